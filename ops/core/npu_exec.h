// The native NPU executor: runs a validated Engine (npu_engine.h) on host buffers, bit for
// bit as the reference executor ratelnn/npu/reference.py (docs/npu-arithmetic.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// Bytes of engine tensor `tensor_id` at run-time batch `batch`.
int64_t tensor_bytes(const Engine& e, int tensor_id, int64_t batch);

// Run `e` on `batch` samples.  inputs[k] holds engine input k (tensor_bytes bytes, the
// tensor's dtype, row-major, batch first); outputs[k] receives engine output k.
// The count and sizes are checked (inputs with npu_io.h's checks, outputs against
// output_sizes); errors throw EngineError naming the engine.  `num_threads` >= 1: kernels split their work over a persistent pool (npu_threads.h).
void run_engine(const Engine& e, int64_t batch, const std::vector<const void*>& inputs,
                const std::vector<int64_t>& input_sizes, const std::vector<void*>& outputs,
                const std::vector<int64_t>& output_sizes, int num_threads);

}  // namespace npu
}  // namespace ratelnn
