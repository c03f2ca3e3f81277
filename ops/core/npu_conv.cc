// CONV2D / FULLY_CONNECTED kernels and the vectorised requantization (npu_kernels.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/npu_kernels.h"
#include "core/npu_threads.h"

#if defined(__AVX2__)
#include <immintrin.h>
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

// ------------------------------------------------------------------ requantization
#if defined(__AVX2__)
// clamp(round_shift(p, s)) on 4 int64 lanes, |p| <= 2^62, 0 <= s <= 62.
inline __m256i round_shift_clamp(__m256i p, __m256i s, __m256i lo, __m256i hi) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i neg = _mm256_cmpgt_epi64(zero, p);
  __m256i a = _mm256_sub_epi64(_mm256_xor_si256(p, neg), neg);
  __m256i half = _mm256_srli_epi64(_mm256_sllv_epi64(_mm256_set1_epi64x(1), s), 1);
  __m256i q = _mm256_srlv_epi64(_mm256_add_epi64(a, half), s);
  __m256i r = _mm256_sub_epi64(_mm256_xor_si256(q, neg), neg);
  r = _mm256_blendv_epi8(r, lo, _mm256_cmpgt_epi64(lo, r));
  return _mm256_blendv_epi8(r, hi, _mm256_cmpgt_epi64(r, hi));
}
inline __m256i load8(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
#endif

// Per-output-channel requantization constants, padded with kNR zero entries so a block of
// kNR channels starting at any channel < cout can be loaded whole.
struct ChannelParams {
  std::vector<int32_t> bias, m, s, mn, sn;
  int64_t lo, hi;
  bool leaky;
#if defined(__AVX2__)
  // For lanes (o, o+2, o+4, o+6) at [4*o, 4*o + 4), per sign of the accumulator (0: >= 0):
  // multiplier, shift, and the offsets of round_shift computed as a logical shift:
  // round_shift(p, s) = ((p + add) >> s) - sub with add = 2^62 + (p >= 0 ? h : 2^s - 1 - h),
  // h = 2^s / 2 (rounded down), sub = 2^(62 - s); p + add is in [0, 2^64).
  std::vector<int64_t> lane_m[2], lane_s[2], lane_add[2], lane_sub[2];
  // Every shift >= 32: |round_shift(t * m, s)| <= 2^30 + 1 fits int32, so the clamp can run
  // on 8 int32 lanes after the even and odd halves are merged.
  bool clamp32 = true;
#endif
  ChannelParams(const Engine& e, const Instruction& ins, int64_t cout) : lo(ins.lo), hi(ins.hi) {
    leaky = ins.consts.size() == 6;
    std::vector<int32_t>* dst[5] = {&bias, &m, &s, &mn, &sn};
    int src[5] = {1, 2, 3, leaky ? 4 : 2, leaky ? 5 : 3};
    for (int k = 0; k < 5; ++k) {
      dst[k]->assign(cout + kNR, 0);
      const ConstDesc& c = e.constants[ins.consts[src[k]]];
      for (int64_t o = 0; o < cout; ++o) (*dst[k])[o] = int32_t(c.at(o));
    }
#if defined(__AVX2__)
    const int64_t n = cout + kNR;
    for (int neg = 0; neg < 2; ++neg) {
      const std::vector<int32_t>& ms = neg ? mn : m;
      const std::vector<int32_t>& ss = neg ? sn : s;
      for (auto* v : {&lane_m[neg], &lane_s[neg], &lane_add[neg], &lane_sub[neg]}) v->assign(4 * n, 0);
      for (int64_t o = 0; o < n; ++o)
        for (int i = 0; i < 4; ++i) {
          int64_t c = o + 2 * i < n ? o + 2 * i : n - 1;  // padding channels: any valid shift
          int64_t sh = ss[c], h = (int64_t(1) << sh) >> 1;
          lane_m[neg][4 * o + i] = ms[c];
          lane_s[neg][4 * o + i] = sh;
          // p = t * M < 0 only on the negative side with M >= 0 (M_neg < 0 makes p >= 0)
          lane_add[neg][4 * o + i] = (int64_t(1) << 62) + (neg && ms[c] >= 0 ? (int64_t(1) << sh) - 1 - h : h);
          lane_sub[neg][4 * o + i] = int64_t(1) << (62 - sh);
          if (c < cout && sh < 32) clamp32 = false;
        }
    }
#endif
  }
#if defined(__AVX2__)
  static __m256i at(const std::vector<int64_t>& v, int64_t o) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&v[4 * o]));
  }
  // 4 lanes: t in the low 32 bits of each int64 lane, channels o, o+2, o+4, o+6; the
  // rounded shift without the clamp.
  __m256i scale4(__m256i t, int64_t o) const {
    __m256i p, neg;
    if (leaky) {
      neg = _mm256_shuffle_epi32(_mm256_cmpgt_epi32(_mm256_setzero_si256(), t), 0xA0);
      p = _mm256_mul_epi32(t, _mm256_blendv_epi8(at(lane_m[0], o), at(lane_m[1], o), neg));
    } else {
      p = _mm256_mul_epi32(t, at(lane_m[0], o));
      neg = _mm256_cmpgt_epi64(_mm256_setzero_si256(), p);  // p == 0 gives 0 either way
    }
    __m256i add = _mm256_blendv_epi8(at(lane_add[0], o), at(lane_add[1], o), neg);
    __m256i sh = leaky ? _mm256_blendv_epi8(at(lane_s[0], o), at(lane_s[1], o), neg) : at(lane_s[0], o);
    __m256i sub = leaky ? _mm256_blendv_epi8(at(lane_sub[0], o), at(lane_sub[1], o), neg) : at(lane_sub[0], o);
    return _mm256_sub_epi64(_mm256_srlv_epi64(_mm256_add_epi64(p, add), sh), sub);
  }
  __m256i requant4(__m256i t, int64_t o, __m256i vlo, __m256i vhi) const {
    __m256i r = scale4(t, o);
    r = _mm256_blendv_epi8(r, vlo, _mm256_cmpgt_epi64(vlo, r));
    return _mm256_blendv_epi8(r, vhi, _mm256_cmpgt_epi64(r, vhi));
  }
