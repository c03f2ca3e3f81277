// MXNet 1.9 registration (lib_api.h) of ratel_minmax, ratel_quant, ratel_dequant and
// ratel_engine_op (docs/architecture.md §5, docs/mxnet.md). The arithmetic lives in ops/core (shared with
// the TensorFlow glue); this file only parses the string attributes, checks types and
// shapes, and maps MXNet tensors onto the core loops. ratel_engine_op checks its inputs with
// the checks every engine caller shares (core/npu_io.h), checks its placement and records each
// run's predicted device time as the TensorFlow op does (core/device_time.h). Loops run on the
// one worker pool of ops/core (core/npu_threads.h).
//
// Every callback catches all exceptions: an error is reported through MX_ERROR_MSG and
// MX_FAIL, which MXNet turns into an MXNetError naming the op; nothing unwinds into MXNet.
// MXNet 1.9 has no int16 NDArray: int16 tensors are carried as int32 holding int16 values.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/device_time.h"
#include "core/minmax.h"
#include "core/npu_batch.h"
#include "core/npu_engine.h"
#include "core/npu_exec.h"
#include "core/npu_io.h"
#include "core/npu_threads.h"
#include "core/quant.h"
#include "core/stats_store.h"
#include "mxnet/lib_api.h"

using namespace mxnet::ext;  // NOLINT: REGISTER_OP expands to unqualified names

namespace {

using Attrs = std::unordered_map<std::string, std::string>;
using Shapes = std::vector<std::vector<unsigned int>>;

// An attribute problem, reported as "<op> '<key>': <message>".
class AttrError : public std::runtime_error {
 public:
  explicit AttrError(const std::string& message) : std::runtime_error(message) {}
};

// Makes `message` the error MXNet reports for the failing call. lib_api.cc keeps every
// MX_ERROR_MSG stream for the life of the process and MXNet prints all of them on each
// failure, so this library owns exactly one stream and overwrites it.
void ReportError(const std::string& message) {
  static std::mutex mutex;
  static std::stringstream* slot = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (slot == nullptr) slot = &MX_ERROR_MSG;
  slot->str("");
  slot->clear();
  *slot << message;
}

// Runs `body` and converts any exception into an MXNet error prefixed by `op` + MX_FAIL.
template <typename Body>
MXReturnValue Guarded(const char* op, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    ReportError(std::string(op) + ": " + e.what());
  } catch (...) {
    ReportError(std::string(op) + ": unknown error");
  }
  return MX_FAIL;
}

// ------------------------------------------------------------------ attribute strings
const std::string* FindAttr(const Attrs& attrs, const std::string& key) {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}

const std::string& RequireAttr(const Attrs& attrs, const std::string& key) {
  const std::string* value = FindAttr(attrs, key);
  if (value == nullptr) throw AttrError("missing attribute '" + key + "'");
  return *value;
}

std::string Trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

double ParseDouble(const std::string& text, const std::string& key) {
  const std::string s = Trim(text);
  errno = 0;
  char* end = nullptr;
  const double value = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE) {
    throw AttrError("attribute '" + key + "' = '" + text + "' is not a number");
  }
  return value;
}

int64_t ParseInt(const std::string& text, const std::string& key) {
  const std::string s = Trim(text);
  errno = 0;
  char* end = nullptr;
  const long long value = s.empty() ? 0 : std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE) {
    throw AttrError("attribute '" + key + "' = '" + text + "' is not an integer");
  }
  return value;
}

// Items of a JSON/Python list "[a, b]" (or "(a, b)"), stripped of spaces and quotes.
std::vector<std::string> ListItems(const std::string& text, const std::string& key) {
  const std::string s = Trim(text);
  if (s.size() < 2 || !((s.front() == '[' && s.back() == ']') ||
                        (s.front() == '(' && s.back() == ')'))) {
    throw AttrError("attribute '" + key + "' = '" + text + "' is not a list");
  }
  std::vector<std::string> items;
  const std::string body = Trim(s.substr(1, s.size() - 2));
  if (body.empty()) return items;
  std::stringstream stream(body);
  std::string item;
  while (std::getline(stream, item, ',')) {
    item = Trim(item);
    if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') &&
        item.back() == item.front()) {
      item = item.substr(1, item.size() - 2);
    }
    if (item.empty() && stream.eof()) break;  // trailing comma: "(1,)"
    if (item.empty()) throw AttrError("attribute '" + key + "' = '" + text + "': empty item");
    items.push_back(item);
  }
  return items;
}

