// The native NPU executor: runs a validated Engine (npu_engine.h) on host buffers, bit for
// bit as the reference executor ratelnn/npu/reference.py (docs/npu-arithmetic.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// The executor plan of a validated engine, made once at load (docs/architecture.md §7): a
// CONV2D on the GEMM path whose output only the ADD after it reads, the ADD's other operand
// being computed earlier, runs that ADD (and the REQUANT after it, when it alone reads the
// sum) in its epilogue: Instruction::fused_add / fused_requant / fused.  Same bits as
// running them one by one; the engine's instructions are unchanged.  Also the narrow plan of
// each ADD/SUB of 8-bit codes with the REQUANT run in its pass (Instruction::narrow,
// npu_add_narrow.h), checked on every code pair.
void plan_fusions(Engine& e);

// The batch schedule of a validated engine (docs/architecture.md §7, "Batch split"):
// Engine::split_by_sample when its constants take no more bytes than one sample's
// activations (every thread then reads the weights once per sample but keeps the sample's
// activations in its cache).  run_engine splits a batch of at least `num_threads` samples
// by sample when set (RATELNN_BATCH_SPLIT=layers|samples forces either), else each
// instruction's work over the threads.
void plan_batch_split(Engine& e);

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