#endif
  // out[j] = requantized acc[j] + bias of channel o + j, j < kNR; the int32 sum is exact
  // (the accumulator bound, bias included, is below 2^31 when not wide).
  void requant_block(const int32_t* acc, int64_t o, int32_t* out) const {
#if defined(__AVX2__)
    if (clamp32) {
      const __m256i lo32 = _mm256_set1_epi32(int32_t(lo)), hi32 = _mm256_set1_epi32(int32_t(hi));
      for (int h = 0; h < kNR; h += 8) {
        __m256i t = _mm256_add_epi32(load8(acc + h), load8(&bias[o + h]));
        __m256i even = scale4(t, o + h), odd = scale4(_mm256_srli_epi64(t, 32), o + h + 1);
        __m256i r = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
        r = _mm256_min_epi32(_mm256_max_epi32(r, lo32), hi32);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h), r);
      }
      return;
    }
    __m256i vlo = _mm256_set1_epi64x(lo), vhi = _mm256_set1_epi64x(hi);
    for (int h = 0; h < kNR; h += 8) {
      __m256i t = _mm256_add_epi32(load8(acc + h), load8(&bias[o + h]));
      __m256i even = requant4(t, o + h, vlo, vhi);
      __m256i odd = requant4(_mm256_srli_epi64(t, 32), o + h + 1, vlo, vhi);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h), _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA));
    }
#else
    for (int j = 0; j < kNR; ++j) out[j] = int32_t(requant_wide(int64_t(acc[j]), o + j));
#endif
  }
  // One channel from an int64 accumulator (bias not yet added).
  int64_t requant_wide(int64_t acc, int64_t o) const {
    int64_t t = acc + bias[o];
    int64_t v = t >= 0 ? round_shift(t * m[o], s[o]) : round_shift(t * mn[o], sn[o]);
    return clamp(v, lo, hi);
  }
};

