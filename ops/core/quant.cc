#include "core/quant.h"

#include <cmath>
#include <limits>

#include "core/float_env.h"

namespace ratelnn {
namespace {

// Rounding of a float32 quotient to an integral float32, as the numpy reference does it.
// Written from nearbyint (round to nearest even; the mode is pinned by ScopedExactFloatEnv),
// fabs, copysign and selects of already computed values so that GCC vectorizes the loops
// without -ffast-math (std::floor/ceil/trunc are not vectorized under -ftrapping-math).
// All formulas are exact: nearbyint returns an integer within 0.5 of v.
inline float CeilExact(float v) {
  const float r = std::nearbyint(v);
  return r + (r < v ? 1.0f : 0.0f);
}
inline float FloorExact(float v) { return -CeilExact(-v); }
inline float TruncExact(float v) { return std::copysign(FloorExact(std::fabs(v)), v); }

template <RoundMode M>
inline float RoundTo(float v);
template <>
inline float RoundTo<RoundMode::kHalfAwayFromZero>(float v) {
  // C roundf, as arith.py computes it: t + sign(v) where |v - t| >= 0.5 (v - t is exact).
  const float t = TruncExact(v);
  const float step = v < 0.0f ? -1.0f : 1.0f;
  return t + (std::fabs(v - t) >= 0.5f ? step : 0.0f);
}
template <>
inline float RoundTo<RoundMode::kHalfToEven>(float v) { return std::nearbyint(v); }
template <>
inline float RoundTo<RoundMode::kFloor>(float v) { return FloorExact(v); }
template <>
inline float RoundTo<RoundMode::kCeil>(float v) { return CeilExact(v); }
template <>
inline float RoundTo<RoundMode::kTrunc>(float v) { return TruncExact(v); }

// Integral float32 -> T with saturation; NaN -> 0.
template <typename T>
inline T Saturate(float r) {
  constexpr float kLow = static_cast<float>(std::numeric_limits<T>::min());
  // Largest float32 not above the maximum code: exact for 8/16 bit, 2^31 - 128 for int32.
  constexpr float kHighClamp =
      sizeof(T) < 4 ? static_cast<float>(std::numeric_limits<T>::max()) : 2147483520.0f;
  float c = r < kLow ? kLow : r;
  c = c > kHighClamp ? kHighClamp : c;
  c = c != c ? 0.0f : c;
  const T code = static_cast<T>(static_cast<int32_t>(c));
  if constexpr (sizeof(T) == 4) {
    return r >= 2147483648.0f ? std::numeric_limits<T>::max() : code;
  }
  return code;
}

template <typename T, RoundMode M>
void QuantizeBlock(const float* x, T* q, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) q[i] = Saturate<T>(RoundTo<M>(x[i] / scale));
}

template <typename T, RoundMode M>
void QuantizeRow(const float* x, T* q, int64_t n, const float* scales) {
  for (int64_t i = 0; i < n; ++i) q[i] = Saturate<T>(RoundTo<M>(x[i] / scales[i]));
}

template <typename T, RoundMode M>
void QuantizeUnitsWith(const float* x, T* q, const ChannelLayout& layout, const float* scales,
                       int64_t unit_begin, int64_t unit_end) {
  if (layout.channels == 1) {
    QuantizeBlock<T, M>(x + unit_begin, q + unit_begin, unit_end - unit_begin, scales[0]);
  } else if (layout.inner == 1) {
    for (int64_t u = unit_begin; u < unit_end; ++u) {
      const int64_t offset = u * layout.channels;
      QuantizeRow<T, M>(x + offset, q + offset, layout.channels, scales);
    }
  } else {
    for (int64_t u = unit_begin; u < unit_end; ++u) {
      const int64_t offset = u * layout.inner;
      QuantizeBlock<T, M>(x + offset, q + offset, layout.inner, scales[u % layout.channels]);
    }
  }
}

}  // namespace

bool ParseRoundMode(const std::string& name, RoundMode* mode) {
  if (name == "half_away_from_zero") *mode = RoundMode::kHalfAwayFromZero;
  else if (name == "half_to_even") *mode = RoundMode::kHalfToEven;
  else if (name == "floor") *mode = RoundMode::kFloor;
  else if (name == "ceil") *mode = RoundMode::kCeil;
  else if (name == "trunc") *mode = RoundMode::kTrunc;
  else return false;
  return true;
}

int64_t ChannelLayout::unit_count() const {
  if (channels == 1) return outer * inner;
  return inner == 1 ? outer : outer * channels;
}

