// Process-global store of calibration statistics, persisted into output directories.
//
// Entries are keyed by (output_dir, tensor_name). Each process writes one snapshot file per
// output_dir, <output_dir>/ratel_stats/<host>-<pid>-<random>.rstats, holding all of its
// tensors for that directory; it is rewritten atomically (temporary file, fsync, rename):
// at most every kFlushInterval while recording (by a background writer thread, so that op
// threads never wait for the disk), on Flush/FlushAll, when a calibration kernel is
// destroyed and at process exit. See docs/statistics.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/stats_format.h"

namespace ratelnn {

constexpr std::chrono::milliseconds kFlushInterval(200);

class StatsStore {
 public:
  // The process-wide store. Never destroyed (kernels may outlive static destructors); a
  // static object in stats_store.cc flushes it at exit.
  static StatsStore& Global();

  // Adds the range of one non-empty batch of `count` elements of `tensor_name`. If the last
  // write of the directory's snapshot is at least kFlushInterval old, wakes the background
  // writer to write it (never waits for the write). Returns "" or the error of the
  // directory's last write, if it failed (kept until a write succeeds).
  std::string Record(const std::string& output_dir, const std::string& tensor_name,
                     float batch_min, float batch_max, int64_t count, double ema_decay);

  // Record plus the batch's histogram of |x| (AbsHistogram of exactly `count` values),
  // merged exactly into the tensor's histogram. Batches recorded with Record alone leave
  // the histogram short of `count` values, which readers treat as "no histogram".
  std::string RecordWithHistogram(const std::string& output_dir, const std::string& tensor_name,
                                  float batch_min, float batch_max, int64_t count,
                                  double ema_decay, const AbsHistogram& batch_histogram);

  // Writes the snapshot of `output_dir` now if it changed since the last write (waits for a
  // background write in progress).
  std::string Flush(const std::string& output_dir);

  // Flushes every directory; returns the errors joined by "; ", "" if none.
  std::string FlushAll();

  // Stops the background writer (after its write in progress), e.g. before the final
  // FlushAll at exit. Recording afterwards starts it again.
  void StopWriter();

  // Drops the in-memory statistics of `output_dir` without writing them (a fresh start:
  // the next batch recorded there starts a new snapshot file). Returns whether any existed.
  bool Forget(const std::string& output_dir);

 private:
  struct Directory;
  class Writer;

  StatsStore() = default;
  std::shared_ptr<Directory> FindOrAdd(const std::string& output_dir);  // requires mutex_
  // Adds one batch under the mutex; returns the directory, whether a write is due and the
  // error of the directory's last write ("" if it succeeded).
  std::shared_ptr<Directory> Add(const std::string& output_dir, const std::string& tensor_name,
                 float batch_min, float batch_max, int64_t count, double ema_decay,
                 const AbsHistogram* batch_histogram, bool* write_due, std::string* write_error);
  // Hands dir to the background writer (started on first use, and again in a forked child).
  void ScheduleWrite(const std::shared_ptr<Directory>& dir);
  // Writes dir's snapshot if it changed (and, if only_if_due, if the last write is at
  // least kFlushInterval old) and keeps the outcome in dir->write_error. Requires
  // dir->write_mutex.
  std::string WriteSnapshot(Directory* dir, bool only_if_due);

  std::mutex mutex_;  // guards dirs_ and the statistics inside every Directory
  // shared: a writer keeps its directory alive while Forget drops it from the map
  std::map<std::string, std::shared_ptr<Directory>> dirs_;
  std::mutex writer_mutex_;  // guards writer_
  Writer* writer_ = nullptr;  // leaked when a forked child replaces its parent's
};

}  // namespace ratelnn

// C entry points, looked up by ratelnn/oplib.py through ctypes.
extern "C" {
// Flushes every directory of the store. 0 on success, -1 if a write failed.
__attribute__((visibility("default"))) int ratelnn_stats_flush_all(void);
// Message of the last failed ratelnn_stats_flush_all / ratelnn_stats_flush_dir, "" if none.
__attribute__((visibility("default"))) const char* ratelnn_stats_last_error(void);
// Flushes one directory (a failed write elsewhere does not matter). 0 on success, -1 if
// its write failed (message in ratelnn_stats_last_error). The failed directory keeps its
// statistics and is written again by the next flush or record that finds it writable.
__attribute__((visibility("default"))) int ratelnn_stats_flush_dir(const char* output_dir);
// Drops the in-memory statistics of one directory; 1 if there were any, else 0.
__attribute__((visibility("default"))) int ratelnn_stats_forget_dir(const char* output_dir);
}
