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
thread_local bool t_inside_pool_task = false;

// One parallel_for call: its chunks, a countdown of unfinished chunks, the first error.
struct Job {
  const std::function<void(int64_t, int64_t)>* f;
  int64_t total, chunk;
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
};

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Queue chunks 1..n-1 of `job` (the caller runs chunk 0), starting workers as needed.
  void submit(const std::shared_ptr<Job>& job, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    while (int(workers_.size()) < std::min(n - 1, kMaxWorkers)) {
      workers_.emplace_back([this] { work(); });
      workers_.back().detach();
    }
    for (int k = 1; k < n; ++k) queue_.push_back({job, k});
    wake_.notify_all();
  }

  // Run queued chunks of `job` on the calling thread (while waiting for the others).
  bool help(const Job* job) {
    std::pair<std::shared_ptr<Job>, int> task;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& t) { return t.first.get() == job; });
      if (it == queue_.end()) return false;
      task = *it;
      queue_.erase(it);
    }
    task.first->run_chunk(task.second);
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<std::shared_ptr<Job>, int>> queue_;
  std::vector<std::thread> workers_;

  void work() {
    t_inside_pool_task = true;
    for (;;) {
      std::pair<std::shared_ptr<Job>, int> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return !queue_.empty(); });
        task = queue_.front();
        queue_.pop_front();
      }
      task.first->run_chunk(task.second);
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
  auto job = std::make_shared<Job>();
  job->f = &f;
  job->total = total;
  job->chunk = (total + n - 1) / n;
  n = int((total + job->chunk - 1) / job->chunk);
  job->remaining = n;
  Pool& pool = Pool::get();
  pool.submit(job, n);
  bool was_inside = t_inside_pool_task;
  t_inside_pool_task = true;  // nested parallel_for inside f runs inline
  job->run_chunk(0);
  while (job->remaining.load() > 0 && pool.help(job.get())) {
  }
  t_inside_pool_task = was_inside;
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->done.wait(lock, [&] { return job->remaining.load() == 0; });
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace npu
}  // namespace ratelnn
