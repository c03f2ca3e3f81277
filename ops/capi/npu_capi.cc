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

#include "core/npu_add_narrow.h"
#include "core/npu_engine.h"
#include "core/npu_exec.h"
#include "core/npu_format.h"
#include "core/npu_io.h"
#include "core/npu_kernels.h"

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

// Multiply-adds done by `iters` rounds of the active kernel path's peak loop on the calling
// thread (npu_kernels.h peak_macs); the instruction's name goes to name[0 .. len).  -1 on error.
int64_t ratel_npu_peak_macs(int64_t iters, char* name, size_t len) {
  try {
    const char* instruction = "";
    int64_t macs = ratelnn::npu::peak_macs(iters, &instruction);
    report(instruction, name, len);
    return macs;
  } catch (...) {
    return -1;
  }
}

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

// Check run-time inputs (npu_io.h): n_inputs inputs, input k held as dtype dtypes[k] with
// ranks[k] dims taken in order from `dims` (all inputs' dims concatenated), batch >= min_batch.
// On success *batch is the inputs' batch size (-1 when there are none).
int ratel_npu_engine_check_inputs(void* engine, int n_inputs, const char* const* dtypes, const int* ranks,
                                  const int64_t* dims, int64_t min_batch, int64_t* batch, char* err,
                                  size_t err_len) {
  try {
    if (!engine) return report("null engine handle", err, err_len);
    if (n_inputs < 0) return report("negative input count", err, err_len);
    std::vector<ratelnn::npu::InputSpec> specs(n_inputs);
    size_t at = 0;
    for (int k = 0; k < n_inputs; ++k) {
      if (ranks[k] < 0) return report("negative rank", err, err_len);
      specs[k].dtype = dtypes[k] ? dtypes[k] : "";
      specs[k].has_shape = true;
      specs[k].dims.assign(dims + at, dims + at + ranks[k]);
      at += size_t(ranks[k]);
    }
    *batch = ratelnn::npu::check_engine_inputs(*static_cast<Engine*>(engine), specs, min_batch, "");
    return 0;
  } catch (const std::exception& ex) {
    return report(ex.what(), err, err_len);
  } catch (...) {
    return report("unknown error while checking engine inputs", err, err_len);
  }
}

// The size limits of npu_io.h at run batch `batch`: the run-time limits (environment or
// defaults) when max_tensor_elements and max_total_bytes are both <= 0, else those two
// (ratelnn/npu/engine.py checks compile-time limits of the config with them).
int ratel_npu_engine_check_size(void* engine, int64_t batch, int64_t max_tensor_elements, int64_t max_total_bytes,
                                char* err, size_t err_len) {
  try {
    if (!engine) return report("null engine handle", err, err_len);
    ratelnn::npu::SizeLimits limits;
    if (max_tensor_elements <= 0 && max_total_bytes <= 0) {
      limits = ratelnn::npu::run_size_limits();
    } else {
      limits.max_tensor_elements = max_tensor_elements;
      limits.max_total_bytes = max_total_bytes;
      limits.elements_source = "the config key";
      limits.bytes_source = "the config key";
    }
    ratelnn::npu::check_size_limits(*static_cast<Engine*>(engine), batch, limits, "");
    return 0;
  } catch (const std::exception& ex) {
    return report(ex.what(), err, err_len);
  } catch (...) {
    return report("unknown error while checking engine sizes", err, err_len);
  }
}

// ---- the narrow ADD path (npu_add_narrow.h), for tests and benchmarks
// spec: {at, bt, ma, mb, s, lo, hi, requant, m2, s2, lo2, hi2} (dtypes as engine.proto numbers;
// SUB: mb negated); plan: {ma, mb, c, t, wide, lo, hi, two_stage, m2, c2, t2, wide2, lo2, hi2}
// (NarrowStage s1, then s2 with mb = 0).
namespace {
bool read_spec(const int64_t* v, ratelnn::npu::AddSpec* f) {
  using ratelnn::npu::DType;
  auto is8 = [](int64_t t) { return t == int64_t(DType::kInt8) || t == int64_t(DType::kUInt8); };
  auto m31 = [](int64_t m) { return m > -(int64_t(1) << 31) && m < (int64_t(1) << 31); };
  if (!is8(v[0]) || !is8(v[1]) || !m31(v[2]) || !m31(v[3]) || v[4] < 0 || v[4] > 62 || !m31(v[8]) || v[9] < 0 ||
      v[9] > 62 || v[5] > v[6] || v[10] > v[11] || !m31(v[5]) || !m31(v[6]) || !m31(v[10]) || !m31(v[11]))
    return false;
  f->at = DType(v[0]), f->bt = DType(v[1]), f->ma = v[2], f->mb = v[3], f->s = int(v[4]), f->lo = v[5], f->hi = v[6];
  f->requant = v[7] != 0, f->m2 = v[8], f->s2 = int(v[9]), f->lo2 = v[10], f->hi2 = v[11];
  return true;
}
}  // namespace

