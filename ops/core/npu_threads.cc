// The worker pool behind parallel_for (npu_threads.h).
#include "core/npu_threads.h"

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace ratelnn {
namespace npu {
namespace {

constexpr int kMaxWorkers = 64;
// Chunks per thread: finer than one per thread, so that a thread the OS delays (a loaded
// machine) leaves its unstarted chunks to the others instead of stalling the whole call.
constexpr int kChunksPerThread = 4;
// How long idle workers keep polling after an engine run ends (ns): an inference loop's next
// call then finds them awake.  A worker that slept between two calls is woken by the next
// one and reaches its CPU late (where the host halted that vCPU, tens of microseconds and
// a slow first instruction); calls 0.2 s apart through a TF Session took 1.8 ms for
// MobileNetV2 at batch 1 against 1.46 ms back to back (AMD EPYC Zen 4).
constexpr int64_t kLingerNs = 2'000'000;
// Pause instructions per polling round (~10-40 us on current x86 cores) before a yield.
constexpr int kPollSpins = 1024;
thread_local bool t_inside_pool_task = false;

// The CPU the calling thread runs on, -1 where unknown (a vDSO read on Linux, ~20 ns).
inline int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

// Moves the calling thread off CPU `cpu` (when it may run elsewhere) and leaves it free to run
// anywhere it could before.  A worker woken by a caller is often put on the caller's CPU by
// the scheduler (Linux wakes a thread near its waker), where it and the caller take turns:
// a two-thread engine run then takes its one-thread time (MobileNetV2 at batch 1, AMD EPYC
// Zen 4, calls 0.2 s apart: 2.5 instead of 1.4 ms), and the idle CPU pulls it over only
// after milliseconds.  Costs two system calls, only when it happens.
void move_off_cpu(int cpu) {
#if defined(__linux__)
  if (cpu < 0 || cpu >= CPU_SETSIZE) return;
  cpu_set_t allowed, others;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(cpu, &allowed)) return;
  others = allowed;
  CPU_CLR(cpu, &others);
  if (CPU_COUNT(&others) == 0) return;
  if (sched_setaffinity(0, sizeof(others), &others) == 0) sched_setaffinity(0, sizeof(allowed), &allowed);
#else
  (void)cpu;
#endif
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

// One participant's share of a Job's chunks, on a cache line of its own: the participant
// claims from it; another claims there only after its own range ran out (stealing).
struct alignas(64) Range {
  std::atomic<int> cursor;  // next chunk to claim
  int limit;                // end of the range
  std::atomic<bool> left;   // a helper's: set when it is done with the Job
};

// One parallel_for call, on the caller's stack.  The caller fills it, offers it to idle
// workers through their slots (Pool::offer) and runs its own range, then the others'
// leftovers; a helper that took the offer does the same from its range and sets its `left`.
// A hand-off thus costs a worker about one cache line from the caller per field group (slot,
// header, its range, f's captures) and the caller one line back: where the two cores sit on
// different chiplets each line is ~170 ns, so the hand-off is a few lines, not a mutex, a
// queue and a counter (docs/architecture.md §7, threads).
struct Job {
  const std::function<void(int64_t, int64_t)>* f = nullptr;
  int64_t total = 0, chunk = 1;
  int chunks = 0, parts = 1;
  int caller_cpu = -1;            // where the caller runs (current_cpu)
  int part_of_slot[kMaxWorkers];  // the participant offered to each worker slot (those offered)
  Range range[kMaxWorkers + 1];   // ranges 0 .. parts - 1 set by split()
  std::mutex error_mu;
  std::exception_ptr error;  // the first exception a chunk threw

  void split(int participants) {
    parts = participants;
    for (int p = 0; p < parts; ++p) {
      range[p].cursor.store(int(int64_t(chunks) * p / parts), std::memory_order_relaxed);
      range[p].limit = int(int64_t(chunks) * (p + 1) / parts);
      range[p].left.store(false, std::memory_order_relaxed);
    }
  }

  void run_chunk(int k) {
    int64_t b = k * chunk, e = std::min(total, b + chunk);
    try {
      if (b < e) (*f)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
  }

  // Participant p: its own range, then the others' leftovers, until no chunk is unclaimed.
  // Own ranges first keep the work of consecutive instructions on the same thread where the
  // split is the same: the rows a thread wrote stay in its core's cache for the next layer.
  void drain(int p) {
    for (int i = 0; i < parts; ++i) {
      Range& r = range[(p + i) % parts];
      for (int k = r.cursor.fetch_add(1, std::memory_order_relaxed); k < r.limit;
           k = r.cursor.fetch_add(1, std::memory_order_relaxed))
        run_chunk(k);
    }
  }
};

// A worker's mailbox: the Job offered to it, taken by exchange (worker) or taken back by
// compare-exchange (the caller, once its drain is over), so exactly one of them has it.
struct alignas(64) Slot {
  std::atomic<Job*> offer{nullptr};
  std::atomic<bool> sleeping{false};
};

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  // Offers `job` to up to `helpers` workers whose slots are free (starting workers as
  // needed); writes the slots offered to `slots` and returns their count.
  int offer(Job* job, int helpers, int* slots) {
    if (started_.load(std::memory_order_acquire) < helpers) start_workers(helpers);
    int offered = 0;
    for (int k = 0; k < kMaxWorkers && offered < helpers && k < started_.load(std::memory_order_acquire); ++k) {
      job->part_of_slot[k] = offered + 1;
      Job* none = nullptr;
      if (!slots_[k].offer.compare_exchange_strong(none, job)) continue;  // another caller's offer
      slots[offered++] = k;
      if (slots_[k].sleeping.load()) {  // seq_cst on both sides: a sleeper sees the offer or is woken
        std::lock_guard<std::mutex> lock(mu_);
        wake_.notify_all();
      }
    }
    return offered;
  }

  // Takes back the offer in slot k if its worker has not taken it; true if taken back.
  bool take_back(int k, Job* job) { return slots_[k].offer.compare_exchange_strong(job, nullptr); }

  // Begin / end a polling period (PollWhileRunning) for `helpers` workers.
  void begin_polling(int helpers) {
    start_workers(helpers);
    caller_cpu_.store(current_cpu(), std::memory_order_relaxed);
    polling_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    wake_.notify_all();
  }
  void end_polling() {
    linger_until_ns_.store(now_ns() + kLingerNs, std::memory_order_relaxed);
    polling_.fetch_sub(1);
  }
  bool polling() const { return polling_.load(std::memory_order_relaxed) > 0; }

 private:
  std::mutex mu_;  // guards starting workers and sleeping
  std::condition_variable wake_;
  Slot slots_[kMaxWorkers];
  std::atomic<int> started_{0};  // workers started (slots 0 .. started_ - 1 have one)
  std::atomic<int> polling_{0};  // live PollWhileRunning scopes
  std::atomic<int> caller_cpu_{-1};
  std::atomic<int64_t> linger_until_ns_{0};  // now_ns() until which idle workers keep polling  // the CPU of the last thread that began a polling period

  void start_workers(int helpers) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = started_.load(); k < std::min(helpers, kMaxWorkers); ++k) {
      std::thread([this, k] { work(slots_[k], k); }).detach();
      started_.store(k + 1, std::memory_order_release);
    }
  }

  // Waits for an offer in `slot`: polling (pause rounds, yielding between them) while a
  // polling period lasts and for kLingerNs after the last one ended, asleep otherwise.
  void wait_for_offer(Slot& slot) {
    for (;;) {
      for (int k = 0; k < kPollSpins; ++k) {
        if (slot.offer.load(std::memory_order_acquire) != nullptr) return;
        cpu_relax();
      }
      if (polling() || now_ns() < linger_until_ns_.load(std::memory_order_relaxed)) {
        const int caller = caller_cpu_.load(std::memory_order_relaxed);
        if (caller >= 0 && current_cpu() == caller) move_off_cpu(caller);
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      slot.sleeping.store(true);
      wake_.wait(lock, [&] { return slot.offer.load() != nullptr || polling(); });
      slot.sleeping.store(false);
    }
  }

  void work(Slot& slot, int k) {
    t_inside_pool_task = true;
    for (;;) {
      wait_for_offer(slot);
      Job* job = slot.offer.exchange(nullptr, std::memory_order_acq_rel);
      if (job == nullptr) continue;  // the caller took it back
      const int p = job->part_of_slot[k];
      if (current_cpu() == job->caller_cpu) move_off_cpu(job->caller_cpu);
      job->drain(p);
      job->range[p].left.store(true, std::memory_order_release);  // the last touch of job
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
  Job job;
  job.f = &f;
  job.total = total;
  job.chunks = int(std::min<int64_t>(total, int64_t(n) * kChunksPerThread));
  job.chunk = (total + job.chunks - 1) / job.chunks;
  job.chunks = int((total + job.chunk - 1) / job.chunk);
  job.split(n);
  job.caller_cpu = current_cpu();
  Pool& pool = Pool::get();
  int slots[kMaxWorkers];
  const int offered = pool.offer(&job, n - 1, slots);
  t_inside_pool_task = true;  // nested parallel_for inside f runs inline
  job.drain(0);
  t_inside_pool_task = false;
  for (int i = 0; i < offered; ++i) {  // every helper that took the job is done with it
    if (pool.take_back(slots[i], &job)) continue;
    const Range& r = job.range[job.part_of_slot[slots[i]]];
    poll_until([&] { return r.left.load(std::memory_order_acquire); });
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace npu
}  // namespace ratelnn
