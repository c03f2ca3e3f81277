// The one check of the inputs a caller hands to an engine, shared by every caller: the
// TensorFlow op (ops/tensorflow/ratel_engine_op.cc), the MXNet op (ops/mxnet/ratel_mx_ops.cc),
// the C API behind ratelnn/npu/native.py (Engine.check_inputs, for both Python executors)
// and run_engine itself (npu_exec.h).
//
// Each check throws EngineError; every message starts "engine '<name>': " and names the
// input by position and tensor name:
//   engine 'e': expects 2 inputs, got 1
//   engine 'e': input 0 ('x') must be int8, got int16
//   engine 'e': input 0 ('x') has shape [2,5,6,3], expected [N,6,6,3]
//   engine 'e': input 0 ('x') has batch 0, expected N >= 1
//   engine 'e': inputs disagree on the batch size (2 vs 1 for input 1 ('y'))
//   engine 'e': input 0 ('x') has 100 bytes, expected 108 at batch 2
// A caller checks what it knows when it knows it (a TF kernel its dtypes when it is built,
// shapes on each run; MXNet dtypes and shapes in type and shape inference) with the single
// checks, or everything at once with check_engine_inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// "engine '<who>': " (who empty: the engine's own name).
std::string engine_prefix(const Engine& e, const std::string& who);

// "input k ('name')".
std::string input_label(const Engine& e, size_t k);

// "[N,d1,d2,...]": an engine tensor's shape with its free batch dimension.
std::string free_batch_shape(const std::vector<int64_t>& shape);

// The caller passes `count` inputs.
void check_input_count(const Engine& e, size_t count, const std::string& who);

// Input k is held as dtype `dtype` (a name such as "int8" or "float32": the caller's
// spelling, compared with dtype_name of the engine tensor).
void check_input_dtype(const Engine& e, size_t k, const std::string& dtype, const std::string& who);

// Input k has shape `dims`: the engine input's rank, its dims 1.., a batch dims[0] >=
// `min_batch` (0 where an empty batch is fine, 1 where it is not), equal to `batch` when
// `batch` >= 0 (the batch of the inputs before it).  Returns dims[0], the batch for the next call.
int64_t check_input_shape(const Engine& e, size_t k, const std::vector<int64_t>& dims, int64_t batch,
                          int64_t min_batch, const std::string& who);

// Input k's buffer holds `bytes` bytes at `data`: exactly tensor_bytes at `batch`, non-null
// when non-empty.
void check_input_bytes(const Engine& e, size_t k, const void* data, int64_t bytes, int64_t batch,
                       const std::string& who);

// One input as the caller holds it; parts it does not know are skipped.
struct InputSpec {
  std::string dtype;           // "": not known
  bool has_shape = false;
  std::vector<int64_t> dims;   // when has_shape
};

// Size limits at a run batch (docs/reliability.md, "Engines"): elements of any one activation
// tensor and bytes of all activation tensors together.  The sources say where each came
// from, for messages.
struct SizeLimits {
  int64_t max_tensor_elements = kMaxElements;
  int64_t max_total_bytes = kMaxActivationBytes;
  std::string elements_source = "the default", bytes_source = "the default";
};
constexpr int64_t kMaxTotalBytesLimit = int64_t(1) << 40;  // the largest max_total_bytes accepted

// The run-time limits: the defaults, or RATELNN_MAX_TENSOR_ELEMENTS (<= 2^31-1) and
// RATELNN_MAX_TOTAL_BYTES (<= 2^40) from the environment.  Throws EngineError for a value
// that is not an integer in range.
SizeLimits run_size_limits();

// Every activation tensor of `e` at `batch` within `limits`; an EngineError names the tensor
// (the largest one when the total is too big).  Callers check before allocating anything.
void check_size_limits(const Engine& e, int64_t batch, const SizeLimits& limits, const std::string& who);

// All of the above but the bytes: count, then per input dtype and shape.  Returns the batch
// (-1 if no input has a shape).
int64_t check_engine_inputs(const Engine& e, const std::vector<InputSpec>& inputs, int64_t min_batch,
                            const std::string& who);

}  // namespace npu
}  // namespace ratelnn