// ------------------------------------------------------------------ dtypes
// MXNet dtype holding values of the ratelnn dtype `name` (int16 -> int32).
MXDType CarrierOf(const std::string& name) {
  if (name == "int8") return kInt8;
  if (name == "uint8") return kUint8;
  if (name == "int16" || name == "int32") return kInt32;
  throw AttrError("dtype '" + name + "' is not one of int8, uint8, int16, int32");
}

const char* MXDTypeName(int dtype) {
  switch (dtype) {
    case kFloat32: return "float32";
    case kFloat64: return "float64";
    case kFloat16: return "float16";
    case kUint8: return "uint8";
    case kInt32: return "int32";
    case kInt8: return "int8";
    case kInt64: return "int64";
    default: return "unknown";
  }
}

// Sets types[i] to `want` when unset; throws when it is another type.
void UnifyType(std::vector<int>* types, size_t i, int want, const std::string& what) {
  if ((*types)[i] == -1 || (*types)[i] == kUNSET) {
    (*types)[i] = want;
  } else if ((*types)[i] != want) {
    throw std::runtime_error(what + " has dtype " + MXDTypeName((*types)[i]) + ", expected " +
                             MXDTypeName(want));
  }
}

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + ")";
}

// ------------------------------------------------------------------ parallel loops
// Threads this library's loops may use: one per hardware thread.
int HardwareThreads() { return std::max<int>(std::thread::hardware_concurrency(), 1); }

// Runs work(begin, end) over [0, units) on the worker pool of ops/core (parallel_for), with
// as many threads as the tensor is large enough to pay for (at most HardwareThreads()).
template <typename Work>
void ParallelUnits(int64_t units, int64_t unit_size, Work work) {
  constexpr int64_t kElementsPerThread = int64_t(1) << 18;
  const int64_t total = units * std::max<int64_t>(unit_size, 1);
  const int64_t threads =
      std::min({int64_t(HardwareThreads()), units, std::max<int64_t>(total / kElementsPerThread, 1)});
  if (threads <= 1) {
    work(int64_t(0), units);
    return;
  }
  ratelnn::npu::parallel_for(units, int(threads), work);
}

// ------------------------------------------------------------------ scales (quant/dequant)
struct ScaleAttrs {
  std::vector<float> values;  // one value per tensor, or one per channel
  bool per_channel = false;
  int64_t axis = -1;

  static ScaleAttrs Parse(const Attrs& attrs) {
    ScaleAttrs s;
    const std::string* scale = FindAttr(attrs, "scale");
    const std::string* scales = FindAttr(attrs, "scales");
    if ((scale == nullptr) == (scales == nullptr)) {
      throw AttrError("exactly one of the attributes 'scale' and 'scales' must be given");
    }
    if (scale != nullptr) {
      s.values = {static_cast<float>(ParseDouble(*scale, "scale"))};
    } else {
      s.per_channel = true;
      for (const std::string& item : ListItems(*scales, "scales")) {
        s.values.push_back(static_cast<float>(ParseDouble(item, "scales")));
      }
      if (s.values.empty()) throw AttrError("attribute 'scales' is empty");
      s.axis = ParseInt(RequireAttr(attrs, "axis"), "axis");
    }
    const std::string error = ratelnn::ValidateScales(s.values);
    if (!error.empty()) throw AttrError(std::string(s.per_channel ? "scales: " : "scale: ") + error);
    return s;
  }

  ratelnn::ChannelLayout Layout(const std::vector<int64_t>& dims) const {
    ratelnn::ChannelLayout layout;
    const std::string error = ratelnn::MakeChannelLayout(
        dims, per_channel ? static_cast<int64_t>(values.size()) : 0, axis, &layout);
    if (!error.empty()) throw std::runtime_error(error + " (input shape " + ShapeText(dims) + ")");
    return layout;
  }
};

