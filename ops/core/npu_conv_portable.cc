// The portable path of the CONV2D / FULLY_CONNECTED kernels: the baseline (x86-64: SSE2), for
// every machine. It compiles npu_conv_kernels.inc under this path's macros and target
// (core/conv/shared.h); npu_conv.cc dispatches to it when active_isa() (core/isa.h) picks it.
#include "core/conv/shared.h"

#define RATELNN_ISA_LEVEL 0
#define RATELNN_ISA_DOT 0
#define RATELNN_ISA_AMX 0
#define RATELNN_ISA_PATH Isa::kPortable
namespace ratelnn {
namespace npu {
namespace isa_portable {
#include "core/npu_conv_kernels.inc"
}  // namespace isa_portable
}  // namespace npu
}  // namespace ratelnn