// ------------------------------------------------------------------ GEMM path
// c[r][0..16) (+)= sum over k pairs p in [p0, p1) of a[r*lda + 2p + {0,1}] * b[p][0..16][{0,1}],
// int32 (exact: see npu_kernels.h); `add` accumulates onto c instead of overwriting it.
template <int R>
void gemm_tile(const int16_t* a, int64_t lda, const int16_t* b, int64_t p0, int64_t p1, int32_t* c, bool add) {
#if defined(__AVX2__)
  __m256i acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = add ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * kNR)) : _mm256_setzero_si256();
    acc[r][1] = add ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + r * kNR + 8)) : _mm256_setzero_si256();
  }
  for (int64_t p = p0; p < p1; ++p) {
    __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32));
    __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + p * 32 + 16));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, 4);
      __m256i av = _mm256_set1_epi32(pair);
      acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
      acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
    }
  }
  // b's layout interleaves k pairs per channel, so lane j of acc[r][h] is channel 8h + j.
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * kNR), acc[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * kNR + 8), acc[r][1]);
  }
#else
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < kNR; ++j) {
      uint32_t sum = add ? uint32_t(c[r * kNR + j]) : 0;  // modular like vpaddd: exact when the true sum fits
      for (int64_t p = p0; p < p1; ++p)
        sum += uint32_t(int32_t(a[r * lda + 2 * p]) * b[p * 32 + 2 * j] + int32_t(a[r * lda + 2 * p + 1]) * b[p * 32 + 2 * j + 1]);
      c[r * kNR + j] = int32_t(sum);
    }
#endif
}

void gemm_rows(int rows, const int16_t* a, int64_t lda, const int16_t* b, int64_t p0, int64_t p1, int32_t* c, bool add) {
  switch (rows) {
    case 1: return gemm_tile<1>(a, lda, b, p0, p1, c, add);
    case 2: return gemm_tile<2>(a, lda, b, p0, p1, c, add);
    case 3: return gemm_tile<3>(a, lda, b, p0, p1, c, add);
    case 4: return gemm_tile<4>(a, lda, b, p0, p1, c, add);
    case 5: return gemm_tile<5>(a, lda, b, p0, p1, c, add);
    default: return gemm_tile<6>(a, lda, b, p0, p1, c, add);
  }
}

template <typename TX>
void widen_run(const TX* __restrict src, int64_t n, int16_t* __restrict d) {
  for (int64_t i = 0; i < n; ++i) d[i] = int16_t(src[i]);
}

// row[0..Kp) = the im2col vector of output pixel `pix` for channels [c0, c0 + cg), widened
// to int16, zeros outside the image and in the k padding.
template <typename TX>
void im2col_row(const TX* x, const ConvGeom& g, int64_t pix, int64_t c0, int16_t* row, int64_t kp) {
  int64_t n = pix / (g.OH * g.OW), r = pix % (g.OH * g.OW);
  int64_t iy0 = (r / g.OW) * g.sh - g.pt, ix0 = (r % g.OW) * g.sw - g.pl;
  int16_t* d = row;
  // A kernel row inside the image with dense taps over all channels is one contiguous run.
  const bool dense_row = g.dw == 1 && g.cg == g.Cin && ix0 >= 0 && ix0 + g.kw <= g.W;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    int64_t iy = iy0 + ky * g.dh;
    bool row_in = iy >= 0 && iy < g.H;
    if (row_in && dense_row) {
      widen_run(x + ((n * g.H + iy) * g.W + ix0) * g.Cin, g.kw * g.cg, d);
      d += g.kw * g.cg;
      continue;
    }
    for (int64_t kx = 0; kx < g.kw; ++kx, d += g.cg) {
      int64_t ix = ix0 + kx * g.dw;
      if (row_in && ix >= 0 && ix < g.W) {
        const TX* src = x + ((n * g.H + iy) * g.W + ix) * g.Cin + c0;
        widen_run(src, g.cg, d);
      } else {
        std::memset(d, 0, g.cg * sizeof(int16_t));
      }
    }
  }
  if (d < row + kp) *d = 0;
}

