// The native NPU executor (see npu_exec.h): the Runner, which runs an engine's instructions on
// host buffers, and run_engine's batch schedule.  Its load-time plans (fusions, batch split) are
// npu_plan.cc's.  Every formula here is the one of docs/npu-arithmetic.md;
// ratelnn/npu/reference.py is the readable twin.
#include "core/npu_exec.h"
#include "core/npu_io.h"

#include <algorithm>
#include <utility>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "core/npu_add.h"
#include "core/npu_add_narrow.h"
#include "core/npu_kernels.h"
#include "core/npu_plan.h"
#include "core/npu_threads.h"

namespace ratelnn {
namespace npu {
namespace {

using Shape = std::vector<int64_t>;

// ---------------------------------------------------------------- integer arithmetic
// rdiv(n, d): n / d rounded half away from zero, d > 0, |n| <= 2^62 (validated bounds).
inline int64_t rdiv(int64_t n, int64_t d) {
  uint64_t a = n < 0 ? uint64_t(-n) : uint64_t(n);
  uint64_t q = a / uint64_t(d), r = a % uint64_t(d);
  if (2 * r >= uint64_t(d)) ++q;
  return n < 0 ? -int64_t(q) : int64_t(q);
}

inline int64_t qabs(DType t) { return std::max(-qmin(t), qmax(t)); }

inline int64_t load(const uint8_t* p, DType t, int64_t i) {
  switch (t) {
    case DType::kInt8: return reinterpret_cast<const int8_t*>(p)[i];
    case DType::kUInt8: return p[i];
    case DType::kInt16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
  }
  return 0;
}
inline void store(uint8_t* p, DType t, int64_t i, int64_t v) {
  switch (t) {
    case DType::kInt8: reinterpret_cast<int8_t*>(p)[i] = int8_t(v); return;
    case DType::kUInt8: p[i] = uint8_t(v); return;
    case DType::kInt16: { int16_t x = int16_t(v); std::memcpy(p + 2 * i, &x, 2); return; }
    case DType::kInt32: { int32_t x = int32_t(v); std::memcpy(p + 4 * i, &x, 4); return; }
  }
}

int64_t product(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  int64_t n = 1;
  for (size_t i = from; i < std::min(to, s.size()); ++i) n *= s[i];
  return n;
}
Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t d = int64_t(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

// Visit every index of `shape` in row-major order; f(k, off) gets the linear index k and,
// for each stride vector in `strides`, the offset sum(idx[d] * strides[j][d]).
template <int K, typename F>
void for_each_index(const Shape& shape, const Shape (&strides)[K], F f) {
  size_t rank = shape.size();
  int64_t total = product(shape);
  if (total == 0) return;
  std::vector<int64_t> idx(rank, 0);
  int64_t off[K] = {0};
  for (int64_t k = 0; k < total; ++k) {
    f(k, off);
    for (int64_t d = int64_t(rank) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (int j = 0; j < K; ++j) off[j] += strides[j][d];
        break;
      }
      for (int j = 0; j < K; ++j) off[j] -= strides[j][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// A run-time view of one operand: bytes, dtype, shape at the run batch.
struct View {
  const uint8_t* data;
  DType dtype;
  Shape shape;
};

// RATELNN_NPU_PROFILE set to anything but "" or "0": every run prints one line per
// instruction to stderr, "npu-profile\t<engine>\t<batch>\t<index>\t<opcode>\t<name>\t<us>",
// us = wall microseconds of the instruction (its output allocation included).  Profiled runs
// keep the layer schedule (run_engine), so each line covers the whole batch.
bool profiling_enabled() {
  const char* v = std::getenv("RATELNN_NPU_PROFILE");
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}

// A block of activation memory and its size in bytes.
struct Block {
  std::unique_ptr<uint8_t[]> mem;
  size_t capacity = 0;
};

// Blocks released by runs, reused by later instructions and later runs: fresh memory costs a
// page fault per 4 KiB on first touch, which for batch-8 activations is a large share of the
// run.  Process-wide, thread-safe; keeps at most kMaxCachedBytes.
class BlockCache {
 public:
  static BlockCache& get() {
    static BlockCache* cache = new BlockCache();  // never destroyed, like the thread pool
    return *cache;
  }
  // The smallest cached block of at least `bytes`, or a new one.
  Block take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t best = blocks_.size();
      for (size_t i = 0; i < blocks_.size(); ++i)
        if (blocks_[i].capacity >= bytes && (best == blocks_.size() || blocks_[i].capacity < blocks_[best].capacity))
          best = i;
      if (best < blocks_.size()) {
        Block b = std::move(blocks_[best]);
        blocks_.erase(blocks_.begin() + best);
        cached_ -= b.capacity;
        return b;
      }
    }
    return {std::unique_ptr<uint8_t[]>(new uint8_t[std::max<size_t>(bytes, 1)]), bytes};
  }
  // Keep `b` for reuse; beyond the cap, the smallest blocks are freed first.
  void give(Block b) {
    std::lock_guard<std::mutex> lock(mu_);
    cached_ += b.capacity;
    blocks_.push_back(std::move(b));
    while (cached_ > kMaxCachedBytes) {
      auto smallest = std::min_element(blocks_.begin(), blocks_.end(),
                                       [](const Block& x, const Block& y) { return x.capacity < y.capacity; });
      cached_ -= smallest->capacity;
      blocks_.erase(smallest);
    }
  }

 private:
  static constexpr size_t kMaxCachedBytes = size_t(512) << 20;
  std::mutex mu_;
  std::vector<Block> blocks_;
  size_t cached_ = 0;
};

// Memory of one activation tensor during a run: owned (a BlockCache block) or
// borrowed (the caller's input and output buffers, which kernels read and write in place).
struct Buffer {
  std::unique_ptr<uint8_t[]> owned;
  size_t capacity = 0;  // bytes of `owned`
  uint8_t* ptr = nullptr;
  size_t size = 0;
  uint8_t* data() const { return ptr; }
};

// Whether engine output k's buffer shares bytes with an input buffer, at `batch` samples.
bool output_overlaps_input(const Engine& e, int64_t batch, const std::vector<const void*>& inputs,
                           const std::vector<void*>& outputs, size_t k) {
  const uint8_t* o = static_cast<const uint8_t*>(outputs[k]);
  const int64_t o_size = tensor_bytes(e, e.outputs[k], batch);
  for (size_t j = 0; j < inputs.size(); ++j) {
    const uint8_t* i = static_cast<const uint8_t*>(inputs[j]);
    if (o < i + tensor_bytes(e, e.inputs[j], batch) && i < o + o_size) return true;
  }
  return false;
}

class Runner {
 public:
  Runner(const Engine& e, int64_t batch, int threads) : e_(e), n_(batch), threads_(threads), buf_(e.tensors.size()) {}

  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs) {
    std::vector<size_t> last_use(e_.tensors.size(), 0);
    for (size_t k = 0; k < e_.instructions.size(); ++k)
      for (int id : e_.instructions[k].inputs) last_use[id] = k;
    // Engine outputs are written straight into the caller's buffers, unless a buffer overlaps
    // an input (then the output is computed aside and copied at the end).
    std::vector<void*> destination(e_.tensors.size(), nullptr);
    std::vector<bool> keep(e_.tensors.size(), false);  // engine outputs live to the end
    for (int id : e_.outputs) keep[id] = true;
    for (size_t k = 0; k < e_.outputs.size(); ++k) {
      if (!output_overlaps_input(e_, n_, inputs, outputs, k)) destination[e_.outputs[k]] = outputs[k];
    }
    for (size_t k = 0; k < e_.inputs.size(); ++k) {  // inputs are never written (validated)
      Buffer& b = buf_[e_.inputs[k]];
      b.ptr = static_cast<uint8_t*>(const_cast<void*>(inputs[k]));
      b.size = size_t(tensor_bytes(e_, e_.inputs[k], n_));
    }
    const bool profile = profiling_enabled();
    for (size_t k = 0; k < e_.instructions.size(); ++k) {
      const Instruction& ins = e_.instructions[k];
      auto start = std::chrono::steady_clock::now();
      if (ins.fused) {  // computed by an earlier conv's epilogue (plan_fusions): 0 us here
        for (int id : ins.inputs)
          if (last_use[id] == k && !keep[id]) release(id);
        if (profile) print_profile_line(k, ins, std::chrono::steady_clock::duration::zero());
        continue;
      }
      if (ins.fused_add >= 0) {  // conv + ADD (+ REQUANT): only the last one's output exists
        const Instruction& add = e_.instructions[ins.fused_add];
        const Instruction* then = ins.fused_requant >= 0 ? &e_.instructions[ins.fused_requant] : nullptr;
        const int z = (then != nullptr ? then : &add)->outputs[0];
        acquire(z, destination[z]);
        conv(ins, &add, then);
        for (int id : ins.inputs)
          if (last_use[id] == k && !keep[id]) release(id);
        if (profile) print_profile_line(k, ins, std::chrono::steady_clock::now() - start);
        continue;
      }
      const Instruction* then = fusable_requant(k, last_use, keep);
      if (then != nullptr) {  // binary op + REQUANT in one pass; the op's output never exists
        acquire(then->outputs[0], destination[then->outputs[0]]);
        binary(ins, then);
        for (int id : ins.inputs)
          if (last_use[id] <= k + 1 && !keep[id]) release(id);
        if (profile) print_profile_line(k, ins, std::chrono::steady_clock::now() - start);
        ++k;
        if (profile) print_profile_line(k, *then, std::chrono::steady_clock::duration::zero());
        continue;
      }
      for (int id : ins.outputs) acquire(id, destination[id]);
      execute(ins);
      for (int id : ins.inputs)
        if (last_use[id] == k && !keep[id]) release(id);
      if (profile) print_profile_line(k, ins, std::chrono::steady_clock::now() - start);
    }
    for (size_t k = 0; k < e_.outputs.size(); ++k) {  // outputs not computed in place
      const Buffer& b = buf_[e_.outputs[k]];
      if (b.size > 0 && b.data() != outputs[k]) std::memmove(outputs[k], b.data(), b.size);
    }
  }

  ~Runner() {
    for (size_t id = 0; id < buf_.size(); ++id) release(int(id));
  }

 private:
  const Engine& e_;
  int64_t n_;
  int threads_;
  std::vector<Buffer> buf_;

  // Memory for output tensor `id`: `dest` when given, else a recycled block that fits
  // (BlockCache), else a new block.  Contents are undefined: every kernel writes its whole output.
  void acquire(int id, void* dest) {
    Buffer& b = buf_[id];
    b.size = size_t(tensor_bytes(e_, id, n_));
    if (dest != nullptr) {
      b.ptr = static_cast<uint8_t*>(dest);
      return;
    }
    Block block = BlockCache::get().take(b.size);
    b.owned = std::move(block.mem);
    b.capacity = block.capacity;
    b.ptr = b.owned.get();
  }
  void release(int id) {
    Buffer& b = buf_[id];
    if (b.owned) BlockCache::get().give({std::move(b.owned), b.capacity});
    b = Buffer();
  }

  void print_profile_line(size_t k, const Instruction& ins, std::chrono::steady_clock::duration d) const {
    double us = std::chrono::duration<double, std::micro>(d).count();
    std::fprintf(stderr, "npu-profile\t%s\t%lld\t%zu\t%s\t%s\t%.1f\n", e_.name.c_str(), static_cast<long long>(n_), k,
                 opcode_name(ins.opcode), ins.name.c_str(), us);
  }

  Shape shape(int id) const {
    Shape s = e_.tensors[id].shape;
    s[0] = n_;
    return s;
  }
  View in(int id) const { return {buf_[id].data(), e_.tensors[id].dtype, shape(id)}; }
  uint8_t* out(int id) { return buf_[id].data(); }
  DType dt(int id) const { return e_.tensors[id].dtype; }
  const ConstDesc& C(int id) const { return e_.constants[id]; }

  void execute(const Instruction& ins) {
    switch (ins.opcode) {
      case Opcode::kConv2D: return conv(ins);
      case Opcode::kFullyConnected: return conv(ins);
      case Opcode::kAdd: case Opcode::kSub: case Opcode::kMul: return binary(ins);
      case Opcode::kMaxPool: case Opcode::kAvgPool: return pool(ins);
      case Opcode::kMean: return mean(ins);
      case Opcode::kConcat: return concat(ins);
      case Opcode::kRequant: return requant(ins);
      case Opcode::kPad: return pad(ins);
      case Opcode::kReshape: std::memcpy(out(ins.outputs[0]), buf_[ins.inputs[0]].data(), buf_[ins.inputs[0]].size); return;
      case Opcode::kTranspose: return transpose(ins);
      case Opcode::kLut: return lut(ins);
      case Opcode::kSoftmax: return softmax(ins);
    }
  }

  // ---- CONV2D and FULLY_CONNECTED (a 1x1 convolution on a 1x1 image): npu_conv.cc; with
  // `add` (plan_fusions), the ADD and the REQUANT `then` run in the conv's epilogue.
  void conv(const Instruction& ins, const Instruction* add = nullptr, const Instruction* then = nullptr) {
    const Attrs& a = ins.attrs;
    Shape xs = shape(ins.inputs[0]);
    const ConstDesc& w = C(ins.consts[0]);
    ConvGeom g;
    if (ins.opcode == Opcode::kConv2D) {
      Shape ys = shape(ins.outputs[0]);
      g = {n_, xs[1], xs[2], xs[3], ys[1], ys[2], ys[3], w.shape[0], w.shape[1], w.shape[2], a.strides[0], a.strides[1],
           a.dilations[0], a.dilations[1], a.pads[0], a.pads[1], a.pads[2], a.pads[3], a.groups};
    } else {
      g = {n_, 1, 1, xs[1], 1, 1, w.shape[1], 1, 1, w.shape[0], 1, 1, 1, 1, 0, 0, 0, 0, 1};
    }
    if (add == nullptr) return run_conv(e_, ins, g, buf_[ins.inputs[0]].data(), out(ins.outputs[0]), threads_);
    ConvAddStep step = add_step(ins.outputs[0], *add, then);
    run_conv(e_, ins, g, buf_[ins.inputs[0]].data(), nullptr, threads_, &step);
  }

  // The fused ADD of conv output `c` (and `then`) as ConvAddStep (npu_kernels.h).
  ConvAddStep add_step(int c, const Instruction& add, const Instruction* then) {
    const bool conv_first = add.inputs[0] == c;
    const int r = add.inputs[conv_first ? 1 : 0];
    const Attrs& at = add.attrs;
    ConvAddStep st{};
    st.residual = buf_[r].data(), st.rt = dt(r);
    st.mc = int32_t(at.multipliers[conv_first ? 0 : 1]), st.mr = int32_t(at.multipliers[conv_first ? 1 : 0]);
    st.s = int(at.shifts[0]), st.lo = add.lo, st.hi = add.hi;
    st.requant = then != nullptr;
    if (then != nullptr)
      st.m2 = int32_t(then->attrs.multipliers[0]), st.s2 = int(then->attrs.shifts[0]), st.lo2 = then->lo, st.hi2 = then->hi;
    st.f64 = add_f64_plan(qabs(dt(c)), qabs(st.rt), st.mc, st.mr, st.s, st.lo, st.hi, &st.plan) &&
             (then == nullptr || add_f64_then(st.m2, st.s2, st.lo2, st.hi2, &st.plan));
    st.narrow = add.narrow && add.narrow->requant == (then != nullptr);  // checked at load (plan_fusions)
    if (st.narrow) st.narrow_plan = conv_first ? *add.narrow : add_narrow_swapped(*add.narrow);
    const int z = (then != nullptr ? then : &add)->outputs[0];
    st.y = out(z), st.yt = dt(z);
    return st;
  }

  // ---- ADD / SUB / MUL with broadcasting; operands are inputs then constants
  View operand(const Instruction& ins, size_t k, size_t rank) const {
    if (k < ins.inputs.size()) return in(ins.inputs[k]);
    const ConstDesc& c = C(ins.consts[k - ins.inputs.size()]);
    Shape s(rank - c.shape.size(), 1);
    s.insert(s.end(), c.shape.begin(), c.shape.end());
    return {c.data.data(), c.dtype, s};
  }

  // Elements of `v` repeat with this period along the row-major output of shape `ys` when
  // v's dims are 1 before some axis and equal to ys from there on; else 0 (general broadcast).
  static int64_t repeat_period(const Shape& v, const Shape& ys) {
    size_t d0 = ys.size();
    while (d0 > 0 && v[d0 - 1] == ys[d0 - 1]) --d0;
    for (size_t d = 0; d < d0; ++d)
      if (v[d] != 1) return 0;
    return product(ys, d0);
  }

  // Whether ADD/SUB/MUL `ins` runs on the vectorised path (both operands repeat with a period).
  bool binary_vectorised(const Instruction& ins) const {
    Shape ys = shape(ins.outputs[0]);
    return repeat_period(operand(ins, 0, ys.size()).shape, ys) > 0 &&
           repeat_period(operand(ins, 1, ys.size()).shape, ys) > 0;
  }

  // The REQUANT that instruction k's result can be requantized by in the same pass: k is a
  // vectorised ADD/SUB/MUL, k + 1 a REQUANT of its output, and nothing else reads that output
  // (not an engine output, no later reader).  Exact: the REQUANT reads the op's clamped codes,
  // which are the int32 values the op would have stored (docs/npu-arithmetic.md).
  const Instruction* fusable_requant(size_t k, const std::vector<size_t>& last_use,
                                     const std::vector<bool>& keep) const {
    const Instruction& ins = e_.instructions[k];
    if (k + 1 >= e_.instructions.size()) return nullptr;
    if (ins.opcode != Opcode::kAdd && ins.opcode != Opcode::kSub && ins.opcode != Opcode::kMul) return nullptr;
    const Instruction& next = e_.instructions[k + 1];
    const int y = ins.outputs[0];
    if (next.opcode != Opcode::kRequant || next.inputs[0] != y || keep[y] || last_use[y] != k + 1) return nullptr;
    return binary_vectorised(ins) ? &next : nullptr;
  }

  // ADD / SUB / MUL; `then` (a REQUANT of the result, see fusable_requant) is applied to each
  // row before it is stored, and then only its output is written.
  void binary(const Instruction& ins, const Instruction* then = nullptr) {
    Shape ys = shape(ins.outputs[0]);
    View a = operand(ins, 0, ys.size()), b = operand(ins, 1, ys.size());
    const Attrs& at = ins.attrs;
    int s = int(at.shifts[0]);
    int64_t ma = at.multipliers[0], mb = at.multipliers.size() > 1 ? at.multipliers[1] : 0;
    Opcode op = ins.opcode;
    const Instruction& last = then != nullptr ? *then : ins;
    uint8_t* y = out(last.outputs[0]);
    DType yt = dt(last.outputs[0]);
    int64_t pa = repeat_period(a.shape, ys), pb = repeat_period(b.shape, ys), total = product(ys);
    // ADD/SUB (and the fused REQUANT) in double where that is exact (npu_add.h), else in int64
    AddF64 plan;
    const bool f64 = op != Opcode::kMul &&
                     add_f64_plan(qabs(a.dtype), qabs(b.dtype), ma, op == Opcode::kAdd ? mb : -mb, s, ins.lo, ins.hi,
                                  &plan) &&
                     (then == nullptr || add_f64_then(then->attrs.multipliers[0], int(then->attrs.shifts[0]), then->lo,
                                                      then->hi, &plan));
    // 8-bit codes: the narrow plan checked at load for this instruction and `then` (npu_add_narrow.h)
    const AddNarrow* narrow =
        ins.narrow && ins.narrow->requant == (then != nullptr) && pa == total && pb == total ? ins.narrow.get() : nullptr;
    if (pa > 0 && pb > 0) {  // vectorised: rows of kChunk elements
      const bool whole = f64 && pa == total && pb == total;  // same-shape operands: codes in, codes out
      const int ia = itemsize(a.dtype), ib = itemsize(b.dtype), iy = itemsize(yt);
      for_chunks(total, [&](int64_t start, int64_t count, int32_t* va, int32_t* vb, int32_t* r) {
        if (narrow != nullptr && add_narrow_codes(*narrow, a.data + start * ia, a.dtype, b.data + start * ib, b.dtype,
                                                  count, y + start * iy, yt))
          return;
        if (whole && add_f64_codes(plan, a.data + start * ia, a.dtype, b.data + start * ib, b.dtype, count,
                                   y + start * iy, yt))
          return;
        load_codes(a.data, a.dtype, start, count, pa, va);
        load_codes(b.data, b.dtype, start, count, pb, vb);
        if (f64) {
          add_f64(plan, va, vb, count, r);
        } else if (op == Opcode::kMul) {
          for (int64_t j = 0; j < count; ++j) va[j] *= vb[j];  // |a*b| <= 2^30
          scale_add_requant(va, nullptr, count, int32_t(ma), 0, s, ins.lo, ins.hi, r);
        } else {
          scale_add_requant(va, vb, count, int32_t(ma), int32_t(op == Opcode::kAdd ? mb : -mb), s, ins.lo, ins.hi, r);
        }
        if (then != nullptr && !f64) {
          std::swap(r, va);
          scale_add_requant(va, nullptr, count, int32_t(then->attrs.multipliers[0]), 0, int(then->attrs.shifts[0]),
                            then->lo, then->hi, r);
        }
        store_codes(yt, r, count, y, start);
      });
      return;
    }
    Shape st[2] = {strides_of(a.shape), strides_of(b.shape)};
    for (size_t d = 0; d < ys.size(); ++d) {
      if (a.shape[d] == 1) st[0][d] = 0;
      if (b.shape[d] == 1) st[1][d] = 0;
    }
    for_each_index<2>(ys, st, [&](int64_t k, const int64_t* off) {
      int64_t p = load(a.data, a.dtype, off[0]), q = load(b.data, b.dtype, off[1]);
      int64_t acc = op == Opcode::kMul ? p * q * ma : (op == Opcode::kAdd ? p * ma + q * mb : p * ma - q * mb);
      store(y, yt, k, clamp(round_shift(acc, s), ins.lo, ins.hi));
    });
  }

  // f(start, count, three int32 scratch rows of count) over [0, total) in rows of kChunk, on the pool.
  static constexpr int64_t kChunk = 2048;
  template <typename F>
  void for_chunks(int64_t total, F f) {
    int64_t chunks = (total + kChunk - 1) / kChunk;
    parallel_for(chunks, total >= 8 * kChunk ? threads_ : 1, [&](int64_t begin, int64_t end) {
      // per thread, reused by every call: no allocation and no zeroing per instruction
      alignas(64) static thread_local int32_t scratch[3 * kChunk];
      for (int64_t c = begin; c < end; ++c) {
        int64_t start = c * kChunk;
        f(start, std::min(kChunk, total - start), &scratch[0], &scratch[kChunk], &scratch[2 * kChunk]);
      }
    });
  }

  // ---- MAX_POOL (max_pool_rows: on the kernel path) / AVG_POOL (windows clipped to the input
  // unless count_include_pad)
  static constexpr int64_t kMinParallelPoolCodes = int64_t(1) << 16;  // window reads; fewer: one thread
  void max_pool(const Instruction& ins) {
    const Attrs& a = ins.attrs;
    Shape xs = shape(ins.inputs[0]), ys = shape(ins.outputs[0]);
    const PoolGeom g{xs[1], xs[2], xs[3], ys[1], ys[2], a.ksize[0], a.ksize[1], a.strides[0], a.strides[1],
                     a.pads[0], a.pads[2]};
    const uint8_t* x = buf_[ins.inputs[0]].data();
    uint8_t* y = out(ins.outputs[0]);
    const DType t = dt(ins.inputs[0]);
    parallel_for(n_ * g.OH, n_ * g.OH * g.OW * g.C * g.kh * g.kw >= kMinParallelPoolCodes ? threads_ : 1,
                 [&](int64_t begin, int64_t end) { max_pool_rows(t, x, g, ins.lo, ins.hi, begin, end, y); });
  }

  void pool(const Instruction& ins) {
    if (ins.opcode == Opcode::kMaxPool) return max_pool(ins);
    const Attrs& a = ins.attrs;
    View x = in(ins.inputs[0]);
    Shape ys = shape(ins.outputs[0]);
    int64_t H = x.shape[1], W = x.shape[2], Cc = x.shape[3], OH = ys[1], OW = ys[2];
    uint8_t* y = out(ins.outputs[0]);
    DType yt = dt(ins.outputs[0]);
    const int64_t m = a.multipliers[0];
    const int s = int(a.shifts[0]);
    parallel_for(n_ * OH, Cc * OW >= 4096 ? threads_ : 1, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> acc(Cc);
      std::vector<int32_t> cell(Cc), res(Cc);
      for (int64_t row = begin; row < end; ++row) {
        int64_t n = row / OH, oh = row % OH;
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t y0 = oh * a.strides[0] - a.pads[0], x0 = ow * a.strides[1] - a.pads[2];
          int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y0 + a.ksize[0], H);
          int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x0 + a.ksize[1], W);
          std::fill(acc.begin(), acc.end(), 0);
          for (int64_t iy = ya; iy < yb; ++iy)
            for (int64_t ix = xa; ix < xb; ++ix) {
              int64_t base = ((n * H + iy) * W + ix) * Cc;
              load_codes(x.data, x.dtype, base, Cc, INT64_MAX, cell.data());
              for (int64_t c = 0; c < Cc; ++c) acc[c] += cell[c];
            }
          int64_t cnt = a.count_include_pad ? a.ksize[0] * a.ksize[1] : (yb - ya) * (xb - xa);
          for (int64_t c = 0; c < Cc; ++c)
            res[c] = int32_t(clamp(rdiv(acc[c] * m, cnt << s), ins.lo, ins.hi));
          store_codes(yt, res.data(), Cc, y, ((n * OH + oh) * OW + ow) * Cc);
        }
      }
    });
  }

