// The avx512_vnni path of the CONV2D / FULLY_CONNECTED kernels: AVX-512 VNNI: the zmm vpdpbusd
// kernels. It compiles npu_conv_kernels.inc under this path's macros and target
// (core/conv/shared.h); npu_conv.cc dispatches to it when active_isa() (core/isa.h) picks it.
#include "core/conv/shared.h"

#if RATELNN_X86_PATHS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,popcnt,lzcnt,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#define RATELNN_ISA_LEVEL 3
#define RATELNN_ISA_DOT 1
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kAvx512Vnni
namespace ratelnn {
namespace npu {
namespace isa_avx512_vnni {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_avx512_vnni
}  // namespace npu
}  // namespace ratelnn
#pragma GCC pop_options
#endif
