// The ONNX Runtime glue of ratelnn's custom ops: extern "C" entry points that
// ratelnn/frontend/onnx/session.py calls (ctypes) for the RatelMinMax nodes of a calibration
// model run by ratelnn.onnx_session.  The statistics go through the same scan
// (SummarizeBatch) and the same process-wide store (StatsStore) as TensorFlow's and MXNet's
// RatelMinMax, so the files in output_dir are the same (docs/statistics.md).  Engines run
// through the C API of the native executor (ops/capi/npu_capi.cc).
//
// Every function returns 0 on success; on failure it returns -1 and writes a NUL-terminated
// message naming the tensor into err[0 .. err_len).  No C++ exception crosses this boundary.
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "core/minmax.h"
#include "core/stats_store.h"

namespace {
int report(const std::string& msg, char* err, size_t err_len) {
  if (err && err_len) {
    size_t n = std::min(msg.size(), err_len - 1);
    std::memcpy(err, msg.data(), n);
    err[n] = '\0';
  }
  return -1;
}

// The histogram range of the last batch per (output_dir, tensor): the scan's starting guess,
// as each TensorFlow / MXNet kernel keeps one (RangeExpHint).
ratelnn::RangeExpHint& hint_for(const std::string& output_dir, const std::string& tensor_name) {
  static std::mutex mutex;
  static auto* hints = new std::map<std::string, ratelnn::RangeExpHint>();
  std::lock_guard<std::mutex> lock(mutex);
  return (*hints)[output_dir + '\n' + tensor_name];
}
}  // namespace

extern "C" {

// Records one batch of n float32 values of `tensor_name` into the statistics of `output_dir`
// (an absolute path) with EMA weight `ema_decay`, as RatelMinMax does.
__attribute__((visibility("default"))) int ratelnn_ort_minmax_record(
    const char* output_dir, const char* tensor_name, const float* x, int64_t n, double ema_decay,
    char* err, size_t err_len) {
  const std::string name = tensor_name ? tensor_name : "";
  try {
    if (!(ema_decay >= 0.0 && ema_decay <= 1.0)) {
      return report("RatelMinMax '" + name + "': ema_decay " + std::to_string(ema_decay) + " is not in [0, 1]",
                    err, err_len);
    }
    if (n <= 0) return 0;
    ratelnn::RangeExpHint& hint = hint_for(output_dir, name);
    const ratelnn::BatchStatistics batch = ratelnn::SummarizeBatch(x, n, hint.Get(), ratelnn::RunAsOnePart);
    if (!batch.range.all_finite) {
      return report("RatelMinMax '" + name + "': calibration batch contains NaN or Inf", err, err_len);
    }
    const std::string error = ratelnn::StatsStore::Global().RecordWithHistogram(
        output_dir, name, batch.range.min, batch.range.max, n, ema_decay, batch.histogram);
    if (!error.empty()) return report("RatelMinMax '" + name + "': " + error, err, err_len);
    hint.Raise(batch.histogram.range_exp);
    return 0;
  } catch (const std::exception& ex) {
    return report("RatelMinMax '" + name + "': " + ex.what(), err, err_len);
  } catch (...) {
    return report("RatelMinMax '" + name + "': unknown error", err, err_len);
  }
}

}  // extern "C"
