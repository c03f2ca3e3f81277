// Decoding and validation of engine bytes; see npu_engine.h and docs/npu-arithmetic.md.
#include "core/npu_engine.h"
#include "core/npu_checksum.h"
#include "core/npu_exec.h"
#include "core/npu_kernels.h"
#include "core/npu_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>

namespace ratelnn {
namespace npu {

int itemsize(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kUInt8: return 1;
    case DType::kInt16: return 2;
    case DType::kInt32: return 4;
  }
  return 0;
}
int64_t qmin(DType t) {
  switch (t) {
    case DType::kInt8: return -128;
    case DType::kUInt8: return 0;
    case DType::kInt16: return -32768;
    case DType::kInt32: return INT32_MIN;
  }
  return 0;
}
int64_t qmax(DType t) {
  switch (t) {
    case DType::kInt8: return 127;
    case DType::kUInt8: return 255;
    case DType::kInt16: return 32767;
    case DType::kInt32: return INT32_MAX;
  }
  return 0;
}
const char* dtype_name(DType t) {
  switch (t) {
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
  }
  return "?";
}
const char* opcode_name(Opcode op) {
  static const char* names[] = {"?", "CONV2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "MAX_POOL",
                                "AVG_POOL", "MEAN", "CONCAT", "REQUANT", "PAD", "RESHAPE",
                                "TRANSPOSE", "LUT", "SOFTMAX"};
  int i = static_cast<int>(op);
  static_assert(sizeof(names) / sizeof(names[0]) == kOpcodeMax + 1, "one name per opcode");
  return (i >= kOpcodeMin && i <= kOpcodeMax) ? names[i] : "?";
}

int64_t TensorDesc::sample_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}
int64_t ConstDesc::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
int64_t ConstDesc::at(int64_t i) const {
  const uint8_t* p = data.data() + i * itemsize(dtype);
  switch (dtype) {
    case DType::kInt8: return static_cast<int8_t>(p[0]);
    case DType::kUInt8: return p[0];
    case DType::kInt16: return static_cast<int16_t>(uint16_t(p[0]) | (uint16_t(p[1]) << 8));
    case DType::kInt32:
      return static_cast<int32_t>(uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) |
                                  (uint32_t(p[3]) << 24));
  }
  return 0;
}

namespace {

[[noreturn]] void fail(const std::string& msg) { throw EngineError(msg); }

// ---------------------------------------------------------------- wire decoding
int64_t as_int32(uint64_t v, const char* what) {
  int64_t s = static_cast<int64_t>(v);  // int32 fields: negative values are sign-extended
  if (s < INT32_MIN || s > INT32_MAX) fail(std::string("malformed protobuf: ") + what + " out of int32 range");
  return s;
}
int64_t zigzag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }
std::string read_string(WireReader& r) {
  WireReader s = r.sub();
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}
void expect(int wt, int want, const char* field) {
  if (wt != want) fail(std::string("malformed protobuf: wrong wire type for ") + field);
}

// A repeated integer field, packed or not.  `is32` narrows int32 fields.
void read_repeated(WireReader& r, int wt, std::vector<int64_t>* out, bool is32, const char* field) {
  auto one = [&](WireReader& rr) {
    uint64_t v = rr.varint();
    if (out->size() >= (size_t(1) << 24)) fail(std::string("too many values in ") + field);
    out->push_back(is32 ? as_int32(v, field) : static_cast<int64_t>(v));
  };
  if (wt == kLengthDelimited) {
    WireReader p = r.sub();
    while (!p.done()) one(p);
  } else {
    expect(wt, kVarint, field);
    one(r);
  }
}
void read_ids(WireReader& r, int wt, std::vector<int>* out, const char* field) {
  std::vector<int64_t> v;
  read_repeated(r, wt, &v, true, field);
  for (int64_t x : v) out->push_back(static_cast<int>(x));
}

void decode_version(WireReader r, Engine* e) {
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    if (f == field::FormatVersion::major) { expect(wt, kVarint, "format_version.major"); e->major = uint32_t(r.varint()); }
    else if (f == field::FormatVersion::minor) { expect(wt, kVarint, "format_version.minor"); e->minor = uint32_t(r.varint()); }
    else r.skip(wt);
  }
}

DType to_dtype(uint64_t v, const std::string& where) {
  if (v < uint64_t(kDTypeMin) || v > uint64_t(kDTypeMax)) fail(where + ": unknown dtype " + std::to_string(int64_t(v)));
  return static_cast<DType>(v);
}

