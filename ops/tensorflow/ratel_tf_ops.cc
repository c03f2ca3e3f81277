// TensorFlow registration of the calibration and quantization ops (docs/architecture.md §5).
// The arithmetic lives in ops/core (shared with the MXNet glue); this file only declares
// the ops, validates attributes and shards the work over TF's CPU threadpool.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/minmax.h"
#include "core/quant.h"
#include "core/stats_store.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tensorflow {
namespace {

using ::ratelnn::ChannelLayout;
using ::ratelnn::RoundMode;
using ::ratelnn::StatsStore;

// Estimated CPU cycles per element, for Shard's cost model.
constexpr int64_t kSummaryCyclesPerElement = 3;  // RatelMinMax: range + histogram
constexpr int64_t kQuantCyclesPerElement = 4;
constexpr int64_t kDequantCyclesPerElement = 1;
// Work estimated below this many cycles (~0.4 ms) runs on the calling thread: waking TF's
// intra-op pool costs tens of microseconds, and its workers then spin-wait on the cores while
// the next op (a RatelEngineOp with its own threads) runs (docs/architecture.md §5).
constexpr int64_t kInlineCycles = int64_t(1) << 20;

template <typename... Args>
absl::Status InvalidArgument(const Args&... message_parts) {
  return absl::InvalidArgumentError(absl::StrCat(message_parts...));
}

template <typename... Args>
absl::Status FailedPrecondition(const Args&... message_parts) {
  return absl::FailedPreconditionError(absl::StrCat(message_parts...));
}

// Runs work(begin, end) over [0, units) on the op's CPU worker threads, or on the calling
// thread when the whole job is small (kInlineCycles).
template <typename Work>
void ShardUnits(OpKernelContext* ctx, int64_t units, int64_t cycles_per_unit, Work work) {
  if (units * cycles_per_unit < kInlineCycles) {
    work(0, units);
    return;
  }
  const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  Shard(workers->num_threads, workers->workers, units, cycles_per_unit, work);
}

REGISTER_OP("RatelMinMax")
    .Input("x: float")
    .Output("y: float")
    .Attr("tensor_name: string")
    .Attr("output_dir: string")
    .Attr("record: list(string) = ['minmax']")
    .Attr("ema_decay: float = 0.9")
    .SetIsStateful()  // records statistics: never constant-folded, pruned or merged
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc(R"doc(
Forwards x unchanged and records its per-batch min/max and the histogram of |x| into the
process-wide statistics store, persisted under output_dir/ratel_stats/ (docs/statistics.md).
)doc");

class RatelMinMaxOp : public OpKernel {
 public:
  explicit RatelMinMaxOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<std::string> record;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_dir", &output_dir_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("record", &record));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("ema_decay", &ema_decay_));
    OP_REQUIRES(ctx, !tensor_name_.empty(),
                InvalidArgument("RatelMinMax node '", name(), "': empty tensor_name"));
    OP_REQUIRES(ctx, !output_dir_.empty(),
                InvalidArgument("RatelMinMax '", tensor_name_, "': empty output_dir"));
    OP_REQUIRES(ctx, !record.empty(),
                InvalidArgument("RatelMinMax '", tensor_name_,
                                "': record lists nothing to record (supported: minmax)"));
    for (const std::string& kind : record) {
      OP_REQUIRES(ctx, kind == "minmax",
                  InvalidArgument("RatelMinMax '", tensor_name_, "': unknown record '",
                                  kind, "' (supported: minmax)"));
    }
    OP_REQUIRES(ctx, ema_decay_ >= 0.0f && ema_decay_ <= 1.0f,
                InvalidArgument("RatelMinMax '", tensor_name_, "': ema_decay ",
                                ema_decay_, " is not in [0, 1]"));
  }