MXReturnValue OneInOne(int* num_in, int* num_out) {
  *num_in = 1;
  *num_out = 1;
  return MX_SUCCESS;
}

MXReturnValue SameShape(const Attrs&, Shapes* in, Shapes* out) {
  out->at(0) = in->at(0);
  return MX_SUCCESS;
}

// ------------------------------------------------------------------ ratel_quant
struct QuantAttrs {
  ScaleAttrs scales;
  std::string dtype;
  ratelnn::RoundMode round_mode = ratelnn::RoundMode::kHalfAwayFromZero;

  static QuantAttrs Parse(const Attrs& attrs) {
    QuantAttrs q;
    q.scales = ScaleAttrs::Parse(attrs);
    q.dtype = RequireAttr(attrs, "dtype");
    CarrierOf(q.dtype);
    const std::string* mode = FindAttr(attrs, "round_mode");
    if (mode != nullptr && !ratelnn::ParseRoundMode(*mode, &q.round_mode)) {
      throw AttrError("unknown round_mode '" + *mode +
                      "' (half_away_from_zero, half_to_even, floor, ceil, trunc)");
    }
    return q;
  }
};

MXReturnValue QuantParse(const Attrs& attrs, int* num_in, int* num_out) {
  return Guarded("ratel_quant", [&] {
    QuantAttrs::Parse(attrs);
    return OneInOne(num_in, num_out);
  });
}

MXReturnValue QuantType(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  return Guarded("ratel_quant", [&] {
    UnifyType(in, 0, kFloat32, "input");
    (*out)[0] = CarrierOf(RequireAttr(attrs, "dtype"));
    return MX_SUCCESS;
  });
}

template <typename T>
void QuantizeTensor(const QuantAttrs& q, const float* x, T* y, const ratelnn::ChannelLayout& layout) {
  ParallelUnits(layout.unit_count(), layout.unit_size(), [&](int64_t begin, int64_t end) {
    ratelnn::QuantizeUnits<T>(x, y, layout, q.scales.values.data(), q.round_mode, begin, end);
  });
}

MXReturnValue QuantForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                           std::vector<MXTensor>* outputs, const OpResource&) {
  return Guarded("ratel_quant", [&] {
    const QuantAttrs q = QuantAttrs::Parse(attrs);
    MXTensor& x = inputs->at(0);
    MXTensor& y = outputs->at(0);
    const ratelnn::ChannelLayout layout = q.scales.Layout(x.shape);
    if (x.size() == 0) return MX_SUCCESS;
    const float* in = x.data<float>();
    if (q.dtype == "int8") {
      QuantizeTensor(q, in, y.data<int8_t>(), layout);
    } else if (q.dtype == "uint8") {
      QuantizeTensor(q, in, y.data<uint8_t>(), layout);
    } else {
      int32_t* out = y.data<int32_t>();
      QuantizeTensor(q, in, out, layout);
      if (q.dtype == "int16") {  // saturating to int32 then to int16 == saturating to int16
        const int64_t n = y.size();
        for (int64_t i = 0; i < n; ++i) out[i] = std::min(32767, std::max(-32768, out[i]));
      }
    }
    return MX_SUCCESS;
  });
}

// ------------------------------------------------------------------ ratel_dequant
MXReturnValue DequantParse(const Attrs& attrs, int* num_in, int* num_out) {
  return Guarded("ratel_dequant", [&] {
    ScaleAttrs::Parse(attrs);
    return OneInOne(num_in, num_out);
  });
}

MXReturnValue DequantType(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return Guarded("ratel_dequant", [&] {
    const int t = (*in)[0];
    if (t != kInt8 && t != kUint8 && t != kInt32) {
      throw std::runtime_error(std::string("input has dtype ") + MXDTypeName(t) +
                               ", expected int8, uint8 or int32 (int16 values)");
    }
    (*out)[0] = kFloat32;
    return MX_SUCCESS;
  });
}

template <typename T>
void DequantizeTensor(const ScaleAttrs& s, const T* q, float* x, const ratelnn::ChannelLayout& layout) {
  ParallelUnits(layout.unit_count(), layout.unit_size(), [&](int64_t begin, int64_t end) {
    ratelnn::DequantizeUnits<T>(q, x, layout, s.values.data(), begin, end);
  });
}

