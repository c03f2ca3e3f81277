// What the CONV2D / FULLY_CONNECTED sources share: npu_conv.cc (weight packing, dispatch)
// and npu_conv_<path>.cc, one translation unit per instruction-set path (so the paths compile
// in parallel), each compiling npu_conv_kernels.inc under its #pragma GCC target.  Every
// system header the kernels use is included here, before any target pragma, so library
// templates are instantiated for the baseline and a path's code never leaks into another's.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <limits>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/isa.h"
#include "core/npu_kernels.h"
#include "core/npu_threads.h"

#if RATELNN_X86_PATHS
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>  // the portable path's pmaddwd (x86-64 baseline) on other compilers
#endif

namespace ratelnn {
namespace npu {
namespace {

constexpr int kNR = 16;  // output channels per weight block
constexpr int kMR = 6;   // pixels per GEMM micro-tile
constexpr int kMT = 48;  // pixels per packed im2col tile
constexpr int64_t kPixelSplitWeights = 6;  // weights / activations below which few tiles split by pixels
constexpr int64_t kMinParallelMacs = int64_t(1) << 16;  // smaller convs run on the calling thread
constexpr int64_t kDepthwiseScratchBytes = int64_t(8) << 20;  // padded samples per depthwise pass
constexpr int64_t kKC = 256;  // k pairs per weight sub-block (16 KiB: stays in L1 across a tile)

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
inline int64_t ceil_div(int64_t v, int64_t m) { return (v + m - 1) / m; }
inline int64_t qabs_of(DType t) { return std::max(-qmin(t), qmax(t)); }

// Pixel tiles of a GEMM over M pixels: mt each (kMT unless said), the last also taking a
// remainder below kMR, so a 7x7 image at batch 1 is one tile of 49 (one pass over the
// weights), not 48 + 1.
constexpr int kMaxMT = kMT + kMR - 1;
inline int64_t tile_count(int64_t M, int64_t mt = kMT) {
  const int64_t t = ceil_div(M, mt);
  return t > 1 && M - (t - 1) * mt < kMR ? t - 1 : t;
}
inline int64_t tile_rows(int64_t M, int64_t tiles, int64_t tile, int64_t mt = kMT) {
  return tile + 1 < tiles ? mt : M - tile * mt;
}

// Position of lane i (0..7) of vpunpck half h in a block of 16 channels.
inline int dw_channel(int h, int i) { return i < 4 ? i + 4 * h : i + 4 + 4 * h; }

// The stem layout of the dot-product GEMM (npu_kernels.h, "stem rows"): few input channels
// (groups 1, cg <= 8: up to 8 the kw * cg bytes of a kernel row are few, and reading them
// from the padded copy beats an im2col row; fer's 3x3 on 8 channels x0.74-0.82 as a whole
// engine), a kernel wider than 1x1, dilation 1 across; the same predicate at load (packing)
// and at run time (dispatch).
inline bool stem_rows(int64_t kh, int64_t kw, int64_t cg, int64_t groups, int64_t dw) {
  return groups == 1 && cg <= 8 && kh * kw > 1 && dw == 1;
}

// Largest even number of k values whose int32 sum of products cannot overflow.
inline int64_t chunk_pairs_for(DType x, DType w) { return std::max<int64_t>(1, (int64_t(INT32_MAX) / (qabs_of(x) * qabs_of(w))) / 2); }

}  // namespace

// The entry points each path defines (npu_conv_kernels.inc): the functions of npu_kernels.h
// without the suffix, plus the path's per-instruction requantization tables.
#define RATELNN_CONV_PATH_ENTRIES                                                                            \
  std::shared_ptr<const void> make_channel_params(const Engine& e, const Instruction& ins, int64_t cout);    \
  void run_conv_impl(const Engine& e, const Instruction& ins, const ConvGeom& g, const uint8_t* x, uint8_t* y, \
                     int threads, const ConvAddStep* add);                                                   \
  int64_t peak_macs_impl(int64_t iters, const char** instruction);                                          \
  void store_codes_impl(DType yt, const int32_t* v, int64_t count, uint8_t* y, int64_t index);              \
  void load_codes_impl(const uint8_t* p, DType t, int64_t start, int64_t count, int64_t period, int32_t* out); \
  void add_code_rows_impl(const uint8_t* p, DType t, int64_t start, int64_t rows, int64_t stride,            \
                          int64_t count, int32_t* sum);                                                      \
  void scale_add_requant_impl(const int32_t* a, const int32_t* b, int64_t n, int32_t ma, int32_t mb, int s,  \
                              int64_t lo, int64_t hi, int32_t* out);                                         \
  void max_pool_rows_impl(DType t, const uint8_t* x, const PoolGeom& g, int64_t lo, int64_t hi, int64_t row0, \
                          int64_t row1, uint8_t* y);

namespace isa_portable { RATELNN_CONV_PATH_ENTRIES }
#if RATELNN_X86_PATHS
namespace isa_avx2 { RATELNN_CONV_PATH_ENTRIES }
namespace isa_avx_vnni { RATELNN_CONV_PATH_ENTRIES }
namespace isa_avx512 { RATELNN_CONV_PATH_ENTRIES }
namespace isa_avx512_vnni { RATELNN_CONV_PATH_ENTRIES }
namespace isa_amx { RATELNN_CONV_PATH_ENTRIES }
#endif

}  // namespace npu
}  // namespace ratelnn
