// A persistent worker pool for the native NPU executor: parallel_for splits a range over
// `threads` workers that live for the whole process (no thread creation per instruction).
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

// While one of these is alive (one engine run: its instructions follow each other within
// microseconds), idle pool workers poll for the next parallel_for instead of sleeping, and
// callers poll for their last chunks, so an instruction pays no futex wake-up; they yield
// the CPU between polling rounds and go back to sleep when the last one is destroyed
// (docs/architecture.md §7, threads).  `threads` <= 1 makes it a no-op.
class PollWhileRunning {
 public:
  explicit PollWhileRunning(int threads);
  ~PollWhileRunning();
  PollWhileRunning(const PollWhileRunning&) = delete;
  PollWhileRunning& operator=(const PollWhileRunning&) = delete;

 private:
  bool active_;
};

}  // namespace npu
}  // namespace ratelnn