TensorDesc decode_tensor(WireReader r, size_t index) {
  TensorDesc t;
  int64_t id = 0;  // proto3 omits zero values
  uint64_t dtype = 0;
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::Tensor::id: expect(wt, kVarint, "tensor.id"); id = as_int32(r.varint(), "tensor.id"); break;
      case field::Tensor::name: expect(wt, kLengthDelimited, "tensor.name"); t.name = read_string(r); break;
      case field::Tensor::shape: read_repeated(r, wt, &t.shape, false, "tensor.shape"); break;
      case field::Tensor::dtype: expect(wt, kVarint, "tensor.dtype"); dtype = r.varint(); break;
      case field::Tensor::scale: { expect(wt, kFixed64, "tensor.scale"); uint64_t b = r.fixed(8); std::memcpy(&t.scale, &b, 8); break; }
      case field::Tensor::sram_offset: expect(wt, kVarint, "tensor.sram_offset"); t.sram_offset = int64_t(r.varint()); break;
      case field::Tensor::sram_size: expect(wt, kVarint, "tensor.sram_size"); t.sram_size = int64_t(r.varint()); break;
      default: r.skip(wt);
    }
  }
  std::string where = "tensor " + std::to_string(index) + " '" + t.name + "'";
  if (id != int64_t(index)) fail(where + ": id " + std::to_string(id) + " differs from its position");
  t.dtype = to_dtype(dtype, where);
  return t;
}

ConstDesc decode_constant(WireReader r, size_t index) {
  ConstDesc c;
  int64_t id = 0;  // proto3 omits zero values
  uint64_t dtype = 0;
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::Constant::id: expect(wt, kVarint, "constant.id"); id = as_int32(r.varint(), "constant.id"); break;
      case field::Constant::name: expect(wt, kLengthDelimited, "constant.name"); c.name = read_string(r); break;
      case field::Constant::dtype: expect(wt, kVarint, "constant.dtype"); dtype = r.varint(); break;
      case field::Constant::shape: read_repeated(r, wt, &c.shape, false, "constant.shape"); break;
      case field::Constant::data: {
        expect(wt, kLengthDelimited, "constant.data");
        WireReader d = r.sub();
        c.data.assign(d.data(), d.data() + d.size());
        break;
      }
      default: r.skip(wt);
    }
  }
  std::string where = "constant " + std::to_string(index) + " '" + c.name + "'";
  if (id != int64_t(index)) fail(where + ": id " + std::to_string(id) + " differs from its position");
  c.dtype = to_dtype(dtype, where);
  return c;
}

Attrs decode_attrs(WireReader r) {
  Attrs a;
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::Attrs::strides: read_repeated(r, wt, &a.strides, true, "attrs.strides"); break;
      case field::Attrs::dilations: read_repeated(r, wt, &a.dilations, true, "attrs.dilations"); break;
      case field::Attrs::pads: read_repeated(r, wt, &a.pads, true, "attrs.pads"); break;
      case field::Attrs::groups: expect(wt, kVarint, "attrs.groups"); a.groups = as_int32(r.varint(), "attrs.groups"); break;
      case field::Attrs::ksize: read_repeated(r, wt, &a.ksize, true, "attrs.ksize"); break;
      case field::Attrs::act_min: expect(wt, kVarint, "attrs.act_min"); a.act_min = zigzag(r.varint()); a.has_act_min = true; break;
      case field::Attrs::act_max: expect(wt, kVarint, "attrs.act_max"); a.act_max = zigzag(r.varint()); a.has_act_max = true; break;
      case field::Attrs::count_include_pad: expect(wt, kVarint, "attrs.count_include_pad"); a.count_include_pad = r.varint() != 0; break;
      case field::Attrs::axes: read_repeated(r, wt, &a.axes, true, "attrs.axes"); break;
      case field::Attrs::axis: expect(wt, kVarint, "attrs.axis"); a.axis = as_int32(r.varint(), "attrs.axis"); break;
      case field::Attrs::perm: read_repeated(r, wt, &a.perm, true, "attrs.perm"); break;
      case field::Attrs::pad_value: expect(wt, kVarint, "attrs.pad_value"); a.pad_value = zigzag(r.varint()); break;
      case field::Attrs::multipliers: read_repeated(r, wt, &a.multipliers, false, "attrs.multipliers"); break;
      case field::Attrs::shifts: read_repeated(r, wt, &a.shifts, true, "attrs.shifts"); break;
      case field::Attrs::keepdims: expect(wt, kVarint, "attrs.keepdims"); a.keepdims = r.varint() != 0; break;
      default: r.skip(wt);
    }
  }
  return a;
}

Instruction decode_instruction(WireReader r) {
  Instruction ins;
  uint64_t opcode = 0;
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::Instruction::opcode: expect(wt, kVarint, "instruction.opcode"); opcode = r.varint(); break;
      case field::Instruction::inputs: read_ids(r, wt, &ins.inputs, "instruction.inputs"); break;
      case field::Instruction::outputs: read_ids(r, wt, &ins.outputs, "instruction.outputs"); break;
      case field::Instruction::consts: read_ids(r, wt, &ins.consts, "instruction.consts"); break;
      case field::Instruction::attrs: expect(wt, kLengthDelimited, "instruction.attrs"); ins.attrs = decode_attrs(r.sub()); break;
      case field::Instruction::cycles: expect(wt, kVarint, "instruction.cycles"); ins.cycles = r.varint(); break;
      case field::Instruction::name: expect(wt, kLengthDelimited, "instruction.name"); ins.name = read_string(r); break;
      default: r.skip(wt);
    }
  }
  if (opcode < uint64_t(kOpcodeMin) || opcode > uint64_t(kOpcodeMax)) fail("instruction '" + ins.name + "': unknown opcode " + std::to_string(int64_t(opcode)));
  ins.opcode = static_cast<Opcode>(opcode);
  return ins;
}