MXReturnValue DequantForward(const Attrs& attrs, std::vector<MXTensor>* inputs,
                             std::vector<MXTensor>* outputs, const OpResource&) {
  return Guarded("ratel_dequant", [&] {
    const ScaleAttrs s = ScaleAttrs::Parse(attrs);
    MXTensor& q = inputs->at(0);
    const ratelnn::ChannelLayout layout = s.Layout(q.shape);
    if (q.size() == 0) return MX_SUCCESS;
    float* out = outputs->at(0).data<float>();
    switch (q.dtype) {
      case kInt8: DequantizeTensor(s, q.data<int8_t>(), out, layout); break;
      case kUint8: DequantizeTensor(s, q.data<uint8_t>(), out, layout); break;
      case kInt32: DequantizeTensor(s, q.data<int32_t>(), out, layout); break;
      default: throw std::runtime_error(std::string("unsupported input dtype ") + MXDTypeName(q.dtype));
    }
    return MX_SUCCESS;
  });
}

// ------------------------------------------------------------------ ratel_minmax
struct MinMaxAttrs {
  std::string tensor_name, output_dir;
  double ema_decay = 0.9;

  static MinMaxAttrs Parse(const Attrs& attrs) {
    MinMaxAttrs m;
    m.tensor_name = RequireAttr(attrs, "tensor_name");
    if (m.tensor_name.empty()) throw AttrError("empty tensor_name");
    m.output_dir = RequireAttr(attrs, "output_dir");
    if (m.output_dir.empty()) throw AttrError("'" + m.tensor_name + "': empty output_dir");
    if (const std::string* decay = FindAttr(attrs, "ema_decay")) {
      m.ema_decay = static_cast<float>(ParseDouble(*decay, "ema_decay"));  // float, as in TF
      if (!(m.ema_decay >= 0.0 && m.ema_decay <= 1.0)) {
        throw AttrError("'" + m.tensor_name + "': ema_decay " + *decay + " is not in [0, 1]");
      }
    }
    if (const std::string* record = FindAttr(attrs, "record")) {
      const std::string text = Trim(*record);
      const std::vector<std::string> kinds =
          (!text.empty() && (text.front() == '[' || text.front() == '('))
              ? ListItems(text, "record") : std::vector<std::string>{text};
      if (kinds.empty()) throw AttrError("'" + m.tensor_name + "': record lists nothing (supported: minmax)");
      for (const std::string& kind : kinds) {
        if (kind != "minmax") {
          throw AttrError("'" + m.tensor_name + "': unknown record '" + kind + "' (supported: minmax)");
        }
      }
    }
    return m;
  }
};

class MinMaxState : public CustomStatefulOp {
 public:
  explicit MinMaxState(MinMaxAttrs attrs) : attrs_(std::move(attrs)) {}

  // An executor freed by MXNet destroys its states: persist what they recorded.
  ~MinMaxState() override {
    const std::string error = ratelnn::StatsStore::Global().Flush(attrs_.output_dir);
    if (!error.empty()) std::cerr << "ratel_minmax '" << attrs_.tensor_name << "': " << error << "\n";
  }

  MXReturnValue Forward(std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                        const OpResource&) override {
    return Guarded("ratel_minmax", [&] {
      MXTensor& x = inputs->at(0);
      MXTensor& y = outputs->at(0);
      const int64_t n = x.size();
      if (n == 0) return MX_SUCCESS;
      const float* data = x.data<float>();
      if (y.data_ptr != x.data_ptr) std::memcpy(y.data_ptr, data, n * sizeof(float));
      const ratelnn::BatchStatistics batch =
          ratelnn::SummarizeBatch(data, n, range_exp_hint_.Get(), ratelnn::RunAsOnePart);
      if (!batch.range.all_finite) {
        throw std::runtime_error("'" + attrs_.tensor_name + "': calibration batch contains NaN or Inf");
      }
      const std::string error = ratelnn::StatsStore::Global().RecordWithHistogram(
          attrs_.output_dir, attrs_.tensor_name, batch.range.min, batch.range.max, n,
          attrs_.ema_decay, batch.histogram);
      if (!error.empty()) throw std::runtime_error("'" + attrs_.tensor_name + "': " + error);
      range_exp_hint_.Raise(batch.histogram.range_exp);
      return MX_SUCCESS;
    });
  }

