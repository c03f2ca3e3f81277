// The executor's plans of a validated engine, made once at load (npu_plan.h): the fusions
// (plan_fusions) and the batch schedule (plan_batch_split, batch_split_by_sample).
#include "core/npu_plan.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/npu_add_narrow.h"
#include "core/npu_exec.h"
#include "core/npu_kernels.h"

namespace ratelnn {
namespace npu {
namespace {

// The conv + ADD (+ REQUANT) fusions of plan_fusions.
void plan_conv_adds(Engine& e, const std::vector<int>& producer, const std::vector<int>& readers,
                    const std::vector<bool>& is_output) {
  const size_t n = e.instructions.size();
  for (size_t j = 0; j < n; ++j) {
    Instruction& add = e.instructions[j];
    if (add.opcode != Opcode::kAdd || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) continue;
    // the operand computed last (c) is the conv's; the other (r) already exists when it runs
    const int side = producer[add.inputs[0]] > producer[add.inputs[1]] ? 0 : 1;
    const int c = add.inputs[side], r = add.inputs[1 - side], k = producer[c], z = add.outputs[0];
    if (k < 0) continue;
    Instruction& conv = e.instructions[k];
    if (conv.opcode != Opcode::kConv2D || conv.fused_add >= 0 || readers[c] != 1 || is_output[c]) continue;
    if (e.tensors[c].shape != e.tensors[z].shape || e.tensors[r].shape != e.tensors[z].shape) continue;
    const ConstDesc& w = e.constants[conv.consts[0]];
    if (conv.packed_weights.empty() || conv.attrs.groups != 1 ||
        conv_path(e.tensors[conv.inputs[0]].dtype, w.dtype, w.shape[2], conv.attrs.groups, conv.wide_accumulator) !=
            ConvPath::kGemm)
      continue;
    conv.fused_add = int(j);
    add.fused = true;
    if (j + 1 < n) {  // the ReLU REQUANT after a residual ADD, when it alone reads the sum
      Instruction& q = e.instructions[j + 1];
      if (q.opcode == Opcode::kRequant && q.inputs[0] == z && readers[z] == 1 && !is_output[z]) {
        conv.fused_requant = int(j + 1);
        q.fused = true;
      }
    }
  }
}

// A PAD of the spatial dims whose output only the CONV2D or MAX_POOL after it reads joins
// that instruction's own padding (its input becomes the PAD's; the PAD is marked fused):
// ResNet50's conv1_pad / pool1_pad, MobileNetV2's stride-2 pads.  Same bits: a CONV2D pads
// with code 0 (reference.py conv2d), so the PAD must too; a MAX_POOL leaves the cells outside
// the image out of its windows, which equals padding with the dtype's lowest code as long as
// every window keeps a cell of the image (each side's padding below the window).
void plan_pad_folds(Engine& e, const std::vector<int>& producer, const std::vector<int>& readers,
                    const std::vector<bool>& is_output) {
  for (Instruction& ins : e.instructions) {
    const bool conv = ins.opcode == Opcode::kConv2D, pool = ins.opcode == Opcode::kMaxPool;
    if ((!conv && !pool) || ins.inputs.empty() || ins.attrs.pads.size() != 4) continue;
    const int t = ins.inputs[0], k = producer[t];
    if (k < 0 || readers[t] != 1 || is_output[t]) continue;
    Instruction& pad = e.instructions[k];
    const std::vector<int64_t>& pp = pad.attrs.pads;
    if (pad.opcode != Opcode::kPad || pad.fused || pp.size() != 8 || pp[0] || pp[1] || pp[6] || pp[7]) continue;
    if (pad.attrs.pad_value != (conv ? 0 : qmin(e.tensors[t].dtype))) continue;
    std::vector<int64_t> pads(4);
    for (int d = 0; d < 4; ++d) pads[d] = ins.attrs.pads[d] + pp[2 + d];
    bool windows_keep_the_image = true;
    for (int d = 0; pool && d < 4; ++d) windows_keep_the_image &= pads[d] < ins.attrs.ksize[d / 2];
    if (!windows_keep_the_image) continue;
    ins.inputs[0] = pad.inputs[0];
    ins.attrs.pads = pads;
    pad.fused = true;
  }
}

// The narrow plan (npu_add_narrow.h) of ADD/SUB `add`, with the REQUANT `then` (or null) the
// executor runs in the same pass: same-shape tensor operands, 8-bit codes in and out.
void plan_narrow_add(const Engine& e, Instruction& add, const Instruction* then) {
  if ((add.opcode != Opcode::kAdd && add.opcode != Opcode::kSub) || add.inputs.size() != 2 || !add.consts.empty())
    return;
  const TensorDesc &ta = e.tensors[add.inputs[0]], &tb = e.tensors[add.inputs[1]], &tz = e.tensors[add.outputs[0]];
  const int y = (then != nullptr ? then : &add)->outputs[0];
  const DType yt = e.tensors[y].dtype;
  if (ta.shape != tz.shape || tb.shape != tz.shape || (yt != DType::kInt8 && yt != DType::kUInt8)) return;
  AddSpec f;
  f.at = ta.dtype, f.bt = tb.dtype;
  f.ma = add.attrs.multipliers[0];
  f.mb = add.opcode == Opcode::kAdd ? add.attrs.multipliers[1] : -add.attrs.multipliers[1];
  f.s = int(add.attrs.shifts[0]), f.lo = add.lo, f.hi = add.hi;
  if (then != nullptr) {
    f.requant = true;
    f.m2 = then->attrs.multipliers[0], f.s2 = int(then->attrs.shifts[0]), f.lo2 = then->lo, f.hi2 = then->hi;
  }
  AddNarrow p;
  if (add_narrow_plan(f, &p)) add.narrow = std::make_shared<const AddNarrow>(p);
}

}  // namespace

void plan_fusions(Engine& e) {
  const size_t n = e.instructions.size();
  std::vector<int> producer(e.tensors.size(), -1), readers(e.tensors.size(), 0);
  std::vector<bool> is_output(e.tensors.size(), false);
  for (int id : e.outputs) is_output[id] = true;
  for (size_t k = 0; k < n; ++k) {
    for (int id : e.instructions[k].outputs) producer[id] = int(k);
    for (int id : e.instructions[k].inputs) ++readers[id];
  }
  plan_conv_adds(e, producer, readers, is_output);
  plan_pad_folds(e, producer, readers, is_output);
  std::vector<int> fused_by(n, -1);  // the conv whose epilogue runs ADD j
  for (size_t k = 0; k < n; ++k)
    if (e.instructions[k].fused_add >= 0) fused_by[e.instructions[k].fused_add] = int(k);
  for (size_t j = 0; j < n; ++j) {  // the REQUANT run with ADD j: as Runner::fusable_requant / conv()
    const Instruction* then = nullptr;
    if (fused_by[j] >= 0) {
      const int q = e.instructions[fused_by[j]].fused_requant;
      then = q >= 0 ? &e.instructions[q] : nullptr;
    } else if (j + 1 < n) {
      const Instruction& q = e.instructions[j + 1];
      const int z = e.instructions[j].outputs[0];
      if (q.opcode == Opcode::kRequant && q.inputs[0] == z && readers[z] == 1 && !is_output[z]) then = &q;
    }
    plan_narrow_add(e, e.instructions[j], then);
  }
}

void plan_batch_split(Engine& e) {
  int64_t constant_bytes = 0, sample_bytes = 0;
  for (const ConstDesc& c : e.constants) constant_bytes += int64_t(c.data.size());
  for (size_t id = 0; id < e.tensors.size(); ++id) sample_bytes += tensor_bytes(e, int(id), 1);
  e.split_by_sample = constant_bytes <= sample_bytes;
}

bool batch_split_by_sample(const Engine& e) {
  const char* v = std::getenv("RATELNN_BATCH_SPLIT");
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, "auto") == 0) return e.split_by_sample;
  if (std::strcmp(v, "samples") == 0) return true;
  if (std::strcmp(v, "layers") == 0) return false;
  throw EngineError(std::string("RATELNN_BATCH_SPLIT=") + v + " names no batch schedule (known: auto, layers, samples)");
}

}  // namespace npu
}  // namespace ratelnn