BatchPlan decode_batch_plan(WireReader r) {
  BatchPlan p;
  std::vector<int64_t> cycles;
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::BatchPlan::batch_size: expect(wt, kVarint, "batch_plan.batch_size"); p.batch_size = int64_t(r.varint()); break;
      case field::BatchPlan::sram_bytes: expect(wt, kVarint, "batch_plan.sram_bytes"); p.sram_bytes = int64_t(r.varint()); break;
      case field::BatchPlan::sram_offsets: read_repeated(r, wt, &p.sram_offsets, false, "batch_plan.sram_offsets"); break;
      case field::BatchPlan::sram_sizes: read_repeated(r, wt, &p.sram_sizes, false, "batch_plan.sram_sizes"); break;
      case field::BatchPlan::cycles: read_repeated(r, wt, &cycles, false, "batch_plan.cycles"); break;
      default: r.skip(wt);
    }
  }
  for (int64_t c : cycles) p.cycles.push_back(static_cast<uint64_t>(c));
  return p;
}

void decode_fields(WireReader r, Engine* e) {
  while (!r.done()) {
    int wt;
    uint32_t f = r.key(&wt);
    switch (f) {
      case field::Engine::format_version: expect(wt, kLengthDelimited, "format_version"); decode_version(r.sub(), e); break;
      case field::Engine::name: expect(wt, kLengthDelimited, "name"); e->name = read_string(r); break;
      case field::Engine::batch_size: expect(wt, kVarint, "batch_size"); e->batch_size = int64_t(r.varint()); break;
      case field::Engine::tensors: expect(wt, kLengthDelimited, "tensors"); e->tensors.push_back(decode_tensor(r.sub(), e->tensors.size())); break;
      case field::Engine::constants: expect(wt, kLengthDelimited, "constants"); e->constants.push_back(decode_constant(r.sub(), e->constants.size())); break;
      case field::Engine::inputs: read_ids(r, wt, &e->inputs, "inputs"); break;
      case field::Engine::outputs: read_ids(r, wt, &e->outputs, "outputs"); break;
      case field::Engine::instructions: expect(wt, kLengthDelimited, "instructions"); e->instructions.push_back(decode_instruction(r.sub())); break;
      case field::Engine::device_id: expect(wt, kVarint, "device_id"); e->device_id = as_int32(r.varint(), "device_id"); break;
      case field::Engine::core_ids: read_repeated(r, wt, &e->core_ids, true, "core_ids"); break;
      case field::Engine::split_mode: expect(wt, kVarint, "split_mode"); e->split_mode = int64_t(r.varint()); break;
      case field::Engine::sram_bytes: expect(wt, kVarint, "sram_bytes"); e->sram_bytes = int64_t(r.varint()); break;
      case field::Engine::batch_plans:
        expect(wt, kLengthDelimited, "batch_plans");
        if (e->batch_plans.size() >= 4096) fail("more than 4096 batch_plans");
        e->batch_plans.push_back(decode_batch_plan(r.sub()));
        break;
      case field::Engine::checksum: fail("malformed engine: a checksum field before the last 5 bytes");
      default: r.skip(wt);
    }
  }
}

// ---------------------------------------------------------------- validation
using u128 = unsigned __int128;

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

// Largest |code| of an integer dtype: 128, 255, 32768.
int64_t qabs(DType t) { return std::max(-qmin(t), qmax(t)); }

void check_shape(const std::vector<int64_t>& shape, const std::string& where, bool allow_scalar) {
  if (shape.size() > size_t(kMaxRank) || (!allow_scalar && shape.empty()))
    fail(where + ": rank " + std::to_string(shape.size()) + " not in [1, 6]");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 1) fail(where + ": dimension " + std::to_string(d) + " is not positive in " + shape_str(shape));
    if (d > kMaxElements || n > kMaxElements / d) fail(where + ": more than 2^31-1 elements in " + shape_str(shape));
    n *= d;
  }
}

class Validator {
 public:
  explicit Validator(Engine& e) : e_(e) {}