 private:
  MinMaxAttrs attrs_;
  ratelnn::RangeExpHint range_exp_hint_;
};

MXReturnValue MinMaxParse(const Attrs& attrs, int* num_in, int* num_out) {
  return Guarded("ratel_minmax", [&] {
    MinMaxAttrs::Parse(attrs);
    return OneInOne(num_in, num_out);
  });
}

MXReturnValue FloatToFloat(const Attrs&, std::vector<int>* in, std::vector<int>* out) {
  return Guarded("ratel_minmax", [&] {
    UnifyType(in, 0, kFloat32, "input");
    (*out)[0] = kFloat32;
    return MX_SUCCESS;
  });
}

MXReturnValue MinMaxCreate(const Attrs& attrs, const MXContext&, const Shapes&,
                           const std::vector<int>, CustomStatefulOp** state) {
  return Guarded("ratel_minmax", [&] {
    *state = CustomStatefulOp::create<MinMaxState>(MinMaxAttrs::Parse(attrs));
    return MX_SUCCESS;
  });
}

// ------------------------------------------------------------------ ratel_engine_op
using ratelnn::npu::DType;
using ratelnn::npu::Engine;

// Strict base64 (RFC 4648, '=' padding, no whitespace).
std::vector<uint8_t> DecodeBase64(const std::string& text, const std::string& key) {
  static const std::string kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (text.size() % 4 != 0) throw AttrError("attribute '" + key + "' is not base64 (length % 4 != 0)");
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t block = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      uint32_t v = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
      } else {
        const size_t pos = kAlphabet.find(c);
        if (pos == std::string::npos || pad > 0) {
          throw AttrError("attribute '" + key + "' is not base64 (bad character at " +
                          std::to_string(i + k) + ")");
        }
        v = static_cast<uint32_t>(pos);
      }
      block = (block << 6) | v;
    }
    out.push_back(uint8_t(block >> 16));
    if (pad < 2) out.push_back(uint8_t(block >> 8));
    if (pad < 1) out.push_back(uint8_t(block));
  }
  return out;
}

// Decoded engines by their attribute text, so that shape/type inference and state creation
// of one node decode its bytes once. Bounded: the oldest entries are dropped.
class EngineCache {
 public:
  std::shared_ptr<const Engine> Get(const Attrs& attrs) {
    const std::string* label = FindAttr(attrs, "engine_name");
    return Get(RequireAttr(attrs, "engine"), label, "engine");
  }

  // The engine of base64 `text` (an item of attribute 'engine' or 'batch_engines').
  std::shared_ptr<const Engine> Get(const std::string& text, const std::string* label,
                                    const std::string& attr) {
    const std::string key = (label ? *label : std::string()) + '\n' + text;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = engines_.find(key);
      if (it != engines_.end()) return it->second;
    }
    const std::vector<uint8_t> bytes = DecodeBase64(text, attr);
    auto engine = std::make_shared<const Engine>(
        ratelnn::npu::decode_engine(bytes.data(), bytes.size(), label ? *label : ""));
    std::lock_guard<std::mutex> lock(mutex_);
    if (engines_.emplace(key, engine).second) order_.push_back(key);
    while (order_.size() > kCapacity) {
      engines_.erase(order_.front());
      order_.pop_front();
    }
    return engine;
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const Engine>> engines_;
  std::deque<std::string> order_;
};

EngineCache& Engines() {
  static EngineCache* cache = new EngineCache();  // never destroyed: states may outlive statics
  return *cache;
}

// The engine of a ratel_engine_op node, with its attributes checked against it.
std::shared_ptr<const Engine> NodeEngine(const Attrs& attrs) {
  std::shared_ptr<const Engine> engine = Engines().Get(attrs);
  const std::string name = "engine '" + engine->name + "': ";
  if (const std::string* num_outputs = FindAttr(attrs, "num_outputs")) {
    if (ParseInt(*num_outputs, "num_outputs") != int64_t(engine->outputs.size())) {
      throw AttrError(name + "num_outputs = " + *num_outputs + " but the engine has " +
                      std::to_string(engine->outputs.size()) + " outputs");
    }
  }
  if (const std::string* device = FindAttr(attrs, "device_id")) {
    if (ParseInt(*device, "device_id") < 0) throw AttrError(name + "negative device_id");
  }
  if (const std::string* cores = FindAttr(attrs, "core_ids")) {
    for (const std::string& core : ListItems(*cores, "core_ids")) {
      if (ParseInt(core, "core_ids") < 0) throw AttrError(name + "negative core id in core_ids");
    }
  }
  return engine;
}

