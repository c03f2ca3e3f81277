#include "core/isa.h"

#include <atomic>
#if RATELNN_X86_PATHS
#include <cpuid.h>
#endif
#if RATELNN_X86_PATHS && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace ratelnn {
namespace {

constexpr const char* kNames[kIsaCount] = {"portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "amx"};

std::atomic<int> g_active{-1};  // -1: not resolved yet
std::once_flag g_env_once;
std::string g_env_error;  // set once, under g_env_once

#if RATELNN_X86_PATHS
// AMX-INT8: CPUID.(EAX=7, ECX=0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), XCR0 bits 17-18
// (the OS saves XTILECFG and XTILEDATA), and on Linux the process's permission to use the
// tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once; without it the
// first tile instruction would kill the process).  Other systems: not supported.
bool amx_usable() {
#if defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & (1u << 24)) == 0 || (d & (1u << 25)) == 0) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || (c & bit_OSXSAVE) == 0) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
#else
  return false;
#endif
}
#endif

std::string known_list() {
  std::string s;
  for (int i = 0; i < kIsaCount; ++i) s += (i ? ", " : "") + std::string(kNames[i]);
  return s;
}

std::string supported_list() {
  std::string s;
  for (int i = 0; i < kIsaCount; ++i)
    if (isa_supported(Isa(i))) s += (s.empty() ? "" : ", ") + std::string(kNames[i]);
  return s;
}

void resolve_from_env() {
  const char* env = std::getenv(kIsaEnv);
  Isa isa = best_isa();
  if (env != nullptr && *env != '\0') {
    if (!isa_from_name(env, &isa)) {
      g_env_error = std::string(kIsaEnv) + "=" + env + " names no kernel path (known: " + known_list() + ")";
      return;
    }
    if (!isa_supported(isa)) {
      g_env_error = std::string(kIsaEnv) + "=" + env + ": this CPU cannot run that kernel path (it supports: " +
                    supported_list() + ")" +
                    (isa == Isa::kAmx ? "; amx needs AMX-TILE and AMX-INT8, the OS tile state (XCR0) and, on Linux, "
                                        "the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM)"
                                      : "");
      return;
    }
  }
  int unresolved = -1;
  g_active.compare_exchange_strong(unresolved, int(isa));  // set_active_isa() may have won
}

}  // namespace

const char* isa_name(Isa isa) {
  int i = int(isa);
  return i >= 0 && i < kIsaCount ? kNames[i] : "unknown";
}

bool isa_from_name(const std::string& name, Isa* isa) {
  for (int i = 0; i < kIsaCount; ++i)
    if (name == kNames[i]) {
      *isa = Isa(i);
      return true;
    }
  return false;
}

bool isa_supported(Isa isa) {
#if RATELNN_X86_PATHS
  // libgcc's cpu indicator also checks that the OS saves the YMM/ZMM state (XGETBV).
  __builtin_cpu_init();
  switch (isa) {
    case Isa::kPortable:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::kAvxVnni: {
      // AVX-VNNI: CPUID.(EAX=7, ECX=1):EAX bit 4; the OS condition (YMM state saved) is the
      // one AVX2's check covers (VEX encoding only: no ZMM state needed).
      unsigned a = 0, b = 0, c = 0, d = 0;
      return isa_supported(Isa::kAvx2) && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & bit_AVXVNNI) != 0;
    }
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
    case Isa::kAvx512Vnni:
      return isa_supported(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni");
    case Isa::kAmx:
      return isa_supported(Isa::kAvx512Vnni) && amx_usable();
  }
  return false;
#else
  return isa == Isa::kPortable;
#endif
}

Isa best_isa() {
  for (int i = kIsaCount - 1; i > 0; --i)
    if (isa_supported(Isa(i))) return Isa(i);
  return Isa::kPortable;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_acquire);
  if (a >= 0) return Isa(a);
  std::call_once(g_env_once, resolve_from_env);
  a = g_active.load(std::memory_order_acquire);
  if (a < 0) throw IsaError(g_env_error);
  return Isa(a);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa))
    throw IsaError(std::string("this CPU cannot run the ") + isa_name(isa) + " kernel path (it supports: " +
                   supported_list() + ")");
  g_active.store(int(isa), std::memory_order_release);
}

}  // namespace ratelnn

// C entry points, exported by every library that links this file (the native executor,
// the TensorFlow and the MXNet op libraries), for ctypes (ratelnn/npu/native.py).
extern "C" {

// The active path's name; on an invalid RATELNN_ISA, NULL and the message in err.
const char* ratelnn_isa_active(char* err, size_t err_len) {
  try {
    return ratelnn::isa_name(ratelnn::active_isa());
  } catch (const std::exception& ex) {
    if (err && err_len) {
      std::snprintf(err, err_len, "%s", ex.what());
    }
    return nullptr;
  }
}

// 1 if the machine can run the named path, 0 if not, -1 for an unknown name.
int ratelnn_isa_supported(const char* name) {
  ratelnn::Isa isa;
  if (!name || !ratelnn::isa_from_name(name, &isa)) return -1;
  return ratelnn::isa_supported(isa) ? 1 : 0;
}

// Use the named path from now on; 0 on success, else -1 and the message in err.
int ratelnn_isa_set(const char* name, char* err, size_t err_len) {
  ratelnn::Isa isa;
  try {
    if (!name || !ratelnn::isa_from_name(name, &isa))
      throw ratelnn::IsaError(std::string("unknown kernel path '") + (name ? name : "") + "'");
    ratelnn::set_active_isa(isa);
    return 0;
  } catch (const std::exception& ex) {
    if (err && err_len) std::snprintf(err, err_len, "%s", ex.what());
    return -1;
  }
}

}  // extern "C"
