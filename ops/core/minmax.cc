#include "core/minmax.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <mutex>

#include "core/float_env.h"
#include "core/isa.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#endif

namespace ratelnn {
namespace {

// Eight float lanes (GCC/Clang vector extension): one AVX register, or two SSE registers.
typedef float Lanes __attribute__((vector_size(32)));
constexpr int kLaneCount = 8;

typedef int32_t IntLanes __attribute__((vector_size(32)));
typedef uint32_t UIntLanes __attribute__((vector_size(32)));

constexpr uint32_t kAbsMask = 0x7fffffffu;      // clears the sign bit
constexpr uint32_t kNonFiniteBits = 0x7f800000u;  // |x| bits at or above: Inf or NaN
constexpr uint32_t kLastBin = kHistogramBins - 1;

// Elements per call of the 32-bit counting loop: every 32-bit count stays below 2^31.
constexpr int64_t kHistogramChunk = int64_t{1} << 30;
// Below this many elements the counts go straight into the 64-bit bins; above, into
// kCounterCopies interleaved 32-bit copies of every bin (bin k, copy c at k * kCounterCopies
// + c; lane j of a vector uses copy j % kCounterCopies), merged once per call. More copies
// keep equal bins close together off one counter (store-to-load forwarding), but multiply
// the counters' L1 footprint: on Zen 4 one copy (8 KiB) was faster than four (32 KiB, the
// whole L1D) on MobileNetV2's tensors (0.33 vs 0.41 ns per element), in L2 (0.27 vs 0.42)
// and even with every element in one bin (0.31 vs 0.43) (docs/architecture.md §5).
constexpr int64_t kCopiesThreshold = 1 << 15;
constexpr int kCounterCopies = 1;

inline BatchRange FoldRange(BatchRange r, float v) {
  r.min = v < r.min ? v : r.min;
  r.max = v > r.max ? v : r.max;
  return r;
}

// Elements per block of ScanAndCount: the block's counter slots (4 bytes each) stay in L1.
constexpr int64_t kSlotBlock = 1024;

// Elements of the next block of ScanAndCount that its vector loop prefetches at step i:
// the next block's x[i, i + 16) while it exists. The scalar counting loop issues no loads of
// x, so without this the hardware prefetcher stalls and every block's vector loop waits for
// memory: a calibrated tensor is usually beyond L2 (docs/architecture.md §5; on Zen 4,
// MobileNetV2's 66 tensors: 0.57-0.67 -> 0.41-0.45 ns per element).
inline int64_t PrefetchCount(int64_t block, int64_t block_size, int64_t full) {
  return std::clamp<int64_t>(full - block - kSlotBlock, 0, block_size);
}

#if RATELNN_X86_PATHS
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

// ------------------------------------------------------------------ the scans, per path
#define RATELNN_ISA_LEVEL 0
namespace isa_portable {
#include "core/minmax_kernels.inc"
}  // namespace isa_portable
#undef RATELNN_ISA_LEVEL

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c")
#define RATELNN_ISA_LEVEL 1
namespace isa_avx2 {
#include "core/minmax_kernels.inc"
}  // namespace isa_avx2
#undef RATELNN_ISA_LEVEL
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#pragma GCC diagnostic push  // GCC 12's AVX-512 headers: false "__Y may be used uninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define RATELNN_ISA_LEVEL 2
namespace isa_avx512 {
#include "core/minmax_kernels.inc"
}  // namespace isa_avx512
#undef RATELNN_ISA_LEVEL
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

// The fused range + histogram scan: its own AVX-512 loop (16 lanes, vpcompressd) on the
// AVX-512 paths (ScanRange there is the 8-lane loop compiled for AVX-512), else as
// RATELNN_ON_AVX2_OR_PORTABLE.
template <int kCopies, typename Count>
BatchRange ScanAndCount(const float* x, int64_t n, float scale, Count* counts) {
#if RATELNN_X86_PATHS
  if (active_isa() >= Isa::kAvx512) return isa_avx512::ScanAndCount<kCopies>(x, n, scale, counts);
#endif
  RATELNN_ON_AVX2_OR_PORTABLE(ScanAndCount<kCopies>(x, n, scale, counts))
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
#if RATELNN_X86_PATHS
  if (active_isa() >= Isa::kAvx512) return isa_avx512::ScanRangeImpl(x, n);
#endif
  RATELNN_ON_AVX2_OR_PORTABLE(ScanRangeImpl(x, n))
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