  // ---- MEAN: sum over the axes, then one rounding division per output.  Contiguous axes
  // (x viewed as [outer, cells, inner], e.g. a global average pool) run in column blocks of
  // kMeanColumns on the pool, each adding its cells rows straight from the codes into int32
  // sums (add_code_rows, one pass) in runs that cannot overflow, added up in int64 (the same
  // sum); other axes walk the index.
  static constexpr int64_t kMeanColumns = 128;
  void mean(const Instruction& ins) {
    const Attrs& a = ins.attrs;
    View x = in(ins.inputs[0]);
    Shape kept = x.shape;  // the output shape with keepdims
    int64_t cells = 1;
    for (int64_t ax : a.axes) { cells *= kept[ax]; kept[ax] = 1; }
    uint8_t* y = out(ins.outputs[0]);
    DType yt = dt(ins.outputs[0]);
    const int64_t den = cells << a.shifts[0], m = a.multipliers[0];
    std::vector<int64_t> axes = a.axes;
    std::sort(axes.begin(), axes.end());
    if (axes.back() - axes.front() + 1 == int64_t(axes.size())) {
      const int64_t inner = product(x.shape, axes.back() + 1), outer = product(x.shape, 0, axes.front());
      const int64_t blocks = (inner + kMeanColumns - 1) / kMeanColumns;
      const int64_t rows32 = std::max<int64_t>(1, INT32_MAX / qabs(x.dtype));  // rows an int32 sum holds
      parallel_for(outer * blocks, outer * cells * inner >= 8 * kChunk ? threads_ : 1, [&](int64_t begin, int64_t end) {
        alignas(64) int32_t sum32[kMeanColumns], res[kMeanColumns];
        alignas(64) int64_t acc[kMeanColumns];
        for (int64_t u = begin; u < end; ++u) {
          const int64_t o = u / blocks, c0 = (u % blocks) * kMeanColumns, n = std::min(kMeanColumns, inner - c0);
          std::fill(acc, acc + n, 0);
          for (int64_t r0 = 0; r0 < cells; r0 += rows32) {  // int32 partial sums of rows32 rows
            std::fill(sum32, sum32 + n, 0);
            add_code_rows(x.data, x.dtype, (o * cells + r0) * inner + c0, std::min(rows32, cells - r0), inner, n, sum32);
            for (int64_t i = 0; i < n; ++i) acc[i] += sum32[i];
          }
          for (int64_t i = 0; i < n; ++i) res[i] = int32_t(clamp(rdiv(acc[i] * m, den), ins.lo, ins.hi));
          store_codes(yt, res, n, y, o * inner + c0);
        }
      });
      return;
    }
    std::vector<int64_t> sum(product(kept), 0);
    Shape st[1] = {strides_of(kept)};
    for (int64_t ax : a.axes) st[0][ax] = 0;
    for_each_index<1>(x.shape, st, [&](int64_t k, const int64_t* off) { sum[off[0]] += load(x.data, x.dtype, k); });
    for (size_t k = 0; k < sum.size(); ++k) store(y, yt, k, clamp(rdiv(sum[k] * m, den), ins.lo, ins.hi));
  }