MXDType CarrierOf(DType t) {
  switch (t) {
    case DType::kInt8: return kInt8;
    case DType::kUInt8: return kUint8;
    default: return kInt32;  // int16 carried as int32
  }
}

std::string EngineLabel(const Engine& e) { return "engine '" + e.name + "'"; }

// The engine set of a node (docs/multi-batch.md): 'engine', then the engines of attribute
// 'batch_engines' (a list of base64 strings), checked to agree (core/npu_batch.h).
std::vector<std::shared_ptr<const Engine>> NodeEngineSet(const Attrs& attrs) {
  std::vector<std::shared_ptr<const Engine>> set = {NodeEngine(attrs)};
  if (const std::string* more = FindAttr(attrs, "batch_engines")) {
    const std::string* label = FindAttr(attrs, "engine_name");
    for (const std::string& text : ListItems(*more, "batch_engines")) {
      set.push_back(Engines().Get(text, label, "batch_engines"));
    }
  }
  std::vector<const Engine*> ptrs;
  for (const auto& e : set) ptrs.push_back(e.get());
  const std::string* label = FindAttr(attrs, "engine_name");
  ratelnn::npu::check_engine_set(ptrs, label ? *label : "");
  return set;
}

MXReturnValue EngineParse(const Attrs& attrs, int* num_in, int* num_out) {
  return Guarded("ratel_engine_op", [&] {
    std::shared_ptr<const Engine> e = NodeEngineSet(attrs)[0];
    *num_in = static_cast<int>(e->inputs.size());
    *num_out = static_cast<int>(e->outputs.size());
    return MX_SUCCESS;
  });
}

// The ratelnn dtype an MXNet dtype carries for an engine tensor of dtype `want` (MXNet has
// no int16: int32 carries int16 values), as the name the shared input checks compare.
std::string CarriedDType(int mx_dtype, DType want) {
  if (mx_dtype == kInt32 && want == DType::kInt16) return "int16";
  return MXDTypeName(mx_dtype);
}

// The shared dtype check of engine input k (core/npu_io.h) for an MXNet dtype, with the
// carrier the input needs when it is int16.
void CheckInputDType(const Engine& e, size_t k, int mx_dtype) {
  const DType want = e.tensors[e.inputs[k]].dtype;
  try {
    ratelnn::npu::check_input_dtype(e, k, CarriedDType(mx_dtype, want), "");
  } catch (const ratelnn::npu::EngineError& err) {
    if (want != DType::kInt16) throw;
    throw ratelnn::npu::EngineError(std::string(err.what()) + " (MXNet carries int16 as int32)");
  }
}

MXReturnValue EngineType(const Attrs& attrs, std::vector<int>* in, std::vector<int>* out) {
  return Guarded("ratel_engine_op", [&] {
    std::shared_ptr<const Engine> e = NodeEngine(attrs);
    ratelnn::npu::check_input_count(*e, in->size(), "");
    for (size_t k = 0; k < e->inputs.size(); ++k) {
      const int t = (*in)[k];
      if (t == -1 || t == kUNSET) {
        (*in)[k] = CarrierOf(e->tensors[e->inputs[k]].dtype);
      } else {
        CheckInputDType(*e, k, t);
      }
    }
    for (size_t k = 0; k < e->outputs.size(); ++k) (*out)[k] = CarrierOf(e->tensors[e->outputs[k]].dtype);
    return MX_SUCCESS;
  });
}

