// The narrow exact ADD/SUB (+ the REQUANT fused after it) for 8-bit codes: docs/npu-arithmetic.md,
// "ADD, SUB, MUL" (the derivation and its proof by exhaustion), docs/architecture.md §7.
//
// With 8-bit operands a, b and an 8-bit result there are at most 256 x 256 code pairs, so the
// instruction (pair) is a finite function f(a, b).  At engine load we look for small integers with
//   stage 1:  q = clamp(floor((a*ma + b*mb + c) / 2^t), lo, hi)
//   stage 2:  q = clamp(floor((q*m2 + c2) / 2^t2), lo2, hi2)          (optional)
// computed in int32 steps (NarrowStage) equal to f on EVERY pair, checked exhaustively; only then
// the kernels use them: vpmaddwd on interleaved (a, b) per int32 lane, an add, shifts, a clamp
// and a saturating pack, instead of the double path (npu_add.h).  Otherwise nothing changes.
#pragma once

#include <cstdint>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

// The exact function: y = clamp(round_shift(a*ma + b*mb, s), lo, hi) (SUB: mb negated), then
// when `requant` y = clamp(round_shift(y*m2, s2), lo2, hi2); a, b codes of dtypes at, bt.
struct AddSpec {
  DType at = DType::kInt8, bt = DType::kInt8;
  int64_t ma = 0, mb = 0;
  int s = 0;
  int64_t lo = 0, hi = 0;
  bool requant = false;
  int64_t m2 = 0;
  int s2 = 0;
  int64_t lo2 = 0, hi2 = 0;
};

// One stage q = clamp(floor((a*ma + b*mb + c) / 2^t), lo, hi) in int32 steps (a, b, lo, hi int16):
// - narrow (|ma|, |mb| < 2^15, t < 32): (vpmaddwd((a, b), (ma, mb)) + c) >> t;
// - wide (ma = mh 2^16 + ml with ml the sign-extended low 16 bits and |mh| < 2^15, 16 <= t < 48):
//   (vpmaddwd((a, b), (mh, nh)) + ((vpmaddwd((a, b), (ml, nl)) + c) >> 16)) >> (t - 16), which is
//   floor((2^16 P + Q + c) / 2^t) by floor(floor(x / 2^16) / 2^k) = floor(x / 2^(16 + k)).
struct NarrowStage {
  int32_t ma = 0, mb = 0, c = 0;
  int t = 0;
  bool wide = false;
  int32_t lo = 0, hi = 0;
};

// The plan: stage 1 on the pair, then (two_stage) stage 2 on its result with mb = 0; without a
// second stage the REQUANT (if any) is folded into stage 1, whose clamp is then the final one.
// Stage-1 bounds [-32768, 32767] before a stage 2 mean no clamp (the kernels skip it).
struct AddNarrow {
  DType at = DType::kInt8, bt = DType::kInt8;  // the operand dtypes it was checked for
  NarrowStage s1, s2;
  bool two_stage = false;
  bool requant = false;  // the spec it equals includes a REQUANT
};

// The exact result of `f` on one pair (int64, the reference formula).
int64_t add_spec_one(const AddSpec& f, int64_t a, int64_t b);
// The narrow result of `p` on one pair, emulating the kernels' int32 steps in int64; false when a
// sum leaves int32 (then the kernels would wrap: the plan is unusable).
bool add_narrow_one(const AddNarrow& p, int64_t a, int64_t b, int64_t* y);
// Pairs (a, b) of f's operand ranges where p differs from f (or overflows); the first one in
// row-major (a, b) order goes to *first_a, *first_b when not null.  0 = proof by exhaustion.
int64_t add_narrow_mismatches(const AddNarrow& p, const AddSpec& f, int64_t* first_a = nullptr,
                              int64_t* first_b = nullptr);
// Find narrow parameters equal to f on every pair (checked with add_narrow_mismatches); false
// when f's operands or result are not 8-bit or none was found (then the caller keeps its path).
bool add_narrow_plan(const AddSpec& f, AddNarrow* p);
// The plan of f(b, a): the operands' roles exchanged.
AddNarrow add_narrow_swapped(const AddNarrow& p);

// y[i] = p applied to (a[i], b[i]), i < n, codes of dtypes at, bt in and yt (8-bit) out, on the
// active kernel path (core/isa.h); false, doing nothing, when the dtypes are not the plan's.
bool add_narrow_codes(const AddNarrow& p, const void* a, DType at, const void* b, DType bt, int64_t n, void* y,
                      DType yt);

}  // namespace npu
}  // namespace ratelnn