  void concat(const Instruction& ins) {
    Shape ys = shape(ins.outputs[0]);
    int64_t axis = ins.attrs.axis;
    int64_t outer = product(ys, 0, axis), inner_y = product(ys, axis);
    uint8_t* y = out(ins.outputs[0]);
    DType yt = dt(ins.outputs[0]);
    int64_t offset = 0;
    for (size_t k = 0; k < ins.inputs.size(); ++k) {
      View x = in(ins.inputs[k]);
      int64_t inner = product(x.shape, axis);
      int32_t m = int32_t(ins.attrs.multipliers[k]);
      int s = int(ins.attrs.shifts[k]);
      std::vector<int32_t> v(std::min(inner, kChunk)), r(v.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; j += kChunk) {
          int64_t count = std::min(kChunk, inner - j);
          load_codes(x.data, x.dtype, o * inner + j, count, INT64_MAX, v.data());
          scale_add_requant(v.data(), nullptr, count, m, 0, s, ins.lo, ins.hi, r.data());
          store_codes(yt, r.data(), count, y, o * inner_y + offset + j);
        }
      offset += inner;
    }
  }

  void requant(const Instruction& ins) {
    View x = in(ins.inputs[0]);
    uint8_t* y = out(ins.outputs[0]);
    DType yt = dt(ins.outputs[0]);
    int32_t m = int32_t(ins.attrs.multipliers[0]);
    int s = int(ins.attrs.shifts[0]);
    for_chunks(product(x.shape), [&](int64_t start, int64_t count, int32_t* v, int32_t*, int32_t* r) {
      load_codes(x.data, x.dtype, start, count, INT64_MAX, v);
      scale_add_requant(v, nullptr, count, m, 0, s, ins.lo, ins.hi, r);
      store_codes(yt, r, count, y, start);
    });
  }

