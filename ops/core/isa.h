// Instruction-set paths of the native kernels, chosen at run time (docs/npu-arithmetic.md,
// "Kernel paths").
//
// Every library is compiled for the baseline of its architecture (x86-64: SSE2); kernels
// that gain from wider vectors are compiled once per path inside #pragma GCC target regions
// (see npu_conv_<path>.cc and core/conv/shared.h) and the caller picks one with active_isa().  All
// paths compute the same bits: tests force each supported path in turn and compare.
//
// The path is the best one the CPU and OS support, unless the environment variable
// RATELNN_ISA names another (portable, avx2, avx_vnni, avx512, avx512_vnni, amx); a name the machine lacks
// is an error at the first kernel call (IsaError), never a silent fallback.
#pragma once

#include <stdexcept>
#include <string>

// 1 where the x86 paths beyond the baseline are compiled (GCC's #pragma GCC target).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define RATELNN_X86_PATHS 1
#else
#define RATELNN_X86_PATHS 0
#endif

// `return isa_avx2::call;` on the AVX2 and AVX-512 paths, else `return isa_portable::call;`:
// the dispatch of a source whose kernels are compiled in namespaces isa_portable and isa_avx2
// only (minmax.cc, quant.cc: the AVX-512 paths gain nothing there and run the AVX2 code).
#if RATELNN_X86_PATHS
#define RATELNN_ON_AVX2_OR_PORTABLE(call)                            \
  if (::ratelnn::active_isa() >= ::ratelnn::Isa::kAvx2) return isa_avx2::call; \
  return isa_portable::call;
#else
#define RATELNN_ON_AVX2_OR_PORTABLE(call) return isa_portable::call;
#endif

namespace ratelnn {

// The order is the capability ladder code compares against: `>= kAvx2` means AVX2 is there,
// `>= kAvx512` that AVX-512 is.  kAvxVnni sits between them because its CPUs (Intel client
// cores, Sierra Forest / Grand Ridge) may lack AVX-512: it must never reach AVX-512 code.
// Nothing compares against kAvxVnni itself (kAvx512 has no VNNI).
enum class Isa : int {
  kPortable = 0,    // the architecture's baseline (x86-64: SSE2); the only path elsewhere
  kAvx2 = 1,        // AVX2 + FMA: 16-bit pair multiply-adds (vpmaddwd) on 8 int32 lanes
  kAvxVnni = 2,     // AVX2 + AVX-VNNI (VEX): vpdpbusd / vpdpwssd on 8 int32 lanes (ymm)
  kAvx512 = 3,      // AVX-512 F/BW/DQ/VL: vpmaddwd on 16 int32 lanes
  kAvx512Vnni = 4,  // AVX-512 VNNI: vpdpbusd / vpdpwssd on 16 int32 lanes (zmm)
  kAmx = 5,         // avx512_vnni plus AMX-INT8 tiles (tdpbusd) for the u8 x s8 GEMM; Linux, once the
                    // kernel granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM)
};
constexpr int kIsaCount = 6;

// The environment variable that forces a path.
constexpr const char* kIsaEnv = "RATELNN_ISA";

struct IsaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* isa_name(Isa isa);
// The path named `name`; false if no path has that name.
bool isa_from_name(const std::string& name, Isa* isa);
// Whether this CPU (and the OS, for the wider register state) can run `isa`.
bool isa_supported(Isa isa);
// The best supported path.
Isa best_isa();
// The path kernels use: RATELNN_ISA if set (resolved once), else best_isa(), unless
// set_active_isa() chose another.  Throws IsaError when RATELNN_ISA names an unknown path
// or one this machine lacks.
Isa active_isa();
// Make kernels use `isa` from now on (for tests and benchmarks that compare paths); throws
// IsaError if the machine lacks it.
void set_active_isa(Isa isa);

}  // namespace ratelnn