template <typename TX>
void conv_gemm(const Instruction& ins, const ConvGeom& g, const TX* x, uint8_t* y, DType yt, const ChannelParams& cp,
               int64_t chunk_pairs, int threads) {
  const int64_t K = g.kh * g.kw * g.cg, kp = round_up(K, 2), pairs = kp / 2;
  const int64_t cout_g = g.Cout / g.groups, nblocks = ceil_div(cout_g, kNR);
  const int64_t M = g.n * g.OH * g.OW, tiles = ceil_div(M, kMT);
  if (M * K * cout_g * g.groups < kMinParallelMacs) threads = 1;  // waking a worker costs more
  // Few pixel tiles (small images, FULLY_CONNECTED): also split the channel blocks.
  int64_t splits = tiles >= 4 * threads ? 1 : std::min(nblocks, ceil_div(4 * threads, tiles));
  const int64_t per_split = ceil_div(nblocks, splits);
  splits = ceil_div(nblocks, per_split);
  const int16_t* w = reinterpret_cast<const int16_t*>(ins.packed_weights.data());
  const bool wide = chunk_pairs > 0;
  const bool pointwise = g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.groups == 1 &&
                         g.pt == 0 && g.pb == 0 && g.pl == 0 && g.pr == 0;
  const int64_t kc = wide ? std::min(kKC, chunk_pairs) : kKC;  // wide: every k block sums exactly in int32
  parallel_for(tiles * splits, threads, [&](int64_t begin, int64_t end) {
    // Per-thread scratch kept across calls: parallel_for hands out several chunks per thread.
    thread_local std::vector<int16_t> a;
    thread_local std::vector<int32_t> acc;
    thread_local std::vector<int64_t> acc64;
    a.resize(std::min<int64_t>(kMT, M) * kp);
    acc.resize(kMT * kNR);
    acc64.resize(wide ? kMT * kNR : 0);
    int32_t out[kNR];
    for (int64_t item = begin; item < end; ++item) {
      int64_t tile = item / splits, nb0 = (item % splits) * per_split, nb1 = std::min(nblocks, nb0 + per_split);
      int64_t m0 = tile * kMT, mt = std::min<int64_t>(kMT, M - m0);
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        if (pointwise) {  // pixel m's im2col row is x[m, 0..Cin): widen the tile's pixels as one run
          if (kp == K) {
            widen_run(x + m0 * g.Cin, mt * K, a.data());
          } else {
            for (int64_t r = 0; r < mt; ++r) {
              widen_run(x + (m0 + r) * g.Cin, K, &a[r * kp]);
              a[r * kp + K] = 0;
            }
          }
        } else {
          for (int64_t r = 0; r < mt; ++r) im2col_row(x, g, m0 + r, grp * g.cg, &a[r * kp], kp);
        }
        for (int64_t nb = nb0; nb < nb1; ++nb) {
          const int16_t* wb = w + (grp * nblocks + nb) * pairs * 32;
          int64_t o0 = grp * cout_g + nb * kNR, valid = std::min<int64_t>(kNR, cout_g - nb * kNR);
          if (wide) std::fill(acc64.begin(), acc64.end(), 0);
          for (int64_t p0 = 0; p0 < pairs; p0 += kc) {
            int64_t p1 = std::min(pairs, p0 + kc);
            for (int64_t r0 = 0; r0 < mt; r0 += kMR)
              gemm_rows(int(std::min<int64_t>(kMR, mt - r0)), &a[r0 * kp], kp, wb, p0, p1, &acc[r0 * kNR], !wide && p0 > 0);
            if (wide)
              for (int64_t j = 0; j < mt * kNR; ++j) acc64[j] += acc[j];
          }
          for (int64_t r = 0; r < mt; ++r) {
            if (wide) {
              for (int j = 0; j < valid; ++j) out[j] = int32_t(cp.requant_wide(acc64[r * kNR + j], o0 + j));
            } else {
              cp.requant_block(&acc[r * kNR], o0, out);
            }
            store_codes(yt, out, valid, y, (m0 + r) * g.Cout + o0);
          }
        }
      }
    }
  });
}

// ------------------------------------------------------------------ depthwise path
// Position of lane i (0..7) of vpunpck half h in a block of 16 channels.
inline int dw_channel(int h, int i) { return i < 4 ? i + 4 * h : i + 4 + 4 * h; }

