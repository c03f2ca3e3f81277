// The exact double-precision ADD/SUB path (npu_add.h): the plan and its proof of exactness,
// and the kernel per instruction-set path (portable, AVX2, AVX-512), chosen by active_isa().
#include "core/npu_add.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/isa.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#endif

namespace ratelnn {
namespace npu {
namespace {

constexpr uint64_t kExact = uint64_t(1) << 53;  // doubles hold every integer below this

// Whether round_shift(p, s) for |p| <= bound is exact in double as trunc(v + copysign(0.5, v)),
// v = p 2^-s: v +- 0.5 = (2p +- 2^s) 2^-(s+1) needs 2|p| + 2^s below 2^53 when s = 0 (an odd
// numerator), |p| + 2^(s-1) below 2^53 when s >= 1.  bound < 2^63 (callers: uint64 sums).
bool rounding_exact(uint64_t bound, int s) {
  if (s < 0 || s > 62 || bound >= kExact) return false;
  return s == 0 ? 2 * bound + 1 < kExact : bound + (uint64_t(1) << (s - 1)) < kExact;
}

// The portable formula: trunc(clamp(v + copysign(0.5, v))), which is round half away from zero
// then clamp (trunc is monotone and keeps the integers lo, hi).
inline double round_clamp(double v, double lo, double hi) {
  return std::trunc(std::min(std::max(v + std::copysign(0.5, v), lo), hi));
}

inline int32_t add_one(const AddF64& p, int32_t a, int32_t b) {
  double y = round_clamp(double(a) * p.ma + double(b) * p.mb, p.lo, p.hi);
  if (p.requant) y = round_clamp(y * p.m2, p.lo2, p.hi2);
  return int32_t(y);
}

void add_portable(const AddF64& p, const int32_t* a, const int32_t* b, int64_t n, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = add_one(p, a[i], b[i]);
}

template <typename A, typename B, typename Y>
void add_codes_portable(const AddF64& p, const A* a, const B* b, int64_t n, Y* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = Y(add_one(p, a[i], b[i]));
}

// f(a, b, y) with the three buffers cast to their element types; false for a dtype not in
// {int8, uint8, int16}.
template <typename F>
bool with_code_types(DType at, DType bt, DType yt, const void* a, const void* b, void* y, F f) {
  auto as_b = [&](auto pa) {
    auto as_y = [&](auto pb) {
      switch (yt) {
        case DType::kInt8: f(pa, pb, static_cast<int8_t*>(y)); return true;
        case DType::kUInt8: f(pa, pb, static_cast<uint8_t*>(y)); return true;
        case DType::kInt16: f(pa, pb, static_cast<int16_t*>(y)); return true;
        default: return false;
      }
    };
    switch (bt) {
      case DType::kInt8: return as_y(static_cast<const int8_t*>(b));
      case DType::kUInt8: return as_y(static_cast<const uint8_t*>(b));
      case DType::kInt16: return as_y(static_cast<const int16_t*>(b));
      default: return false;
    }
  };
  switch (at) {
    case DType::kInt8: return as_b(static_cast<const int8_t*>(a));
    case DType::kUInt8: return as_b(static_cast<const uint8_t*>(a));
    case DType::kInt16: return as_b(static_cast<const int16_t*>(a));
    default: return false;
  }
}

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {  // the namespaces of the wide code (tests/npu/test_isa_paths.py checks)
// round_clamp on 4 lanes; trunc by the caller's conversion or by round_pd.
inline __m256d round_clamp4(__m256d v, __m256d lo, __m256d hi) {
  const __m256d sign = _mm256_set1_pd(-0.0), half = _mm256_set1_pd(0.5);
  v = _mm256_add_pd(v, _mm256_or_pd(_mm256_and_pd(v, sign), half));
  return _mm256_min_pd(_mm256_max_pd(v, lo), hi);
}

inline __m128i add4(const AddF64& p, __m128i a, __m128i b) {
  const __m256d ma = _mm256_set1_pd(p.ma), mb = _mm256_set1_pd(p.mb);
  __m256d v = _mm256_fmadd_pd(_mm256_cvtepi32_pd(b), mb, _mm256_mul_pd(_mm256_cvtepi32_pd(a), ma));
  v = round_clamp4(v, _mm256_set1_pd(p.lo), _mm256_set1_pd(p.hi));
  if (p.requant) {
    v = _mm256_mul_pd(_mm256_round_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), _mm256_set1_pd(p.m2));
    v = round_clamp4(v, _mm256_set1_pd(p.lo2), _mm256_set1_pd(p.hi2));
  }
  return _mm256_cvttpd_epi32(v);
}

// 8 codes widened to int32, and 8 int32 narrowed to codes (values already in range).
inline __m256i widen8(const int8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256i widen8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
inline __m256i widen8(const int16_t* p) { return _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m128i pack16(__m128i lo, __m128i hi) { return _mm_packs_epi32(lo, hi); }  // in-range int32 -> int16
inline void narrow8(int8_t* y, __m128i lo, __m128i hi) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), _mm_packs_epi16(pack16(lo, hi), _mm_setzero_si128()));
}
inline void narrow8(uint8_t* y, __m128i lo, __m128i hi) {
  _mm_storel_epi64(reinterpret_cast<__m128i*>(y), _mm_packus_epi16(pack16(lo, hi), _mm_setzero_si128()));
}
inline void narrow8(int16_t* y, __m128i lo, __m128i hi) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), pack16(lo, hi));
}

