// extern "C" API of the native NPU executor, used by ratelnn/npu/native.py (ctypes).
//
// Every function returns 0 on success; on failure it returns -1 and writes a
// NUL-terminated message naming the engine into err[0 .. err_len).  No C++ exception
// crosses this boundary.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "core/npu_engine.h"
#include "core/npu_exec.h"

using ratelnn::npu::Engine;

namespace {
int report(const char* msg, char* err, size_t err_len) {
  if (err && err_len) {
    size_t n = std::min(std::strlen(msg), err_len - 1);
    std::memcpy(err, msg, n);
    err[n] = '\0';
  }
  return -1;
}
}  // namespace

extern "C" {

// Decode and validate engine bytes; on success *out owns the engine (free with
// ratel_npu_engine_free).  `label` (may be NULL) names the engine in errors.
int ratel_npu_engine_create(const uint8_t* data, size_t size, const char* label, void** out, char* err,
                            size_t err_len) {
  try {
    *out = nullptr;
    Engine e = ratelnn::npu::decode_engine(data, size, label ? label : "");
    *out = new Engine(std::move(e));
    return 0;
  } catch (const std::exception& ex) {
    return report(ex.what(), err, err_len);
  } catch (...) {
    return report("unknown error while decoding an engine", err, err_len);
  }
}

void ratel_npu_engine_free(void* engine) { delete static_cast<Engine*>(engine); }

// Run on `batch` samples: inputs[k] has input_sizes[k] bytes, outputs[k] output_sizes[k].
int ratel_npu_engine_run(void* engine, int64_t batch, const void* const* inputs, const int64_t* input_sizes,
                         int n_inputs, void* const* outputs, const int64_t* output_sizes, int n_outputs,
                         int num_threads, char* err, size_t err_len) {
  try {
    if (!engine) return report("null engine handle", err, err_len);
    if (n_inputs < 0 || n_outputs < 0) return report("negative buffer count", err, err_len);
    std::vector<const void*> in(inputs, inputs + n_inputs);
    std::vector<int64_t> in_sizes(input_sizes, input_sizes + n_inputs);
    std::vector<void*> outs(outputs, outputs + n_outputs);
    std::vector<int64_t> out_sizes(output_sizes, output_sizes + n_outputs);
    ratelnn::npu::run_engine(*static_cast<Engine*>(engine), batch, in, in_sizes, outs, out_sizes, num_threads);
    return 0;
  } catch (const std::exception& ex) {
    return report(ex.what(), err, err_len);
  } catch (...) {
    return report("unknown error while running an engine", err, err_len);
  }
}

}  // extern "C"