template <typename TX>
void conv_depthwise(const Instruction& ins, const ConvGeom& g, const TX* x, uint8_t* y, DType yt,
                    const ChannelParams& cp, int threads) {
  const int64_t mult = g.Cout / g.groups, cpad = round_up(g.Cout, kNR), blocks = cpad / kNR;
  const int64_t hp = g.H + g.pt + g.pb, wp = g.W + g.pl + g.pr, taps = g.kh * g.kw, tap_pairs = ceil_div(taps, 2);
  std::vector<int64_t> tap_off(2 * tap_pairs);
  for (int64_t t = 0; t < 2 * tap_pairs; ++t) {
    int64_t tt = t < taps ? t : 0;  // the padding tap has zero weights
    tap_off[t] = ((tt / g.kw) * g.dh * wp + (tt % g.kw) * g.dw) * cpad;
  }
  const int16_t* w = reinterpret_cast<const int16_t*>(ins.packed_weights.data());
  // A pass of `ns` samples at a time (the padded copies within kDepthwiseScratchBytes): their
  // inputs, zero padded, channel c*mult+m holding input channel c.  Kept per calling thread
  // across calls (no fresh pages per conv); the lambdas below run on pool threads too, so
  // they reach it through the pointer `xp`, not the thread_local name.
  const int64_t sample = hp * wp * cpad;
  const int64_t ns = std::max<int64_t>(1, std::min<int64_t>(g.n, kDepthwiseScratchBytes / (2 * sample)));
  if (ns * g.OH * g.OW * cpad * taps < kMinParallelMacs) threads = 1;  // waking a worker costs more
  thread_local std::vector<int16_t> padded;
  padded.resize(ns * sample);
  int16_t* const xp = padded.data();
  for (int64_t n0 = 0; n0 < g.n; n0 += ns) {
    const int64_t pass = std::min(ns, g.n - n0);
    parallel_for(pass * hp, threads, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = n0 + row / hp, py = row % hp;
        int16_t* drow = &xp[row * wp * cpad];
        int64_t iy = py - g.pt;
        if (iy < 0 || iy >= g.H) { std::memset(drow, 0, wp * cpad * sizeof(int16_t)); continue; }
        for (int64_t px = 0; px < wp; ++px) {
          int16_t* d = drow + px * cpad;
          int64_t ix = px - g.pl;
          if (ix < 0 || ix >= g.W) { std::memset(d, 0, cpad * sizeof(int16_t)); continue; }
          const TX* src = x + ((n * g.H + iy) * g.W + ix) * g.Cin;
          if (mult == 1) {
            widen_run(src, g.Cin, d);
          } else {
            for (int64_t o = 0; o < g.Cout; ++o) d[o] = int16_t(src[o / mult]);
          }
          std::memset(d + g.Cout, 0, (cpad - g.Cout) * sizeof(int16_t));
        }
      }
    });
    parallel_for(pass * g.OH, threads, [&](int64_t begin, int64_t end) {
      int32_t acc[kNR], out[kNR];
      for (int64_t row = begin; row < end; ++row) {
        const int64_t n = n0 + row / g.OH, oh = row % g.OH;
        const int16_t* sample_base = &xp[(row / g.OH) * sample];
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int16_t* base = sample_base + (oh * g.sh * wp + ow * g.sw) * cpad;
          for (int64_t cb = 0; cb < blocks; ++cb) {
            const int16_t* wb = w + cb * tap_pairs * 32;
            const int16_t* xb = base + cb * kNR;
#if defined(__AVX2__)
            __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
            for (int64_t tp = 0; tp < tap_pairs; ++tp) {
              __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + tap_off[2 * tp]));
              __m256i xc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + tap_off[2 * tp + 1]));
              __m256i wl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + tp * 32));
              __m256i wh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + tp * 32 + 16));
              lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(xa, xc), wl));
              hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(xa, xc), wh));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc), _mm256_permute2x128_si256(lo, hi, 0x20));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
#else
            for (int h = 0; h < 2; ++h)
              for (int i = 0; i < 8; ++i) {
                int j = dw_channel(h, i);
                uint32_t sum = 0;
                for (int64_t tp = 0; tp < tap_pairs; ++tp)
                  for (int q = 0; q < 2; ++q)
                    sum += uint32_t(int32_t(xb[tap_off[2 * tp + q] + j]) * wb[tp * 32 + h * 16 + 2 * i + q]);
                acc[j] = int32_t(sum);
              }