  // PAD: fill y with pad_value, then copy x in contiguous runs: the trailing dims without
  // padding are one run of `run` elements, the leading dims are visited index by index.
  void pad(const Instruction& ins) {
    View x = in(ins.inputs[0]);
    Shape ys = shape(ins.outputs[0]);
    uint8_t* y = out(ins.outputs[0]);
    const int isz = itemsize(x.dtype);
    const int64_t total = product(ys);
    if (isz == 1) {
      std::memset(y, int(ins.attrs.pad_value & 0xFF), size_t(total));
    } else {
      for (int64_t k = 0; k < total; ++k) store(y, x.dtype, k, ins.attrs.pad_value);
    }
    size_t lead = ys.size();  // dims [lead, rank) have no padding: x and y agree there
    while (lead > 0 && ins.attrs.pads[2 * (lead - 1)] == 0 && ins.attrs.pads[2 * lead - 1] == 0) --lead;
    if (lead == 0) lead = 1;  // nothing padded at all: one run per leading index
    const int64_t run = product(x.shape, lead);
    const Shape yst = strides_of(ys);
    int64_t base = 0;
    for (size_t d = 0; d < ys.size(); ++d) base += ins.attrs.pads[2 * d] * yst[d];
    Shape outer(x.shape.begin(), x.shape.begin() + lead), st[1] = {Shape(yst.begin(), yst.begin() + lead)};
    if (run == 0) return;
    for_each_index<1>(outer, st, [&](int64_t k, const int64_t* off) {
      std::memcpy(y + (base + off[0]) * isz, x.data + k * run * isz, size_t(run * isz));
    });
  }