int64_t ChannelLayout::unit_size() const {
  if (channels == 1) return 1;
  return inner == 1 ? channels : inner;
}

std::string MakeChannelLayout(const std::vector<int64_t>& dims, int64_t num_scales,
                              int64_t axis, ChannelLayout* layout) {
  int64_t elements = 1;
  for (int64_t d : dims) elements *= d;
  if (num_scales == 0) {
    *layout = ChannelLayout{1, 1, elements};
    return "";
  }
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (axis < -rank || axis >= rank) {
    return "axis " + std::to_string(axis) + " is out of range for a tensor of rank " +
           std::to_string(rank);
  }
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (dims[a] != num_scales) {
    return "got " + std::to_string(num_scales) + " scales but dimension " + std::to_string(a) +
           " (axis " + std::to_string(axis) + ") has size " + std::to_string(dims[a]);
  }
  ChannelLayout l;
  l.channels = num_scales;
  l.inner = 1;
  for (int64_t i = 0; i < a; ++i) l.outer *= dims[i];
  for (int64_t i = a + 1; i < rank; ++i) l.inner *= dims[i];
  if (l.channels == 1) l = ChannelLayout{1, 1, elements};
  *layout = l;
  return "";
}

std::string ValidateScales(const std::vector<float>& scales) {
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!std::isfinite(scales[i]) || !(scales[i] > 0.0f)) {
      return "scale[" + std::to_string(i) + "] = " + std::to_string(scales[i]) +
             " is not a finite positive number";
    }
  }
  return "";
}

template <typename T>
void QuantizeUnits(const float* x, T* q, const ChannelLayout& layout, const float* scales,
                   RoundMode mode, int64_t unit_begin, int64_t unit_end) {
  ScopedExactFloatEnv exact_float;
  switch (mode) {
    case RoundMode::kHalfAwayFromZero:
      return QuantizeUnitsWith<T, RoundMode::kHalfAwayFromZero>(x, q, layout, scales,
                                                                unit_begin, unit_end);
    case RoundMode::kHalfToEven:
      return QuantizeUnitsWith<T, RoundMode::kHalfToEven>(x, q, layout, scales, unit_begin,
                                                          unit_end);
    case RoundMode::kFloor:
      return QuantizeUnitsWith<T, RoundMode::kFloor>(x, q, layout, scales, unit_begin,
                                                     unit_end);
    case RoundMode::kCeil:
      return QuantizeUnitsWith<T, RoundMode::kCeil>(x, q, layout, scales, unit_begin,
                                                    unit_end);
    case RoundMode::kTrunc:
      return QuantizeUnitsWith<T, RoundMode::kTrunc>(x, q, layout, scales, unit_begin,
                                                     unit_end);
  }
}

template <typename T>
void DequantizeUnits(const T* q, float* x, const ChannelLayout& layout, const float* scales,
                     int64_t unit_begin, int64_t unit_end) {
  ScopedExactFloatEnv exact_float;
  if (layout.channels == 1) {
    const float scale = scales[0];
    for (int64_t i = unit_begin; i < unit_end; ++i) x[i] = static_cast<float>(q[i]) * scale;
  } else if (layout.inner == 1) {
    for (int64_t u = unit_begin; u < unit_end; ++u) {
      const T* qr = q + u * layout.channels;
      float* xr = x + u * layout.channels;
      for (int64_t c = 0; c < layout.channels; ++c) xr[c] = static_cast<float>(qr[c]) * scales[c];
    }
  } else {
    for (int64_t u = unit_begin; u < unit_end; ++u) {
      const T* qb = q + u * layout.inner;
      float* xb = x + u * layout.inner;
      const float scale = scales[u % layout.channels];
      for (int64_t i = 0; i < layout.inner; ++i) xb[i] = static_cast<float>(qb[i]) * scale;
    }
  }
}

#define RATELNN_INSTANTIATE(T)                                                          \
  template void QuantizeUnits<T>(const float*, T*, const ChannelLayout&, const float*,  \
                                 RoundMode, int64_t, int64_t);                          \
  template void DequantizeUnits<T>(const T*, float*, const ChannelLayout&, const float*, \
                                   int64_t, int64_t);
RATELNN_INSTANTIATE(int8_t)
RATELNN_INSTANTIATE(uint8_t)
RATELNN_INSTANTIATE(int16_t)
RATELNN_INSTANTIATE(int32_t)
#undef RATELNN_INSTANTIATE

}  // namespace ratelnn