#endif
            int64_t o0 = cb * kNR;
            cp.requant_block(acc, o0, out);
            store_codes(yt, out, std::min<int64_t>(kNR, g.Cout - o0), y, ((n * g.OH + oh) * g.OW + ow) * g.Cout + o0);
          }
        }
      }
    });
  }
}

// ------------------------------------------------------------------ scalar path
template <typename TX, typename TW>
void conv_scalar(const Engine& e, const Instruction& ins, const ConvGeom& g, const TX* x, uint8_t* y, DType yt,
                 const ChannelParams& cp, int threads) {
  const TW* w = reinterpret_cast<const TW*>(e.constants[ins.consts[0]].data.data());
  int64_t cout_g = g.Cout / g.groups;
  parallel_for(g.n * g.OH, threads, [&](int64_t begin, int64_t end) {
    int32_t out[1];
    for (int64_t row = begin; row < end; ++row) {
      int64_t n = row / g.OH, oh = row % g.OH;
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        int64_t iy0 = oh * g.sh - g.pt, ix0 = ow * g.sw - g.pl;
        for (int64_t o = 0; o < g.Cout; ++o) {
          int64_t grp = o / cout_g, acc = 0;
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            int64_t iy = iy0 + ky * g.dh;
            if (iy < 0 || iy >= g.H) continue;
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              int64_t ix = ix0 + kx * g.dw;
              if (ix < 0 || ix >= g.W) continue;
              const TX* xp = x + ((n * g.H + iy) * g.W + ix) * g.Cin + grp * g.cg;
              const TW* wp = w + (ky * g.kw + kx) * g.cg * g.Cout + o;
              for (int64_t ci = 0; ci < g.cg; ++ci) acc += int64_t(xp[ci]) * int64_t(wp[ci * g.Cout]);
            }
          }
          out[0] = int32_t(cp.requant_wide(acc, o));
          store_codes(yt, out, 1, y, ((n * g.OH + oh) * g.OW + ow) * g.Cout + o);
        }
      }
    }
  });
}

// Largest even number of k values whose int32 sum of products cannot overflow.
int64_t chunk_pairs_for(DType x, DType w) { return std::max<int64_t>(1, (int64_t(INT32_MAX) / (qabs_of(x) * qabs_of(w))) / 2); }

}  // namespace

ConvPath conv_path(DType x, DType w, int64_t cg, int64_t groups, bool wide) {
  if (x == DType::kInt16 && w == DType::kInt16) return ConvPath::kScalar;
  if (cg == 1 && groups > 1) return wide ? ConvPath::kScalar : ConvPath::kDepthwise;
  return ConvPath::kGemm;
}

void pack_conv_weights(Instruction& ins, const ConstDesc& w, DType x, int64_t kh, int64_t kw, int64_t cg,
                       int64_t cout, int64_t groups) {
  ins.packed_weights.clear();
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
  } else {
    return;
  }
  ins.packed_weights.resize(packed.size() * sizeof(int16_t));
  std::memcpy(ins.packed_weights.data(), packed.data(), ins.packed_weights.size());
}

namespace {
template <typename TX>
void run_conv_x(const Engine& e, const Instruction& ins, const ConvGeom& g, const TX* x, uint8_t* y, int threads) {
  ChannelParams cp(e, ins, g.Cout);
  DType yt = e.tensors[ins.outputs[0]].dtype, wt = e.constants[ins.consts[0]].dtype;
  if (ins.packed_weights.empty()) {
    if (wt == DType::kInt8) return conv_scalar<TX, int8_t>(e, ins, g, x, y, yt, cp, threads);
    return conv_scalar<TX, int16_t>(e, ins, g, x, y, yt, cp, threads);
  }
  if (g.cg == 1 && g.groups > 1) return conv_depthwise<TX>(ins, g, x, y, yt, cp, threads);
  DType xt = e.tensors[ins.inputs[0]].dtype;
  conv_gemm<TX>(ins, g, x, y, yt, cp, ins.wide_accumulator ? chunk_pairs_for(xt, wt) : 0, threads);
}
}  // namespace

