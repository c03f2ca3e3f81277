// Quantize / dequantize loops shared by the TensorFlow and MXNet glue.
//
// The semantics are those of ratelnn/quantization/arith.py, bit for bit:
//   quantize:   q = saturate(round(float32(x / scale)))   NaN -> 0, +/-Inf saturate
//   dequantize: x = float32(q) * scale                     (float32 product)
// Per-channel scales apply along one axis; a tensor is viewed as [outer, channels, inner].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ratelnn {

enum class RoundMode { kHalfAwayFromZero, kHalfToEven, kFloor, kCeil, kTrunc };

// Parses "half_away_from_zero", "half_to_even", "floor", "ceil" or "trunc".
bool ParseRoundMode(const std::string& name, RoundMode* mode);

// Row-major tensor viewed as [outer, channels, inner]; `channels` scales, one per channel.
// The work is split into `unit_count()` independent units of `unit_size()` elements so the
// glue can shard it over threads: single elements (one channel), rows of `channels`
// elements (channel axis last, inner == 1) or contiguous blocks of `inner` elements.
struct ChannelLayout {
  int64_t outer = 1, channels = 1, inner = 0;

  int64_t unit_count() const;
  int64_t unit_size() const;
};

// Layout of a tensor of shape `dims` with `num_scales` scales. num_scales == 0 means one
// scale for the whole tensor. Otherwise `axis` (negative counts from the end) selects the
// channel axis whose size must equal num_scales. Returns an error message, "" when valid.
std::string MakeChannelLayout(const std::vector<int64_t>& dims, int64_t num_scales,
                              int64_t axis, ChannelLayout* layout);

// Returns an error message naming the offending value if a scale is not finite and > 0.
std::string ValidateScales(const std::vector<float>& scales);

// Quantizes work units [unit_begin, unit_end) of `x` into `q`. T: int8_t, uint8_t, int16_t
// or int32_t. `scales` holds layout.channels values.
template <typename T>
void QuantizeUnits(const float* x, T* q, const ChannelLayout& layout, const float* scales,
                   RoundMode mode, int64_t unit_begin, int64_t unit_end);

// Dequantizes work units [unit_begin, unit_end) of `q` into `x`.
template <typename T>
void DequantizeUnits(const T* q, float* x, const ChannelLayout& layout, const float* scales,
                     int64_t unit_begin, int64_t unit_end);

}  // namespace ratelnn