  // A 2-D copy per index of the other output dims (NCHW -> NHWC: per (n, h), [W, C] from
  // x's [C, W]): `row` is the output dim that x holds contiguously, the last output dim the
  // one y does; when they are the same dim, each copy is one memcpy.
  void transpose(const Instruction& ins) {
    View x = in(ins.inputs[0]);
    Shape ys = shape(ins.outputs[0]);
    const size_t rank = ys.size(), last = rank - 1;
    if (product(ys) == 0) return;
    Shape xst = strides_of(x.shape), st[2] = {Shape(rank), strides_of(ys)};
    for (size_t d = 0; d < rank; ++d) st[0][d] = xst[ins.attrs.perm[d]];
    size_t row = last;
    for (size_t d = 0; d < rank; ++d)
      if (st[0][d] == 1 && ys[d] > 1) row = d;
    uint8_t* y = out(ins.outputs[0]);
    const int isz = itemsize(x.dtype);
    Shape outer = ys;
    outer[row] = outer[last] = 1;
    const int64_t rows = ys[row], cols = row == last ? 1 : ys[last];
    const int64_t sr = st[0][row], dr = st[1][row], sc = st[0][last];
    for_each_index<2>(outer, st, [&](int64_t, const int64_t* off) {
      const uint8_t* src = x.data + off[0] * isz;
      uint8_t* dst = y + off[1] * isz;
      if (row == last && sr == 1) {
        std::memcpy(dst, src, size_t(rows * isz));
        return;
      }
      switch (isz) {
        case 1: copy_block<uint8_t>(src, dst, rows, cols, sr, dr, sc); break;
        case 2: copy_block<uint16_t>(src, dst, rows, cols, sr, dr, sc); break;
        case 4: copy_block<uint32_t>(src, dst, rows, cols, sr, dr, sc); break;
        default: copy_block<uint64_t>(src, dst, rows, cols, sr, dr, sc); break;
      }
    });
  }

