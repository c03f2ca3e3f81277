// CONV2D / FULLY_CONNECTED kernels and the vectorised requantization (npu_kernels.h):
// weight packing and the dispatch here; the kernels in npu_conv_kernels.inc (one file per family
// in core/conv/), compiled once per instruction-set path in npu_conv_<path>.cc and chosen at
// run time by active_isa() (core/isa.h).
#include "core/conv/shared.h"

namespace ratelnn {
namespace npu {
namespace {

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

void add_code_rows(const uint8_t* p, DType t, int64_t start, int64_t rows, int64_t stride, int64_t count,
                   int32_t* sum) {
  RATELNN_ON_ACTIVE_PATH(add_code_rows_impl(p, t, start, rows, stride, count, sum))
}

void scale_add_requant(const int32_t* a, const int32_t* b, int64_t n, int32_t ma, int32_t mb, int s, int64_t lo,
                       int64_t hi, int32_t* out) {
  RATELNN_ON_ACTIVE_PATH(scale_add_requant_impl(a, b, n, ma, mb, s, lo, hi, out))
}

void max_pool_rows(DType t, const uint8_t* x, const PoolGeom& g, int64_t lo, int64_t hi, int64_t row0, int64_t row1,
                   uint8_t* y) {
  RATELNN_ON_ACTIVE_PATH(max_pool_rows_impl(t, x, g, lo, hi, row0, row1, y))
}

}  // namespace npu
}  // namespace ratelnn
