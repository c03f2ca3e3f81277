#include "core/minmax.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/float_env.h"

namespace ratelnn {
namespace {

// Eight float lanes (GCC/Clang vector extension): one AVX register, or two SSE registers.
typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLaneCount = 8;

typedef int32_t IntLanes __attribute__((vector_size(32)));
typedef uint32_t UIntLanes __attribute__((vector_size(32)));

inline Lanes LoadLanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

constexpr uint32_t kAbsMask = 0x7fffffffu;      // clears the sign bit
constexpr uint32_t kNonFiniteBits = 0x7f800000u;  // |x| bits at or above: Inf or NaN
constexpr uint32_t kLastBin = kHistogramBins - 1;

// Elements per call of the 32-bit counting loop: every 32-bit count stays below 2^31.
constexpr int64_t kHistogramChunk = int64_t{1} << 30;
// Below this many elements the counts go straight into the 64-bit bins; above, into
// kCounterCopies interleaved 32-bit copies of every bin (bin k, copy c at k * kCounterCopies
// + c; lane j of a vector uses copy j % kCounterCopies), so that equal bins close together
// increment different counters and do not wait on each other's store-to-load forwarding.
// The copies cost one 32 KiB allocation and a 2048 x 4 reduction per call.
constexpr int64_t kCopiesThreshold = 1 << 15;
constexpr int kCounterCopies = 4;

inline BatchRange FoldRange(BatchRange r, float v) {
  r.min = v < r.min ? v : r.min;
  r.max = v > r.max ? v : r.max;
  return r;
}

// Bin index (0 .. kLastBin) of every lane's |v|: |v| * scale truncated; values at or above
// the range, and NaN (whose conversion gives 0x80000000), land in the last bin.
inline UIntLanes BinIndex(UIntLanes abs_bits, const Lanes& scale) {
  const Lanes abs_value = reinterpret_cast<Lanes>(abs_bits);
  const UIntLanes index = reinterpret_cast<UIntLanes>(
      __builtin_convertvector(abs_value * scale, IntLanes));
  return index > kLastBin ? kLastBin : index;  // unsigned min
}

inline uint32_t ScalarBinIndex(float v, float scale) {
  const float scaled = std::fabs(v) * scale;
  return std::min(static_cast<uint32_t>(static_cast<int32_t>(scaled)), kLastBin);
}

// Elements per block of ScanAndCount: the block's counter slots (4 bytes each) stay in L1.
constexpr int64_t kSlotBlock = 1024;

#if defined(__AVX2__)
// kCompactLanes[mask]: the lanes whose bit is set in `mask`, in order, then the others
// (for _mm256_permutevar8x32_epi32, which moves those lanes to the front).
constexpr std::array<std::array<int32_t, kLaneCount>, 256> CompactLanePermutations() {
  std::array<std::array<int32_t, kLaneCount>, 256> table{};
  for (int mask = 0; mask < 256; ++mask) {
    int front = 0, back = __builtin_popcount(mask);
    for (int lane = 0; lane < kLaneCount; ++lane) {
      table[mask][(mask >> lane) & 1 ? front++ : back++] = lane;
    }
  }
  return table;
}
alignas(32) constexpr std::array<std::array<int32_t, kLaneCount>, 256> kCompactLanes =
    CompactLanePermutations();
#endif

// Appends to slots[*written ...] the slot of every lane whose bin is not 0, in lane order.
// Writes kLaneCount slots at slots + *written whatever the count (the caller leaves room).
inline void AppendNonZeroBinSlots(const UIntLanes& bin, const UIntLanes& slot, uint32_t* slots,
                                  int64_t* written) {
#if defined(__AVX2__)
  const __m256i bin_vec = reinterpret_cast<__m256i>(bin);
  const __m256i in_bin_0 = _mm256_cmpeq_epi32(bin_vec, _mm256_setzero_si256());
  const int keep = ~_mm256_movemask_ps(_mm256_castsi256_ps(in_bin_0)) & 0xff;
  const __m256i order = _mm256_load_si256(
      reinterpret_cast<const __m256i*>(kCompactLanes[keep].data()));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(slots + *written),
                      _mm256_permutevar8x32_epi32(reinterpret_cast<__m256i>(slot), order));
  *written += __builtin_popcount(keep);
#else
  for (int j = 0; j < kLaneCount; ++j) {
    slots[*written] = slot[j];
    *written += bin[j] != 0;
  }
#endif
}

// One pass over x[0, n), n > 0: the range, and |x| binned with `scale` = 2^(11 - range_exp)
// into counts[k * kCopies + copy] (copy = lane % kCopies). Min/max use two accumulators of
// kLaneCount lanes, as ScanRange. Per block, a vector loop computes the range and the
// counter slot of every element not in bin 0 (those are only counted: ReLU outputs are
// about half exact zeros); then a scalar loop increments the counters of the others: one
// load and one read-modify-write per element, with no dependency on the vector work.
template <int kCopies, typename Count>
BatchRange ScanAndCount(const float* x, int64_t n, float scale, Count* counts) {
  ScopedExactFloatEnv exact_float;  // denormals compare as themselves, not as zero
  BatchRange r{x[0], x[0], true};
  const int64_t full = n - n % (2 * kLaneCount);
  if (full > 0) {
    const Lanes scale_lanes = Lanes{} + scale;
    UIntLanes copy_offset = {0, 1, 2, 3, 4, 5, 6, 7};
    copy_offset = copy_offset % kCopies;
    Lanes min0 = LoadLanes(x), max0 = min0, min1 = min0, max1 = min0;
    UIntLanes non_finite = {};
    int64_t bin_0_count = 0;
    alignas(32) uint32_t slots[kSlotBlock];
    for (int64_t block = 0; block < full; block += kSlotBlock) {
      const int64_t block_size = std::min(kSlotBlock, full - block);
      const float* xb = x + block;
      int64_t written = 0;  // <= i below, so every 8-slot store stays inside `slots`
      for (int64_t i = 0; i < block_size; i += 2 * kLaneCount) {
        const Lanes a = LoadLanes(xb + i), b = LoadLanes(xb + i + kLaneCount);
        min0 = a < min0 ? a : min0;
        max0 = a > max0 ? a : max0;
        min1 = b < min1 ? b : min1;
        max1 = b > max1 ? b : max1;
        const UIntLanes abs_a = reinterpret_cast<UIntLanes>(a) & kAbsMask;
        const UIntLanes abs_b = reinterpret_cast<UIntLanes>(b) & kAbsMask;
        non_finite |= reinterpret_cast<UIntLanes>(abs_a >= kNonFiniteBits);
        non_finite |= reinterpret_cast<UIntLanes>(abs_b >= kNonFiniteBits);
        const UIntLanes bin_a = BinIndex(abs_a, scale_lanes);
        const UIntLanes bin_b = BinIndex(abs_b, scale_lanes);
        AppendNonZeroBinSlots(bin_a, bin_a * kCopies + copy_offset, slots, &written);
        AppendNonZeroBinSlots(bin_b, bin_b * kCopies + copy_offset, slots, &written);
      }
      bin_0_count += block_size - written;
      for (int64_t i = 0; i < written; ++i) ++counts[slots[i]];
    }
    counts[0] += bin_0_count;
    for (int j = 0; j < kLaneCount; ++j) {
      r.min = std::fmin(r.min, std::fmin(min0[j], min1[j]));
      r.max = std::fmax(r.max, std::fmax(max0[j], max1[j]));
      r.all_finite = r.all_finite && non_finite[j] == 0;
    }
  }
  for (int64_t i = full; i < n; ++i) {
    r = FoldRange(r, x[i]);
    r.all_finite = r.all_finite && std::isfinite(x[i]);
    ++counts[ScalarBinIndex(x[i], scale) * kCopies];
  }
  return r;
}

// ScanAndCount of a chunk (n <= kHistogramChunk) through 32-bit interleaved copies.
BatchRange ScanAndCountWithCopies(const float* x, int64_t n, float scale, int64_t* bins) {
  std::vector<uint32_t> copies(kCounterCopies * kHistogramBins, 0);
  const BatchRange r = ScanAndCount<kCounterCopies>(x, n, scale, copies.data());
  for (int k = 0; k < kHistogramBins; ++k) {
    const uint32_t* bin_copies = copies.data() + k * kCounterCopies;
    int64_t sum = 0;
    for (int c = 0; c < kCounterCopies; ++c) sum += bin_copies[c];
    bins[k] += sum;
  }
  return r;
}

// Range and histogram parts of one batch, merged under a mutex as parts finish.
class BatchAccumulator {
 public:
  BatchAccumulator() : bins_(kHistogramBins, 0) {}

