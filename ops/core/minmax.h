// Single-pass min/max scan of a float32 buffer, used by the calibration ops.
#pragma once

#include <cstdint>

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

}  // namespace ratelnn
