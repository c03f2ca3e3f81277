#include "core/stats_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
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
  std::mutex write_mutex;  // one writer per directory; held across snapshot and write
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
                                       const AbsHistogram* batch_histogram, bool* write_due) {
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
  return dir;
}

std::string StatsStore::WriteIfDue(Directory* dir) {
  std::unique_lock<std::mutex> writer(dir->write_mutex, std::try_to_lock);
  if (!writer.owns_lock()) return "";  // another thread is writing this directory
  return WriteSnapshot(dir, /*only_if_due=*/true);
}

std::string StatsStore::Record(const std::string& output_dir, const std::string& tensor_name,
                               float batch_min, float batch_max, int64_t count,
                               double ema_decay) {
  bool write_due;
  std::shared_ptr<Directory> dir = Add(output_dir, tensor_name, batch_min, batch_max, count,
                                       ema_decay, nullptr, &write_due);
  return write_due ? WriteIfDue(dir.get()) : "";
}

std::string StatsStore::RecordWithHistogram(const std::string& output_dir,
                                            const std::string& tensor_name, float batch_min,
                                            float batch_max, int64_t count, double ema_decay,
                                            const AbsHistogram& batch_histogram) {
  bool write_due;
  std::shared_ptr<Directory> dir = Add(output_dir, tensor_name, batch_min, batch_max, count,
                                       ema_decay, &batch_histogram, &write_due);
  return write_due ? WriteIfDue(dir.get()) : "";
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
  if (error.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    dir->written_version = version;
  }
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