  void AddPart(const BatchRange& range, const std::vector<int64_t>* part_bins) {
    std::lock_guard<std::mutex> lock(mutex_);
    range_ = has_range_ ? MergeRanges(range_, range) : range;
    has_range_ = true;
    if (part_bins != nullptr) {
      for (int k = 0; k < kHistogramBins; ++k) bins_[k] += (*part_bins)[k];
    }
  }

  const BatchRange& range() const { return range_; }
  std::vector<int64_t>& bins() { return bins_; }

 private:
  std::mutex mutex_;
  BatchRange range_{0.0f, 0.0f, true};
  bool has_range_ = false;
  std::vector<int64_t> bins_;
};

// Runs ScanRangeAndHistogram over the parts of x[0, n) at `range_exp` into `batch`.
void HistogramPass(const float* x, int64_t n, int range_exp, const PartRunner& run_parts,
                   BatchAccumulator* batch) {
  run_parts(n, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> part_bins(kHistogramBins, 0);
    const BatchRange part_range =
        ScanRangeAndHistogram(x + begin, end - begin, range_exp, part_bins.data());
    batch->AddPart(part_range, &part_bins);
  });
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
  if (n > 0) ScanRangeAndHistogram(x, n, range_exp, bins);
}

BatchRange ScanRangeAndHistogram(const float* x, int64_t n, int range_exp, int64_t* bins) {
  const float scale = std::ldexp(1.0f, kHistogramBinsLog2 - range_exp);
  if (n < kCopiesThreshold) return ScanAndCount<1>(x, n, scale, bins);
  BatchRange r = ScanAndCountWithCopies(x, std::min(kHistogramChunk, n), scale, bins);
  for (int64_t begin = kHistogramChunk; begin < n; begin += kHistogramChunk) {
    r = MergeRanges(
        r, ScanAndCountWithCopies(x + begin, std::min(kHistogramChunk, n - begin), scale, bins));
  }
  return r;
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

BatchStatistics SummarizeBatch(const float* x, int64_t n, int range_exp_hint,
                               const PartRunner& run_parts) {
  const bool fused = range_exp_hint >= kMinRangeExp;
  const int hint = std::min(range_exp_hint, kMaxRangeExp);
  BatchAccumulator batch;
  if (fused) {
    HistogramPass(x, n, hint, run_parts, &batch);
  } else {
    run_parts(n, [&](int64_t begin, int64_t end) {
      batch.AddPart(ScanRange(x + begin, end - begin), nullptr);
    });
  }
  BatchStatistics result;
  result.range = batch.range();
  if (!result.range.all_finite) return result;
  const int own_exp =
      HistogramRangeExp(std::max(std::fabs(result.range.min), std::fabs(result.range.max)));
  if (fused && own_exp <= hint) {
    result.histogram.range_exp = hint;
    result.histogram.bins = std::move(batch.bins());
    return result;
  }
  BatchAccumulator rebinned;  // no hint, or the batch exceeds it: bin at its own exponent
  HistogramPass(x, n, own_exp, run_parts, &rebinned);
  result.histogram.range_exp = own_exp;
  result.histogram.bins = std::move(rebinned.bins());
  return result;
}

void RunAsOnePart(int64_t n, const std::function<void(int64_t begin, int64_t end)>& part) {
  part(0, n);
}

}  // namespace ratelnn