  void run() {
    if (e_.major != kFormatMajor)
      fail("unsupported format version " + std::to_string(e_.major) + "." + std::to_string(e_.minor) +
           " (this reader reads major version " + std::to_string(kFormatMajor) + ")");
    if (e_.batch_size < 1 || e_.batch_size > kMaxElements) fail("batch_size " + std::to_string(e_.batch_size) + " is not positive");
    if (e_.sram_bytes < 0) fail("negative sram_bytes");
    if (e_.device_id < 0) fail("negative device_id");
    for (int64_t c : e_.core_ids) if (c < 0) fail("negative core id");
    if (e_.split_mode < kSplitModeMin || e_.split_mode > kSplitModeMax) fail("unknown split_mode " + std::to_string(e_.split_mode));
    int64_t total = 0;
    for (size_t i = 0; i < e_.tensors.size(); ++i) {
      TensorDesc& t = e_.tensors[i];
      std::string where = tname(int(i));
      if (t.dtype == DType::kInt32) fail(where + ": activations must be int8, uint8 or int16");
      check_shape(t.shape, where, false);
      if (t.shape[0] != e_.batch_size)
        fail(where + ": batch dimension " + std::to_string(t.shape[0]) + " differs from batch_size " + std::to_string(e_.batch_size));
      if (!(std::isfinite(t.scale) && t.scale > 0)) fail(where + ": scale must be a positive finite number");
      if (t.sram_offset < 0 || t.sram_size < 0 || t.sram_offset > e_.sram_bytes || t.sram_size > e_.sram_bytes - t.sram_offset)
        fail(where + ": memory plan range outside sram_bytes " + std::to_string(e_.sram_bytes));
      total += t.sample_elements() * itemsize(t.dtype);
      if (total > kMaxActivationBytes) fail("activations exceed 8 GiB per sample");
    }
    for (size_t i = 0; i < e_.constants.size(); ++i) {
      ConstDesc& c = e_.constants[i];
      std::string where = "constant " + std::to_string(i) + " '" + c.name + "'";
      check_shape(c.shape, where, true);
      if (int64_t(c.data.size()) != c.elements() * itemsize(c.dtype))
        fail(where + ": " + std::to_string(c.data.size()) + " data bytes for shape " + shape_str(c.shape) + " of " +
             dtype_name(c.dtype));
    }
    check_batch_plans();
    check_io();
    for (size_t i = 0; i < e_.instructions.size(); ++i) check_instruction(e_.instructions[i], i);
    for (int id : e_.outputs)
      if (!defined_.count(id)) fail("output " + tname(id) + " is never produced");
  }

 private:
  // Every plan: a batch size above the previous one, one memory range per tensor inside its
  // sram_bytes and one cycle estimate per instruction.
  void check_batch_plans() {
    int64_t previous = e_.batch_size;
    for (const BatchPlan& p : e_.batch_plans) {
      const std::string where = "batch plan " + std::to_string(p.batch_size);
      if (p.batch_size <= previous || p.batch_size > kMaxElements)
        fail("batch plans must have ascending batch sizes above batch_size " + std::to_string(e_.batch_size) +
             ", got " + std::to_string(p.batch_size) + " after " + std::to_string(previous));
      previous = p.batch_size;
      if (p.sram_bytes < 0) fail(where + ": negative sram_bytes");
      if (p.sram_offsets.size() != e_.tensors.size() || p.sram_sizes.size() != e_.tensors.size())
        fail(where + ": " + std::to_string(p.sram_offsets.size()) + " sram_offsets and " +
             std::to_string(p.sram_sizes.size()) + " sram_sizes for " + std::to_string(e_.tensors.size()) + " tensors");
      if (p.cycles.size() != e_.instructions.size())
        fail(where + ": " + std::to_string(p.cycles.size()) + " cycle estimates for " +
             std::to_string(e_.instructions.size()) + " instructions");
      for (size_t i = 0; i < e_.tensors.size(); ++i) {
        const int64_t off = p.sram_offsets[i], size = p.sram_sizes[i];
        if (off < 0 || size < 0 || off > p.sram_bytes || size > p.sram_bytes - off)
          fail(where + ": " + tname(int(i)) + ": memory plan range outside sram_bytes " + std::to_string(p.sram_bytes));
      }
    }
  }

  Engine& e_;
  std::set<int> defined_;

  std::string tname(int id) const { return "tensor " + std::to_string(id) + " '" + e_.tensors[id].name + "'"; }

  void check_io() {
    if (e_.inputs.empty()) fail("no inputs");
    if (e_.outputs.empty()) fail("no outputs");
    for (int id : e_.inputs) {
      if (id < 0 || size_t(id) >= e_.tensors.size()) fail("input id " + std::to_string(id) + " out of range");
      if (!defined_.insert(id).second) fail("input " + tname(id) + " listed twice");
    }
    std::set<int> outs;
    for (int id : e_.outputs) {
      if (id < 0 || size_t(id) >= e_.tensors.size()) fail("output id " + std::to_string(id) + " out of range");
      if (!outs.insert(id).second) fail("output " + tname(id) + " listed twice");
    }
  }

  // ---- helpers for one instruction
  struct Ctx {
    Instruction* ins;
    std::string where;
  };

  const TensorDesc& T(int id) const { return e_.tensors[id]; }
  const ConstDesc& C(int id) const { return e_.constants[id]; }

