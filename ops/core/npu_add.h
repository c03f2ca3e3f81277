// The exact double-precision path of ADD/SUB (and a REQUANT fused after them) of the native
// executor (docs/architecture.md §7; the proof is docs/npu-arithmetic.md, "ADD, SUB, MUL").
//
// y = clamp(round_shift(a*Ma + b*Mb, s)) equals, in IEEE double,
//   v = a*(Ma 2^-s) + b*(Mb 2^-s);  y = trunc(clamp(v + copysign(0.5, v)))
// when every step is exact: the products and the sum are integers |p| < 2^53 scaled by a power
// of two, and |p| + 2^(s-1) < 2^53 keeps v +- 0.5 exact, so trunc gives round half away from
// zero.  With B = qabs(a)*|Ma| + qabs(b)*|Mb| the condition is B + 2^(s-1) < 2^53, checked per
// instruction (add_f64_plan); otherwise the 64-bit path runs.  Exact operations do not depend
// on the rounding mode, FMA contraction or flush-to-zero (every value is >= 2^-62 or 0).
#pragma once

#include <cstdint>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// One ADD/SUB in the double path, and optionally the REQUANT after it.
struct AddF64 {
  double ma = 0, mb = 0;  // Ma 2^-s and +-Mb 2^-s (SUB: -Mb)
  double lo = 0, hi = 0;
  bool requant = false;   // then y = clamp2(round_shift(y * M2, s2)) too
  double m2 = 0, lo2 = 0, hi2 = 0;
};

// The plan of y = clamp(round_shift(a*ma + b*mb, s), lo, hi) for operands with |a| <= qa,
// |b| <= qb; false when the double path is not exact (then the caller uses the 64-bit path).
bool add_f64_plan(int64_t qa, int64_t qb, int64_t ma, int64_t mb, int s, int64_t lo, int64_t hi, AddF64* plan);
// Add the REQUANT y2 = clamp(round_shift(y * m2, s2), lo2, hi2) to `plan`; false when not exact.
bool add_f64_then(int64_t m2, int s2, int64_t lo2, int64_t hi2, AddF64* plan);

// out[i] = the plan applied to (a[i], b[i]), i < n, on the active kernel path (core/isa.h).
void add_f64(const AddF64& plan, const int32_t* a, const int32_t* b, int64_t n, int32_t* out);
// y[i] = the plan applied to (a[i], b[i]), i < n, read and written as codes of their dtypes
// (int8, uint8, int16; no int32 rows in between); false, doing nothing, for another dtype.
bool add_f64_codes(const AddF64& plan, const void* a, DType at, const void* b, DType bt, int64_t n, void* y, DType yt);

}  // namespace npu
}  // namespace ratelnn
