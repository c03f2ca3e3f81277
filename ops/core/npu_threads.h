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

}  // namespace npu
}  // namespace ratelnn
