// The local devices, the placement check and the device-time account shared by the
// TensorFlow, MXNet and ONNX Runtime engine ops (see device_time.h).
#include "core/device_time.h"

#include "core/npu_batch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace ratelnn {
namespace npu {
namespace {

constexpr char kEnvDevices[] = "RATELNN_DEVICES";
constexpr int64_t kDefaultCores = 4;    // HG800_CORES of ratelnn/npu/device.py
constexpr int64_t kMaxCores = 64;       // MAX_CORES_PER_DEVICE
constexpr int64_t kMaxDevices = 64;     // MAX_DEVICES

std::string Strip(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

std::string ListText(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

// Predicted device time of every engine run in this process, by engine name.
struct EngineTime {
  int64_t device_id = 0;
  int64_t runs = 0;     // op executions
  int64_t samples = 0;  // sum of the run batch sizes
  double cycles = 0;    // predicted cycles of the busiest core, summed over runs
};

class EngineTimeRegistry {
 public:
  static EngineTimeRegistry& Global() {
    static EngineTimeRegistry* registry = new EngineTimeRegistry();  // never destroyed
    return *registry;
  }

  void Record(const std::string& engine_name, int64_t device_id, int64_t samples, double cycles) {
    std::lock_guard<std::mutex> lock(mutex_);
    EngineTime& t = times_[engine_name];
    t.device_id = device_id;
    t.runs += 1;
    t.samples += samples;
    t.cycles += cycles;
  }

  // Entry `index` in name order; false if there is none.
  bool Entry(int64_t index, std::string* name, EngineTime* time) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index < 0 || index >= int64_t(times_.size())) return false;
    auto it = times_.begin();
    std::advance(it, index);
    *name = it->first;
    *time = it->second;
    return true;
  }

  int64_t Size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(times_.size());
  }

  void Reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    times_.clear();
  }

 private:
  std::mutex mutex_;
  std::map<std::string, EngineTime> times_;
};

}  // namespace

