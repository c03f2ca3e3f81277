// The schema of ratelnn/proto/engine.proto as the hand-written C++ reader (npu_engine.cc)
// sees it: field numbers and kinds of every message it reads, the value ranges of the enums
// and the format version.  This is the only place these numbers are written in C++.
//
// tests/test_wire_constants.py checks every entry against engine_pb2.DESCRIPTOR (and that
// every field of the descriptor is listed here); it reads them through
// ratel_npu_wire_schema() (ops/capi/npu_capi.cc).  Editing engine.proto without this file
// (or the reverse) fails that test.
#pragma once

#include <cstdint>

namespace ratelnn {
namespace npu {

constexpr uint32_t kFormatMajor = 1;
constexpr uint32_t kFormatMinor = 2;

// X(message, field, number, kind, repeated): kind is the proto scalar type, or `message`
// / `enum` (the schema export writes the kind as spelled here).
#define RATELNN_WIRE_FIELDS(X)                             \
  X(FormatVersion, major, 1, uint32, false)                \
  X(FormatVersion, minor, 2, uint32, false)                \
  X(Tensor, id, 1, int32, false)                           \
  X(Tensor, name, 2, string, false)                        \
  X(Tensor, shape, 3, int64, true)                         \
  X(Tensor, dtype, 4, enum, false)                         \
  X(Tensor, scale, 5, double, false)                       \
  X(Tensor, sram_offset, 6, int64, false)                  \
  X(Tensor, sram_size, 7, int64, false)                    \
  X(Constant, id, 1, int32, false)                         \
  X(Constant, name, 2, string, false)                      \
  X(Constant, dtype, 3, enum, false)                       \
  X(Constant, shape, 4, int64, true)                       \
  X(Constant, data, 5, bytes, false)                       \
  X(Attrs, strides, 1, int32, true)                        \
  X(Attrs, dilations, 2, int32, true)                      \
  X(Attrs, pads, 3, int32, true)                           \
  X(Attrs, groups, 4, int32, false)                        \
  X(Attrs, ksize, 5, int32, true)                          \
  X(Attrs, act_min, 6, sint32, false)                      \
  X(Attrs, act_max, 7, sint32, false)                      \
  X(Attrs, count_include_pad, 8, bool, false)              \
  X(Attrs, axes, 9, int32, true)                           \
  X(Attrs, axis, 10, int32, false)                         \
  X(Attrs, perm, 11, int32, true)                          \
  X(Attrs, pad_value, 12, sint32, false)                   \
  X(Attrs, multipliers, 13, int64, true)                   \
  X(Attrs, shifts, 14, int32, true)                        \
  X(Attrs, keepdims, 15, bool, false)                      \
  X(Instruction, opcode, 1, enum, false)                   \
  X(Instruction, inputs, 2, int32, true)                   \
  X(Instruction, outputs, 3, int32, true)                  \
  X(Instruction, consts, 4, int32, true)                   \
  X(Instruction, attrs, 5, message, false)                 \
  X(Instruction, cycles, 6, uint64, false)                 \
  X(Instruction, name, 7, string, false)                   \
  X(BatchPlan, batch_size, 1, int64, false)               \
  X(BatchPlan, sram_bytes, 2, int64, false)               \
  X(BatchPlan, sram_offsets, 3, int64, true)              \
  X(BatchPlan, sram_sizes, 4, int64, true)                \
  X(BatchPlan, cycles, 5, uint64, true)                   \
  X(Engine, format_version, 1, message, false)             \
  X(Engine, name, 2, string, false)                        \
  X(Engine, batch_size, 3, int64, false)                   \
  X(Engine, tensors, 4, message, true)                     \
  X(Engine, constants, 5, message, true)                   \
  X(Engine, inputs, 6, int32, true)                        \
  X(Engine, outputs, 7, int32, true)                       \
  X(Engine, instructions, 8, message, true)                \
  X(Engine, device_id, 9, int32, false)                    \
  X(Engine, core_ids, 10, int32, true)                     \
  X(Engine, split_mode, 11, enum, false)                   \
  X(Engine, sram_bytes, 12, int64, false)                  \
  X(Engine, checksum, 13, fixed32, false)                 \
  X(Engine, batch_plans, 14, message, true)

// Field numbers: field::Tensor::dtype == 4, field::Engine::instructions == 8, ...
namespace field {
#define RATELNN_WIRE_FIELD_NUMBER(msg, name, number, kind, repeated) \
  namespace msg {                                                    \
  constexpr uint32_t name = number;                                  \
  }
RATELNN_WIRE_FIELDS(RATELNN_WIRE_FIELD_NUMBER)
#undef RATELNN_WIRE_FIELD_NUMBER
}  // namespace field

// Enum value ranges the reader accepts: [min, max].  DType and Opcode start at 1 (0 is the
// proto3 UNSPECIFIED default, rejected); every value in the range is defined.
constexpr int64_t kDTypeMin = 1, kDTypeMax = 4;          // INT8 .. INT32
constexpr int64_t kOpcodeMin = 1, kOpcodeMax = 15;       // CONV2D .. SOFTMAX
constexpr int64_t kSplitModeMin = 0, kSplitModeMax = 4;  // SPLIT_NONE .. SPLIT_PIPELINE
constexpr int64_t kSplitNone = 0, kSplitBatch = 1;       // SPLIT_NONE, SPLIT_BATCH

}  // namespace npu
}  // namespace ratelnn
