// The avx512 path of the CONV2D / FULLY_CONNECTED kernels: AVX-512 (zmm), no dot-product
// instructions. It compiles npu_conv_kernels.inc under this path's macros and target
// (core/conv/shared.h); npu_conv.cc dispatches to it when active_isa() (core/isa.h) picks it.
#include "core/conv/shared.h"

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#define RATELNN_ISA_LEVEL 2
#define RATELNN_ISA_DOT 0
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvx512
namespace ratelnn {
namespace npu {
namespace isa_avx512 {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx512
}  // namespace npu
}  // namespace ratelnn
#pragma GCC pop_options
#endif
