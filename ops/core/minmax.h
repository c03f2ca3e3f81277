// Single-pass min/max scan of a float32 buffer, and the histogram of |x| recorded next to
// it, used by the calibration ops (docs/statistics.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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

// One pass over x[0, n), n > 0: returns the range (as ScanRange) and adds the histogram of
// |x| over [0, 2^range_exp) to `bins`. The bins are the histogram only if the returned range
// is all finite and HistogramRangeExp(max |x|) <= range_exp; otherwise they hold garbage
// (values at or above 2^range_exp, and NaN, are counted in the last bin, never out of bounds).
BatchRange ScanRangeAndHistogram(const float* x, int64_t n, int range_exp, int64_t* bins);

// What the calibration op records for one batch: its range and the histogram of |x|.
// histogram.range_exp is max(range_exp_hint, the batch's own exponent): binning at a wider
// power-of-two range is the batch's own histogram widened (exact), so merging it into a
// store whose range is at least the hint gives the same counts bit for bit.
struct BatchStatistics {
  BatchRange range;
  AbsHistogram histogram;  // empty bins when the batch is not all finite
};

// Splits [0, n) into contiguous parts and calls part(begin, end) once per part, possibly
// concurrently from several threads (e.g. TensorFlow's Shard); returns when all are done.
using PartRunner =
    std::function<void(int64_t n, const std::function<void(int64_t begin, int64_t end)>& part)>;

// No hint: the first batch of a tensor (a scan pass, then the histogram pass).
constexpr int kNoRangeExpHint = kMinRangeExp - 1;

// Statistics of x[0, n), n > 0. With a hint (usually the range exponent of the tensor's
// earlier batches) one fused pass computes range and histogram; only when the batch's
// exponent exceeds the hint (or there is no hint) a second pass bins the batch at its own
// exponent. Parts keep private sub-histograms, merged once per part.
BatchStatistics SummarizeBatch(const float* x, int64_t n, int range_exp_hint,
                               const PartRunner& run_parts);

// The range exponent a calibration kernel bins its next batch at: the largest exponent of
// the batches it recorded (those are in the store, whose range can only be wider, so the
// merge stays exact and the store's range stays the smallest power of two above the data).
// Thread-safe: several threads may run one kernel.
class RangeExpHint {
 public:
  int Get() const { return exp_.load(std::memory_order_relaxed); }
  // Call after the batch binned at range_exp was recorded.
  void Raise(int range_exp) {
    int current = Get();
    while (current < range_exp &&
           !exp_.compare_exchange_weak(current, range_exp, std::memory_order_relaxed)) {
    }
  }

 private:
  std::atomic<int> exp_{kNoRangeExpHint};
};

// A PartRunner that runs the whole range as one part on the calling thread.
void RunAsOnePart(int64_t n, const std::function<void(int64_t begin, int64_t end)>& part);

}  // namespace ratelnn
