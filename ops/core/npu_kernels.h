// Fast integer kernels of the native NPU executor (used by npu_exec.cc), bit-exact with
// docs/npu-arithmetic.md.
//
// CONV2D / FULLY_CONNECTED take one of three paths, chosen by conv_path() from the dtypes
// and the grouping, both when the decoder packs the weights (pack_conv_weights) and at run time:
// - kGemm: im2col rows widened to int16 times weights widened to int16 with 16x16->32-bit
//   pair multiply-adds (AVX2 vpmaddwd; the scalar build runs the same loops).  Every 8/16-bit
//   product pair fits int32 unless both operands are int16, so the int32 sums are exact; when the
//   accumulator bound exceeds int32 (Instruction::wide_accumulator) the K loop runs in chunks
//   whose int32 sums are exact and adds them in int64.
//   packed_weights: int16 [groups][ceil(cout_g/16)][ceil(K/2)][16 channels][2 k], K = kh*kw*cg
//   in (ky, kx, ci) order, zero padded in k and channels.
//   8-bit activations x int8 weights, not wide, on a CPU with AVX-512 VNNI or AVX-VNNI: also
//   packed_quads, int8 [groups][ceil(cout_g/16)][ceil(K/4)][16 channels][4 k] for vpdpbusd
//   (u8 x s8, four products per int32 lane); int8 activations enter as x + 128 (a u8) and
//   quad_correction[o] = -128 * sum_k w[k][o] restores the sum.  The avx512_vnni path reads a
//   16-channel quad row as one zmm, the avx_vnni path as two ymm halves (channels 0-7, 8-15)
//   (docs/npu-arithmetic.md, "Kernel paths" gives the exactness argument).
//   Stem rows (groups 1, cg <= 8, kh * kw > 1, dilation 1 across: MobileNetV2's and ResNet50's
//   first convs, fer's second): packed_quads instead int8 [ceil(cout/16)][kh][qr][16 channels][4],
//   qr = ceil(kw * cg / 4), each kernel row's kw * cg values (kx, ci) then zero weights, so
//   the kernel reads each row's quads straight from a zero-padded u8 copy of x (no im2col).
// - kDepthwise (cg == 1, groups > 1, not wide): per output pixel, 16 channels at a time, two
//   taps per vpmaddwd.  packed_weights: int16 [ceil(Cout/16)][ceil(kh*kw/2)][2 halves][8][2 taps]
//   (half 0 = channels 0-3, 8-11 of the block, half 1 = 4-7, 12-15: the vpunpck order), zero padded.
//   Multiplier 1 (Cout == groups) on a CPU with AVX2: also packed_taps, int32
//   [ceil(Cout/16)][kh*kw][16 channels], each the weight's int16 bits zero-extended (high half 0),
//   zero padded.  The AVX2 and AVX-512 paths then read the 8/16-bit input directly (no padded
//   copy; taps outside the image skipped), one sign/zero-extended int32 lane per channel, so
//   vpmaddwd / vpdpwssd adds x * w per lane (the high halves multiply 0): 16 channels per zmm
//   or two ymm (docs/architecture.md §17).  8-bit x with int8 weights, kh <= 4, kw = 3, on a CPU
//   with AVX-512 VNNI: also packed_quads, int8 [ceil(Cout/16)][3 kx][16 channels][4 ky] (ky >= kh
//   zero) and quad_correction, int32 [ceil(Cout/16) * 16]: -128 * sum(w) for int8 x, else 0, for
//   the vpdpbusd runs (strides 1-2).
// - kScalar (int16 activations with int16 weights, or wide depthwise): plain loops over the
//   HWIO constant; packed_weights is empty.
#pragma once

#include <cstdint>

#include "core/npu_add.h"
#include "core/npu_add_narrow.h"
#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// The scalar requantization primitives of docs/npu-arithmetic.md, shared by every kernel.
// round_shift(p, s) == rdiv(p, 2^s) (half away from zero), 0 <= s <= 62.
inline int64_t round_shift(int64_t p, int s) {
  if (s == 0) return p;
  uint64_t a = p < 0 ? uint64_t(-p) : uint64_t(p);
  uint64_t q = (a + (uint64_t(1) << (s - 1))) >> s;
  return p < 0 ? -int64_t(q) : int64_t(q);
}
inline int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

enum class ConvPath { kGemm, kDepthwise, kScalar };

// Whether pack_conv_weights also builds packed_taps (see above) for a kDepthwise conv.
bool taps_path_applies(int64_t cout, int64_t groups);

// Whether pack_conv_weights also builds packed_quads (see above) for a kGemm conv.
bool quad_path_applies(DType x, DType w, bool wide);

ConvPath conv_path(DType x, DType w, int64_t cg, int64_t groups, bool wide);