// 1 and the plan in plan[0..14) when narrow parameters equal to spec on every pair exist, 0 when
// not, -1 for a spec outside the bounds (8-bit operands, |multipliers| < 2^31, shifts 0..62).
int ratel_npu_add_narrow_plan(const int64_t* spec, int64_t* plan) {
  ratelnn::npu::AddSpec f;
  ratelnn::npu::AddNarrow p;
  if (!read_spec(spec, &f)) return -1;
  if (!ratelnn::npu::add_narrow_plan(f, &p)) return 0;
  const int64_t v[14] = {p.s1.ma, p.s1.mb, p.s1.c, p.s1.t, p.s1.wide, p.s1.lo, p.s1.hi,
                         p.two_stage, p.s2.ma, p.s2.c, p.s2.t, p.s2.wide, p.s2.lo, p.s2.hi};
  std::memcpy(plan, v, sizeof(v));
  return 1;
}

// The code pairs where plan differs from spec (the exhaustive check of npu_add_narrow.h), the
// first one in first[0..2); -1 for a bad spec or plan values beyond int32.
int64_t ratel_npu_add_narrow_mismatches(const int64_t* spec, const int64_t* plan, int64_t* first) {
  ratelnn::npu::AddSpec f;
  if (!read_spec(spec, &f)) return -1;
  for (int k = 0; k < 14; ++k)
    if (plan[k] < INT32_MIN || plan[k] > INT32_MAX) return -1;
  ratelnn::npu::AddNarrow p;
  p.at = f.at, p.bt = f.bt, p.requant = f.requant;
  auto stage = [](const int64_t* v, int64_t mb, ratelnn::npu::NarrowStage* s) {
    s->ma = int32_t(v[0]), s->mb = int32_t(mb), s->c = int32_t(v[1]), s->t = int(v[2]), s->wide = v[3] != 0;
    s->lo = int32_t(v[4]), s->hi = int32_t(v[5]);
  };
  const int64_t s1[6] = {plan[0], plan[2], plan[3], plan[4], plan[5], plan[6]};
  stage(s1, plan[1], &p.s1);
  p.two_stage = plan[7] != 0;
  stage(plan + 8, 0, &p.s2);
  return ratelnn::npu::add_narrow_mismatches(p, f, &first[0], &first[1]);
}

// The indices of the engine's ADD/SUB instructions that run the narrow path (npu_add_narrow.h),
// the first `cap` of them into indices; returns how many there are.
int64_t ratel_npu_engine_narrow_adds(void* engine, int32_t* indices, int64_t cap) {
  if (!engine) return -1;
  const Engine& e = *static_cast<Engine*>(engine);
  int64_t n = 0;
  for (size_t k = 0; k < e.instructions.size(); ++k)
    if (e.instructions[k].narrow) {
      if (n < cap) indices[n] = int32_t(k);
      ++n;
    }
  return n;
}

// The engine.proto schema the C++ reader is written against (core/npu_format.h), one
// entry a line, for tests/test_wire_constants.py:
//   format <major> <minor>
//   field <Message> <field> <number> <kind> <repeated 0|1>
//   enum <Enum> <min> <max>
//   value <Enum> <number> <NAME>        (names the C++ code prints)
const char* ratel_npu_wire_schema() {
  namespace npu = ratelnn::npu;
  static const std::string schema = [] {
    std::string s = "format " + std::to_string(npu::kFormatMajor) + " " + std::to_string(npu::kFormatMinor) + "\n";
#define RATELNN_WIRE_FIELD_LINE(msg, name, number, kind, repeated)                                  \
  s += std::string("field " #msg " " #name " ") + std::to_string(number) + " " #kind " " + \
       (repeated ? "1" : "0") + "\n";
    RATELNN_WIRE_FIELDS(RATELNN_WIRE_FIELD_LINE)
#undef RATELNN_WIRE_FIELD_LINE
    auto range = [&](const char* name, int64_t lo, int64_t hi) {
      s += std::string("enum ") + name + " " + std::to_string(lo) + " " + std::to_string(hi) + "\n";
    };
    range("DType", npu::kDTypeMin, npu::kDTypeMax);
    range("Opcode", npu::kOpcodeMin, npu::kOpcodeMax);
    range("SplitMode", npu::kSplitModeMin, npu::kSplitModeMax);
    for (int64_t v = npu::kDTypeMin; v <= npu::kDTypeMax; ++v)
      s += "value DType " + std::to_string(v) + " " + npu::dtype_name(static_cast<npu::DType>(v)) + "\n";
    for (int64_t v = npu::kOpcodeMin; v <= npu::kOpcodeMax; ++v)
      s += "value Opcode " + std::to_string(v) + " " + npu::opcode_name(static_cast<npu::Opcode>(v)) + "\n";
    return s;
  }();
  return schema.c_str();
}

}  // extern "C"
