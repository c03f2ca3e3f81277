// CONV2D / FULLY_CONNECTED kernels and the vectorised requantization (npu_kernels.h):
// weight packing here, the kernels in npu_conv_kernels.inc (one file per family in core/conv/),
// compiled once per instruction-set path and chosen at run time by active_isa() (core/isa.h).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/isa.h"
#include "core/npu_kernels.h"
#include "core/npu_threads.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>  // the portable path's pmaddwd (x86-64 baseline) on other compilers
#endif

namespace ratelnn {
namespace npu {
namespace {

constexpr int kNR = 16;  // output channels per weight block
constexpr int kMR = 6;   // pixels per GEMM micro-tile
constexpr int kMT = 48;  // pixels per packed im2col tile
constexpr int64_t kMinParallelMacs = int64_t(1) << 18;  // smaller convs run on the calling thread
constexpr int64_t kDepthwiseScratchBytes = int64_t(8) << 20;  // padded samples per depthwise pass
constexpr int64_t kKC = 256;  // k pairs per weight sub-block (16 KiB: stays in L1 across a tile)

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
inline int64_t ceil_div(int64_t v, int64_t m) { return (v + m - 1) / m; }
inline int64_t qabs_of(DType t) { return std::max(-qmin(t), qmax(t)); }

// Pixel tiles of a GEMM over M pixels: mt each (kMT unless said), the last also taking a
// remainder below kMR, so a 7x7 image at batch 1 is one tile of 49 (one pass over the
// weights), not 48 + 1.
constexpr int kMaxMT = kMT + kMR - 1;
inline int64_t tile_count(int64_t M, int64_t mt = kMT) {
  const int64_t t = ceil_div(M, mt);
  return t > 1 && M - (t - 1) * mt < kMR ? t - 1 : t;
}
inline int64_t tile_rows(int64_t M, int64_t tiles, int64_t tile, int64_t mt = kMT) {
  return tile + 1 < tiles ? mt : M - tile * mt;
}

// Position of lane i (0..7) of vpunpck half h in a block of 16 channels.
inline int dw_channel(int h, int i) { return i < 4 ? i + 4 * h : i + 4 + 4 * h; }

// The stem layout of the dot-product GEMM (npu_kernels.h, "stem rows"): few input channels
// (groups 1, cg <= 8: up to 8 the kw * cg bytes of a kernel row are few, and reading them
// from the padded copy beats an im2col row; fer's 3x3 on 8 channels x0.74-0.82 as a whole
// engine), a kernel wider than 1x1, dilation 1 across; the same predicate at load (packing)
// and at run time (dispatch).
inline bool stem_rows(int64_t kh, int64_t kw, int64_t cg, int64_t groups, int64_t dw) {
  return groups == 1 && cg <= 8 && kh * kw > 1 && dw == 1;
}

// Largest even number of k values whose int32 sum of products cannot overflow.
int64_t chunk_pairs_for(DType x, DType w) { return std::max<int64_t>(1, (int64_t(INT32_MAX) / (qabs_of(x) * qabs_of(w))) / 2); }


// ------------------------------------------------------------------ the kernels, per path
// RATELNN_ISA_LEVEL: the vector ladder the .inc compiles (0 portable, 1 AVX2 ymm, 2 AVX-512,
// 3 AVX-512 VNNI); RATELNN_ISA_DOT: 1 where vpdpbusd is there (the dot-product kernels on
// packed_quads: zmm at level 3, VEX ymm on avx_vnni); RATELNN_ISA_AMX: 1 on the amx path (the
// avx512_vnni code plus the tdpbusd tile GEMM, gemm_dot.inc); RATELNN_ISA_PATH: the Isa (the
// index of the path's channel_params).
#define RATELNN_ISA_LEVEL 0
#define RATELNN_ISA_DOT 0
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kPortable
namespace isa_portable {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_portable
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c")
#define RATELNN_ISA_LEVEL 1
#define RATELNN_ISA_DOT 0
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvx2
namespace isa_avx2 {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx2
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH
#pragma GCC pop_options

// AVX-VNNI (VEX): the AVX2 code plus the ymm vpdpbusd / vpdpwssd kernels; no AVX-512 at all.
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avxvnni")
#define RATELNN_ISA_LEVEL 1
#define RATELNN_ISA_DOT 1
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvxVnni
namespace isa_avx_vnni {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx_vnni
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#define RATELNN_ISA_LEVEL 2
#define RATELNN_ISA_DOT 0
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvx512
namespace isa_avx512 {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx512
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#define RATELNN_ISA_LEVEL 3
#define RATELNN_ISA_DOT 1
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvx512Vnni
namespace isa_avx512_vnni {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx512_vnni
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH
#pragma GCC pop_options
// AMX: the avx512_vnni code plus the AMX-INT8 tile GEMM (tdpbusd) of conv_gemm_quad.
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")
#define RATELNN_ISA_LEVEL 3
#define RATELNN_ISA_DOT 1
#define RATELNN_ISA_AMX 1
#define RATELNN_ISA_PATH Isa::kAmx
namespace isa_amx {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_amx
#undef RATELNN_ISA_LEVEL
#undef RATELNN_ISA_DOT
#undef RATELNN_ISA_AMX
#undef RATELNN_ISA_PATH
#pragma GCC pop_options
#endif

// `return isa_<active path>::call;`
#if RATELNN_X86_PATHS
#define RATELNN_ON_ACTIVE_PATH(call)                          \
  switch (active_isa()) {                                    \
    case Isa::kAmx: return isa_amx::call;                    \
    case Isa::kAvx512Vnni: return isa_avx512_vnni::call;     \
    case Isa::kAvx512: return isa_avx512::call;              \
    case Isa::kAvxVnni: return isa_avx_vnni::call;           \
    case Isa::kAvx2: return isa_avx2::call;                  \
    default: return isa_portable::call;                      \
  }
#else
#define RATELNN_ON_ACTIVE_PATH(call) return isa_portable::call;
#endif

}  // namespace

bool quad_path_applies(DType x, DType w, bool wide) {
#if RATELNN_X86_PATHS
  return (x == DType::kInt8 || x == DType::kUInt8) && w == DType::kInt8 && !wide &&
         (isa_supported(Isa::kAvx512Vnni) || isa_supported(Isa::kAvxVnni));
#else
  (void)x, (void)w, (void)wide;
  return false;
#endif
}

bool taps_path_applies(int64_t cout, int64_t groups) {
#if RATELNN_X86_PATHS
  return cout == groups && isa_supported(Isa::kAvx2);
#else
  (void)cout, (void)groups;
  return false;
#endif
}

namespace {

// The depthwise vpdpbusd runs' weights (npu_kernels.h): 8-bit x, int8 w, kh <= 4, kw = 3, on
// a CPU with AVX-512 VNNI (the avx_vnni path runs the AVX2 depthwise code).
bool dw_quads_apply(DType x, DType w, int64_t kh, int64_t kw) {
  return kh <= 4 && kw == 3 && quad_path_applies(x, w, false) && isa_supported(Isa::kAvx512Vnni);
}

void pack_dw_quads(Instruction& ins, const ConstDesc& w, DType x, int64_t kh, int64_t cout) {
  const int64_t blocks = ceil_div(cout, kNR);
  ins.packed_quads.assign(blocks * 3 * kNR * 4, 0);
  ins.quad_correction.assign(blocks * kNR, 0);
  for (int64_t o = 0; o < cout; ++o) {
    int64_t sum = 0;
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t kx = 0; kx < 3; ++kx) {
        const int64_t v = w.at((ky * 3 + kx) * cout + o);
        ins.packed_quads[(((o / kNR) * 3 + kx) * kNR + o % kNR) * 4 + ky] = int8_t(v);
        sum += v;
      }
    if (x == DType::kInt8) ins.quad_correction[o] = int32_t(-128 * sum);  // |.| <= 12 * 2^14
  }
}

// packed_quads in the stem layout: [nblocks][kh * qr][16 channels][4], qr = ceil(kw * cg / 4)
// quads per kernel row, the row's kw * cg values (kx, ci) first, zero weights after them.
void pack_stem_quads(Instruction& ins, const ConstDesc& w, int64_t kh, int64_t kw, int64_t cg, int64_t cout) {
  const int64_t run = kw * cg, qr = ceil_div(run, 4), nblocks = ceil_div(cout, kNR);
  ins.packed_quads.assign(nblocks * kh * qr * 64, 0);
  for (int64_t o = 0; o < cout; ++o)
    for (int64_t ky = 0; ky < kh; ++ky)
      for (int64_t i = 0; i < run; ++i)
        ins.packed_quads[(((o / kNR) * kh + ky) * qr + i / 4) * 64 + (o % kNR) * 4 + i % 4] =
            int8_t(w.at((ky * run + i) * cout + o));
}

}  // namespace

ConvPath conv_path(DType x, DType w, int64_t cg, int64_t groups, bool wide) {
  if (x == DType::kInt16 && w == DType::kInt16) return ConvPath::kScalar;
  if (cg == 1 && groups > 1) return wide ? ConvPath::kScalar : ConvPath::kDepthwise;
  return ConvPath::kGemm;
}

void pack_conv_weights(Instruction& ins, const ConstDesc& w, DType x, int64_t kh, int64_t kw, int64_t cg,
                       int64_t cout, int64_t groups) {
  ins.packed_weights.clear();
  ins.packed_quads.clear();
  ins.quad_correction.clear();
  ins.packed_taps.clear();
  ConvPath path = conv_path(x, w.dtype, cg, groups, ins.wide_accumulator);
  std::vector<int16_t> packed;
  if (path == ConvPath::kGemm) {
    const int64_t K = kh * kw * cg, pairs = ceil_div(K, 2), cout_g = cout / groups, nblocks = ceil_div(cout_g, kNR);
    // Channel padding of tiny groups could blow the weights up: such convs stay scalar.
    if (groups * nblocks * kNR > 4 * cout + 64) return;
    packed.assign(groups * nblocks * pairs * 32, 0);
    for (int64_t grp = 0; grp < groups; ++grp)
      for (int64_t nb = 0; nb < nblocks; ++nb)
        for (int64_t k = 0; k < K; ++k)
          for (int64_t j = 0; j < kNR && nb * kNR + j < cout_g; ++j)
            packed[((grp * nblocks + nb) * pairs + k / 2) * 32 + j * 2 + (k & 1)] =
                int16_t(w.at(k * cout + grp * cout_g + nb * kNR + j));
    if (quad_path_applies(x, w.dtype, ins.wide_accumulator)) {
      const int64_t quads = ceil_div(K, 4);
      ins.packed_quads.assign(groups * nblocks * quads * 64, 0);
      for (int64_t grp = 0; grp < groups; ++grp)
        for (int64_t nb = 0; nb < nblocks; ++nb)
          for (int64_t k = 0; k < K; ++k)
            for (int64_t j = 0; j < kNR && nb * kNR + j < cout_g; ++j)
              ins.packed_quads[((grp * nblocks + nb) * quads + k / 4) * 64 + j * 4 + (k & 3)] =
                  int8_t(w.at(k * cout + grp * cout_g + nb * kNR + j));
      if (x == DType::kInt8) {  // x enters as x + 128: subtract 128 * sum_k w[k][o]
        ins.quad_correction.assign(cout, 0);
        for (int64_t o = 0; o < cout; ++o) {
          int64_t sum = 0;
          for (int64_t k = 0; k < K; ++k) sum += w.at(k * cout + o);
          ins.quad_correction[o] = int32_t(-128 * sum);  // |128 * sum| <= K * 2^14 < 2^31 (not wide)
        }
      }
      const int64_t dw = ins.attrs.dilations.size() == 2 ? ins.attrs.dilations[1] : 1;
      if (stem_rows(kh, kw, cg, groups, dw)) pack_stem_quads(ins, w, kh, kw, cg, cout);
    }
  } else if (path == ConvPath::kDepthwise) {
    const int64_t taps = kh * kw, tap_pairs = ceil_div(taps, 2), blocks = ceil_div(cout, kNR);
    packed.assign(blocks * tap_pairs * 32, 0);
    for (int64_t cb = 0; cb < blocks; ++cb)
      for (int64_t t = 0; t < taps; ++t)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 8; ++i) {
            int64_t o = cb * kNR + dw_channel(h, i);
            if (o < cout) packed[(cb * tap_pairs + t / 2) * 32 + h * 16 + 2 * i + (t & 1)] = int16_t(w.at(t * cout + o));
          }
    if (taps_path_applies(cout, groups)) {
      ins.packed_taps.assign(blocks * taps * kNR, 0);
      for (int64_t o = 0; o < cout; ++o)
        for (int64_t t = 0; t < taps; ++t)
          ins.packed_taps[((o / kNR) * taps + t) * kNR + o % kNR] = int32_t(uint16_t(int16_t(w.at(t * cout + o))));
      if (dw_quads_apply(x, w.dtype, kh, kw)) pack_dw_quads(ins, w, x, kh, cout);
    }
  } else {
    return;
  }
  ins.packed_weights.resize(packed.size() * sizeof(int16_t));
  std::memcpy(ins.packed_weights.data(), packed.data(), ins.packed_weights.size());
}

void prepare_channel_params(const Engine& e, Instruction& ins, int64_t cout) {
  for (auto& p : ins.channel_params) p.reset();
  ins.channel_params[int(Isa::kPortable)] = isa_portable::make_channel_params(e, ins, cout);
#if RATELNN_X86_PATHS
  if (isa_supported(Isa::kAvx2)) ins.channel_params[int(Isa::kAvx2)] = isa_avx2::make_channel_params(e, ins, cout);
  if (isa_supported(Isa::kAvxVnni))
    ins.channel_params[int(Isa::kAvxVnni)] = isa_avx_vnni::make_channel_params(e, ins, cout);
  if (isa_supported(Isa::kAvx512)) ins.channel_params[int(Isa::kAvx512)] = isa_avx512::make_channel_params(e, ins, cout);
  if (isa_supported(Isa::kAvx512Vnni))
    ins.channel_params[int(Isa::kAvx512Vnni)] = isa_avx512_vnni::make_channel_params(e, ins, cout);
  if (isa_supported(Isa::kAmx)) ins.channel_params[int(Isa::kAmx)] = isa_amx::make_channel_params(e, ins, cout);
#endif
}

void run_conv(const Engine& e, const Instruction& ins, const ConvGeom& g, const uint8_t* x, uint8_t* y, int threads,
              const ConvAddStep* add) {
  RATELNN_ON_ACTIVE_PATH(run_conv_impl(e, ins, g, x, y, threads, add))
}

int64_t peak_macs(int64_t iters, const char** instruction) {
  RATELNN_ON_ACTIVE_PATH(peak_macs_impl(iters, instruction))
}

void store_codes(DType yt, const int32_t* v, int64_t count, uint8_t* y, int64_t index) {
  RATELNN_ON_ACTIVE_PATH(store_codes_impl(yt, v, count, y, index))
}

void load_codes(const uint8_t* p, DType t, int64_t start, int64_t count, int64_t period, int32_t* out) {
  RATELNN_ON_ACTIVE_PATH(load_codes_impl(p, t, start, count, period, out))
}

void scale_add_requant(const int32_t* a, const int32_t* b, int64_t n, int32_t ma, int32_t mb, int s, int64_t lo,
                       int64_t hi, int32_t* out) {
  RATELNN_ON_ACTIVE_PATH(scale_add_requant_impl(a, b, n, ma, mb, s, lo, hi, out))
}

}  // namespace npu
}  // namespace ratelnn
