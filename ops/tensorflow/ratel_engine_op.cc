// TensorFlow registration of RatelEngineOp (docs/architecture.md §5): runs one compiled NPU engine
// (ratelnn/proto/engine.proto) on the emulated NPU's native executor (ops/core/npu_exec.h),
// and keeps a process-wide account of the device time the runs would take (docs/architecture.md §7;
// the account and the placement check are shared with the MXNet op: ops/core/device_time.h).
//
// The engine bytes are decoded and validated once, when the kernel is constructed, after
// their checksum (ops/core/npu_checksum.h); corrupted or hostile bytes give an
// InvalidArgument status naming the engine, never a crash.  Sizes at the run batch are
// checked against the run-time limits before outputs are allocated.  Inputs are checked with the engine input checks every caller shares
// (ops/core/npu_io.h): count and dtypes when the kernel is built, shapes on every run.  The batch dimension is free:
// an engine compiled for batch b runs any batch N >= 0 (N = 0 gives empty outputs).  A node
// with `batch_engines` holds an engine set (docs/multi-batch.md): the batch is split over the
// compiled sizes and the remainder padded (ops/core/npu_batch.h).
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/device_time.h"
#include "core/npu_batch.h"
#include "core/npu_engine.h"
#include "core/npu_exec.h"
#include "core/npu_io.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tensorflow {
namespace {

namespace npu = ::ratelnn::npu;

template <typename... Args>
absl::Status InvalidArgument(const Args&... message_parts) {
  return absl::InvalidArgumentError(absl::StrCat(message_parts...));
}

DataType TfDtype(npu::DType t) {
  switch (t) {
    case npu::DType::kInt8: return DT_INT8;
    case npu::DType::kUInt8: return DT_UINT8;
    case npu::DType::kInt16: return DT_INT16;
    case npu::DType::kInt32: return DT_INT32;
  }
  return DT_INVALID;
}

REGISTER_OP("RatelEngineOp")
    .Input("x: Tin")
    .Output("y: Tout")
    .Attr("Tin: list({int8, uint8, int16}) >= 1")
    .Attr("Tout: list({int8, uint8, int16}) >= 1")
    .Attr("engine: string")
    .Attr("engine_name: string")
    .Attr("device_id: int = 0")
    .Attr("core_ids: list(int) = [0]")
    .Attr("output_shapes: list(shape) = []")
    .Attr("batch_engines: list(string) = []")
    .SetIsStateful()  // accounts device time per run: never constant-folded or merged
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      std::vector<PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("output_shapes", &shapes));
      if (shapes.empty()) {
        for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->UnknownShape());
        return absl::OkStatus();
      }
      if (int(shapes.size()) != c->num_outputs()) {
        return InvalidArgument("RatelEngineOp: ", shapes.size(), " output_shapes for ",
                               c->num_outputs(), " outputs");
      }
      // Outputs share the inputs' batch dimension; the rest comes from the engine.
      shape_inference::DimensionHandle batch = c->UnknownDim();
      if (c->RankKnown(c->input(0)) && c->Rank(c->input(0)) >= 1) batch = c->Dim(c->input(0), 0);
      for (int i = 0; i < c->num_outputs(); ++i) {
        shape_inference::ShapeHandle shape;
        TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &shape));
        if (c->RankKnown(shape) && c->Rank(shape) >= 1) {
          TF_RETURN_IF_ERROR(c->ReplaceDim(shape, 0, batch, &shape));
        }
        c->set_output(i, shape);
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
Runs a compiled NPU engine (serialized ratelnn engine bytes in `engine`) on integer
inputs with any batch size; outputs are the engine's integer outputs.  `output_shapes`
(optional, batch dimension -1) lets shape inference see the output shapes.
`batch_engines` (optional): the same region compiled for other batch sizes; with it a
run splits its batch over the compiled sizes (docs/multi-batch.md).
)doc");