  // y[r * dr + c] = x[r * sr + c * sc] for r < rows, c < cols (strides in elements).
  template <typename E>
  static void copy_block(const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols, int64_t sr, int64_t dr,
                         int64_t sc) {
    const E* x = reinterpret_cast<const E*>(src);
    E* y = reinterpret_cast<E*>(dst);
    constexpr int64_t kTile = 64;
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) y[r * dr + c] = x[r * sr + c * sc];
  }

  void lut(const Instruction& ins) {
    View x = in(ins.inputs[0]);
    const ConstDesc& table = C(ins.consts[0]);
    uint8_t* y = out(ins.outputs[0]);
    int isz = itemsize(table.dtype);
    int64_t total = product(x.shape), lo = qmin(x.dtype);
    for (int64_t k = 0; k < total; ++k)
      std::memcpy(y + k * isz, table.data.data() + (load(x.data, x.dtype, k) - lo) * isz, isz);
  }

  void softmax(const Instruction& ins) {
    View x = in(ins.inputs[0]);
    const ConstDesc& table = C(ins.consts[0]);
    uint8_t* y = out(ins.outputs[0]);
    DType yt = dt(ins.outputs[0]);
    int64_t len = x.shape.back(), rows = product(x.shape) / len, m = ins.attrs.multipliers[0];
    int s = int(ins.attrs.shifts[0]);
    std::vector<int64_t> ex(len);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t mx = INT64_MIN, sum = 0;
      for (int64_t j = 0; j < len; ++j) mx = std::max(mx, load(x.data, x.dtype, r * len + j));
      for (int64_t j = 0; j < len; ++j) sum += ex[j] = table.at(mx - load(x.data, x.dtype, r * len + j));
      for (int64_t j = 0; j < len; ++j) store(y, yt, r * len + j, clamp(rdiv(ex[j] * m, sum << s), ins.lo, ins.hi));
    }
  }
};

}  // namespace

