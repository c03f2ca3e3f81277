// Single-pass min/max scan of a float32 buffer, and the histogram of |x| recorded next to
// it, used by the calibration ops (docs/statistics.md).
#pragma once

#include <cstdint>
#include <vector>

namespace ratelnn {

// Min and max of a batch, and whether every element was finite (no NaN or +/-Inf).
struct BatchRange {
  float min;
  float max;
  bool all_finite;
};

// Scans x[0, n), n > 0. Vectorized: lanes of partial results, no per-element branch.
BatchRange ScanRange(const float* x, int64_t n);

// Combines the ranges of two disjoint parts of one batch.
BatchRange MergeRanges(const BatchRange& a, const BatchRange& b);

// Histogram of |x| with kHistogramBins equal bins over [0, 2^range_exp). The range is always
// a power of two strictly above every recorded |x|, so widening it by doubling sums adjacent
// pairs of bins exactly: bin k of range 2^e is floor(|x| * 2^(11 - e)) and, for y >= 0,
// floor(floor(y) / 2) == floor(y / 2), so a value binned under 2^e and re-binned to 2^(e+1)
// lands where it would have been binned under 2^(e+1) directly. The result is independent
// of the batch split and order: it only depends on the values and the final range.
constexpr int kHistogramBinsLog2 = 11;
constexpr int kHistogramBins = 1 << kHistogramBinsLog2;  // 2048
// Range exponents are clamped to [kMinRangeExp, kMaxRangeExp]: every finite float32 is
// below 2^128, and a tensor whose max |x| is below 2^-64 (all-zero included) gets the range
// 2^-64 with all its values in bin 0.
constexpr int kMinRangeExp = -64;
constexpr int kMaxRangeExp = 128;

struct AbsHistogram {
  int range_exp = kMinRangeExp;
  std::vector<int64_t> bins;  // kHistogramBins counts, or empty when nothing was recorded

  // Adds `other` (widening whichever has the smaller range first). Exact.
  void Merge(const AbsHistogram& other);
};

// Smallest e in [kMinRangeExp, kMaxRangeExp] with max_abs < 2^e (max_abs finite, >= 0).
int HistogramRangeExp(float max_abs);

// Adds |x[i]|, i in [0, n), to `bins` (kHistogramBins counts over [0, 2^range_exp)).
// Requires every |x[i]| < 2^range_exp and no NaN (check with ScanRange first); values
// breaking this are counted in the last bin rather than written out of bounds.
void AddToAbsHistogram(const float* x, int64_t n, int range_exp, int64_t* bins);

// Re-bins `bins` from the range 2^from_exp to 2^to_exp (to_exp >= from_exp), in place.
void WidenHistogram(int64_t* bins, int from_exp, int to_exp);

// The histogram of one batch whose range `range` was scanned (all finite), single-threaded.
AbsHistogram BatchAbsHistogram(const float* x, int64_t n, const BatchRange& range);

}  // namespace ratelnn
