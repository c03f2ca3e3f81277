// Probe of parallel_for (ops/core/npu_threads.h) for tests/npu/test_parallel_for.py: with a
// ScopedExecutor whose tasks run on threads of a stand-in foreign pool (as RatelEngineOp lends
// TensorFlow's intra-op pool), or on the library's own pool.  Not part of ratelnn.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "core/npu_threads.h"

namespace {
std::mutex g_mu;
std::set<std::thread::id> g_foreign;  // threads of the stand-in pool

// The stand-in pool: every task on a new detached thread, registered as foreign while it runs.
void run_on_foreign_thread(std::function<void()> task) {
  std::thread([task = std::move(task)] {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_foreign.insert(std::this_thread::get_id());
    }
    task();
    std::lock_guard<std::mutex> lock(g_mu);
    g_foreign.erase(std::this_thread::get_id());  // a later thread may reuse the id
  }).detach();
}
}  // namespace

extern "C" {

// parallel_for over [0, total) with `threads` threads, on the stand-in pool when `foreign`,
// each chunk sleeping `sleep_us` and calling a nested parallel_for; unit `throw_at` throws
// (-1: none).  Writes the sum of the units, the chunks run on the caller, on foreign
// threads and on other threads (the own pool), and the nested calls not run inline.
// Returns 0, or -1 with the exception's message in err.
int ratelnn_probe_parallel_for(int64_t total, int threads, int foreign, int64_t sleep_us, int64_t throw_at,
                               int64_t* sum, int64_t* counts, char* err, size_t err_len) {
  std::atomic<int64_t> s{0}, on_caller{0}, on_foreign{0}, on_other{0}, nested_moved{0};
  const std::thread::id caller = std::this_thread::get_id();
  auto f = [&](int64_t begin, int64_t end) {
    const std::thread::id me = std::this_thread::get_id();
    bool is_foreign;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      is_foreign = g_foreign.count(me) > 0;
    }
    (me == caller ? on_caller : is_foreign ? on_foreign : on_other) += 1;
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
    if (foreign) {
      ratelnn::npu::ScopedExecutor lent(run_on_foreign_thread);
      ratelnn::npu::parallel_for(total, threads, f);
    } else {
      ratelnn::npu::parallel_for(total, threads, f);
    }
  } catch (const std::exception& e) {
    std::strncpy(err, e.what(), err_len - 1);
    err[err_len - 1] = '\0';
    return -1;
  }
  *sum = s;
  counts[0] = on_caller, counts[1] = on_foreign, counts[2] = on_other, counts[3] = nested_moved;
  return 0;
}
}