class RatelEngineOp : public OpKernel {
 public:
  explicit RatelEngineOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string bytes;
    std::vector<PartialTensorShape> output_shapes;
    std::vector<std::string> batch_engines;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("engine_name", &engine_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("engine", &bytes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("device_id", &device_id_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("core_ids", &core_ids_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("output_shapes", &output_shapes));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("batch_engines", &batch_engines));
    if (engine_name_.empty()) engine_name_ = name();
    OP_REQUIRES(ctx, device_id_ >= 0,
                InvalidArgument("engine '", engine_name_, "': negative device_id ", device_id_));
    OP_REQUIRES(ctx, !core_ids_.empty(),
                InvalidArgument("engine '", engine_name_, "': core_ids is empty"));
    for (int64_t core : core_ids_) {
      OP_REQUIRES(ctx, core >= 0,
                  InvalidArgument("engine '", engine_name_, "': negative core id ", core));
      OP_REQUIRES(ctx, std::count(core_ids_.begin(), core_ids_.end(), core) == 1,
                  InvalidArgument("engine '", engine_name_, "': core id ", core, " listed twice"));
    }
    try {
      engine_ = npu::decode_engine(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                   engine_name_);
      batch_engines_.reserve(batch_engines.size());  // set_ points into it: no reallocation
      for (const std::string& more : batch_engines) {
        batch_engines_.push_back(npu::decode_engine(reinterpret_cast<const uint8_t*>(more.data()),
                                                    more.size(), engine_name_));
      }
      set_.push_back(&engine_);
      for (const npu::Engine& e : batch_engines_) set_.push_back(&e);
      npu::check_engine_set(set_, engine_name_);
    } catch (const std::exception& e) {
      ctx->CtxFailure(InvalidArgument(e.what()));
      return;
    }
    OP_REQUIRES_OK(ctx, CheckInputTypes(ctx->input_types()));
    OP_REQUIRES_OK(ctx, CheckOutputTypes(ctx->output_types()));
    OP_REQUIRES_OK(ctx, CheckOutputShapes(output_shapes));
    // the engine runs only where the local runtime has its device and cores (RATELNN_DEVICES)
    const std::string missing = npu::placement_error(engine_name_, device_id_, core_ids_);
    OP_REQUIRES(ctx, missing.empty(), absl::FailedPreconditionError(missing));
    device_time_ = npu::DeviceTimeRecorder(set_, engine_name_, device_id_, int64_t(core_ids_.size()));
  }

  void Compute(OpKernelContext* ctx) override {
    int64_t batch = -1;
    std::vector<const void*> in_ptrs;
    std::vector<int64_t> in_sizes;
    for (int k = 0; k < ctx->num_inputs(); ++k) {
      const Tensor& x = ctx->input(k);
      const auto sizes = x.shape().dim_sizes();
      try {  // the shared check (ops/core/npu_io.h); batch 0 runs nothing
        batch = npu::check_input_shape(engine_, k, std::vector<int64_t>(sizes.begin(), sizes.end()),
                                       batch, 0, engine_name_);
      } catch (const std::exception& e) {
        ctx->CtxFailure(InvalidArgument(e.what()));
        return;
      }
      in_ptrs.push_back(x.tensor_data().data());
      in_sizes.push_back(int64_t(x.tensor_data().size()));
    }
    try {  // sizes before any output is allocated (docs/reliability.md, "Engines")
      npu::check_size_limits(engine_, batch, npu::run_size_limits(), engine_name_);
    } catch (const std::exception& e) {
      ctx->CtxFailure(InvalidArgument(e.what()));
      return;
    }
    std::vector<void*> out_ptrs;
    std::vector<int64_t> out_sizes;
    for (int k = 0; k < ctx->num_outputs(); ++k) {
      const npu::TensorDesc& t = engine_.tensors[engine_.outputs[k]];
      std::vector<int64_t> dims(t.shape.begin(), t.shape.end());
      dims[0] = batch;
      TensorShape shape;
      OP_REQUIRES_OK(ctx, TensorShape::BuildTensorShapeBase(dims, &shape));
      Tensor* y = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(k, shape, &y));
      out_ptrs.push_back(const_cast<char*>(y->tensor_data().data()));
      out_sizes.push_back(int64_t(y->tensor_data().size()));
    }
    if (batch == 0) return;
    const int threads = ctx->device()->tensorflow_cpu_worker_threads()->num_threads;
    try {
      npu::run_engine_set(set_, batch, in_ptrs, in_sizes, out_ptrs, out_sizes, std::max(threads, 1));
    } catch (const std::exception& e) {
      ctx->CtxFailure(InvalidArgument(e.what()));
      return;
    }
    device_time_.record(batch);
  }

 private:
  // The node's input count and dtypes (Tin), by the shared checks of ops/core/npu_io.h.
  absl::Status CheckInputTypes(const DataTypeSlice& types) const {
    try {
      npu::check_input_count(engine_, types.size(), engine_name_);
      for (size_t k = 0; k < types.size(); ++k)
        npu::check_input_dtype(engine_, k, DataTypeString(types[k]), engine_name_);
    } catch (const std::exception& e) {
      return InvalidArgument(e.what());
    }
    return absl::OkStatus();
  }

  absl::Status CheckOutputTypes(const DataTypeSlice& types) const {
    const std::vector<int>& ids = engine_.outputs;
    if (types.size() != ids.size()) {
      return InvalidArgument("engine '", engine_name_, "': the node has ", types.size(),
                             " outputs but the engine has ", ids.size());
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const npu::TensorDesc& t = engine_.tensors[ids[k]];
      if (types[k] != TfDtype(t.dtype)) {
        return InvalidArgument("engine '", engine_name_, "': output ", k, " ('", t.name,
                               "') is ", npu::dtype_name(t.dtype), " in the engine but ",
                               DataTypeString(types[k]), " in the node");
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckOutputShapes(const std::vector<PartialTensorShape>& shapes) const {
    if (shapes.empty()) return absl::OkStatus();
    if (shapes.size() != engine_.outputs.size()) {
      return InvalidArgument("engine '", engine_name_, "': ", shapes.size(),
                             " output_shapes for ", engine_.outputs.size(), " engine outputs");
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      const npu::TensorDesc& t = engine_.tensors[engine_.outputs[k]];
      bool same = shapes[k].dims() == int(t.shape.size());
      for (size_t d = 1; same && d < t.shape.size(); ++d) same = shapes[k].dim_size(d) == t.shape[d];
      if (!same) {
        return InvalidArgument("engine '", engine_name_, "': output_shapes[", k, "] ",
                               shapes[k].DebugString(), " does not match engine output '", t.name,
                               "' of shape ", npu::free_batch_shape(t.shape));
      }
    }
    return absl::OkStatus();
  }

  std::string engine_name_;
  int64_t device_id_ = 0;
  std::vector<int64_t> core_ids_;
  npu::Engine engine_;
  std::vector<npu::Engine> batch_engines_;  // the other engines of the set (attr batch_engines)
  std::vector<const npu::Engine*> set_;     // engine_, then batch_engines_: ascending batch sizes
  npu::DeviceTimeRecorder device_time_;
};

REGISTER_KERNEL_BUILDER(Name("RatelEngineOp").Device(DEVICE_CPU), RatelEngineOp);

}  // namespace
}  // namespace tensorflow