// Fill ins.packed_weights from HWIO weights `w` [kh, kw, cg, cout] for the path of
// conv_path(x, w.dtype, cg, groups, ins.wide_accumulator).  FULLY_CONNECTED is kh = kw = 1.
void pack_conv_weights(Instruction& ins, const ConstDesc& w, DType x, int64_t kh, int64_t kw, int64_t cg,
                       int64_t cout, int64_t groups);

// Geometry of one CONV2D (FULLY_CONNECTED: a 1x1 image, 1x1 kernel) at the run batch `n`.
struct ConvGeom {
  int64_t n, H, W, Cin, OH, OW, Cout, kh, kw, cg, sh, sw, dh, dw, pt, pb, pl, pr, groups;
};

// Build ins.channel_params (the per-channel requantization tables of a CONV2D /
// FULLY_CONNECTED with `cout` output channels) for every kernel path the CPU has; at load.
void prepare_channel_params(const Engine& e, Instruction& ins, int64_t cout);

// An ADD (and a REQUANT after it) applied by a GEMM conv (groups 1) to its output codes c
// (docs/architecture.md §7): with r the residual operand's code at the same index,
// y = clamp(round_shift(c*mc + r*mr, s), lo, hi), then optionally
// y = clamp(round_shift(y*m2, s2), lo2, hi2); only y is written to memory: the conv stages
// each pixel tile's codes in a per-thread buffer and adds them while they are in cache.
// With the narrow plan when `narrow` (npu_add_narrow.h), else in double when `f64` (the exact plan
// of npu_add.h), else in int64: the codes of the two instructions run one by one.
struct ConvAddStep {
  const uint8_t* residual;  // same shape as the conv output
  DType rt;
  int32_t mc, mr;  // multipliers of the conv's and the residual's operand
  int s;
  int64_t lo, hi;
  bool requant;  // a REQUANT follows
  int32_t m2;
  int s2;
  int64_t lo2, hi2;
  bool f64;
  AddF64 plan;  // a = the conv code, b = the residual code
  bool narrow;  // 8-bit codes: the narrow plan (npu_add_narrow.h), a = the conv code, b = the residual
  AddNarrow narrow_plan;
  uint8_t* y;   // the ADD's (or the REQUANT's) output
  DType yt;
};

// y = CONV2D(x) of `ins` (weights/bias/multipliers from `e`); x and y are NHWC buffers
// of the instruction's input/output dtypes.  Uses up to `threads` pool threads.  With `add`
// (only for conv_path kGemm with packed weights, groups 1) it is applied per tile and add->y
// is written instead of y.
void run_conv(const Engine& e, const Instruction& ins, const ConvGeom& g, const uint8_t* x, uint8_t* y,
              int threads, const ConvAddStep* add = nullptr);

// out[j] = element (start + j) % period of the row-major buffer p of dtype t, j < count.
void load_codes(const uint8_t* p, DType t, int64_t start, int64_t count, int64_t period, int32_t* out);
// sum[j] += element start + r * stride + j of the row-major buffer p of dtype t, for r < rows,
// j < count (int32 adds: the caller keeps rows * max|code| below 2^31).
void add_code_rows(const uint8_t* p, DType t, int64_t start, int64_t rows, int64_t stride, int64_t count,
                   int32_t* sum);
// y[index + j] = v[j] narrowed to dtype t (values already in its range), j < count.
void store_codes(DType t, const int32_t* v, int64_t count, uint8_t* y, int64_t index);

// out[i] = clamp(round_shift(a[i] * ma + (b ? b[i] * mb : 0), s), lo, hi) for i < n;
// |a|, |b| < 2^31, 0 <= |ma|, |mb| < 2^31, 0 <= s <= 62, |a*ma + b*mb| <= 2^62.
void scale_add_requant(const int32_t* a, const int32_t* b, int64_t n, int32_t ma, int32_t mb, int s, int64_t lo,
                       int64_t hi, int32_t* out);

// Geometry of one MAX_POOL / AVG_POOL at the run batch: input H x W x C, output OH x OW x C,
// kernel kh x kw, strides sh, sw, top and left padding pt, pl.
struct PoolGeom {
  int64_t H, W, C, OH, OW, kh, kw, sh, sw, pt, pl;
};

// MAX_POOL of the NHWC codes x (dtype t, 8 or 16 bits) into y (same dtype), clamped to
// [lo, hi]: output rows [row0, row1) of the n * OH rows (windows clipped to the input).
void max_pool_rows(DType t, const uint8_t* x, const PoolGeom& g, int64_t lo, int64_t hi, int64_t row0, int64_t row1,
                   uint8_t* y);

// Throughput probe of the active path's multiply-add instruction (registers only, the calling
// thread): runs `iters` rounds, returns the multiply-adds done and names the instruction.
int64_t peak_macs(int64_t iters, const char** instruction);

}  // namespace npu
}  // namespace ratelnn