template <typename A, typename B, typename Y>
void add_codes_avx2(const AddF64& p, const A* a, const B* b, int64_t n, Y* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i va = widen8(a + i), vb = widen8(b + i);
    narrow8(y + i, add4(p, _mm256_castsi256_si128(va), _mm256_castsi256_si128(vb)),
            add4(p, _mm256_extracti128_si256(va, 1), _mm256_extracti128_si256(vb, 1)));
  }
  for (; i < n; ++i) y[i] = Y(add_one(p, a[i], b[i]));
}

void add_avx2(const AddF64& p, const int32_t* a, const int32_t* b, int64_t n, int32_t* out) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), add4(p, va, vb));
  }
  for (; i < n; ++i) out[i] = add_one(p, a[i], b[i]);
}
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw")
namespace isa_avx512 {
inline __m512d round_clamp8(__m512d v, __m512d lo, __m512d hi) {
  const __m512d sign = _mm512_set1_pd(-0.0), half = _mm512_set1_pd(0.5);
  v = _mm512_add_pd(v, _mm512_or_pd(_mm512_and_pd(v, sign), half));
  return _mm512_min_pd(_mm512_max_pd(v, lo), hi);
}

inline __m256i add8(const AddF64& p, __m256i a, __m256i b) {
  const __m512d ma = _mm512_set1_pd(p.ma), mb = _mm512_set1_pd(p.mb);
  __m512d v = _mm512_fmadd_pd(_mm512_cvtepi32_pd(b), mb, _mm512_mul_pd(_mm512_cvtepi32_pd(a), ma));
  v = round_clamp8(v, _mm512_set1_pd(p.lo), _mm512_set1_pd(p.hi));
  if (p.requant) {
    v = _mm512_mul_pd(_mm512_roundscale_pd(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC), _mm512_set1_pd(p.m2));
    v = round_clamp8(v, _mm512_set1_pd(p.lo2), _mm512_set1_pd(p.hi2));
  }
  return _mm512_cvttpd_epi32(v);
}

// 8 codes of a dtype widened to int32 (masked: the first `m` lanes), and narrowed back.
inline __m256i widen8m(__mmask8 m, const int8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_maskz_loadu_epi8(__mmask16(m), p));
}
inline __m256i widen8m(__mmask8 m, const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8(__mmask16(m), p));
}
inline __m256i widen8m(__mmask8 m, const int16_t* p) { return _mm256_cvtepi16_epi32(_mm_maskz_loadu_epi16(m, p)); }
inline void narrow8m(__mmask8 m, int8_t* y, __m256i v) { _mm256_mask_cvtepi32_storeu_epi8(y, m, v); }
inline void narrow8m(__mmask8 m, uint8_t* y, __m256i v) { _mm256_mask_cvtepi32_storeu_epi8(y, m, v); }
inline void narrow8m(__mmask8 m, int16_t* y, __m256i v) { _mm256_mask_cvtepi32_storeu_epi16(y, m, v); }