  // A closed Session destroys its kernels: persist what they recorded.
  ~RatelMinMaxOp() override {
    const std::string error = StatsStore::Global().Flush(output_dir_);
    if (!error.empty()) LOG(ERROR) << "RatelMinMax '" << tensor_name_ << "': " << error;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ctx->set_output(0, x);
    const int64_t n = x.NumElements();
    if (n == 0) return;
    const auto run_parts = [ctx](int64_t total,
                                 const std::function<void(int64_t, int64_t)>& part) {
      RunInBlocks(ctx, total, part);
    };
    const ratelnn::BatchStatistics batch = ratelnn::SummarizeBatch(
        x.flat<float>().data(), n, range_exp_hint_.Get(), run_parts);
    OP_REQUIRES(ctx, batch.range.all_finite,
                InvalidArgument("RatelMinMax '", tensor_name_,
                                "': calibration batch contains NaN or Inf"));
    const std::string error = StatsStore::Global().RecordWithHistogram(
        output_dir_, tensor_name_, batch.range.min, batch.range.max, n, ema_decay_,
        batch.histogram);
    range_exp_hint_.Raise(batch.histogram.range_exp);
    OP_REQUIRES(ctx, error.empty(),
                FailedPrecondition("RatelMinMax '", tensor_name_, "': ", error));
  }

 private:
  // Tensors below kMinParallelElements are summarized on the calling thread; larger ones in
  // blocks of kBlockElements spread over TF's CPU worker threads (each part keeps its own
  // 32 KiB of sub-histograms, so smaller blocks would cost more than they save).
  static constexpr int64_t kMinParallelElements = int64_t{1} << 18;
  static constexpr int64_t kBlockElements = int64_t{1} << 16;

  static void RunInBlocks(OpKernelContext* ctx, int64_t n,
                          const std::function<void(int64_t, int64_t)>& part) {
    if (n < kMinParallelElements) return part(0, n);
    const int64_t blocks = (n + kBlockElements - 1) / kBlockElements;
    ShardUnits(ctx, blocks, kBlockElements * kSummaryCyclesPerElement,
               [&](int64_t begin, int64_t end) {
                 part(begin * kBlockElements, std::min(n, end * kBlockElements));
               });
  }

  std::string tensor_name_;
  std::string output_dir_;
  float ema_decay_ = 0.9f;
  ratelnn::RangeExpHint range_exp_hint_;
};

REGISTER_KERNEL_BUILDER(Name("RatelMinMax").Device(DEVICE_CPU), RatelMinMaxOp);

// Scale attributes shared by RatelQuant and RatelDequant: `scale` per tensor, or `scales`
// per channel along `axis`.
class ChannelScales {
 public:
  absl::Status Init(OpKernelConstruction* ctx) {
    float scale;
    std::vector<float> scales;
    TF_RETURN_IF_ERROR(ctx->GetAttr("scale", &scale));
    TF_RETURN_IF_ERROR(ctx->GetAttr("scales", &scales));
    TF_RETURN_IF_ERROR(ctx->GetAttr("axis", &axis_));
    per_channel_ = !scales.empty();
    values_ = per_channel_ ? scales : std::vector<float>{scale};
    const std::string error = ratelnn::ValidateScales(values_);
    if (!error.empty()) {
      return InvalidArgument(ctx->def().op(), " '", ctx->def().name(), "': ",
                             per_channel_ ? "scales: " : "scale: ", error);
    }
    return absl::OkStatus();
  }

  // Layout of `shape` for these scales; InvalidArgument naming the node if they mismatch.
  absl::Status Layout(const OpKernel& op, const TensorShape& shape, ChannelLayout* layout) const {
    std::vector<int64_t> dims(shape.dims());
    for (int i = 0; i < shape.dims(); ++i) dims[i] = shape.dim_size(i);
    const std::string error = ratelnn::MakeChannelLayout(
        dims, per_channel_ ? static_cast<int64_t>(values_.size()) : 0, axis_, layout);
    if (!error.empty()) {
      return InvalidArgument(op.type_string(), " '", op.name(), "': ", error,
                             " (input shape ", shape.DebugString(), ")");
    }
    return absl::OkStatus();
  }