  static void need(bool ok, const Ctx& c, const std::string& msg) {
    if (!ok) fail(c.where + ": " + msg);
  }
  static void count(const Ctx& c, size_t n_in, size_t n_out, size_t n_const_min, size_t n_const_max) {
    const Instruction& i = *c.ins;
    need(i.inputs.size() == n_in && i.outputs.size() == n_out && i.consts.size() >= n_const_min &&
             i.consts.size() <= n_const_max,
         c, "wrong number of inputs/outputs/constants (" + std::to_string(i.inputs.size()) + "/" +
                std::to_string(i.outputs.size()) + "/" + std::to_string(i.consts.size()) + ")");
  }
  static void attr_len(const Ctx& c, const std::vector<int64_t>& v, size_t n, const char* name) {
    need(v.size() == n, c, std::string("attr ") + name + " needs " + std::to_string(n) + " values, has " + std::to_string(v.size()));
  }
  static void positive(const Ctx& c, const std::vector<int64_t>& v, const char* name) {
    for (int64_t x : v) need(x >= 1, c, std::string("attr ") + name + " must be >= 1");
  }
  // A const of this dtype and shape.
  void const_is(const Ctx& c, int k, std::initializer_list<DType> dtypes, const std::vector<int64_t>& shape, const char* role) {
    const ConstDesc& cd = C(c.ins->consts[k]);
    need(std::find(dtypes.begin(), dtypes.end(), cd.dtype) != dtypes.end(), c,
         std::string(role) + " constant has dtype " + dtype_name(cd.dtype));
    need(cd.shape == shape, c, std::string(role) + " constant has shape " + shape_str(cd.shape) + ", expected " + shape_str(shape));
  }
  // Requantization parameters: multipliers in [0, 2^31), shifts in [0, 62], and
  // bound * multiplier <= 2^62 (so no int64 overflow anywhere).
  static void requant_ok(const Ctx& c, int64_t m, int64_t s, u128 bound) {
    need(m >= 0 && m <= INT32_MAX, c, "multiplier " + std::to_string(m) + " outside [0, 2^31)");
    need(s >= 0 && s <= 62, c, "shift " + std::to_string(s) + " outside [0, 62]");
    need(bound * u128(m) <= u128(kMaxProduct) && bound <= u128(kMaxProduct), c,
         "accumulator bound times multiplier exceeds 2^62 (multiplier " + std::to_string(m) + ")");
  }
  void clamp_bounds(const Ctx& c, DType out) {
    Instruction& i = *c.ins;
    i.lo = i.attrs.has_act_min ? i.attrs.act_min : qmin(out);
    i.hi = i.attrs.has_act_max ? i.attrs.act_max : qmax(out);
    need(i.lo >= qmin(out) && i.hi <= qmax(out) && i.lo <= i.hi, c,
         "clamp [" + std::to_string(i.lo) + ", " + std::to_string(i.hi) + "] not inside the output dtype range");
  }
  static bool is_act(int id, size_t n) { return id >= 0 && size_t(id) < n; }

  void check_instruction(Instruction& ins, size_t index) {
    Ctx c{&ins, "instruction " + std::to_string(index) + " " + opcode_name(ins.opcode) + " '" + ins.name + "'"};
    for (int id : ins.inputs) {
      need(is_act(id, e_.tensors.size()), c, "input tensor id " + std::to_string(id) + " out of range");
      need(defined_.count(id) > 0, c, "reads " + tname(id) + " before it is produced");
    }
    for (int id : ins.consts) need(id >= 0 && size_t(id) < e_.constants.size(), c, "constant id " + std::to_string(id) + " out of range");
    for (int id : ins.outputs) {
      need(is_act(id, e_.tensors.size()), c, "output tensor id " + std::to_string(id) + " out of range");
      need(defined_.insert(id).second, c, "writes " + tname(id) + " which is already produced or an input");
    }
    switch (ins.opcode) {
      case Opcode::kConv2D: conv(c); break;
      case Opcode::kFullyConnected: fully_connected(c); break;
      case Opcode::kAdd: case Opcode::kSub: case Opcode::kMul: binary(c); break;
      case Opcode::kMaxPool: case Opcode::kAvgPool: pool(c); break;
      case Opcode::kMean: mean(c); break;
      case Opcode::kConcat: concat(c); break;
      case Opcode::kRequant: requant(c); break;
      case Opcode::kPad: pad(c); break;
      case Opcode::kReshape: reshape(c); break;
      case Opcode::kTranspose: transpose(c); break;
      case Opcode::kLut: lut(c); break;
      case Opcode::kSoftmax: softmax(c); break;
    }
  }

  // Shared by CONV2D and FULLY_CONNECTED once shapes are checked: consts are
  // (weights, bias, multiplier, shift[, neg_multiplier, neg_shift]), per output channel.
  void channel_requant(const Ctx& c, int64_t k, int64_t cout, DType x_dtype, const std::vector<int64_t>& wshape) {
    Instruction& i = *c.ins;
    need(i.consts.size() == 4 || i.consts.size() == 6, c, "needs 4 or 6 constants");
    const_is(c, 0, {DType::kInt8, DType::kInt16}, wshape, "weight");
    for (size_t k2 = 1; k2 < i.consts.size(); ++k2)
      const_is(c, int(k2), {DType::kInt32}, {cout}, k2 == 1 ? "bias" : "requantization");
    DType wt = C(i.consts[0]).dtype;
    u128 prod_bound = u128(k) * u128(qabs(x_dtype)) * u128(qabs(wt));
    const ConstDesc& bias = C(i.consts[1]);
    for (int64_t o = 0; o < cout; ++o) {
      int64_t b = bias.at(o);
      u128 bound = prod_bound + u128(b < 0 ? -b : b);
      requant_ok(c, C(i.consts[2]).at(o), C(i.consts[3]).at(o), bound);
      if (i.consts.size() == 6) {  // M_neg may be negative (PReLU slopes < 0): |M_neg| < 2^31
        int64_t mn = C(i.consts[4]).at(o);
        requant_ok(c, mn < 0 ? -mn : mn, C(i.consts[5]).at(o), bound);
      }
      if (bound > u128(INT32_MAX)) i.wide_accumulator = true;
    }
    clamp_bounds(c, T(i.outputs[0]).dtype);
  }

