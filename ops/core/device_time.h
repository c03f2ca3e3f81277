// What the framework glues (ops/tensorflow, ops/mxnet, ops/onnxruntime) share around running an engine
// (docs/architecture.md §7): the local emulated devices and the placement check made before an engine
// runs, and the process-wide account of the device time engine runs would take.
//
// The account is read from Python (ratelnn/npu/profile.py) through the C entry points
// ratelnn_engine_time_{count,entry,reset} that device_time.cc exports from every op library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/npu_engine.h"

namespace ratelnn {
namespace npu {

#define RATELNN_HIDDEN __attribute__((visibility("hidden")))

// Cores per device of the local emulated runtime: the environment variable RATELNN_DEVICES
// read as ratelnn/npu/device.py reads it ("4", "4,4", "2,4"; unset: one device of 4 cores).
// An invalid value throws std::invalid_argument with the reason.
RATELNN_HIDDEN std::vector<int64_t> local_devices();

// "" if the local runtime has device `device_id` and every core of `core_ids`; else the
// error that names the engine, what is missing and how to set RATELNN_DEVICES (the same
// words as ratelnn.npu.device.check_placement).
RATELNN_HIDDEN std::string placement_error(const std::string& engine_name, int64_t device_id,
                                           const std::vector<int64_t>& core_ids);

// Records the predicted device time of one engine op's runs under its name.  Cycles are
// per sample at the compiled batch, scaled to the run batch; a SPLIT_BATCH engine's busiest
// core runs ceil(batch / cores) samples, other splits divide the work evenly over the cores.
// An engine set of several sizes (npu_batch.h) records each chunk of plan_batches at its
// compiled size (chunk_cycles, the engine's cores), padding included: the run's samples are
// the real ones, its cycles those of the chunks.
class RATELNN_HIDDEN DeviceTimeRecorder {
 public:
  DeviceTimeRecorder() = default;
  DeviceTimeRecorder(const Engine& engine, std::string engine_name, int64_t device_id,
                     int64_t num_cores);
  DeviceTimeRecorder(const std::vector<const Engine*>& set, std::string engine_name,
                     int64_t device_id, int64_t num_cores);

  // Adds one run of `batch` samples; an empty batch runs nothing and records nothing.
  void record(int64_t batch) const;

 private:
  std::string engine_name_;
  int64_t device_id_ = 0;
  int64_t num_cores_ = 1;
  int64_t split_mode_ = 0;
  std::vector<int64_t> batch_sizes_;  // of the engine set, ascending
  std::vector<double> chunk_cycles_;  // per size: one chunk's cycles (npu_batch.h)
  double cycles_per_sample_ = 0;      // a set of one size: at its compiled batch
};

}  // namespace npu
}  // namespace ratelnn
