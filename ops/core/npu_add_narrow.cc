// The narrow exact ADD/SUB path for 8-bit codes (npu_add_narrow.h): the search for the
// parameters, their check on every code pair, and the kernels per instruction-set path.
#include "core/npu_add_narrow.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/isa.h"
#include "core/npu_kernels.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#endif

namespace ratelnn {
namespace npu {
namespace {

constexpr double kI16 = 32767;
constexpr int kMaxNarrowT = 24;  // the largest shifts tried
constexpr int kMaxWideT = 28;    // |c| stays near 2^(t-1) < 2^30, so Q + c fits int32
constexpr int kRadius = 3;       // narrow multipliers tried around the real slopes, per axis
constexpr int kWideRadius = 1;   // wide ones (2^13 times finer: the center nearly always fits)

bool is8(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }
bool fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }
bool fits16(int64_t v) { return v >= -32768 && v <= 32767; }
int64_t low16(int64_t m) { return int16_t(uint16_t(uint64_t(m) & 0xFFFF)); }  // sign-extended low half
int64_t high16(int64_t m) { return (m - low16(m)) / 65536; }                 // m = high16 2^16 + low16

// Samples (a, b) -> y of one stage, with y in [lo, hi].
struct Samples {
  std::vector<int32_t> a, b, y;
  int64_t lo = 0, hi = 0;
};

// The interval [cmin, cmax] of offsets c that give every sample's y with multipliers (ma, mb) at
// shift t: y > lo needs a*ma + b*mb + c >= y 2^t, y < hi needs it <= (y + 1) 2^t - 1; empty when
// cmin > cmax, T's extremes when a side has no constraint.  T = int32 (narrow: fit_stage's choice
// of t keeps every term in int32) or int64 (wide).
template <typename T>
void c_range(const Samples& s, T ma, T mb, int t, T* cmin, T* cmax) {
  constexpr T kMin = std::numeric_limits<T>::min(), kMax = std::numeric_limits<T>::max();
  T lo_c = kMin, hi_c = kMax;
  const T lo = T(s.lo), hi = T(s.hi), one = T(1) << t;
  const size_t n = s.y.size();
  auto bound = [&](size_t i) {
    const T L = T(s.a[i]) * ma + T(s.b[i]) * mb, y = s.y[i];
    lo_c = std::max(lo_c, y > lo ? y * one - L : kMin);
    hi_c = std::min(hi_c, y < hi ? (y + 1) * one - 1 - L : kMax);
  };
  // every 61st sample first (spread over the whole domain, where a wrong slope shows), then
  // the rest in blocks: a failing candidate stops early
  for (size_t i = 0; i < n && lo_c <= hi_c; i += 61) bound(i);
  for (size_t i0 = 0; i0 < n && lo_c <= hi_c; i0 += 1024)
    for (size_t i = i0; i < std::min(n, i0 + 1024); ++i) bound(i);
  *cmin = lo_c, *cmax = hi_c;
}

int64_t max_abs(const std::vector<int32_t>& v) {
  int64_t m = 0;
  for (int32_t x : v) m = std::max<int64_t>(m, std::llabs(x));
  return m;
}

// Candidates (ma, mb) within kRadius of round((ra, rb) 2^t), nearest first, each with an offset c
// reproducing every sample (the middle of c_range); the first one goes to *st.  b_used false
// for a one-operand stage (every b is 0).
template <typename T>
bool search(const Samples& s, double ra, double rb, bool b_used, int t, int radius, T c_limit, NarrowStage* st) {
  const int64_t a0 = std::llround(std::ldexp(ra, t)), b0 = b_used ? std::llround(std::ldexp(rb, t)) : 0;
  std::vector<std::pair<int, int>> offsets;
  for (int da = -radius; da <= radius; ++da)
    for (int db = -radius; db <= radius; ++db)
      if (b_used || db == 0) offsets.emplace_back(da, db);
  std::stable_sort(offsets.begin(), offsets.end(), [](auto x, auto y) {
    return std::max(std::abs(x.first), std::abs(x.second)) < std::max(std::abs(y.first), std::abs(y.second));
  });
  for (auto [da, db] : offsets) {
    T cmin, cmax;
    c_range<T>(s, T(a0 + da), T(b0 + db), t, &cmin, &cmax);
    if (cmin > cmax) continue;
    const T nominal = T(1) << (t - 1), none_lo = std::numeric_limits<T>::min(), none_hi = std::numeric_limits<T>::max();
    const T c = cmin > none_lo && cmax < none_hi ? cmin + (cmax - cmin) / 2 : std::min(std::max(nominal, cmin), cmax);
    if (c < -c_limit || c > c_limit) continue;
    st->ma = int32_t(a0 + da), st->mb = int32_t(b0 + db), st->c = int32_t(c), st->t = t;
    st->lo = int32_t(s.lo), st->hi = int32_t(s.hi);
    return true;
  }
  return false;
}

// One stage for `s` near the real slopes (ra, rb): narrow at the largest shift t <= kMaxNarrowT
// with |ma|, |mb| < 2^15 and (max|y| + 1) 2^t + 2 max|a*ma + b*mb| < 2^31 (c_range in int32);
// else (allow_wide) wide at the largest t <= kMaxWideT with |ma|, |mb| < 2^30 (so |mh| < 2^14).
bool fit_stage(const Samples& s, double ra, double rb, bool b_used, bool allow_wide, NarrowStage* st) {
  if (!fits16(s.lo) || !fits16(s.hi)) return false;
  const double amax = double(max_abs(s.a)), bmax = double(max_abs(s.b));
  const double ymax = double(std::max(std::llabs(s.lo), std::llabs(s.hi)) + 1);
  auto slope = [&](double r, int t) { return std::fabs(r) * std::ldexp(1.0, t) + kRadius + 1; };
  auto narrow_ok = [&](int t) {
    return slope(ra, t) <= kI16 && slope(rb, t) <= kI16 &&
           ymax * std::ldexp(1.0, t) + 2 * (amax * slope(ra, t) + bmax * slope(rb, t)) < 2147483647.0;
  };
  int t = kMaxNarrowT;
  while (t > 1 && !narrow_ok(t)) --t;
  st->wide = false;
  if (narrow_ok(t) && search<int32_t>(s, ra, rb, b_used, t, kRadius, INT32_MAX, st)) return true;
  if (!allow_wide) return false;
  auto wide_ok = [&](int t) { return slope(ra, t) < std::ldexp(1.0, 30) && slope(rb, t) < std::ldexp(1.0, 30); };
  t = kMaxWideT;
  while (t > 16 && !wide_ok(t)) --t;
  st->wide = true;
  return wide_ok(t) && search<int64_t>(s, ra, rb, b_used, t, kWideRadius, int64_t(1) << 30, st);
}

// Every code of dtype t.
std::vector<int32_t> codes_of(DType t) {
  std::vector<int32_t> v;
  for (int64_t x = qmin(t); x <= qmax(t); ++x) v.push_back(int32_t(x));
  return v;
}

// The samples of f over every pair (the ADD alone when `add_only`).
Samples pair_samples(const AddSpec& f, bool add_only) {
  AddSpec g = f;
  if (add_only) g.requant = false;
  Samples s;
  s.lo = g.requant ? g.lo2 : g.lo, s.hi = g.requant ? g.hi2 : g.hi;
  const std::vector<int32_t> as = codes_of(f.at), bs = codes_of(f.bt);
  s.a.reserve(as.size() * bs.size()), s.b.reserve(as.size() * bs.size()), s.y.reserve(as.size() * bs.size());
  for (int32_t a : as)
    for (int32_t b : bs) {
      s.a.push_back(a), s.b.push_back(b);
      s.y.push_back(int32_t(add_spec_one(g, a, b)));
    }
  return s;
}

// One stage on one pair in the kernels' int32 steps (emulated in int64); false when a step
// leaves int32 or a parameter its instruction (npu_add_narrow.h) cannot hold.
bool stage_value(const NarrowStage& s, int64_t a, int64_t b, int64_t* q, int64_t* unclamped = nullptr) {
  if (!fits16(s.lo) || !fits16(s.hi) || !fits16(a) || !fits16(b)) return false;
  int64_t r;
  if (!s.wide) {
    if (!fits16(s.ma) || !fits16(s.mb) || s.t < 0 || s.t > 31) return false;
    const int64_t p = a * s.ma + b * s.mb, L = p + s.c;
    if (!fits32(p) || !fits32(L)) return false;
    r = L >> s.t;  // arithmetic: floor
  } else {
    const int64_t ha = high16(s.ma), hb = high16(s.mb), la = low16(s.ma), lb = low16(s.mb);
    if (!fits16(ha) || !fits16(hb) || s.t < 16 || s.t > 47) return false;
    const int64_t P = a * ha + b * hb, Q = a * la + b * lb, Qc = Q + s.c, R = P + (Qc >> 16);
    if (!fits32(P) || !fits32(Q) || !fits32(Qc) || !fits32(R)) return false;
    r = R >> (s.t - 16);
  }
  if (unclamped) *unclamped = r;
  *q = clamp(r, s.lo, s.hi);
  return true;
}

// The pairs where p differs from `want` (f's values in pair_samples order, row-major (a, b));
// with `stop`, 1 at the first one.
int64_t mismatches(const AddNarrow& p, DType at, DType bt, const std::vector<int32_t>& want, int64_t* first_a,
                   int64_t* first_b, bool stop = false) {
  int64_t bad = 0;
  size_t i = 0;
  const int64_t a0 = qmin(at), a1 = qmax(at), b0 = qmin(bt), b1 = qmax(bt);
  for (int64_t a = a0; a <= a1; ++a)
    for (int64_t b = b0; b <= b1; ++b, ++i) {
      int64_t y;
      if (add_narrow_one(p, a, b, &y) && y == want[i]) continue;
      if (bad++ == 0) {
        if (first_a) *first_a = a;
        if (first_b) *first_b = b;
      }
      if (stop) return bad;
    }
  return bad;
}

// ------------------------------------------------------------------ kernels
inline int32_t stage_fast(const NarrowStage& s, int32_t a, int32_t b) {  // checked at load: no overflow
  int32_t r;
  if (!s.wide) {
    r = (a * s.ma + b * s.mb + s.c) >> s.t;
  } else {
    const int32_t la = int16_t(s.ma & 0xFFFF), lb = int16_t(s.mb & 0xFFFF);
    const int32_t ha = (s.ma - la) / 65536, hb = (s.mb - lb) / 65536;
    r = (a * ha + b * hb + ((a * la + b * lb + s.c) >> 16)) >> (s.t - 16);
  }
  return std::min(std::max(r, s.lo), s.hi);
}

inline int32_t narrow_fast(const AddNarrow& p, int32_t a, int32_t b) {
  const int32_t q = stage_fast(p.s1, a, b);
  return p.two_stage ? stage_fast(p.s2, q, 0) : q;
}

template <typename A, typename B, typename Y>
void narrow_portable(const AddNarrow& p, const A* a, const B* b, int64_t n, Y* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = Y(narrow_fast(p, a[i], b[i]));
}

// f(a, b, y) with the buffers cast to their 8-bit element types; false for another dtype.
template <typename F>
bool with_8bit_types(DType at, DType bt, DType yt, const void* a, const void* b, void* y, F f) {
  if (!is8(at) || !is8(bt) || !is8(yt)) return false;
  auto as_y = [&](auto pa, auto pb) {
    if (yt == DType::kInt8) return f(pa, pb, static_cast<int8_t*>(y));
    return f(pa, pb, static_cast<uint8_t*>(y));
  };
  auto as_b = [&](auto pa) {
    if (bt == DType::kInt8) return as_y(pa, static_cast<const int8_t*>(b));
    return as_y(pa, static_cast<const uint8_t*>(b));
  };
  if (at == DType::kInt8) as_b(static_cast<const int8_t*>(a));
  else as_b(static_cast<const uint8_t*>(a));
  return true;
}

// The vpmaddwd multiplier pairs of a stage: (low halves) and (high halves) of (ma, mb).
inline int32_t low_pair(const NarrowStage& s) { return int32_t((uint32_t(uint16_t(s.mb)) << 16) | uint16_t(s.ma)); }
inline int32_t high_pair(const NarrowStage& s) {
  return int32_t((uint32_t(uint16_t(high16(s.mb))) << 16) | uint16_t(high16(s.ma)));
}

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace isa_avx2 {  // 16 pairs a step: a, b widened to int16 and interleaved for vpmaddwd
inline __m256i widen16(const int8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256i widen16(const uint8_t* p) { return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m128i pack8(int8_t*, __m128i lo, __m128i hi) { return _mm_packs_epi16(lo, hi); }
inline __m128i pack8(uint8_t*, __m128i lo, __m128i hi) { return _mm_packus_epi16(lo, hi); }

struct Stage {  // a NarrowStage in registers
  __m256i low, high, c, lo, hi;
  __m128i t, t16;  // shift counts: t (narrow) or t - 16 (wide), and 16
  bool wide;
  explicit Stage(const NarrowStage& s)
      : low(_mm256_set1_epi32(low_pair(s))), high(_mm256_set1_epi32(high_pair(s))), c(_mm256_set1_epi32(s.c)),
        lo(_mm256_set1_epi32(s.lo)), hi(_mm256_set1_epi32(s.hi)), t(_mm_cvtsi32_si128(s.wide ? s.t - 16 : s.t)),
        t16(_mm_cvtsi32_si128(16)), wide(s.wide) {}
  // int32 lanes of (a, b) int16 pairs -> the stage's floor, unclamped
  __m256i apply(__m256i pairs) const {
    __m256i r = _mm256_add_epi32(_mm256_madd_epi16(pairs, low), c);
    if (wide) r = _mm256_add_epi32(_mm256_madd_epi16(pairs, high), _mm256_sra_epi32(r, t16));
    return _mm256_sra_epi32(r, t);
  }
  __m256i clamp(__m256i v) const { return _mm256_min_epi32(_mm256_max_epi32(v, lo), hi); }
};

template <typename A, typename B, typename Y>
void narrow_avx2(const AddNarrow& p, const A* a, const B* b, int64_t n, Y* y) {
  const Stage s1(p.s1), s2(p.s2);
  const NarrowStage& last = p.two_stage ? p.s2 : p.s1;
  const bool clamp1 = p.s1.lo != -32768 || p.s1.hi != 32767;
  const __m256i lo = _mm256_set1_epi16(int16_t(last.lo)), hi = _mm256_set1_epi16(int16_t(last.hi));
  auto half = [&](__m256i pairs) {  // stage 2 reads the clamped int32 q as the int16 pair (q, sign): mb = 0
    const __m256i q = s1.apply(pairs);
    return p.two_stage ? s2.apply(clamp1 ? s1.clamp(q) : q) : q;
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i va = widen16(a + i), vb = widen16(b + i);
    // in-lane unpack then in-lane pack: the 16 results come back in order
    __m256i r = _mm256_packs_epi32(half(_mm256_unpacklo_epi16(va, vb)), half(_mm256_unpackhi_epi16(va, vb)));
    r = _mm256_min_epi16(_mm256_max_epi16(r, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), pack8(y, _mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  for (; i < n; ++i) y[i] = Y(narrow_fast(p, a[i], b[i]));
}
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512dq,avx512vl,avx512bw")
namespace isa_avx512 {  // 32 pairs a step; the tail with masked loads and a masked store
inline __m512i widen32(__mmask32 m, const int8_t* p) { return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, p)); }
inline __m512i widen32(__mmask32 m, const uint8_t* p) { return _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, p)); }

struct Stage {
  __m512i low, high, c, lo, hi;
  __m128i t, t16;
  bool wide;
  explicit Stage(const NarrowStage& s)
      : low(_mm512_set1_epi32(low_pair(s))), high(_mm512_set1_epi32(high_pair(s))), c(_mm512_set1_epi32(s.c)),
        lo(_mm512_set1_epi32(s.lo)), hi(_mm512_set1_epi32(s.hi)), t(_mm_cvtsi32_si128(s.wide ? s.t - 16 : s.t)),
        t16(_mm_cvtsi32_si128(16)), wide(s.wide) {}
  __m512i apply(__m512i pairs) const {
    __m512i r = _mm512_add_epi32(_mm512_madd_epi16(pairs, low), c);
    if (wide) r = _mm512_add_epi32(_mm512_madd_epi16(pairs, high), _mm512_sra_epi32(r, t16));
    return _mm512_sra_epi32(r, t);
  }
  __m512i clamp(__m512i v) const { return _mm512_min_epi32(_mm512_max_epi32(v, lo), hi); }
};

template <typename A, typename B, typename Y>
void narrow_avx512(const AddNarrow& p, const A* a, const B* b, int64_t n, Y* y) {
  const Stage s1(p.s1), s2(p.s2);
  const NarrowStage& last = p.two_stage ? p.s2 : p.s1;
  const bool clamp1 = p.s1.lo != -32768 || p.s1.hi != 32767;
  const __m512i lo = _mm512_set1_epi16(int16_t(last.lo)), hi = _mm512_set1_epi16(int16_t(last.hi));
  auto half = [&](__m512i pairs) {
    const __m512i q = s1.apply(pairs);
    return p.two_stage ? s2.apply(clamp1 ? s1.clamp(q) : q) : q;
  };
  auto step = [&](__m512i va, __m512i vb) {  // 32 results as int16 in order, clamped
    __m512i r = _mm512_packs_epi32(half(_mm512_unpacklo_epi16(va, vb)), half(_mm512_unpackhi_epi16(va, vb)));
    return _mm512_min_epi16(_mm512_max_epi16(r, lo), hi);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)  // the register form of vpmovwb (the masked store form is slow on Zen 4)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtepi16_epi8(step(widen32(~__mmask32(0), a + i), widen32(~__mmask32(0), b + i))));
  if (i < n) {
    const __mmask32 m = __mmask32((uint64_t(1) << (n - i)) - 1);
    _mm512_mask_cvtepi16_storeu_epi8(y + i, m, step(widen32(m, a + i), widen32(m, b + i)));
  }
}
}  // namespace isa_avx512
#pragma GCC pop_options
#endif

}  // namespace

int64_t add_spec_one(const AddSpec& f, int64_t a, int64_t b) {
  int64_t y = clamp(round_shift(a * f.ma + b * f.mb, f.s), f.lo, f.hi);
  if (f.requant) y = clamp(round_shift(y * f.m2, f.s2), f.lo2, f.hi2);
  return y;
}

bool add_narrow_one(const AddNarrow& p, int64_t a, int64_t b, int64_t* y) {
  int64_t q, r;
  if (!stage_value(p.s1, a, b, &q, &r)) return false;
  if (p.two_stage) {  // without stage 1's clamp (int16 bounds) the kernels pass r on: it must be int16
    if (p.s1.lo == -32768 && p.s1.hi == 32767 && !fits16(r)) return false;
    if (p.s2.mb != 0 || !stage_value(p.s2, q, 0, &q)) return false;
  }
  *y = q;
  return true;
}

int64_t add_narrow_mismatches(const AddNarrow& p, const AddSpec& f, int64_t* first_a, int64_t* first_b) {
  return mismatches(p, f.at, f.bt, pair_samples(f, false).y, first_a, first_b);
}

namespace {
bool search_plan(const AddSpec& f, AddNarrow* out) {
  const int64_t flo = f.requant ? f.lo2 : f.lo, fhi = f.requant ? f.hi2 : f.hi;
  if (!is8(f.at) || !is8(f.bt) || flo < -128 || fhi > 255 || flo > fhi) return false;
  const double ra = std::ldexp(double(f.ma), -f.s), rb = std::ldexp(double(f.mb), -f.s);
  const double r2 = f.requant ? std::ldexp(double(f.m2), -f.s2) : 1.0;
  AddNarrow p;
  p.at = f.at, p.bt = f.bt, p.requant = f.requant;
  // one stage: the whole function (the REQUANT folded in)
  const Samples whole = pair_samples(f, false);
  // (with a REQUANT only narrow: the double rounding is rarely one floor, and a failing wide
  // search is the slow part of the load)
  bool found = fit_stage(whole, ra * r2, rb * r2, true, !f.requant, &p.s1);
  if (!found && f.requant) {
    // two stages: the ADD alone, then the REQUANT on the ADD's codes that occur
    const Samples first = pair_samples(f, true);
    if (fit_stage(first, ra, rb, true, true, &p.s1)) {
      std::vector<bool> seen(65536, false);  // stage 1's codes, in int16
      for (int32_t v : first.y) seen[size_t(v + 32768)] = true;
      Samples second;
      second.lo = flo, second.hi = fhi;
      for (int32_t v = -32768; v <= 32767; ++v) {
        if (!seen[size_t(v + 32768)]) continue;
        second.a.push_back(v), second.b.push_back(0);
        second.y.push_back(int32_t(clamp(round_shift(int64_t(v) * f.m2, f.s2), f.lo2, f.hi2)));
      }
      p.two_stage = true;
      found = fit_stage(second, r2, 0.0, false, true, &p.s2);
    }
  }
  if (!found) return false;
  // the proof by exhaustion; first without stage 1's clamp, which stage 2's often implies (a ReLU)
  // and the kernels then skip (stage 2 requires the unclamped sum to fit int16)
  AddNarrow q = p;
  q.s1.lo = -32768, q.s1.hi = 32767;
  if (p.two_stage && mismatches(q, f.at, f.bt, whole.y, nullptr, nullptr, true) == 0) {
    *out = q;
    return true;
  }
  if (mismatches(p, f.at, f.bt, whole.y, nullptr, nullptr, true) != 0) return false;
  *out = p;
  return true;
}

}  // namespace

bool add_narrow_plan(const AddSpec& f, AddNarrow* out) {
  // Plans by spec, process-wide: the engines of one model at several batch sizes, or decoded
  // again, share their ADDs' specs; the search and check (a few ms each) then run once.
  using Key = std::array<int64_t, 12>;
  static std::mutex mu;
  static std::map<Key, std::pair<bool, AddNarrow>>* cache = new std::map<Key, std::pair<bool, AddNarrow>>();
  const Key key = {int64_t(f.at), int64_t(f.bt), f.ma, f.mb, f.s, f.lo, f.hi, f.requant, f.m2, f.s2, f.lo2, f.hi2};
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) {
      if (it->second.first) *out = it->second.second;
      return it->second.first;
    }
  }
  AddNarrow p;
  const bool found = search_plan(f, &p);
  std::lock_guard<std::mutex> lock(mu);
  if (cache->size() >= 4096) cache->clear();  // bounded; specs rarely repeat beyond a few models
  (*cache)[key] = {found, p};
  if (found) *out = p;
  return found;
}

AddNarrow add_narrow_swapped(const AddNarrow& p) {
  AddNarrow q = p;
  std::swap(q.s1.ma, q.s1.mb);
  std::swap(q.at, q.bt);
  return q;
}

bool add_narrow_codes(const AddNarrow& p, const void* a, DType at, const void* b, DType bt, int64_t n, void* y,
                      DType yt) {
  if (at != p.at || bt != p.bt) return false;
#if RATELNN_X86_PATHS
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512)
    return with_8bit_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { isa_avx512::narrow_avx512(p, pa, pb, n, py); });
  if (isa >= Isa::kAvx2)
    return with_8bit_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { isa_avx2::narrow_avx2(p, pa, pb, n, py); });
#endif
  return with_8bit_types(at, bt, yt, a, b, y, [&](auto pa, auto pb, auto py) { narrow_portable(p, pa, pb, n, py); });
}

}  // namespace npu
}  // namespace ratelnn
