// A decoded, validated engine (ratelnn/proto/engine.proto) for the native NPU executor.
//
// decode_engine() reads the bytes with a bounds-checked wire reader and checks everything
// docs/npu-arithmetic.md requires (shapes, dtypes, ids, attrs, requantization bounds),
// so that run_engine() (npu_exec.h) never reads or writes out of bounds nor overflows int64.
// Errors are EngineError with a message "engine '<name>': <problem>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_vector.h"
#include "core/isa.h"
#include "core/npu_format.h"
#include "core/npu_wire.h"

namespace ratelnn {
namespace npu {

constexpr int kMaxRank = 6;
constexpr int64_t kMaxElements = (int64_t(1) << 31) - 1;      // per tensor or constant
constexpr int64_t kMaxActivationBytes = int64_t(1) << 33;     // sum over tensors, at any batch
constexpr int64_t kMaxProduct = int64_t(1) << 62;             // |acc * multiplier| bound

enum class DType : int { kInt8 = 1, kUInt8 = 2, kInt16 = 3, kInt32 = 4 };

enum class Opcode : int {
  kConv2D = 1, kFullyConnected = 2, kAdd = 3, kSub = 4, kMul = 5, kMaxPool = 6, kAvgPool = 7,
  kMean = 8, kConcat = 9, kRequant = 10, kPad = 11, kReshape = 12, kTranspose = 13, kLut = 14,
  kSoftmax = 15,
};
static_assert(int(DType::kInt8) == kDTypeMin && int(DType::kInt32) == kDTypeMax, "npu_format.h DType range");
static_assert(int(Opcode::kConv2D) == kOpcodeMin && int(Opcode::kSoftmax) == kOpcodeMax,
              "npu_format.h Opcode range");

int itemsize(DType t);
int64_t qmin(DType t);
int64_t qmax(DType t);
const char* dtype_name(DType t);
const char* opcode_name(Opcode op);

struct AddNarrow;  // npu_add_narrow.h

struct TensorDesc {
  std::string name;
  std::vector<int64_t> shape;  // shape[0] is the batch (Engine::batch_size as stored)
  DType dtype = DType::kInt8;
  double scale = 0;
  int64_t sram_offset = 0, sram_size = 0;
  int64_t sample_elements() const;  // product of shape[1:]
};

struct ConstDesc {
  std::string name;
  DType dtype = DType::kInt8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // little-endian, row-major
  int64_t elements() const;
  int64_t at(int64_t i) const;  // element i widened to int64 (caller checks the bounds)
};

struct Attrs {
  std::vector<int64_t> strides, dilations, pads, ksize, axes, perm, multipliers, shifts;
  int64_t groups = 0, axis = 0, pad_value = 0;
  bool has_act_min = false, has_act_max = false;
  int64_t act_min = 0, act_max = 0;
  bool count_include_pad = false, keepdims = false;
};

struct Instruction {
  Opcode opcode = Opcode::kConv2D;
  std::vector<int> inputs, outputs, consts;
  Attrs attrs;
  uint64_t cycles = 0;
  std::string name;
  // Filled by validation: output clamp bounds, and CONV2D/FULLY_CONNECTED weights repacked
  // for the native kernels (layouts in npu_kernels.h; empty for the scalar path).
  int64_t lo = 0, hi = 0;
  std::vector<uint8_t> packed_weights;
  // The int8 dot-product (vpdpbusd) copy of 8-bit x int8 GEMM weights, built when the CPU has
  // that path (npu_kernels.h): int8 k-quads, and per output channel -128 * sum(w) for int8
  // activations (they enter as x + 128); both empty otherwise.  64-byte aligned: the quad rows
  // are whole cache lines (the AMX B tiles' rows).
  AlignedVector<int8_t> packed_quads;
  std::vector<int32_t> quad_correction;
  // The depthwise weights (multiplier 1) of the AVX2 and AVX-512 paths, built when the CPU has AVX2
  // (npu_kernels.h): int32 [ceil(Cout/16)][kh*kw][16 channels]; empty otherwise.
  std::vector<int32_t> packed_taps;
  bool wide_accumulator = false;  // int64 accumulation needed (else int32 cannot overflow)
  // CONV2D / FULLY_CONNECTED: the per-channel requantization tables (ChannelParams of
  // core/conv/epilogue.inc), built at load for every kernel path the CPU has, by path (core/isa.h).
  std::shared_ptr<const void> channel_params[kIsaCount];
  // The executor plan (plan_fusions, npu_plan.h; docs/architecture.md §7): a CONV2D whose
  // epilogue also computes the ADD at index fused_add (and the REQUANT at fused_requant after
  // it), -1 for none; `fused` marks the ADD/REQUANT so computed, or a PAD folded into the
  // padding of the CONV2D / MAX_POOL that reads it (plan_fusions), which the executor skips.
  int fused_add = -1, fused_requant = -1;
  bool fused = false;
  // ADD/SUB of same-shape 8-bit codes into 8-bit codes: the narrow integer parameters found and
  // checked on every code pair at load (plan_fusions; npu_add_narrow.h), for the instruction with
  // the REQUANT that the executor runs in the same pass when there is one; null otherwise.
  std::shared_ptr<const AddNarrow> narrow;
};

// Format 1.2: one more batch size the engine was compiled for (docs/multi-batch.md): the
// memory plan and the cycle estimates at that size; instructions and constants are shared.
struct BatchPlan {
  int64_t batch_size = 0, sram_bytes = 0;
  std::vector<int64_t> sram_offsets, sram_sizes;  // one per tensor
  std::vector<uint64_t> cycles;                   // one per instruction
};

struct Engine {
  uint32_t major = 0, minor = 0;
  std::string name;
  int64_t batch_size = 0;
  std::vector<TensorDesc> tensors;
  std::vector<ConstDesc> constants;
  std::vector<int> inputs, outputs;
  std::vector<Instruction> instructions;
  int64_t device_id = 0;
  std::vector<int64_t> core_ids;
  int64_t split_mode = 0;
  int64_t sram_bytes = 0;
  std::vector<BatchPlan> batch_plans;  // ascending batch sizes, all above batch_size
  // The native executor's batch schedule (plan_batch_split, npu_plan.h): threads take whole
  // samples instead of sharing each instruction.  Not part of the engine bytes.
  bool split_by_sample = false;
};

// Decode and validate; `label` (may be empty) names the engine in errors when given,
// else the decoded name is used.  Throws EngineError.
Engine decode_engine(const uint8_t* data, size_t size, const std::string& label);

}  // namespace npu
}  // namespace ratelnn