  const float* data() const { return values_.data(); }

 private:
  std::vector<float> values_;
  bool per_channel_ = false;
  int64_t axis_ = -1;
};

REGISTER_OP("RatelQuant")
    .Input("x: float")
    .Output("y: dtype")
    .Attr("dtype: {int8, uint8, int16, int32}")
    .Attr("scale: float = 1.0")
    .Attr("scales: list(float) = []")
    .Attr("axis: int = -1")
    .Attr("round_mode: {'half_away_from_zero', 'half_to_even', 'floor', 'ceil', 'trunc'} = "
          "'half_away_from_zero'")
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc(R"doc(
y = clamp(round(x / scale), min(dtype), max(dtype)) in float32, NaN -> 0; per channel
along `axis` when `scales` is set. Bit-identical to ratelnn/quantization/arith.py.
)doc");

template <typename T>
class RatelQuantOp : public OpKernel {
 public:
  explicit RatelQuantOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string round_mode;
    OP_REQUIRES_OK(ctx, scales_.Init(ctx));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("round_mode", &round_mode));
    OP_REQUIRES(ctx, ratelnn::ParseRoundMode(round_mode, &round_mode_),
                InvalidArgument("RatelQuant '", name(), "': unknown round_mode '",
                                round_mode, "'"));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ChannelLayout layout;
    OP_REQUIRES_OK(ctx, scales_.Layout(*this, x.shape(), &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    const float* in = x.flat<float>().data();
    T* out = y->flat<T>().data();
    ShardUnits(ctx, layout.unit_count(), layout.unit_size() * kQuantCyclesPerElement,
               [&](int64_t begin, int64_t end) {
                 ratelnn::QuantizeUnits<T>(in, out, layout, scales_.data(), round_mode_, begin,
                                           end);
               });
  }

 private:
  ChannelScales scales_;
  RoundMode round_mode_ = RoundMode::kHalfAwayFromZero;
};

REGISTER_OP("RatelDequant")
    .Input("x: T")
    .Output("y: float")
    .Attr("T: {int8, uint8, int16, int32}")
    .Attr("scale: float = 1.0")
    .Attr("scales: list(float) = []")
    .Attr("axis: int = -1")
    .SetShapeFn(shape_inference::UnchangedShape)
    .Doc(R"doc(
y = float32(x) * scale (float32 product); per channel along `axis` when `scales` is set.
)doc");

template <typename T>
class RatelDequantOp : public OpKernel {
 public:
  explicit RatelDequantOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, scales_.Init(ctx));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    ChannelLayout layout;
    OP_REQUIRES_OK(ctx, scales_.Layout(*this, x.shape(), &layout));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    if (x.NumElements() == 0) return;
    const T* in = x.flat<T>().data();
    float* out = y->flat<float>().data();
    ShardUnits(ctx, layout.unit_count(), layout.unit_size() * kDequantCyclesPerElement,
               [&](int64_t begin, int64_t end) {
                 ratelnn::DequantizeUnits<T>(in, out, layout, scales_.data(), begin, end);
               });
  }

 private:
  ChannelScales scales_;
};

#define RATELNN_REGISTER_INT_KERNELS(T)                                               \
  REGISTER_KERNEL_BUILDER(                                                            \
      Name("RatelQuant").Device(DEVICE_CPU).TypeConstraint<T>("dtype"),            \
      RatelQuantOp<T>);                                                               \
  REGISTER_KERNEL_BUILDER(Name("RatelDequant").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          RatelDequantOp<T>);
RATELNN_REGISTER_INT_KERNELS(int8)
RATELNN_REGISTER_INT_KERNELS(uint8)
RATELNN_REGISTER_INT_KERNELS(int16)
RATELNN_REGISTER_INT_KERNELS(int32)
#undef RATELNN_REGISTER_INT_KERNELS

}  // namespace
}  // namespace tensorflow
