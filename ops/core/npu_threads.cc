// The worker pool behind parallel_for (npu_threads.h).
#include "core/npu_threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RATELNN_CPU_RELAX() _mm_pause()
#else
#define RATELNN_CPU_RELAX() std::this_thread::yield()
#endif

namespace ratelnn {
namespace npu {
namespace {

constexpr int kMaxWorkers = 64;
// Chunks per thread: finer than one per thread, so that a thread the OS delays (a loaded
// machine) leaves its unstarted chunks to the others instead of stalling the whole call.
constexpr int kChunksPerThread = 4;
thread_local bool t_inside_pool_task = false;
// How long an idle worker, and a caller waiting for the last chunks, poll before sleeping: an
// engine's instructions follow each other within microseconds, and a futex wake-up plus a
// context switch per instruction is a large share of a small model's run (docs/architecture.md §7).
constexpr std::chrono::microseconds kSpin(50);

// Poll `ready` for up to kSpin; true once it holds.
template <typename F>
bool spin_until(F ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      if (ready()) return true;
      RATELNN_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

// One parallel_for call: its chunks, the next chunk to hand out, a countdown of unfinished
// chunks, the first error.
struct Job {
  const std::function<void(int64_t, int64_t)>* f;
  int64_t total, chunk;
  int chunks = 0;
  std::atomic<int> next{0};
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable done;
  std::exception_ptr error;

  void run_chunk(int k) {
    int64_t b = k * chunk, e = std::min(total, b + chunk);
    try {
      if (b < e) (*f)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
    if (remaining.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(mu);
      done.notify_all();
    }
  }

  // Run chunks not yet handed out until there are none.
  void drain() {
    for (int k = next.fetch_add(1); k < chunks; k = next.fetch_add(1)) run_chunk(k);
  }
};

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Queue `helpers` requests to help drain `job`, starting workers as needed.
  void submit(const std::shared_ptr<Job>& job, int helpers) {
    std::lock_guard<std::mutex> lock(mu_);
    while (int(workers_.size()) < std::min(helpers, kMaxWorkers)) {
      workers_.emplace_back([this] { work(); });
      workers_.back().detach();
    }
    for (int k = 0; k < helpers; ++k) queue_.push_back(job);
    queued_.fetch_add(helpers);
    if (sleeping_ > 0) wake_.notify_all();  // polling workers see queued_ without a wake-up
  }

  // Take back the requests for `job` no worker has picked up (its chunks are all handed out).
  void withdraw(const Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    auto kept = std::remove_if(queue_.begin(), queue_.end(), [&](const auto& j) { return j.get() == job; });
    queued_.fetch_sub(int(queue_.end() - kept));
    queue_.erase(kept, queue_.end());
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::atomic<int> queued_{0};  // queue_.size(), readable without the lock
  int sleeping_ = 0;            // workers waiting on wake_ (under mu_)
  std::vector<std::thread> workers_;

  void work() {
    t_inside_pool_task = true;
    for (;;) {
      spin_until([&] { return queued_.load(std::memory_order_relaxed) > 0; });
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (queue_.empty()) {
          ++sleeping_;
          wake_.wait(lock, [&] { return !queue_.empty(); });
          --sleeping_;
        }
        job = queue_.front();
        queue_.pop_front();
        queued_.fetch_sub(1);
      }
      job->drain();
    }
  }
};

}  // namespace

void parallel_for(int64_t total, int threads, const std::function<void(int64_t, int64_t)>& f) {
  if (total <= 0) return;
  int n = int(std::max<int64_t>(1, std::min<int64_t>({int64_t(threads), total, int64_t(kMaxWorkers) + 1})));
  if (n == 1 || t_inside_pool_task) {
    f(0, total);
    return;
  }
  const int helpers = n - 1;
  int chunks = int(std::min<int64_t>(total, int64_t(n) * kChunksPerThread));
  auto job = std::make_shared<Job>();
  job->f = &f;
  job->total = total;
  job->chunk = (total + chunks - 1) / chunks;
  job->chunks = int((total + job->chunk - 1) / job->chunk);
  job->remaining = job->chunks;
  Pool& pool = Pool::get();
  pool.submit(job, helpers);
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;  // nested parallel_for inside f runs inline
  job->drain();
  pool.withdraw(job.get());
  t_inside_pool_task = was_inside;
  if (!spin_until([&] { return job->remaining.load() == 0; })) {
    std::unique_lock<std::mutex> lock(job->mu);
    job->done.wait(lock, [&] { return job->remaining.load() == 0; });
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace npu
}  // namespace ratelnn
