// Probe of parallel_for (ops/core/npu_threads.h) for tests/npu/test_parallel_for.py: which
// threads ran the chunks, whether nested calls stayed inline, and what an exception thrown in
// a chunk becomes.  Not part of ratelnn.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/npu_threads.h"

extern "C" {

// parallel_for over [0, total) with `threads` threads, each chunk sleeping `sleep_us` and
// calling a nested parallel_for; unit `throw_at` throws (-1: none).  Writes the sum of the
// units, the chunks run on the caller and on other threads, the nested calls not run inline,
// and the first unit of the first chunk the caller and the other threads ran (-1: none).
// Returns 0, or -1 with the exception's message in err.
int ratelnn_probe_parallel_for(int64_t total, int threads, int64_t sleep_us, int64_t throw_at, int64_t* sum,
                               int64_t* counts, char* err, size_t err_len) {
  std::atomic<int64_t> s{0}, on_caller{0}, on_other{0}, nested_moved{0}, first_caller{-1}, first_other{-1};
  const std::thread::id caller = std::this_thread::get_id();
  auto f = [&](int64_t begin, int64_t end) {
    const std::thread::id me = std::this_thread::get_id();
    (me == caller ? on_caller : on_other) += 1;
    int64_t none = -1;
    (me == caller ? first_caller : first_other).compare_exchange_strong(none, begin);
    ratelnn::npu::parallel_for(4, threads, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != me) nested_moved += 1;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    for (int64_t i = begin; i < end; ++i) {
      if (i == throw_at) throw std::runtime_error("unit " + std::to_string(i) + " failed");
      s += i;
    }
  };
  try {
    ratelnn::npu::parallel_for(total, threads, f);
  } catch (const std::exception& e) {
    std::strncpy(err, e.what(), err_len - 1);
    err[err_len - 1] = '\0';
    return -1;
  }
  *sum = s;
  counts[0] = on_caller, counts[1] = on_other, counts[2] = nested_moved;
  counts[3] = first_caller, counts[4] = first_other;
  return 0;
}

// `callers` threads at once, each making `rounds` parallel_for calls over [0, total) with
// `threads` threads (inside a polling period when `polling`): returns the number of calls
// whose units were not each run exactly once (0 when the pool hands every call's chunks out
// right while other callers share it).
int64_t ratelnn_probe_concurrent_callers(int callers, int rounds, int64_t total, int threads, int polling) {
  std::atomic<int64_t> bad{0};
  std::vector<std::thread> pool;
  for (int c = 0; c < callers; ++c) {
    pool.emplace_back([&] {
      std::vector<std::atomic<int>> runs(total);
      for (int r = 0; r < rounds; ++r) {
        for (auto& x : runs) x = 0;
        if (polling) {
          ratelnn::npu::PollWhileRunning poll(threads);
          ratelnn::npu::parallel_for(total, threads, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) ++runs[i]; });
        } else {
          ratelnn::npu::parallel_for(total, threads, [&](int64_t b, int64_t e) { for (int64_t i = b; i < e; ++i) ++runs[i]; });
        }
        for (auto& x : runs) if (x != 1) { ++bad; break; }
      }
    });
  }
  for (auto& t : pool) t.join();
  return bad;
}

// The caller pinned to its CPU and every other thread of the process (the pool's workers) put
// on that CPU too, then let run anywhere again (so it stays there until moved), before each of
// `calls` two-thread parallel_for calls of two chunks that spin ~2 ms each.  Returns how many
// chunks another thread ran on the caller's CPU (0 when a worker moves off the caller's
// CPU), or -1 where this cannot be arranged (one CPU).
int64_t ratelnn_probe_worker_on_caller_cpu(int calls) {
  cpu_set_t all, mine;
  if (sched_getaffinity(0, sizeof(all), &all) != 0 || CPU_COUNT(&all) < 2) return -1;
  const int cpu = sched_getcpu();
  CPU_ZERO(&mine);
  CPU_SET(cpu, &mine);
  sched_setaffinity(0, sizeof(mine), &mine);
  ratelnn::npu::parallel_for(2, 2, [](int64_t, int64_t) {});  // the pool's worker exists
  const pid_t self = pid_t(syscall(SYS_gettid));
  std::atomic<int64_t> shared{0};
  for (int c = 0; c < calls; ++c) {
    if (DIR* dir = opendir("/proc/self/task")) {
      while (dirent* e = readdir(dir)) {
        const pid_t tid = pid_t(std::atoi(e->d_name));
        if (tid <= 0 || tid == self) continue;
        sched_setaffinity(tid, sizeof(mine), &mine);
        sched_setaffinity(tid, sizeof(all), &all);
      }
      closedir(dir);
    }
    const std::thread::id caller = std::this_thread::get_id();
    ratelnn::npu::parallel_for(2, 2, [&](int64_t, int64_t) {
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2)) {
      }
      if (std::this_thread::get_id() != caller && sched_getcpu() == cpu) ++shared;
    });
  }
  sched_setaffinity(0, sizeof(all), &all);
  return shared;
}
}
