// A persistent worker pool for the native NPU executor: parallel_for splits a range over
// `threads` workers that live for the whole process (no thread creation per instruction).
// A framework op may lend its own worker threads instead, for the calls made on its thread
// (ScopedExecutor; docs/architecture.md §7).
#pragma once

#include <cstdint>
#include <functional>

namespace ratelnn {
namespace npu {

// Run f(begin, end) over [0, total) split into contiguous chunks (a few per thread) that at
// most `threads` threads, the caller included, take one after the other; returns when all
// chunks are done.  Safe to call from
// several threads at once and from inside f (nested calls run inline).  Exceptions thrown
// by f are rethrown in the caller (the first one).
void parallel_for(int64_t total, int threads, const std::function<void(int64_t, int64_t)>& f);

// Hands a task to another thread: must run task() once, later, on a thread other than the
// caller's (never inline); the tasks never throw.  E.g. TensorFlow's intra-op pool Schedule.
using Schedule = std::function<void(std::function<void()>)>;

// For its lifetime, parallel_for calls made on the constructing thread send their helper
// tasks to `schedule` instead of this library's own pool (nested scopes restore the outer
// one).  The caller still runs chunks itself and never waits for a task that has not started,
// so a busy or slow executor delays nothing but its own share.
class ScopedExecutor {
 public:
  explicit ScopedExecutor(Schedule schedule);
  ~ScopedExecutor();
  ScopedExecutor(const ScopedExecutor&) = delete;
  ScopedExecutor& operator=(const ScopedExecutor&) = delete;

 private:
  Schedule schedule_;
  const Schedule* outer_;
};

}  // namespace npu
}  // namespace ratelnn