int64_t tensor_bytes(const Engine& e, int tensor_id, int64_t batch) {
  const TensorDesc& t = e.tensors[tensor_id];
  return batch * t.sample_elements() * itemsize(t.dtype);
}

namespace {

// Whether some output buffer shares bytes with an input buffer (a run in place): the Runner
// then computes that output aside, which only a run over the whole batch can do.
bool buffers_overlap(const Engine& e, int64_t batch, const std::vector<const void*>& inputs,
                     const std::vector<void*>& outputs) {
  for (size_t k = 0; k < outputs.size(); ++k)
    if (output_overlaps_input(e, batch, inputs, outputs, k)) return true;
  return false;
}

// Samples [first, first + count) of the run's buffers: the same tensors at batch `count`.
void run_slice(const Engine& e, int64_t first, int64_t count, const std::vector<const void*>& inputs,
               const std::vector<void*>& outputs, int threads) {
  std::vector<const void*> in(inputs.size());
  std::vector<void*> out(outputs.size());
  for (size_t k = 0; k < in.size(); ++k)
    in[k] = static_cast<const uint8_t*>(inputs[k]) + first * tensor_bytes(e, e.inputs[k], 1);
  for (size_t k = 0; k < out.size(); ++k)
    out[k] = static_cast<uint8_t*>(outputs[k]) + first * tensor_bytes(e, e.outputs[k], 1);
  PollWhileRunning polling(threads);
  Runner(e, count, threads).run(in, out);
}

// The batch split by samples: each thread runs whole samples, one at a time, every
// instruction on that thread alone, so a sample's activations stay in its core's cache and
// threads meet once per run instead of once per instruction; samples never mix, so the bits
// are those of the whole-batch run.  The last batch % threads samples run as one batch on
// every thread.
void run_by_sample(const Engine& e, int64_t batch, const std::vector<const void*>& inputs,
                   const std::vector<void*>& outputs, int threads) {
  const int64_t spread = batch - batch % threads;
  parallel_for(spread, threads, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) run_slice(e, s, 1, inputs, outputs, 1);
  });
  if (spread < batch) run_slice(e, spread, batch - spread, inputs, outputs, threads);
}

}  // namespace

