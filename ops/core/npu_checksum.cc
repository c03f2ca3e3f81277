// The engine checksum of npu_checksum.h: table-driven CRC-32, eight bytes a step.
#include "core/npu_checksum.h"

#include <cstdio>
#include <string>

#include "core/npu_wire.h"

namespace ratelnn {
namespace npu {

namespace {
struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = t[0][t[s - 1][i] & 0xFF] ^ (t[s - 1][i] >> 8);
  }
};
const Tables& tables() {
  static const Tables tables;
  return tables;
}
std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}
}  // namespace

uint32_t engine_crc32(const uint8_t* data, size_t size) {
  const auto& t = tables().t;
  uint32_t c = 0xFFFFFFFFu;
  for (; size >= 8; data += 8, size -= 8) {  // slicing by 8: bytes combined little-endian
    uint32_t lo = c ^ (uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 | uint32_t(data[3]) << 24);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][data[4]] ^
        t[2][data[5]] ^ t[1][data[6]] ^ t[0][data[7]];
  }
  for (; size; ++data, --size) c = t[0][(c ^ *data) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

size_t verify_engine_checksum(const uint8_t* data, size_t size) {
  if (data == nullptr || size < kChecksumBytes || data[size - kChecksumBytes] != kChecksumTag)
    throw EngineError("no checksum at the end of the " + std::to_string(size) +
                      " engine bytes: they are cut short, or were compiled by a ratelnn older than engine "
                      "format 1.1; compile the model again (to_npu)");
  const uint8_t* p = data + size - 4;
  uint32_t stored = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
  uint32_t computed = engine_crc32(data, size - kChecksumBytes);
  if (stored != computed)
    throw EngineError("checksum mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                      "): the engine bytes are corrupted; compile the model again (to_npu)");
  return size - kChecksumBytes;
}

}  // namespace npu
}  // namespace ratelnn
