#include "core/stats_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>
#include <system_error>
#include <thread>
#include <vector>

namespace ratelnn {
namespace {

std::string SnapshotFileName() {
  char host[256] = "unknown-host";
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
  host[sizeof(host) - 1] = '\0';
  for (char* c = host; *c; ++c) {
    if (*c == '/') *c = '_';
  }
  std::random_device entropy;
  char name[512];
  std::snprintf(name, sizeof(name), "%s-%d-%08x%08x.rstats", host, static_cast<int>(getpid()),
                entropy(), entropy());
  return name;
}

std::string ErrnoMessage(const std::string& what, const std::string& path) {
  return "cannot " + what + " calibration statistics file '" + path + "': " +
         std::strerror(errno);
}

bool WriteAll(int fd, const std::string& content) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Replaces <output_dir>/ratel_stats/<file_name> by `content` atomically: readers see the
// old or the new file, never a partial one. Returns "" or an error message.
std::string ReplaceFileAtomically(const std::string& output_dir, const std::string& file_name,
                                  const std::string& content) {
  const std::filesystem::path dir = std::filesystem::path(output_dir) / "ratel_stats";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return "cannot create calibration statistics directory '" + dir.string() +
           "': " + ec.message();
  }
  const std::string target = (dir / file_name).string();
  const std::string temp = (dir / ("." + file_name + ".tmp")).string();
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoMessage("create", temp);
  if (!WriteAll(fd, content) || fsync(fd) != 0) {
    const std::string error = ErrnoMessage("write", temp);
    close(fd);
    unlink(temp.c_str());
    return error;
  }
  if (close(fd) != 0) return ErrnoMessage("close", temp);
  if (rename(temp.c_str(), target.c_str()) != 0) {
    const std::string error = ErrnoMessage("rename into place", target);
    unlink(temp.c_str());
    return error;
  }
  const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {  // make the rename durable; best effort
    fsync(dir_fd);
    close(dir_fd);
  }
  return "";
}

}  // namespace

struct StatsStore::Directory {
  std::string output_dir;
  std::string file_name = SnapshotFileName();
  std::map<std::string, TensorStatistics> tensors;
  uint64_t version = 0;          // bumped by every Record
  uint64_t written_version = 0;  // version of the snapshot on disk
  std::chrono::steady_clock::time_point last_write{};
  std::string write_error;  // of the last write attempt, "" if it succeeded
  std::mutex write_mutex;  // one writer per directory; held across snapshot and write
};

// The thread that writes the snapshots found due while recording, so that calibration ops
// never wait for serialization and fsync (docs/architecture.md §5, docs/statistics.md).
class StatsStore::Writer {
 public:
  // Starts the thread; throws std::system_error if it cannot.
  explicit Writer(StatsStore* store) : store_(store), pid_(getpid()), thread_([this] { Run(); }) {}

  pid_t pid() const { return pid_; }

  // Queues dir for a write (once, however often it is queued before the write starts).
  void Enqueue(const std::shared_ptr<Directory>& dir) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (std::find(queue_.begin(), queue_.end(), dir) != queue_.end()) return;
      queue_.push_back(dir);
    }
    wake_.notify_one();
  }

  // Ends the thread after the write in progress; queued writes are dropped (FlushAll
  // writes everything anyway).
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

 private:
  void Run() {
    for (;;) {
      std::shared_ptr<Directory> dir;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        dir = std::move(queue_.front());
        queue_.pop_front();
      }
      std::lock_guard<std::mutex> writer(dir->write_mutex);
      store_->WriteSnapshot(dir.get(), /*only_if_due=*/true);  // error kept in dir
    }
  }

  StatsStore* store_;
  pid_t pid_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Directory>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

StatsStore& StatsStore::Global() {
  static StatsStore* store = new StatsStore();
  return *store;
}

std::shared_ptr<StatsStore::Directory> StatsStore::FindOrAdd(const std::string& output_dir) {
  std::shared_ptr<Directory>& slot = dirs_[output_dir];
  if (!slot) {
    slot = std::make_shared<Directory>();
    slot->output_dir = output_dir;
  }
  return slot;
}

std::shared_ptr<StatsStore::Directory> StatsStore::Add(const std::string& output_dir,
                                       const std::string& tensor_name, float batch_min,
                                       float batch_max, int64_t count, double ema_decay,
                                       const AbsHistogram* batch_histogram, bool* write_due,
                                       std::string* write_error) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::shared_ptr<Directory> dir = FindOrAdd(output_dir);
  TensorStatistics& s = dir->tensors[tensor_name];
  if (s.batches == 0) {
    s.min = s.ema_min = batch_min;
    s.max = s.ema_max = batch_max;
  } else {
    s.min = std::min<double>(s.min, batch_min);
    s.max = std::max<double>(s.max, batch_max);
    s.ema_min = ema_decay * s.ema_min + (1.0 - ema_decay) * batch_min;
    s.ema_max = ema_decay * s.ema_max + (1.0 - ema_decay) * batch_max;
  }
  s.batches += 1;
  s.count += count;
  if (batch_histogram != nullptr) s.histogram.Merge(*batch_histogram);
  dir->version += 1;
  *write_due = std::chrono::steady_clock::now() - dir->last_write >= kFlushInterval;
  *write_error = dir->write_error;
  return dir;
}

