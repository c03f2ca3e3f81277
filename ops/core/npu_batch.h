// Engine sets (docs/multi-batch.md): one NPU region compiled for several batch sizes, and the
// rule that splits a run of n samples over them (the same rule as ratelnn/npu/batching.py).
// A set is one engine with batch plans (format 1.2: every size shares its instructions and
// constants) or, as models compiled before that stored it, one engine per size.
// q = n / B chunks of the largest compiled size B, then the remainder r = n % B > 0 as the
// chunks of least predicted cycles (chunk_cycles), fewest padded samples and fewest chunks
// next: a sum of compiled sizes (3 = 2 + 1), or ending in one chunk of the smallest size that
// holds what is left, padded with zero samples whose outputs are dropped (3 -> 4).  Shared by the TensorFlow and MXNet engine ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// One compiled batch size of a set: the engine that runs it and the predicted cycles of one
// chunk of that size (chunk_cycles).
struct BatchSlot {
  const Engine* engine = nullptr;
  int64_t size = 0;
  double cycles = 0;
};

// Samples [start, start + rows) run as one chunk of slot `slot` (its size >= rows; larger: padded).
struct BatchChunk {
  size_t slot = 0;
  int64_t start = 0;
  int64_t rows = 0;
};

// Samples' worth of work on the busiest core of a run of `size` samples: a SPLIT_BATCH
// engine's busiest core runs ceil(size / cores) samples, other splits divide the work over
// the cores, SPLIT_NONE runs it all on one core.
double busiest_samples(int64_t size, int64_t split_mode, int64_t num_cores);

// Predicted cycles of one chunk of `size` samples whose instructions total `total_cycles` at
// that size on one core: per-sample cycles times busiest_samples.
double chunk_cycles(double total_cycles, int64_t size, int64_t split_mode, int64_t num_cores);

// The compiled sizes of a set, ascending, each with its engine and chunk cycles (the engine's cores).
std::vector<BatchSlot> batch_slots(const std::vector<const Engine*>& set);

// The chunks of a run of `n` samples over ascending compiled `sizes` whose chunks cost `cycles`.
std::vector<BatchChunk> plan_batches(const std::vector<int64_t>& sizes, const std::vector<double>& cycles, int64_t n);

// The engines of a set agree: batch sizes (with their plans) strictly ascending; inputs and
// outputs (count, dtype, shape[1:]), device and cores equal.  Throws EngineError "engine '<who>': ...".
void check_engine_set(const std::vector<const Engine*>& set, const std::string& who);

// run_engine (npu_exec.h) over the set by plan_batches; a set of one size runs the batch as it is.
// Buffers as for run_engine, at `batch` samples.
void run_engine_set(const std::vector<const Engine*>& set, int64_t batch,
                    const std::vector<const void*>& inputs, const std::vector<int64_t>& input_sizes,
                    const std::vector<void*>& outputs, const std::vector<int64_t>& output_sizes,
                    int num_threads);

}  // namespace npu
}  // namespace ratelnn
