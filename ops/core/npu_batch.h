// Engine sets (docs/multi-batch.md): one NPU region compiled for several batch sizes, and the
// rule that splits a run of n samples over them (the same rule as ratelnn/npu/batching.py):
// q = n / B chunks of the largest compiled size B, then, for the remainder r = n % B > 0, one
// chunk of the smallest compiled size s >= r, padded with s - r zero samples whose outputs
// are dropped.  Shared by the TensorFlow and MXNet engine ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// Samples [start, start + rows) run on set[engine] (its batch_size >= rows; larger: padded).
struct BatchChunk {
  size_t engine = 0;
  int64_t start = 0;
  int64_t rows = 0;
};

// The chunks of a run of `n` samples over an engine set of ascending batch `sizes`.
std::vector<BatchChunk> plan_batches(const std::vector<int64_t>& sizes, int64_t n);

// The engines of a set agree: batch sizes strictly ascending; inputs and outputs (count,
// dtype, shape[1:]), device and cores equal.  Throws EngineError "engine '<who>': ...".
void check_engine_set(const std::vector<const Engine*>& set, const std::string& who);

// run_engine (npu_exec.h) over the set by plan_batches; one engine runs the batch as it is.
// Buffers as for run_engine, at `batch` samples.
void run_engine_set(const std::vector<const Engine*>& set, int64_t batch,
                    const std::vector<const void*>& inputs, const std::vector<int64_t>& input_sizes,
                    const std::vector<void*>& outputs, const std::vector<int64_t>& output_sizes,
                    int num_threads);

}  // namespace npu
}  // namespace ratelnn
