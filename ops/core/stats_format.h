// The .rstats snapshot file format (docs/statistics.md).
//
//   RATELSTATS <version> <crc32 of payload, 8 hex digits> <payload length in bytes>\n
//   {"tensors": {"<name>": {"min": .., "max": .., "ema_min": .., "ema_max": ..,
//                           "batches": .., "count": ..,
//                           "hist": {"range_exp": e, "bins": [..]}}, ...}}
//
// CRC-32 is the zlib/IEEE polynomial (Python's zlib.crc32). Floats use %.9g, names are
// JSON-escaped. "hist" (absent when no histogram was recorded) holds kHistogramBins counts
// of |x| over [0, 2^range_exp), zero runs written as one negative number: -k = k zero bins.
// Version 1 (readers ignore unknown keys, so old readers still read the min/max).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "core/minmax.h"

namespace ratelnn {

constexpr int kStatsFormatVersion = 1;

// Everything recorded for one tensor in one process. Values are in the tensor's units.
struct TensorStatistics {
  double min = 0, max = 0;          // over all batches
  double ema_min = 0, ema_max = 0;  // exponential moving average of per-batch min/max
  int64_t batches = 0;              // number of non-empty batches seen
  int64_t count = 0;                // number of elements seen
  AbsHistogram histogram;           // of |x| over the batches recorded with a histogram
};

uint32_t Crc32(const char* data, size_t size);

// Complete file contents (header + JSON payload) for `tensors`, keyed by tensor name.
std::string SerializeStatistics(const std::map<std::string, TensorStatistics>& tensors);

}  // namespace ratelnn