void run_engine(const Engine& e, int64_t batch, const std::vector<const void*>& inputs,
                const std::vector<int64_t>& input_sizes, const std::vector<void*>& outputs,
                const std::vector<int64_t>& output_sizes, int num_threads) {
  std::string who = "engine '" + e.name + "': ";
  if (batch < 1) throw EngineError(who + "batch size must be positive, got " + std::to_string(batch));
  check_input_count(e, inputs.size(), "");
  if (input_sizes.size() != inputs.size())
    throw EngineError(who + std::to_string(inputs.size()) + " inputs but " + std::to_string(input_sizes.size()) + " sizes");
  if (outputs.size() != e.outputs.size() || output_sizes.size() != e.outputs.size())
    throw EngineError(who + "has " + std::to_string(e.outputs.size()) + " outputs, got " + std::to_string(outputs.size()) + " buffers");
  check_size_limits(e, batch, run_size_limits(), "");
  for (size_t k = 0; k < e.inputs.size(); ++k) check_input_bytes(e, k, inputs[k], input_sizes[k], batch, "");
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    int64_t want = tensor_bytes(e, e.outputs[k], batch);
    if (output_sizes[k] != want || (want > 0 && outputs[k] == nullptr))
      throw EngineError(who + "output " + std::to_string(k) + " buffer has " + std::to_string(output_sizes[k]) +
                        " bytes, expected " + std::to_string(want));
  }
  try {
    const int threads = std::max(1, num_threads);
    // A profiled run keeps the layer schedule: one line per instruction, the whole batch's wall time.
    if (threads > 1 && batch >= threads && batch_split_by_sample(e) && !profiling_enabled() &&
        !buffers_overlap(e, batch, inputs, outputs)) {
      run_by_sample(e, batch, inputs, outputs, threads);
      return;
    }
    PollWhileRunning polling(threads);  // no futex wake-up between instructions
    Runner(e, batch, threads).run(inputs, outputs);
  } catch (const std::bad_alloc&) {
    throw EngineError(who + "out of memory at batch " + std::to_string(batch));
  }
}

}  // namespace npu
}  // namespace ratelnn
