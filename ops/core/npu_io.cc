// The engine input checks of npu_io.h.
#include "core/npu_io.h"

#include "core/npu_exec.h"

#include <cerrno>
#include <cstdlib>

namespace ratelnn {
namespace npu {

std::string engine_prefix(const Engine& e, const std::string& who) {
  return "engine '" + (who.empty() ? e.name : who) + "': ";
}

std::string input_label(const Engine& e, size_t k) {
  return "input " + std::to_string(k) + " ('" + e.tensors[e.inputs[k]].name + "')";
}

std::string free_batch_shape(const std::vector<int64_t>& shape) {
  std::string s = "[N";
  for (size_t d = 1; d < shape.size(); ++d) s += "," + std::to_string(shape[d]);
  return s + "]";
}

namespace {
std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) s += (d ? "," : "") + std::to_string(dims[d]);
  return s + "]";
}
int64_t env_limit(const char* name, int64_t fallback, int64_t hi, std::string* source) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    *source = std::string("the default; the environment variable ") + name + " sets it";
    return fallback;
  }
  *source = std::string("from the environment variable ") + name;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > hi)
    throw EngineError(std::string(name) + "='" + text + "' is not an integer in [1, " + std::to_string(hi) + "]");
  return int64_t(v);
}
}  // namespace

SizeLimits run_size_limits() {
  SizeLimits l;
  l.max_tensor_elements = env_limit("RATELNN_MAX_TENSOR_ELEMENTS", kMaxElements, kMaxElements, &l.elements_source);
  l.max_total_bytes = env_limit("RATELNN_MAX_TOTAL_BYTES", kMaxActivationBytes, kMaxTotalBytesLimit, &l.bytes_source);
  return l;
}

void check_size_limits(const Engine& e, int64_t batch, const SizeLimits& limits, const std::string& who) {
  using u128 = unsigned __int128;
  u128 total = 0, largest = 0;
  size_t largest_id = 0;
  auto at_batch = [&](const TensorDesc& t) {
    std::vector<int64_t> s = t.shape;
    s[0] = batch;
    return shape_text(s);
  };
  for (size_t id = 0; id < e.tensors.size(); ++id) {
    const TensorDesc& t = e.tensors[id];
    u128 elements = u128(t.sample_elements()) * u128(batch < 0 ? 0 : batch);
    if (elements > u128(limits.max_tensor_elements))
      throw EngineError(engine_prefix(e, who) + "tensor '" + t.name + "' " + at_batch(t) + " has more than " +
                        std::to_string(limits.max_tensor_elements) + " elements at batch " + std::to_string(batch) +
                        " (max_tensor_elements, " + limits.elements_source + ")");
    u128 bytes = elements * u128(itemsize(t.dtype));
    total += bytes;
    if (bytes > largest) largest = bytes, largest_id = id;
  }
  if (total > u128(limits.max_total_bytes)) {
    const TensorDesc& t = e.tensors[largest_id];
    throw EngineError(engine_prefix(e, who) + "activation tensors take more than " +
                      std::to_string(limits.max_total_bytes) + " bytes at batch " + std::to_string(batch) +
                      " (max_total_bytes, " + limits.bytes_source + "); the largest is tensor '" + t.name + "' " +
                      at_batch(t) + " of " + std::to_string(int64_t(largest)) + " bytes");
  }
}

void check_input_count(const Engine& e, size_t count, const std::string& who) {
  if (count != e.inputs.size())
    throw EngineError(engine_prefix(e, who) + "expects " + std::to_string(e.inputs.size()) + " inputs, got " +
                      std::to_string(count));
}

void check_input_dtype(const Engine& e, size_t k, const std::string& dtype, const std::string& who) {
  const char* want = dtype_name(e.tensors[e.inputs[k]].dtype);
  if (dtype != want)
    throw EngineError(engine_prefix(e, who) + input_label(e, k) + " must be " + want + ", got " + dtype);
}

int64_t check_input_shape(const Engine& e, size_t k, const std::vector<int64_t>& dims, int64_t batch,
                          int64_t min_batch, const std::string& who) {
  const std::vector<int64_t>& want = e.tensors[e.inputs[k]].shape;
  bool same = dims.size() == want.size();
  for (size_t d = 1; same && d < want.size(); ++d) same = dims[d] == want[d];
  if (!same)
    throw EngineError(engine_prefix(e, who) + input_label(e, k) + " has shape " + shape_text(dims) + ", expected " +
                      free_batch_shape(want));
  if (dims[0] < min_batch)
    throw EngineError(engine_prefix(e, who) + input_label(e, k) + " has batch " + std::to_string(dims[0]) +
                      ", expected N >= " + std::to_string(min_batch));
  if (batch >= 0 && dims[0] != batch)
    throw EngineError(engine_prefix(e, who) + "inputs disagree on the batch size (" + std::to_string(batch) + " vs " +
                      std::to_string(dims[0]) + " for " + input_label(e, k) + ")");
  return dims[0];
}

void check_input_bytes(const Engine& e, size_t k, const void* data, int64_t bytes, int64_t batch,
                       const std::string& who) {
  int64_t want = tensor_bytes(e, e.inputs[k], batch);
  if (bytes != want || (want > 0 && data == nullptr))
    throw EngineError(engine_prefix(e, who) + input_label(e, k) + " has " + std::to_string(bytes) +
                      " bytes, expected " + std::to_string(want) + " at batch " + std::to_string(batch));
}

int64_t check_engine_inputs(const Engine& e, const std::vector<InputSpec>& inputs, int64_t min_batch,
                            const std::string& who) {
  check_input_count(e, inputs.size(), who);
  int64_t batch = -1;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].dtype.empty()) check_input_dtype(e, k, inputs[k].dtype, who);
    if (inputs[k].has_shape) batch = check_input_shape(e, k, inputs[k].dims, batch, min_batch, who);
  }
  return batch;
}

}  // namespace npu
}  // namespace ratelnn
