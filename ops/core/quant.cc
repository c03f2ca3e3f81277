#include "core/quant.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/float_env.h"
#include "core/isa.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#endif

namespace ratelnn {
namespace {

// ------------------------------------------------------------------ the loops, per path
#define RATELNN_ISA_LEVEL 0
namespace isa_portable {
#include "core/quant_kernels.inc"
}  // namespace isa_portable
#undef RATELNN_ISA_LEVEL

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c")
#define RATELNN_ISA_LEVEL 1
namespace isa_avx2 {
#include "core/quant_kernels.inc"
}  // namespace isa_avx2
#undef RATELNN_ISA_LEVEL
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#define RATELNN_ISA_LEVEL 2
namespace isa_avx512 {
#include "core/quant_kernels.inc"
}  // namespace isa_avx512
#undef RATELNN_ISA_LEVEL
#pragma GCC pop_options
#endif

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
#if RATELNN_X86_PATHS
  if (active_isa() >= Isa::kAvx512)
    return isa_avx512::QuantizeUnitsAnyMode<T>(x, q, layout, scales, mode, unit_begin, unit_end);
#endif
  RATELNN_ON_AVX2_OR_PORTABLE(QuantizeUnitsAnyMode<T>(x, q, layout, scales, mode, unit_begin, unit_end))
}

template <typename T>
void DequantizeUnits(const T* q, float* x, const ChannelLayout& layout, const float* scales,
                     int64_t unit_begin, int64_t unit_end) {
  ScopedExactFloatEnv exact_float;
  RATELNN_ON_AVX2_OR_PORTABLE(DequantizeUnitsImpl<T>(q, x, layout, scales, unit_begin, unit_end))
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
