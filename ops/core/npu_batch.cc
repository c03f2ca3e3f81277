// Engine sets: the batch split rule and its run (see npu_batch.h).
#include "core/npu_batch.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/npu_exec.h"
#include "core/npu_format.h"
#include "core/npu_wire.h"

namespace ratelnn {
namespace npu {

double busiest_samples(int64_t size, int64_t split_mode, int64_t num_cores) {
  const int64_t cores = std::max<int64_t>(num_cores, 1);
  if (split_mode == kSplitBatch) return double((size + cores - 1) / cores);
  if (split_mode != kSplitNone) return double(size) / double(cores);
  return double(size);
}

double chunk_cycles(double total_cycles, int64_t size, int64_t split_mode, int64_t num_cores) {
  if (size <= 0) return 0.0;
  return total_cycles / double(size) * busiest_samples(size, split_mode, num_cores);
}

std::vector<BatchSlot> batch_slots(const std::vector<const Engine*>& set) {
  std::vector<BatchSlot> slots;
  for (const Engine* e : set) {
    const int64_t cores = int64_t(e->core_ids.size());
    double total = 0;  // double: hostile cycle counts must not overflow
    for (const Instruction& ins : e->instructions) total += double(ins.cycles);
    slots.push_back({e, e->batch_size, chunk_cycles(total, e->batch_size, e->split_mode, cores)});
    for (const BatchPlan& p : e->batch_plans) {
      double plan_total = 0;
      for (uint64_t c : p.cycles) plan_total += double(c);
      slots.push_back({e, p.batch_size, chunk_cycles(plan_total, p.batch_size, e->split_mode, cores)});
    }
  }
  return slots;
}

std::vector<BatchChunk> plan_batches(const std::vector<int64_t>& sizes, const std::vector<double>& cycles, int64_t n) {
  std::vector<BatchChunk> chunks;
  if (sizes.empty() || n <= 0) return chunks;
  const size_t last = sizes.size() - 1;
  const int64_t largest = sizes[last];
  const int64_t full = n / largest, rest = n % largest;
  for (int64_t k = 0; k < full; ++k) chunks.push_back({last, k * largest, largest});
  if (rest <= 0) return chunks;
  // best[m]: the cheapest chunks for m samples (cycles, then padded samples, then chunks)
  struct Best {
    double cycles = 0;
    int64_t padded = 0, count = 0;
    size_t slot = 0;
  };
  std::vector<Best> best(size_t(rest) + 1);
  for (int64_t m = 1; m <= rest; ++m) {
    bool found = false;
    for (size_t i = sizes.size(); i-- > 0;) {
      if (sizes[i] > m && i > 0 && sizes[i - 1] >= m) continue;  // pad only to the smallest size holding m
      const Best& prev = best[size_t(std::max<int64_t>(m - sizes[i], 0))];
      const Best cand{prev.cycles + cycles[i], prev.padded + std::max<int64_t>(sizes[i] - m, 0), prev.count + 1, i};
      const Best& cur = best[size_t(m)];
      const bool better = !found || cand.cycles < cur.cycles ||
                          (cand.cycles == cur.cycles && (cand.padded < cur.padded ||
                                                         (cand.padded == cur.padded && cand.count < cur.count)));
      if (better) best[size_t(m)] = cand;
      found = true;
    }
  }
  int64_t start = full * largest;
  for (int64_t m = rest; m > 0;) {
    const size_t i = best[size_t(m)].slot;
    const int64_t rows = std::min(sizes[i], m);
    chunks.push_back({i, start, rows});
    start += rows;
    m -= rows;
  }
  return chunks;
}

namespace {

bool SameTensors(const Engine& a, const std::vector<int>& ia, const Engine& b, const std::vector<int>& ib) {
  if (ia.size() != ib.size()) return false;
  for (size_t k = 0; k < ia.size(); ++k) {
    const TensorDesc& x = a.tensors[ia[k]];
    const TensorDesc& y = b.tensors[ib[k]];
    if (x.dtype != y.dtype || x.shape.size() != y.shape.size()) return false;
    if (!std::equal(x.shape.begin() + 1, x.shape.end(), y.shape.begin() + 1)) return false;
  }
  return true;
}

}  // namespace

void check_engine_set(const std::vector<const Engine*>& set, const std::string& who) {
  if (set.empty()) throw EngineError("engine '" + who + "': empty engine set");
  const Engine& first = *set[0];
  const std::string name = "engine '" + (who.empty() ? first.name : who) + "': ";
  const std::vector<BatchSlot> slots = batch_slots(set);
  for (size_t i = 1; i < slots.size(); ++i) {
    if (slots[i].size <= slots[i - 1].size) {
      throw EngineError(name + "batch sizes of its engine set must be distinct and ascending (" +
                        std::to_string(slots[i - 1].size) + " then " + std::to_string(slots[i].size) + ")");
    }
  }
  for (size_t i = 1; i < set.size(); ++i) {
    const Engine& e = *set[i];
    if (!SameTensors(first, first.inputs, e, e.inputs) || !SameTensors(first, first.outputs, e, e.outputs) ||
        e.device_id != first.device_id || e.core_ids != first.core_ids) {
      throw EngineError(name + "the engine compiled for batch " + std::to_string(e.batch_size) +
                        " does not match the one for batch " + std::to_string(first.batch_size) +
                        " (inputs, outputs, device or cores differ)");
    }
  }
}

void run_engine_set(const std::vector<const Engine*>& set, int64_t batch,
                    const std::vector<const void*>& inputs, const std::vector<int64_t>& input_sizes,
                    const std::vector<void*>& outputs, const std::vector<int64_t>& output_sizes,
                    int num_threads) {
  const Engine& first = *set[0];
  const std::vector<BatchSlot> slots = batch_slots(set);
  if (slots.size() == 1) {
    run_engine(first, batch, inputs, input_sizes, outputs, output_sizes, num_threads);
    return;
  }
  std::vector<int64_t> sizes;
  std::vector<double> cycles;
  for (const BatchSlot& s : slots) sizes.push_back(s.size), cycles.push_back(s.cycles);
  std::vector<int64_t> in_sample, out_sample;  // bytes of one sample
  for (size_t k = 0; k < first.inputs.size(); ++k) in_sample.push_back(tensor_bytes(first, first.inputs[k], 1));
  for (size_t k = 0; k < first.outputs.size(); ++k) out_sample.push_back(tensor_bytes(first, first.outputs[k], 1));
  // the whole buffers are checked here; each chunk's run checks its own slice again
  if (inputs.size() != in_sample.size() || input_sizes.size() != in_sample.size() ||
      outputs.size() != out_sample.size() || output_sizes.size() != out_sample.size()) {
    throw EngineError("engine '" + first.name + "': wrong number of input or output buffers");
  }
  for (size_t k = 0; k < in_sample.size(); ++k) {
    if (input_sizes[k] != in_sample[k] * batch) {
      throw EngineError("engine '" + first.name + "': input " + std::to_string(k) + " has " +
                        std::to_string(input_sizes[k]) + " bytes, expected " +
                        std::to_string(in_sample[k] * batch) + " at batch " + std::to_string(batch));
    }
  }
  for (size_t k = 0; k < out_sample.size(); ++k) {
    if (output_sizes[k] != out_sample[k] * batch) {
      throw EngineError("engine '" + first.name + "': output " + std::to_string(k) + " has " +
                        std::to_string(output_sizes[k]) + " bytes, expected " +
                        std::to_string(out_sample[k] * batch) + " at batch " + std::to_string(batch));
    }
  }
  std::vector<std::vector<uint8_t>> pad_in(in_sample.size()), pad_out(out_sample.size());
  for (const BatchChunk& c : plan_batches(sizes, cycles, batch)) {
    const Engine& e = *slots[c.slot].engine;
    const int64_t size = slots[c.slot].size;
    std::vector<const void*> in_ptrs;
    std::vector<void*> out_ptrs;
    std::vector<int64_t> in_bytes, out_bytes;
    for (size_t k = 0; k < in_sample.size(); ++k) {
      const uint8_t* src = static_cast<const uint8_t*>(inputs[k]) + c.start * in_sample[k];
      if (c.rows == size) {
        in_ptrs.push_back(src);
      } else {  // the padded remainder: zero samples after the real ones
        pad_in[k].assign(size_t(size * in_sample[k]), 0);
        std::memcpy(pad_in[k].data(), src, size_t(c.rows * in_sample[k]));
        in_ptrs.push_back(pad_in[k].data());
      }
      in_bytes.push_back(size * in_sample[k]);
    }
    for (size_t k = 0; k < out_sample.size(); ++k) {
      uint8_t* dst = static_cast<uint8_t*>(outputs[k]) + c.start * out_sample[k];
      if (c.rows == size) {
        out_ptrs.push_back(dst);
      } else {
        pad_out[k].assign(size_t(size * out_sample[k]), 0);
        out_ptrs.push_back(pad_out[k].data());
      }
      out_bytes.push_back(size * out_sample[k]);
    }
    run_engine(e, size, in_ptrs, in_bytes, out_ptrs, out_bytes, num_threads);
    if (c.rows < size) {
      for (size_t k = 0; k < out_sample.size(); ++k) {
        std::memcpy(static_cast<uint8_t*>(outputs[k]) + c.start * out_sample[k], pad_out[k].data(),
                    size_t(c.rows * out_sample[k]));
      }
    }
  }
}

}  // namespace npu
}  // namespace ratelnn
