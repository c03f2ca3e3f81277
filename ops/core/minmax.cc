#include "core/minmax.h"

#include <cmath>
#include <cstring>

#include "core/float_env.h"

namespace ratelnn {
namespace {

// Eight float lanes (GCC/Clang vector extension): one AVX register, or two SSE registers.
typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLaneCount = 8;

inline Lanes LoadLanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof(v));
  return v;
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

}  // namespace ratelnn
