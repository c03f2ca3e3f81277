// Core-to-core hop for the benches (bench/core_hop.py): one cache line bounced between a
// thread on each of two CPUs; the time of one one-way hop, in ns.  On VMs whose two vCPUs the
// host moves between cores that share an L3 and cores on different chiplets it tells which
// of the two a measurement saw (AMD EPYC Zen 4: ~27 ns vs ~170 ns).  Not part of ratelnn.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

}  // namespace

extern "C" {

// ns per one-way hop over `round_trips` round trips between CPUs cpu_a and cpu_b; -1 if a
// thread could not be pinned.  The calling thread's affinity is restored.
double ratelnn_core_hop_ns(int cpu_a, int cpu_b, int64_t round_trips) {
  cpu_set_t saved;
  if (pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) != 0) return -1;
  alignas(128) static std::atomic<int64_t> flag;
  flag.store(0);
  std::atomic<bool> pinned{true};
  std::thread other([&] {
    if (!pin(cpu_b)) pinned = false;
    for (int64_t i = 0; i < round_trips; ++i) {
      while (flag.load(std::memory_order_acquire) != 2 * i + 1) {
        if (!pinned) return;
      }
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  if (!pin(cpu_a)) pinned = false;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < round_trips && pinned; ++i) {
    flag.store(2 * i + 1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 2 * i + 2 && pinned) {
    }
  }
  const auto end = std::chrono::steady_clock::now();
  other.join();
  pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
  if (!pinned) return -1;
  return std::chrono::duration<double, std::nano>(end - start).count() / (2.0 * double(round_trips));
}
}