std::vector<int64_t> local_devices() {
  const char* env = std::getenv(kEnvDevices);
  if (env == nullptr) return {kDefaultCores};
  const std::string text(env);
  const std::string quoted = std::string(kEnvDevices) + "='" + text + "'";
  std::vector<std::string> tokens;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    tokens.push_back(Strip(text.substr(start, comma == std::string::npos ? std::string::npos
                                                                          : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (Strip(text).empty() || std::count(tokens.begin(), tokens.end(), std::string()) > 0) {
    throw std::invalid_argument(quoted +
                                ": expected cores per device separated by commas, e.g. '4' or '4,4'");
  }
  if (int64_t(tokens.size()) > kMaxDevices) {
    throw std::invalid_argument(quoted + ": at most " + std::to_string(kMaxDevices) + " devices");
  }
  std::vector<int64_t> counts;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    const std::string where = quoted + ": device " + std::to_string(i);
    size_t digits = (token[0] == '+' || token[0] == '-') ? 1 : 0;
    const bool whole = token.size() > digits && token.size() - digits <= 9 &&
                       token.find_first_not_of("0123456789", digits) == std::string::npos;
    if (!whole) throw std::invalid_argument(where + ": '" + token + "' is not a whole number of cores");
    const int64_t count = std::strtoll(token.c_str(), nullptr, 10);
    if (count < 1 || count > kMaxCores) {
      throw std::invalid_argument(where + ": number of cores must be in 1.." +
                                  std::to_string(kMaxCores) + ", got " + std::to_string(count));
    }
    counts.push_back(count);
  }
  return counts;
}

std::string placement_error(const std::string& engine_name, int64_t device_id,
                            const std::vector<int64_t>& core_ids) {
  std::vector<int64_t> devices;
  try {
    devices = local_devices();
  } catch (const std::invalid_argument& e) {
    return "engine '" + engine_name + "' cannot check its placement: " + e.what();
  }
  std::string local;
  for (size_t d = 0; d < devices.size(); ++d) {
    local += (d ? ", device " : "device ") + std::to_string(d) + ": " + std::to_string(devices[d]) +
             " cores";
  }
  const std::string have = "the local emulated NPU has " + std::to_string(devices.size()) +
                           " device(s) (" + local + ")";
  std::string problem;
  if (device_id < 0 || device_id >= int64_t(devices.size())) {
    problem = "device " + std::to_string(device_id) + " does not exist: " + have;
  } else {
    std::vector<int64_t> missing;
    for (int64_t c : core_ids) {
      if (c >= devices[device_id]) missing.push_back(c);
    }
    std::sort(missing.begin(), missing.end());
    if (missing.empty()) return "";
    problem = "device " + std::to_string(device_id) + " has no core" +
              (missing.size() > 1 ? "s " : " ") + ListText(missing) + ": " + have;
  }
  // a RATELNN_DEVICES value with the engine's device and cores, the configured ones kept
  std::vector<int64_t> hint = devices;
  if (device_id >= 0 && device_id < kMaxDevices) {
    if (int64_t(hint.size()) <= device_id) hint.resize(device_id + 1, kDefaultCores);
    int64_t need = 0;
    for (int64_t c : core_ids) need = std::max(need, std::min(c, kMaxCores - 1) + 1);
    hint[device_id] = std::max(hint[device_id], need);
  }
  std::string example;
  if (device_id >= 0 && device_id < kMaxDevices) {
    example = std::string(" (e.g. ") + kEnvDevices + "=";
    for (size_t d = 0; d < hint.size(); ++d) example += (d ? "," : "") + std::to_string(hint[d]);
    example += ")";
  }
  return "engine '" + engine_name + "' was compiled for device " + std::to_string(device_id) +
         " cores " + ListText(core_ids) + ", but " + problem + "; set " + kEnvDevices +
         " to the cores per device of the target" + example +
         " or recompile with a device_info this machine has";
}

DeviceTimeRecorder::DeviceTimeRecorder(const Engine& engine, std::string engine_name,
                                       int64_t device_id, int64_t num_cores)
    : DeviceTimeRecorder(std::vector<const Engine*>{&engine}, std::move(engine_name), device_id,
                         num_cores) {}

DeviceTimeRecorder::DeviceTimeRecorder(const std::vector<const Engine*>& set, std::string engine_name,
                                       int64_t device_id, int64_t num_cores)
    : engine_name_(std::move(engine_name)),
      device_id_(device_id),
      num_cores_(std::max<int64_t>(num_cores, 1)),
      split_mode_(set.empty() ? 0 : set[0]->split_mode) {
  for (const BatchSlot& slot : batch_slots(set)) {
    batch_sizes_.push_back(slot.size);
    chunk_cycles_.push_back(slot.cycles);
  }
  if (batch_sizes_.size() == 1) {  // one size: any batch at its per-sample cycles
    double cycles = 0;
    for (const Instruction& ins : set[0]->instructions) cycles += double(ins.cycles);
    cycles_per_sample_ = set[0]->batch_size > 0 ? cycles / double(set[0]->batch_size) : 0.0;
  }
}

void DeviceTimeRecorder::record(int64_t batch) const {
  if (batch <= 0 || batch_sizes_.empty()) return;
  double cycles = 0;
  if (batch_sizes_.size() == 1) {
    cycles = cycles_per_sample_ * busiest_samples(batch, split_mode_, num_cores_);
  } else {
    for (const BatchChunk& c : plan_batches(batch_sizes_, chunk_cycles_, batch)) cycles += chunk_cycles_[c.slot];
  }
  EngineTimeRegistry::Global().Record(engine_name_, device_id_, batch, cycles);
}

}  // namespace npu
}  // namespace ratelnn

// C entry points, read by ratelnn/npu/profile.py through ctypes (each op library has its own
// account: one per framework loaded in the process).
extern "C" {
// Number of engines that ran in this process (since the last reset).
__attribute__((visibility("default"))) int64_t ratelnn_engine_time_count(void) {
  return ratelnn::npu::EngineTimeRegistry::Global().Size();
}

// Entry `index` (name order): writes the NUL-terminated, possibly truncated name into
// name[0 .. name_len) and the counters.  Returns the full name length, or -1 if `index` is
// out of range (entries may vanish between calls if another thread resets the registry).
__attribute__((visibility("default"))) int64_t ratelnn_engine_time_entry(
    int64_t index, char* name, int64_t name_len, int64_t* device_id, int64_t* runs,
    int64_t* samples, double* cycles) {
  std::string entry_name;
  ratelnn::npu::EngineTime time;
  if (!ratelnn::npu::EngineTimeRegistry::Global().Entry(index, &entry_name, &time)) return -1;
  if (name != nullptr && name_len > 0) {
    const size_t n = std::min(entry_name.size(), size_t(name_len - 1));
    std::memcpy(name, entry_name.data(), n);
    name[n] = '\0';
  }
  *device_id = time.device_id;
  *runs = time.runs;
  *samples = time.samples;
  *cycles = time.cycles;
  return int64_t(entry_name.size());
}

// Forgets every recorded run.
__attribute__((visibility("default"))) void ratelnn_engine_time_reset(void) {
  ratelnn::npu::EngineTimeRegistry::Global().Reset();
}
}  // extern "C"
