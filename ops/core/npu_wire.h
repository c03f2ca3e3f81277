// Bounds-checked reader of the protobuf wire format (no libprotobuf).
//
// Every read checks the remaining length first; malformed input throws EngineError.
// Used only by npu_engine.cc to decode ratelnn/proto/engine.proto, whose field numbers and
// enum ranges it takes from npu_format.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace ratelnn {
namespace npu {

// Any problem with an engine: malformed bytes, inconsistent contents, bad run-time inputs.
class EngineError : public std::runtime_error {
 public:
  explicit EngineError(const std::string& msg) : std::runtime_error(msg) {}
};

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool done() const { return p_ >= end_; }

  // Reads a field key; returns the field number and stores the wire type.
  uint32_t key(int* wire_type) {
    uint64_t k = varint();
    *wire_type = static_cast<int>(k & 7);
    uint64_t field = k >> 3;
    if (field == 0 || field > 0x1FFFFFFF) throw EngineError("malformed protobuf: bad field number");
    return static_cast<uint32_t>(field);
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) throw EngineError("malformed protobuf: truncated varint");
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw EngineError("malformed protobuf: varint longer than 10 bytes");
  }

  // A length-delimited payload: a sub-reader over it (the length is bounded by the buffer).
  WireReader sub() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) throw EngineError("malformed protobuf: length past end of buffer");
    WireReader r(p_, static_cast<size_t>(n));
    p_ += n;
    return r;
  }

  uint64_t fixed(int nbytes) {
    if (static_cast<size_t>(end_ - p_) < static_cast<size_t>(nbytes))
      throw EngineError("malformed protobuf: truncated fixed-width field");
    uint64_t v = 0;
    for (int i = 0; i < nbytes; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += nbytes;
    return v;
  }

  void skip(int wire_type) {
    switch (wire_type) {
      case kVarint: varint(); return;
      case kFixed64: fixed(8); return;
      case kLengthDelimited: sub(); return;
      case kFixed32: fixed(4); return;
      default: throw EngineError("malformed protobuf: unsupported wire type " + std::to_string(wire_type));
    }
  }

  const uint8_t* data() const { return p_; }
  size_t size() const { return static_cast<size_t>(end_ - p_); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace npu
}  // namespace ratelnn