MXReturnValue EngineShape(const Attrs& attrs, Shapes* in, Shapes* out) {
  return Guarded("ratel_engine_op", [&] {
    std::shared_ptr<const Engine> e = NodeEngine(attrs);
    ratelnn::npu::check_input_count(*e, in->size(), "");
    int64_t batch = -1;
    for (size_t k = 0; k < e->inputs.size(); ++k) {
      const std::vector<unsigned int>& got = in->at(k);
      batch = ratelnn::npu::check_input_shape(*e, k, std::vector<int64_t>(got.begin(), got.end()), batch,
                                              0, "");
    }
    if (batch < 0) batch = e->batch_size;
    // sizes before MXNet allocates the outputs (docs/reliability.md, "Engines")
    ratelnn::npu::check_size_limits(*e, batch, ratelnn::npu::run_size_limits(), "");
    for (size_t k = 0; k < e->outputs.size(); ++k) {
      const auto& t = e->tensors[e->outputs[k]];
      std::vector<unsigned int> dims = {static_cast<unsigned int>(batch)};
      for (size_t d = 1; d < t.shape.size(); ++d) dims.push_back(static_cast<unsigned int>(t.shape[d]));
      out->at(k) = dims;
    }
    return MX_SUCCESS;
  });
}

// Where a node's engine runs: its name for the device-time account (attribute engine_name,
// else the engine's own), device and cores (attributes device_id/core_ids, else the
// placement compiled into the engine).
struct EnginePlacement {
  std::string name;
  int64_t device_id = 0;
  std::vector<int64_t> core_ids;
};

EnginePlacement NodePlacement(const Attrs& attrs, const Engine& e) {
  EnginePlacement p{e.name, e.device_id, e.core_ids};
  const std::string* label = FindAttr(attrs, "engine_name");
  if (label != nullptr && !label->empty()) p.name = *label;
  if (const std::string* device = FindAttr(attrs, "device_id")) p.device_id = ParseInt(*device, "device_id");
  if (const std::string* cores = FindAttr(attrs, "core_ids")) {
    std::vector<int64_t> ids;
    for (const std::string& core : ListItems(*cores, "core_ids")) ids.push_back(ParseInt(core, "core_ids"));
    if (!ids.empty()) p.core_ids = ids;
  }
  if (p.core_ids.empty()) p.core_ids = {0};
  return p;
}

class EngineState : public CustomStatefulOp {
 public:
  EngineState(std::vector<std::shared_ptr<const Engine>> set, const EnginePlacement& placement)
      : owned_(std::move(set)),
        engine_(owned_[0]),
        set_(Pointers(owned_)),
        device_time_(set_, placement.name, placement.device_id, int64_t(placement.core_ids.size())) {}

  MXReturnValue Forward(std::vector<MXTensor>* inputs, std::vector<MXTensor>* outputs,
                        const OpResource&) override {
    return Guarded("ratel_engine_op", [&] {
      const Engine& e = *engine_;
      ratelnn::npu::check_input_count(e, inputs->size(), "");
      if (outputs->size() != e.outputs.size()) {
        throw std::runtime_error(EngineLabel(e) + ": called with " + std::to_string(outputs->size()) +
                                 " outputs, the engine has " + std::to_string(e.outputs.size()));
      }
      int64_t batch = -1;  // the shared checks (core/npu_io.h); run_engine checks the bytes
      for (size_t k = 0; k < inputs->size(); ++k) {
        const MXTensor& x = inputs->at(k);
        CheckInputDType(e, k, x.dtype);
        batch = ratelnn::npu::check_input_shape(e, k, x.shape, batch, 0, "");
      }
      if (batch < 0) batch = e.batch_size;
      ratelnn::npu::check_size_limits(e, batch, ratelnn::npu::run_size_limits(), "");  // before any copy
      std::vector<std::vector<int16_t>> narrowed(inputs->size()), widened(outputs->size());
      std::vector<const void*> in_ptrs;
      std::vector<int64_t> in_sizes;
      for (size_t k = 0; k < inputs->size(); ++k) {
        MXTensor& x = inputs->at(k);
        const auto& t = e.tensors[e.inputs[k]];
        if (t.dtype == DType::kInt16) {
          narrowed[k] = NarrowToInt16(x, t.name);
          in_ptrs.push_back(narrowed[k].data());
          in_sizes.push_back(int64_t(narrowed[k].size()) * 2);
        } else {
          in_ptrs.push_back(x.data_ptr);
          in_sizes.push_back(x.size() * ratelnn::npu::itemsize(t.dtype));
        }
      }
      std::vector<void*> out_ptrs;
      std::vector<int64_t> out_sizes;
      for (size_t k = 0; k < outputs->size(); ++k) {
        MXTensor& y = outputs->at(k);
        const auto& t = e.tensors[e.outputs[k]];
        if (t.dtype == DType::kInt16) {
          widened[k].resize(y.size());
          out_ptrs.push_back(widened[k].data());
          out_sizes.push_back(int64_t(widened[k].size()) * 2);
        } else {
          out_ptrs.push_back(y.data_ptr);
          out_sizes.push_back(y.size() * ratelnn::npu::itemsize(t.dtype));
        }
      }
      ratelnn::npu::run_engine_set(set_, batch, in_ptrs, in_sizes, out_ptrs, out_sizes, HardwareThreads());
      for (size_t k = 0; k < outputs->size(); ++k) {
        if (widened[k].empty()) continue;
        int32_t* y = outputs->at(k).data<int32_t>();
        std::copy(widened[k].begin(), widened[k].end(), y);
      }
      device_time_.record(batch);
      return MX_SUCCESS;
    });
  }

