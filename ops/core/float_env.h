// Exact IEEE float arithmetic for the duration of a scope.
//
// TensorFlow runs kernels on threads with flush-to-zero / denormals-are-zero enabled.  The
// Quant/Dequant kernels must match the numpy reference bit for bit (subnormal inputs and
// quotients included), and round-half-to-even relies on the round-to-nearest mode, so the
// kernels switch the SSE control register to IEEE defaults and restore it on exit.
#pragma once

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace ratelnn {

class ScopedExactFloatEnv {
 public:
#if defined(__SSE__)
  ScopedExactFloatEnv() : saved_(_mm_getcsr()) {
    constexpr unsigned kFlushToZero = 1u << 15, kDenormalsAreZero = 1u << 6;
    constexpr unsigned kRoundingBits = 3u << 13;  // 00 = round to nearest even
    _mm_setcsr(saved_ & ~(kFlushToZero | kDenormalsAreZero | kRoundingBits));
  }
  ~ScopedExactFloatEnv() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
  ScopedExactFloatEnv(const ScopedExactFloatEnv&) = delete;
  ScopedExactFloatEnv& operator=(const ScopedExactFloatEnv&) = delete;
};

}  // namespace ratelnn
