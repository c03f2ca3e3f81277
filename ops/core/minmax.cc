#include "core/minmax.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/float_env.h"

namespace ratelnn {
namespace {

// Eight float lanes (GCC/Clang vector extension): one AVX register, or two SSE registers.
typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLaneCount = 8;

typedef int32_t IntLanes __attribute__((vector_size(32)));

inline Lanes LoadLanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Elements per call of the 32-bit sub-histogram loop: every sub-histogram count stays < 2^31.
constexpr int64_t kHistogramChunk = int64_t{1} << 30;
// Independent sub-histograms: consecutive increments of one bin hit different counters, so
// they do not wait on each other's store-to-load forwarding.
constexpr int kSubHistograms = 4;

// Adds a chunk (n <= kHistogramChunk) to `bins` using 32-bit sub-histograms.
void AddChunk(const float* x, int64_t n, float scale, int64_t* bins) {
  std::vector<uint32_t> sub(kSubHistograms * kHistogramBins, 0);
  uint32_t* h = sub.data();
  constexpr uint32_t kLast = kHistogramBins - 1;
  const int64_t full = n - n % kLaneCount;
  const Lanes scale_lanes = Lanes{} + scale;
  for (int64_t i = 0; i < full; i += kLaneCount) {
    Lanes v = LoadLanes(x + i);
    v = v < 0 ? -v : v;
    // |x| * 2^(11 - e) is exact (a power-of-two product below 2^11) and the conversion
    // truncates: the bin index. Unsigned min keeps any out-of-contract value in bounds.
    const IntLanes index = __builtin_convertvector(v * scale_lanes, IntLanes);
    for (int j = 0; j < kLaneCount; ++j) {
      const uint32_t k = std::min(static_cast<uint32_t>(index[j]), kLast);
      ++h[(j % kSubHistograms) * kHistogramBins + k];
    }
  }
  for (int64_t i = full; i < n; ++i) {
    const float v = std::fabs(x[i]) * scale;
    const uint32_t k = std::min(static_cast<uint32_t>(static_cast<int32_t>(v)), kLast);
    ++h[k];
  }
  for (int s = 0; s < kSubHistograms; ++s) {
    for (int k = 0; k < kHistogramBins; ++k) bins[k] += h[s * kHistogramBins + k];
  }
}

}  // namespace

BatchRange ScanRange(const float* x, int64_t n) {
  ScopedExactFloatEnv exact_float;  // denormals compare as themselves, not as zero
  BatchRange r{x[0], x[0], true};
  float poison = 0.0f;  // sum of (v - v): 0 if every v is finite, NaN otherwise
  const int64_t full = n - n % (2 * kLaneCount);
  if (full > 0) {
    Lanes min0 = LoadLanes(x), max0 = min0, min1 = min0, max1 = min0;
    Lanes poison0 = min0 - min0, poison1 = poison0;
    for (int64_t i = 0; i < full; i += 2 * kLaneCount) {
      const Lanes a = LoadLanes(x + i), b = LoadLanes(x + i + kLaneCount);
      min0 = a < min0 ? a : min0;
      max0 = a > max0 ? a : max0;
      min1 = b < min1 ? b : min1;
      max1 = b > max1 ? b : max1;
      poison0 += a - a;
      poison1 += b - b;
    }
    for (int j = 0; j < kLaneCount; ++j) {
      r.min = std::fmin(r.min, std::fmin(min0[j], min1[j]));
      r.max = std::fmax(r.max, std::fmax(max0[j], max1[j]));
      poison += poison0[j] + poison1[j];
    }
  }
  for (int64_t i = full; i < n; ++i) {
    r.min = x[i] < r.min ? x[i] : r.min;
    r.max = x[i] > r.max ? x[i] : r.max;
    poison += x[i] - x[i];
  }
  r.all_finite = poison == 0.0f;
  return r;
}

BatchRange MergeRanges(const BatchRange& a, const BatchRange& b) {
  return BatchRange{a.min < b.min ? a.min : b.min, a.max > b.max ? a.max : b.max,
                    a.all_finite && b.all_finite};
}

int HistogramRangeExp(float max_abs) {
  if (!(max_abs > 0.0f)) return kMinRangeExp;
  int e;
  std::frexp(max_abs, &e);  // max_abs = f * 2^e with f in [0.5, 1): max_abs < 2^e
  return std::clamp(e, kMinRangeExp, kMaxRangeExp);
}

void AddToAbsHistogram(const float* x, int64_t n, int range_exp, int64_t* bins) {
  const float scale = std::ldexp(1.0f, kHistogramBinsLog2 - range_exp);
  for (int64_t begin = 0; begin < n; begin += kHistogramChunk) {
    AddChunk(x + begin, std::min(kHistogramChunk, n - begin), scale, bins);
  }
}

void WidenHistogram(int64_t* bins, int from_exp, int to_exp) {
  for (int e = from_exp; e < to_exp; ++e) {
    for (int k = 0; k < kHistogramBins / 2; ++k) bins[k] = bins[2 * k] + bins[2 * k + 1];
    std::fill(bins + kHistogramBins / 2, bins + kHistogramBins, 0);
  }
}

void AbsHistogram::Merge(const AbsHistogram& other) {
  if (other.bins.empty()) return;
  if (bins.empty()) {
    *this = other;
    return;
  }
  if (other.range_exp > range_exp) {
    WidenHistogram(bins.data(), range_exp, other.range_exp);
    range_exp = other.range_exp;
  }
  if (other.range_exp < range_exp) {
    std::vector<int64_t> widened = other.bins;
    WidenHistogram(widened.data(), other.range_exp, range_exp);
    for (int k = 0; k < kHistogramBins; ++k) bins[k] += widened[k];
  } else {
    for (int k = 0; k < kHistogramBins; ++k) bins[k] += other.bins[k];
  }
}

AbsHistogram BatchAbsHistogram(const float* x, int64_t n, const BatchRange& range) {
  AbsHistogram h;
  h.range_exp = HistogramRangeExp(std::max(std::fabs(range.min), std::fabs(range.max)));
  h.bins.assign(kHistogramBins, 0);
  AddToAbsHistogram(x, n, h.range_exp, h.bins.data());
  return h;
}

}  // namespace ratelnn