void StatsStore::ScheduleWrite(const std::shared_ptr<Directory>& dir) {
  {
    std::lock_guard<std::mutex> lock(writer_mutex_);
    try {
      // a forked child has none of its parent's threads: it starts its own writer
      if (writer_ == nullptr || writer_->pid() != getpid()) writer_ = new Writer(this);
      writer_->Enqueue(dir);
      return;
    } catch (const std::system_error&) {
      writer_ = nullptr;  // no thread: write on this one, as a Flush would
    }
  }
  std::unique_lock<std::mutex> writer(dir->write_mutex, std::try_to_lock);
  if (writer.owns_lock()) WriteSnapshot(dir.get(), /*only_if_due=*/true);
}

void StatsStore::StopWriter() {
  std::lock_guard<std::mutex> lock(writer_mutex_);
  if (writer_ != nullptr && writer_->pid() == getpid()) {
    writer_->Stop();
    delete writer_;
  }
  writer_ = nullptr;
}

std::string StatsStore::Record(const std::string& output_dir, const std::string& tensor_name,
                               float batch_min, float batch_max, int64_t count,
                               double ema_decay) {
  bool write_due;
  std::string error;
  std::shared_ptr<Directory> dir = Add(output_dir, tensor_name, batch_min, batch_max, count,
                                       ema_decay, nullptr, &write_due, &error);
  if (write_due) ScheduleWrite(dir);
  return error;
}

std::string StatsStore::RecordWithHistogram(const std::string& output_dir,
                                            const std::string& tensor_name, float batch_min,
                                            float batch_max, int64_t count, double ema_decay,
                                            const AbsHistogram& batch_histogram) {
  bool write_due;
  std::string error;
  std::shared_ptr<Directory> dir = Add(output_dir, tensor_name, batch_min, batch_max, count,
                                       ema_decay, &batch_histogram, &write_due, &error);
  if (write_due) ScheduleWrite(dir);
  return error;
}

std::string StatsStore::WriteSnapshot(Directory* dir, bool only_if_due) {
  std::map<std::string, TensorStatistics> snapshot;
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dir->version == dir->written_version) return "";
    const auto now = std::chrono::steady_clock::now();
    if (only_if_due && now - dir->last_write < kFlushInterval) return "";  // just written
    snapshot = dir->tensors;
    version = dir->version;
    dir->last_write = now;
  }
  const std::string error =
      ReplaceFileAtomically(dir->output_dir, dir->file_name, SerializeStatistics(snapshot));
  std::lock_guard<std::mutex> lock(mutex_);
  if (error.empty()) dir->written_version = version;
  dir->write_error = error;
  return error;
}

std::string StatsStore::Flush(const std::string& output_dir) {
  std::shared_ptr<Directory> dir;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = dirs_.find(output_dir);
    if (it == dirs_.end()) return "";
    dir = it->second;
  }
  std::lock_guard<std::mutex> writer(dir->write_mutex);
  return WriteSnapshot(dir.get(), /*only_if_due=*/false);
}

std::string StatsStore::FlushAll() {
  std::vector<std::string> output_dirs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : dirs_) output_dirs.push_back(entry.first);
  }
  std::string errors;
  for (const std::string& output_dir : output_dirs) {
    const std::string error = Flush(output_dir);
    if (!error.empty()) errors += (errors.empty() ? "" : "; ") + error;
  }
  return errors;
}

bool StatsStore::Forget(const std::string& output_dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  // a thread still writing the dropped directory holds its own reference to it
  return dirs_.erase(output_dir) > 0;
}

namespace {

std::mutex last_error_mutex;
std::string* last_error = new std::string();  // leaked: read after static destruction

// Writes whatever is still unwritten when the library is unloaded or the process exits.
struct FlushAtExit {
  ~FlushAtExit() {
    StatsStore::Global().StopWriter();
    const std::string error = StatsStore::Global().FlushAll();
    if (!error.empty()) std::fprintf(stderr, "ratelnn: %s\n", error.c_str());
  }
} flush_at_exit;

}  // namespace
}  // namespace ratelnn

extern "C" int ratelnn_stats_flush_all(void) {
  const std::string error = ratelnn::StatsStore::Global().FlushAll();
  std::lock_guard<std::mutex> lock(ratelnn::last_error_mutex);
  *ratelnn::last_error = error;
  return error.empty() ? 0 : -1;
}

extern "C" int ratelnn_stats_flush_dir(const char* output_dir) {
  const std::string error = ratelnn::StatsStore::Global().Flush(output_dir ? output_dir : "");
  std::lock_guard<std::mutex> lock(ratelnn::last_error_mutex);
  *ratelnn::last_error = error;
  return error.empty() ? 0 : -1;
}

extern "C" int ratelnn_stats_forget_dir(const char* output_dir) {
  return ratelnn::StatsStore::Global().Forget(output_dir ? output_dir : "") ? 1 : 0;
}

extern "C" const char* ratelnn_stats_last_error(void) {
  std::lock_guard<std::mutex> lock(ratelnn::last_error_mutex);
  return ratelnn::last_error->c_str();
}