 private:
  static std::vector<const Engine*> Pointers(const std::vector<std::shared_ptr<const Engine>>& set) {
    std::vector<const Engine*> out;
    for (const auto& e : set) out.push_back(e.get());
    return out;
  }

  std::vector<int16_t> NarrowToInt16(MXTensor& x, const std::string& name) const {
    const int32_t* values = x.data<int32_t>();
    std::vector<int16_t> out(x.size());
    for (size_t i = 0; i < out.size(); ++i) {
      if (values[i] < -32768 || values[i] > 32767) {
        throw std::runtime_error(EngineLabel(*engine_) + ": int16 input '" + name +
                                 "' holds " + std::to_string(values[i]) + ", outside the int16 range");
      }
      out[i] = static_cast<int16_t>(values[i]);
    }
    return out;
  }

  std::vector<std::shared_ptr<const Engine>> owned_;  // the engine set, ascending batch sizes
  std::shared_ptr<const Engine> engine_;                // owned_[0]
  std::vector<const Engine*> set_;
  ratelnn::npu::DeviceTimeRecorder device_time_;
};

MXReturnValue EngineCreate(const Attrs& attrs, const MXContext&, const Shapes&,
                           const std::vector<int>, CustomStatefulOp** state) {
  return Guarded("ratel_engine_op", [&] {
    std::vector<std::shared_ptr<const Engine>> set = NodeEngineSet(attrs);
    const EnginePlacement placement = NodePlacement(attrs, *set[0]);
    // the engine runs only where the local runtime has its device and cores (RATELNN_DEVICES)
    const std::string missing =
        ratelnn::npu::placement_error(placement.name, placement.device_id, placement.core_ids);
    if (!missing.empty()) throw std::runtime_error(missing);
    *state = CustomStatefulOp::create<EngineState>(std::move(set), placement);
    return MX_SUCCESS;
  });
}

}  // namespace

REGISTER_OP(ratel_quant)
    .setParseAttrs(QuantParse)
    .setInferType(QuantType)
    .setInferShape(SameShape)
    .setForward(QuantForward, "cpu");

REGISTER_OP(ratel_dequant)
    .setParseAttrs(DequantParse)
    .setInferType(DequantType)
    .setInferShape(SameShape)
    .setForward(DequantForward, "cpu");

REGISTER_OP(ratel_minmax)
    .setParseAttrs(MinMaxParse)
    .setInferType(FloatToFloat)
    .setInferShape(SameShape)
    .setCreateOpState(MinMaxCreate, "cpu");

REGISTER_OP(ratel_engine_op)
    .setParseAttrs(EngineParse)
    .setInferType(EngineType)
    .setInferShape(EngineShape)
    .setCreateOpState(EngineCreate, "cpu");

MXReturnValue initialize(int version) {
  if (version < 10900) {
    ReportError("ratelnn's MXNet op library needs MXNet >= 1.9.0, got version " +
                std::to_string(version));
    return MX_FAIL;
  }
  return MX_SUCCESS;
}
