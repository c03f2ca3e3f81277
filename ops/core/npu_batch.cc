// Engine sets: the batch split rule and its run (see npu_batch.h).
#include "core/npu_batch.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/npu_exec.h"
#include "core/npu_wire.h"

namespace ratelnn {
namespace npu {

std::vector<BatchChunk> plan_batches(const std::vector<int64_t>& sizes, int64_t n) {
  std::vector<BatchChunk> chunks;
  if (sizes.empty() || n <= 0) return chunks;
  const size_t last = sizes.size() - 1;
  const int64_t largest = sizes[last];
  const int64_t full = n / largest, rest = n % largest;
  for (int64_t k = 0; k < full; ++k) chunks.push_back({last, k * largest, largest});
  if (rest > 0) {
    size_t pick = last;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] >= rest) { pick = i; break; }
    }
    chunks.push_back({pick, full * largest, rest});
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
  for (size_t i = 1; i < set.size(); ++i) {
    const Engine& e = *set[i];
    if (e.batch_size <= set[i - 1]->batch_size) {
      throw EngineError(name + "batch sizes of its engine set must be distinct and ascending (" +
                        std::to_string(set[i - 1]->batch_size) + " then " + std::to_string(e.batch_size) + ")");
    }
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
  if (set.size() == 1) {
    run_engine(first, batch, inputs, input_sizes, outputs, output_sizes, num_threads);
    return;
  }
  std::vector<int64_t> sizes;
  for (const Engine* e : set) sizes.push_back(e->batch_size);
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
  for (const BatchChunk& c : plan_batches(sizes, batch)) {
    const Engine& e = *set[c.engine];
    const int64_t size = e.batch_size;
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
