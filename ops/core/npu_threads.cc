// The worker pool behind parallel_for (npu_threads.h).
#include "core/npu_threads.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ratelnn {
namespace npu {
namespace {

constexpr int kMaxWorkers = 64;
// Chunks per thread: finer than one per thread, so that a thread the OS delays (a loaded
// machine) leaves its unstarted chunks to the others instead of stalling the whole call.
constexpr int kChunksPerThread = 4;
// Pause instructions per polling round (~10-40 us on current x86 cores) before a yield.
constexpr int kPollSpins = 1024;
thread_local bool t_inside_pool_task = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spin until done(): rounds of kPollSpins pauses, yielding the CPU between rounds.
template <typename Done>
void poll_until(Done done) {
  while (!done()) {
    for (int k = 0; k < kPollSpins && !done(); ++k) cpu_relax();
    if (!done()) std::this_thread::yield();
  }
}

// One parallel_for call: its chunks, split into one contiguous range per participant (the
// caller is participant 0, helpers number themselves as they join), the first error, and a
// countdown of unfinished chunks.  Each participant runs its own range first, then takes
// what is left of the others' (the same cursors, so every chunk runs once).  Own ranges first
// keep the work of consecutive instructions on the same thread where the split is the same:
// the rows a thread wrote stay in its core's cache for the next layer (docs/architecture.md §7).
struct Job {
  const std::function<void(int64_t, int64_t)>* f;
  int64_t total, chunk;
  int chunks = 0, parts = 1;
  std::atomic<int> cursor[kMaxWorkers + 1];  // next chunk of each participant's range
  int limit[kMaxWorkers + 1];                // end of each participant's range
  std::atomic<int> joined{1};
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable done;
  std::exception_ptr error;

  void split(int participants) {
    parts = participants;
    for (int p = 0; p < parts; ++p) {
      cursor[p].store(int(int64_t(chunks) * p / parts), std::memory_order_relaxed);
      limit[p] = int(int64_t(chunks) * (p + 1) / parts);
    }
  }

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

  // Participant p: its own range, then the others' leftovers, until no chunk is unclaimed.
  void drain(int p) {
    for (int i = 0; i < parts; ++i) {
      const int q = (p + i) % parts;
      for (int k = cursor[q].fetch_add(1); k < limit[q]; k = cursor[q].fetch_add(1)) run_chunk(k);
    }
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
    start_workers(helpers);
    for (int k = 0; k < helpers; ++k) queue_.push_back(job);
    queued_.store(int(queue_.size()), std::memory_order_release);
    wake_.notify_all();
  }

  // Begin / end a polling period (PollWhileRunning) for `helpers` workers.
  void begin_polling(int helpers) {
    std::lock_guard<std::mutex> lock(mu_);
    start_workers(helpers);
    polling_.fetch_add(1);
    wake_.notify_all();
  }
  void end_polling() { polling_.fetch_sub(1); }
  bool polling() const { return polling_.load(std::memory_order_relaxed) > 0; }

  // Take back the requests for `job` no worker has picked up (its chunks are all claimed).
  void withdraw(const Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const auto& j) { return j.get() == job; }),
                 queue_.end());
    queued_.store(int(queue_.size()), std::memory_order_release);
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::thread> workers_;
  std::atomic<int> queued_{0};   // queue_.size(), readable without the lock
  std::atomic<int> polling_{0};  // live PollWhileRunning scopes

  void start_workers(int helpers) {  // with mu_ held
    while (int(workers_.size()) < std::min(helpers, kMaxWorkers)) {
      workers_.emplace_back([this] { work(); });
      workers_.back().detach();
    }
  }

  // Poll until a request is queued or the polling period ends.
  void poll() {
    poll_until([&] { return !polling() || queued_.load(std::memory_order_acquire) != 0; });
  }

  void work() {
    t_inside_pool_task = true;
    for (;;) {
      poll();
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return !queue_.empty() || polling(); });
        if (queue_.empty()) continue;  // woken to poll
        job = queue_.front();
        queue_.pop_front();
        queued_.store(int(queue_.size()), std::memory_order_release);
      }
      job->drain(job->joined.fetch_add(1) % job->parts);
    }
  }
};

}  // namespace

PollWhileRunning::PollWhileRunning(int threads) : active_(threads > 1 && !t_inside_pool_task) {
  if (active_) Pool::get().begin_polling(std::min(threads - 1, kMaxWorkers));
}

PollWhileRunning::~PollWhileRunning() {
  if (active_) Pool::get().end_polling();
}

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
  job->split(n);
  Pool& pool = Pool::get();
  pool.submit(job, helpers);
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;  // nested parallel_for inside f runs inline
  job->drain(0);
  pool.withdraw(job.get());
  t_inside_pool_task = was_inside;
  if (pool.polling())  // a worker took the last chunks moments ago
    poll_until([&] { return job->remaining.load(std::memory_order_acquire) == 0; });
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->done.wait(lock, [&] { return job->remaining.load() == 0; });
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace npu
}  // namespace ratelnn