// 16 codes widened to int32, and 16 int32 narrowed (register forms: the masked memory form of
// vpmovdb is slow on AMD Zen 4).
inline __m512i widen16(const int8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512i widen16(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m512i widen16(const int16_t* p) {
  return _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline void narrow16(int8_t* y, __m512i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm512_cvtepi32_epi8(v)); }
inline void narrow16(uint8_t* y, __m512i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm512_cvtepi32_epi8(v)); }
inline void narrow16(int16_t* y, __m512i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(v));
}

template <typename A, typename B, typename Y>
void add_codes_avx512(const AddF64& p, const A* a, const B* b, int64_t n, Y* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i va = widen16(a + i), vb = widen16(b + i);
    __m256i lo = add8(p, _mm512_castsi512_si256(va), _mm512_castsi512_si256(vb));
    __m256i hi = add8(p, _mm512_extracti64x4_epi64(va, 1), _mm512_extracti64x4_epi64(vb, 1));
    narrow16(y + i, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
  }
  for (; i < n; i += 8) {  // the tail, masked
    const __mmask8 m = n - i >= 8 ? __mmask8(0xFF) : __mmask8((1u << (n - i)) - 1);
    narrow8m(m, y + i, add8(p, widen8m(m, a + i), widen8m(m, b + i)));
  }
}

void add_avx512(const AddF64& p, const int32_t* a, const int32_t* b, int64_t n, int32_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i va = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i));
    __m256i vb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), add8(p, va, vb));
  }
  if (i < n) {  // the tail: masked lanes
    const __mmask8 m = __mmask8((1u << (n - i)) - 1);
    __m256i va = _mm256_maskz_loadu_epi32(m, a + i), vb = _mm256_maskz_loadu_epi32(m, b + i);
    _mm256_mask_storeu_epi32(out + i, m, add8(p, va, vb));
  }
}
}  // namespace isa_avx512
#pragma GCC pop_options
#endif

}  // namespace

bool add_f64_plan(int64_t qa, int64_t qb, int64_t ma, int64_t mb, int s, int64_t lo, int64_t hi, AddF64* plan) {
  if (qa < 0 || qb < 0 || qa > (int64_t(1) << 31) || qb > (int64_t(1) << 31) || std::llabs(ma) >= (int64_t(1) << 31) ||
      std::llabs(mb) >= (int64_t(1) << 31))
    return false;
  const uint64_t bound = uint64_t(qa) * uint64_t(std::llabs(ma)) + uint64_t(qb) * uint64_t(std::llabs(mb));
  if (!rounding_exact(bound, s)) return false;
  *plan = AddF64();
  plan->ma = std::ldexp(double(ma), -s);  // exact: |M| < 2^31 and a power-of-two scale
  plan->mb = std::ldexp(double(mb), -s);
  plan->lo = double(lo), plan->hi = double(hi);
  return true;
}

bool add_f64_then(int64_t m2, int s2, int64_t lo2, int64_t hi2, AddF64* plan) {
  const uint64_t q = uint64_t(std::max(std::llabs(int64_t(plan->lo)), std::llabs(int64_t(plan->hi))));
  if (m2 < 0 || m2 >= (int64_t(1) << 31) || q > (uint64_t(1) << 31) || !rounding_exact(q * uint64_t(m2), s2))
    return false;
  plan->requant = true;
  plan->m2 = std::ldexp(double(m2), -s2);
  plan->lo2 = double(lo2), plan->hi2 = double(hi2);
  return true;
}

void add_f64(const AddF64& plan, const int32_t* a, const int32_t* b, int64_t n, int32_t* out) {
#if RATELNN_X86_PATHS
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512) return isa_avx512::add_avx512(plan, a, b, n, out);
  if (isa >= Isa::kAvx2) return isa_avx2::add_avx2(plan, a, b, n, out);
#endif
  add_portable(plan, a, b, n, out);
}

bool add_f64_codes(const AddF64& plan, const void* a, DType at, const void* b, DType bt, int64_t n, void* y, DType yt) {
#if RATELNN_X86_PATHS
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512)
    return with_code_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { isa_avx512::add_codes_avx512(plan, pa, pb, n, py); });
  if (isa >= Isa::kAvx2)
    return with_code_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { isa_avx2::add_codes_avx2(plan, pa, pb, n, py); });
#endif
  return with_code_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { add_codes_portable(plan, pa, pb, n, py); });
}

}  // namespace npu
}  // namespace ratelnn