void run_conv(const Engine& e, const Instruction& ins, const ConvGeom& g, const uint8_t* x, uint8_t* y, int threads) {
  switch (e.tensors[ins.inputs[0]].dtype) {
    case DType::kInt8: return run_conv_x(e, ins, g, reinterpret_cast<const int8_t*>(x), y, threads);
    case DType::kUInt8: return run_conv_x(e, ins, g, x, y, threads);
    default: return run_conv_x(e, ins, g, reinterpret_cast<const int16_t*>(x), y, threads);
  }
}

// Narrowing copy; restrict because char types alias everything (no vectorising otherwise).
template <typename T>
void narrow_run(const int32_t* __restrict v, int64_t count, T* __restrict p) {
  for (int64_t j = 0; j < count; ++j) p[j] = T(v[j]);
}

void store_codes(DType yt, const int32_t* v, int64_t count, uint8_t* y, int64_t index) {
  if (count == kNR) {  // whole blocks: fixed-length loops
    switch (yt) {
      case DType::kInt8: return narrow_run(v, kNR, reinterpret_cast<int8_t*>(y) + index);
      case DType::kUInt8: return narrow_run(v, kNR, y + index);
      case DType::kInt16: return narrow_run(v, kNR, reinterpret_cast<int16_t*>(y) + index);
      default: break;
    }
  }
  switch (yt) {
    case DType::kInt8: return narrow_run(v, count, reinterpret_cast<int8_t*>(y) + index);
    case DType::kUInt8: return narrow_run(v, count, y + index);
    case DType::kInt16: return narrow_run(v, count, reinterpret_cast<int16_t*>(y) + index);
    case DType::kInt32: return narrow_run(v, count, reinterpret_cast<int32_t*>(y) + index);
  }
}

template <typename T>
void load_run(const T* __restrict p, int64_t start, int64_t count, int64_t period, int32_t* __restrict out) {
  int64_t idx = start % period;
  while (count > 0) {
    int64_t seg = std::min(count, period - idx);
    for (int64_t j = 0; j < seg; ++j) out[j] = p[idx + j];
    out += seg, count -= seg, idx = 0;
  }
}

void load_codes(const uint8_t* p, DType t, int64_t start, int64_t count, int64_t period, int32_t* out) {
  switch (t) {
    case DType::kInt8: return load_run(reinterpret_cast<const int8_t*>(p), start, count, period, out);
    case DType::kUInt8: return load_run(p, start, count, period, out);
    case DType::kInt16: return load_run(reinterpret_cast<const int16_t*>(p), start, count, period, out);
    case DType::kInt32: return load_run(reinterpret_cast<const int32_t*>(p), start, count, period, out);
  }
}

void scale_add_requant(const int32_t* a, const int32_t* b, int64_t n, int32_t ma, int32_t mb, int s, int64_t lo,
                       int64_t hi, int32_t* out) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256i vma = _mm256_set1_epi32(ma), vmb = _mm256_set1_epi32(mb), vs = _mm256_set1_epi64x(s);
  const __m256i vlo = _mm256_set1_epi64x(lo), vhi = _mm256_set1_epi64x(hi);
  for (; i + 8 <= n; i += 8) {
    __m256i va = load8(a + i), vb = b ? load8(b + i) : _mm256_setzero_si256();
    __m256i pe = _mm256_add_epi64(_mm256_mul_epi32(va, vma), _mm256_mul_epi32(vb, vmb));
    __m256i po = _mm256_add_epi64(_mm256_mul_epi32(_mm256_srli_epi64(va, 32), vma),
                                  _mm256_mul_epi32(_mm256_srli_epi64(vb, 32), vmb));
    __m256i r = _mm256_blend_epi32(round_shift_clamp(pe, vs, vlo, vhi),
                                   _mm256_slli_epi64(round_shift_clamp(po, vs, vlo, vhi), 32), 0xAA);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), r);
  }
#endif
  for (; i < n; ++i)
    out[i] = int32_t(clamp(round_shift(int64_t(a[i]) * ma + (b ? int64_t(b[i]) * mb : 0), s), lo, hi));
}

}  // namespace npu
}  // namespace ratelnn