  void conv(const Ctx& c) {
    Instruction& i = *c.ins;
    const Attrs& a = i.attrs;
    count(c, 1, 1, 4, 6);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape.size() == 4 && y.shape.size() == 4, c, "input and output must be rank 4 (NHWC)");
    const ConstDesc& w = C(i.consts[0]);
    need(w.shape.size() == 4, c, "weights must be rank 4 (HWIO)");
    attr_len(c, a.strides, 2, "strides"); positive(c, a.strides, "strides");
    attr_len(c, a.dilations, 2, "dilations"); positive(c, a.dilations, "dilations");
    attr_len(c, a.pads, 4, "pads");
    int64_t g = a.groups, cin = x.shape[3], kh = w.shape[0], kw = w.shape[1], cg = w.shape[2], cout = w.shape[3];
    need(g >= 1 && cin % g == 0 && cout % g == 0 && cg * g == cin, c,
         "groups " + std::to_string(g) + " inconsistent with Cin " + std::to_string(cin) + " and weights " + shape_str(w.shape));
    int64_t ext[2] = {a.dilations[0] * (kh - 1) + 1, a.dilations[1] * (kw - 1) + 1};
    for (int d = 0; d < 4; ++d)
      need(a.pads[d] >= 0 && a.pads[d] < ext[d / 2], c, "pads must be in [0, dilated kernel extent)");
    std::vector<int64_t> want = {x.shape[0], 0, 0, cout};
    for (int d = 0; d < 2; ++d) {
      int64_t span = x.shape[1 + d] + a.pads[2 * d] + a.pads[2 * d + 1] - ext[d];
      need(span >= 0, c, "kernel larger than the padded input");
      want[1 + d] = span / a.strides[d] + 1;
    }
    need(y.shape == want, c, "output shape " + shape_str(y.shape) + ", expected " + shape_str(want));
    channel_requant(c, kh * kw * cg, cout, x.dtype, w.shape);
    pack_conv_weights(i, w, x.dtype, kh, kw, cg, cout, g);
    prepare_channel_params(e_, i, cout);
  }

  void fully_connected(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 4, 6);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape.size() == 2 && y.shape.size() == 2, c, "input and output must be rank 2");
    const ConstDesc& w = C(i.consts[0]);
    need(w.shape.size() == 2 && w.shape[0] == x.shape[1], c, "weights " + shape_str(w.shape) + " do not match input " + shape_str(x.shape));
    need(y.shape[0] == x.shape[0] && y.shape[1] == w.shape[1], c, "output shape " + shape_str(y.shape) + " wrong");
    channel_requant(c, w.shape[0], w.shape[1], x.dtype, w.shape);
    pack_conv_weights(i, w, x.dtype, 1, 1, w.shape[0], w.shape[1], 1);
    prepare_channel_params(e_, i, w.shape[1]);
  }

  void binary(const Ctx& c) {
    Instruction& i = *c.ins;
    need(i.outputs.size() == 1 && i.inputs.size() >= 1 && i.inputs.size() + i.consts.size() == 2, c,
         "needs two operands (inputs then constants) and one output");
    const TensorDesc& y = T(i.outputs[0]);
    size_t rank = y.shape.size();
    DType dt[2];
    std::vector<int64_t> shapes[2];
    for (int k = 0; k < 2; ++k) {
      bool is_tensor = size_t(k) < i.inputs.size();
      if (is_tensor) {
        const TensorDesc& t = T(i.inputs[k]);
        need(t.shape.size() == rank, c, "tensor operands must have the output's rank");
        shapes[k] = t.shape;
        dt[k] = t.dtype;
      } else {
        const ConstDesc& cd = C(i.consts[k - i.inputs.size()]);
        need(cd.dtype != DType::kInt32, c, "constant operand must be int8, uint8 or int16");
        need(cd.shape.size() <= rank, c, "constant operand has a higher rank than the output");
        shapes[k].assign(rank - cd.shape.size(), 1);
        shapes[k].insert(shapes[k].end(), cd.shape.begin(), cd.shape.end());
        need(cd.shape.size() < rank || shapes[k][0] == 1, c, "constant operand cannot span the batch dimension");
        dt[k] = cd.dtype;
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      int64_t p = shapes[0][d], q = shapes[1][d];
      need((p == q || p == 1 || q == 1) && std::max(p, q) == y.shape[d], c,
           "operands " + shape_str(shapes[0]) + " and " + shape_str(shapes[1]) + " do not broadcast to " + shape_str(y.shape));
    }
    const Attrs& a = i.attrs;
    if (i.opcode == Opcode::kMul) {
      attr_len(c, a.multipliers, 1, "multipliers"); attr_len(c, a.shifts, 1, "shifts");
      requant_ok(c, a.multipliers[0], a.shifts[0], u128(qabs(dt[0])) * u128(qabs(dt[1])));
    } else {
      attr_len(c, a.multipliers, 2, "multipliers"); attr_len(c, a.shifts, 1, "shifts");
      requant_ok(c, a.multipliers[0], a.shifts[0], u128(qabs(dt[0])));
      requant_ok(c, a.multipliers[1], a.shifts[0], u128(qabs(dt[1])));
      need(u128(qabs(dt[0])) * u128(a.multipliers[0]) + u128(qabs(dt[1])) * u128(a.multipliers[1]) <= u128(kMaxProduct), c,
           "sum of rescaled operands can exceed 2^62");
    }
    clamp_bounds(c, y.dtype);
  }

  void pool(const Ctx& c) {
    Instruction& i = *c.ins;
    const Attrs& a = i.attrs;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape.size() == 4 && y.shape.size() == 4, c, "input and output must be rank 4 (NHWC)");
    attr_len(c, a.ksize, 2, "ksize"); positive(c, a.ksize, "ksize");
    attr_len(c, a.strides, 2, "strides"); positive(c, a.strides, "strides");
    attr_len(c, a.pads, 4, "pads");
    for (int d = 0; d < 4; ++d) need(a.pads[d] >= 0 && a.pads[d] < a.ksize[d / 2], c, "pads must be in [0, ksize)");
    std::vector<int64_t> want = {x.shape[0], 0, 0, x.shape[3]};
    for (int d = 0; d < 2; ++d) {
      int64_t span = x.shape[1 + d] + a.pads[2 * d] + a.pads[2 * d + 1] - a.ksize[d];
      need(span >= 0, c, "window larger than the padded input");
      want[1 + d] = span / a.strides[d] + 1;
    }
    need(y.shape == want, c, "output shape " + shape_str(y.shape) + ", expected " + shape_str(want));
    if (i.opcode == Opcode::kMaxPool) {
      need(x.dtype == y.dtype, c, "MAX_POOL keeps the dtype");
    } else {
      attr_len(c, a.multipliers, 1, "multipliers"); attr_len(c, a.shifts, 1, "shifts");
      u128 cells = u128(a.ksize[0]) * u128(a.ksize[1]);
      requant_ok(c, a.multipliers[0], a.shifts[0], cells * u128(qabs(x.dtype)));
      need(cells << a.shifts[0] <= u128(kMaxProduct), c, "window cells times 2^shift exceeds 2^62");
    }
    clamp_bounds(c, y.dtype);
  }

  void mean(const Ctx& c) {
    Instruction& i = *c.ins;
    const Attrs& a = i.attrs;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    int64_t rank = x.shape.size();
    need(!a.axes.empty(), c, "attr axes is empty");
    std::vector<bool> reduced(rank, false);
    int64_t cells = 1;
    for (int64_t ax : a.axes) {
      need(ax >= 1 && ax < rank && !reduced[ax], c, "axes must be distinct and in [1, rank)");
      reduced[ax] = true;
      cells *= x.shape[ax];
    }
    std::vector<int64_t> want;
    for (int64_t d = 0; d < rank; ++d) {
      if (!reduced[d]) want.push_back(x.shape[d]);
      else if (a.keepdims) want.push_back(1);
    }
    need(y.shape == want, c, "output shape " + shape_str(y.shape) + ", expected " + shape_str(want));
    attr_len(c, a.multipliers, 1, "multipliers"); attr_len(c, a.shifts, 1, "shifts");
    requant_ok(c, a.multipliers[0], a.shifts[0], u128(cells) * u128(qabs(x.dtype)));
    need(u128(cells) << a.shifts[0] <= u128(kMaxProduct), c, "cells times 2^shift exceeds 2^62");
    clamp_bounds(c, y.dtype);
  }

  void concat(const Ctx& c) {
    Instruction& i = *c.ins;
    const Attrs& a = i.attrs;
    need(i.inputs.size() >= 1 && i.outputs.size() == 1 && i.consts.empty(), c, "needs >= 1 inputs, 1 output, no constants");
    const TensorDesc& y = T(i.outputs[0]);
    int64_t rank = y.shape.size();
    need(a.axis >= 1 && a.axis < rank, c, "axis must be in [1, rank)");
    attr_len(c, a.multipliers, i.inputs.size(), "multipliers"); attr_len(c, a.shifts, i.inputs.size(), "shifts");
    int64_t sum = 0;
    for (size_t k = 0; k < i.inputs.size(); ++k) {
      const TensorDesc& x = T(i.inputs[k]);
      need(int64_t(x.shape.size()) == rank, c, "inputs must have the output's rank");
      for (int64_t d = 0; d < rank; ++d)
        need(d == a.axis || x.shape[d] == y.shape[d], c, "input " + shape_str(x.shape) + " does not match output " + shape_str(y.shape));
      sum += x.shape[a.axis];
      requant_ok(c, a.multipliers[k], a.shifts[k], u128(qabs(x.dtype)));
    }
    need(sum == y.shape[a.axis], c, "concatenated size differs from the output");
    clamp_bounds(c, y.dtype);
  }

  void requant(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape == y.shape, c, "output shape differs from input");
    attr_len(c, i.attrs.multipliers, 1, "multipliers"); attr_len(c, i.attrs.shifts, 1, "shifts");
    requant_ok(c, i.attrs.multipliers[0], i.attrs.shifts[0], u128(qabs(x.dtype)));
    clamp_bounds(c, y.dtype);
  }

  void pad(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    size_t rank = x.shape.size();
    attr_len(c, i.attrs.pads, 2 * rank, "pads");
    need(x.dtype == y.dtype, c, "PAD keeps the dtype");
    need(i.attrs.pads[0] == 0 && i.attrs.pads[1] == 0, c, "the batch dimension cannot be padded");
    need(i.attrs.pad_value >= qmin(x.dtype) && i.attrs.pad_value <= qmax(x.dtype), c, "pad_value outside the dtype range");
    need(y.shape.size() == rank, c, "output rank differs");
    for (size_t d = 0; d < rank; ++d) {
      need(i.attrs.pads[2 * d] >= 0 && i.attrs.pads[2 * d + 1] >= 0, c, "negative pads");
      need(y.shape[d] == x.shape[d] + i.attrs.pads[2 * d] + i.attrs.pads[2 * d + 1], c, "output shape " + shape_str(y.shape) + " wrong");
    }
  }

  void reshape(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.dtype == y.dtype, c, "RESHAPE keeps the dtype");
    need(x.sample_elements() == y.sample_elements(), c, "element count differs: " + shape_str(x.shape) + " -> " + shape_str(y.shape));
  }

  void transpose(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 0, 0);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    size_t rank = x.shape.size();
    const std::vector<int64_t>& p = i.attrs.perm;
    attr_len(c, p, rank, "perm");
    need(x.dtype == y.dtype, c, "TRANSPOSE keeps the dtype");
    need(p[0] == 0, c, "perm must keep the batch dimension first");
    std::vector<bool> seen(rank, false);
    for (int64_t v : p) {
      need(v >= 0 && size_t(v) < rank && !seen[v], c, "perm is not a permutation");
      seen[v] = true;
    }
    need(y.shape.size() == rank, c, "output rank differs");
    for (size_t d = 0; d < rank; ++d) need(y.shape[d] == x.shape[p[d]], c, "output shape " + shape_str(y.shape) + " wrong");
  }

  void lut(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 1, 1);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape == y.shape, c, "output shape differs from input");
    int64_t n = qmax(x.dtype) - qmin(x.dtype) + 1;
    const_is(c, 0, {y.dtype}, {n}, "table");
  }

  void softmax(const Ctx& c) {
    Instruction& i = *c.ins;
    count(c, 1, 1, 1, 1);
    const TensorDesc &x = T(i.inputs[0]), &y = T(i.outputs[0]);
    need(x.shape == y.shape && x.shape.size() >= 2, c, "input and output must have one shape of rank >= 2");
    int64_t n = qmax(x.dtype) - qmin(x.dtype) + 1;
    const_is(c, 0, {DType::kInt32}, {n}, "exp table");
    const ConstDesc& table = C(i.consts[0]);
    int64_t table_max = 0;  // bounds every e_j, so the row sum is at most len * table_max
    for (int64_t k = 0; k < n; ++k) {
      int64_t v = table.at(k);
      need(v >= 0 && v <= (int64_t(1) << 30), c, "exp table values must be in [0, 2^30]");
      table_max = std::max(table_max, v);
    }
    need(table.at(0) >= 1, c, "exp table entry 0 must be positive");
    attr_len(c, i.attrs.multipliers, 1, "multipliers"); attr_len(c, i.attrs.shifts, 1, "shifts");
    int64_t len = x.shape.back();
    requant_ok(c, i.attrs.multipliers[0], i.attrs.shifts[0], u128(table_max));
    need((u128(len) * u128(table_max) << i.attrs.shifts[0]) <= u128(kMaxProduct), c,
         "row length times the largest exp table value times 2^shift exceeds 2^62");
    clamp_bounds(c, y.dtype);
  }
};

}  // namespace

Engine decode_engine(const uint8_t* data, size_t size, const std::string& label) {
  Engine e;
  std::string who = label;
  size_t body = 0;
  try {  // the checksum first: nothing of corrupted bytes is decoded (npu_checksum.h)
    body = verify_engine_checksum(data, size);
  } catch (const EngineError& err) {
    throw EngineError((who.empty() ? std::string("engine bytes") : "engine '" + who + "'") + ": " + err.what());
  }
  try {
    decode_fields(WireReader(data, body), &e);
    if (who.empty()) who = e.name;
    Validator(e).run();
    plan_fusions(e);
    plan_batch_split(e);
  } catch (const EngineError& err) {
    if (who.empty()) who = e.name;
    throw EngineError("engine '" + who + "': " + err.what());
  } catch (const std::bad_alloc&) {
    throw EngineError("engine '" + who + "': out of memory while decoding");
  }
  return e;
}

}  // namespace npu
}  // namespace ratelnn
