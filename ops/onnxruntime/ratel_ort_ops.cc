// The ONNX Runtime glue of ratelnn's custom ops: extern "C" entry points that
// ratelnn/frontend/onnx/session.py calls (ctypes) for the RatelMinMax nodes of a calibration
// model and the RatelQuant nodes of a compiled model run by ratelnn.onnx_session.  The
// statistics go through the same scan (SummarizeBatch) and the same process-wide store
// (StatsStore) as TensorFlow's and MXNet's RatelMinMax, so the files in output_dir are the
// same (docs/statistics.md); RatelQuant is the same loop (QuantizeUnits) as their
// ratel_quant.  Engines run through the C API of the native executor (ops/capi/npu_capi.cc);
// each RatelEngineOp node has an engine timer here that records its runs' predicted device
// time in this library's account (DeviceTimeRecorder, ops/core/device_time.h), as the
// TensorFlow and MXNet engine ops record theirs.
//
// Every function returns 0 on success; on failure it returns -1 and writes a NUL-terminated
// message naming the tensor into err[0 .. err_len).  No C++ exception crosses this boundary.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/device_time.h"
#include "core/minmax.h"
#include "core/npu_batch.h"
#include "core/npu_engine.h"
#include "core/npu_threads.h"
#include "core/quant.h"
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

template <typename T>
void QuantizeTensor(const float* x, void* q, const ratelnn::ChannelLayout& layout, const float* scales,
                    ratelnn::RoundMode mode, int threads) {
  constexpr int64_t kElementsPerThread = int64_t(1) << 18;   // below this a thread does not pay
  const int64_t units = layout.unit_count();
  const int64_t total = units * std::max<int64_t>(layout.unit_size(), 1);
  const int64_t used = std::min({int64_t(std::max(threads, 1)), units, std::max<int64_t>(total / kElementsPerThread, 1)});
  auto work = [&](int64_t begin, int64_t end) {
    ratelnn::QuantizeUnits<T>(x, static_cast<T*>(q), layout, scales, mode, begin, end);
  };
  if (used <= 1) {
    work(0, units);
  } else {
    ratelnn::npu::parallel_for(units, int(used), work);
  }
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

// Quantizes the float32 tensor x of shape dims[0 .. rank) into q (dtype "int8", "uint8",
// "int16" or "int32"), as RatelQuant does: num_scales == 0 means the one scale scales[0],
// otherwise one scale per index of `axis`; round_mode as ratelnn/ir/arith.py names it.
// At most `threads` threads of the executor's pool share the work.
__attribute__((visibility("default"))) int ratelnn_ort_quantize(
    const float* x, void* q, const int64_t* dims, int rank, const char* dtype, const float* scales,
    int64_t num_scales, int64_t axis, const char* round_mode, int threads, char* err, size_t err_len) {
  try {
    ratelnn::RoundMode mode;
    if (!ratelnn::ParseRoundMode(round_mode ? round_mode : "", &mode)) {
      return report(std::string("RatelQuant: unknown round_mode '") + (round_mode ? round_mode : "") + "'",
                    err, err_len);
    }
    const std::vector<float> values(scales, scales + std::max<int64_t>(num_scales, 1));
    std::string error = ratelnn::ValidateScales(values);
    if (!error.empty()) return report("RatelQuant: " + error, err, err_len);
    ratelnn::ChannelLayout layout;
    error = ratelnn::MakeChannelLayout(std::vector<int64_t>(dims, dims + rank), num_scales, axis, &layout);
    if (!error.empty()) return report("RatelQuant: " + error, err, err_len);
    const std::string type = dtype ? dtype : "";
    if (type == "int8") {
      QuantizeTensor<int8_t>(x, q, layout, values.data(), mode, threads);
    } else if (type == "uint8") {
      QuantizeTensor<uint8_t>(x, q, layout, values.data(), mode, threads);
    } else if (type == "int16") {
      QuantizeTensor<int16_t>(x, q, layout, values.data(), mode, threads);
    } else if (type == "int32") {
      QuantizeTensor<int32_t>(x, q, layout, values.data(), mode, threads);
    } else {
      return report("RatelQuant: dtype '" + type + "' is not int8, uint8, int16 or int32", err, err_len);
    }
    return 0;
  } catch (const std::exception& ex) {
    return report(std::string("RatelQuant: ") + ex.what(), err, err_len);
  } catch (...) {
    return report("RatelQuant: unknown error", err, err_len);
  }
}

// Makes the device-time recorder of one RatelEngineOp node: `count` engine byte strings
// (attr `engine`, then `batch_engines`), its `engine_name`, `device_id` and number of cores.
// The engines are decoded and checked as the engine ops do, then dropped: the recorder keeps
// only their batch sizes and cycles.  *timer is freed by ratelnn_ort_engine_timer_free.
__attribute__((visibility("default"))) int ratelnn_ort_engine_timer_create(
    const uint8_t* const* engines, const int64_t* sizes, int count, const char* engine_name,
    int64_t device_id, int64_t num_cores, void** timer, char* err, size_t err_len) {
  const std::string name = engine_name ? engine_name : "";
  try {
    if (count < 1) return report("engine '" + name + "': no engine bytes", err, err_len);
    std::vector<ratelnn::npu::Engine> decoded;
    decoded.reserve(size_t(count));  // set points into it: no reallocation
    std::vector<const ratelnn::npu::Engine*> set;
    for (int k = 0; k < count; ++k) {
      decoded.push_back(ratelnn::npu::decode_engine(engines[k], size_t(sizes[k]), name));
      set.push_back(&decoded.back());
    }
    ratelnn::npu::check_engine_set(set, name);
    *timer = new ratelnn::npu::DeviceTimeRecorder(set, name, device_id, num_cores);
    return 0;
  } catch (const std::exception& ex) {
    return report(ex.what(), err, err_len);
  } catch (...) {
    return report("engine '" + name + "': unknown error", err, err_len);
  }
}

// Records one run of `batch` samples (none for batch <= 0).
__attribute__((visibility("default"))) int ratelnn_ort_engine_timer_record(void* timer, int64_t batch,
                                                                           char* err, size_t err_len) {
  try {
    static_cast<const ratelnn::npu::DeviceTimeRecorder*>(timer)->record(batch);
    return 0;
  } catch (const std::exception& ex) {
    return report(std::string("recording the device time: ") + ex.what(), err, err_len);
  }
}

__attribute__((visibility("default"))) void ratelnn_ort_engine_timer_free(void* timer) {
  delete static_cast<ratelnn::npu::DeviceTimeRecorder*>(timer);
}

}  // extern "C"
