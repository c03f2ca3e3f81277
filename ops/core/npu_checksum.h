// The engine checksum (ratelnn/proto/engine.proto, Engine.checksum, format 1.1): CRC-32 with
// zlib's polynomial (Python's zlib.crc32) of every byte before the checksum field, which is
// the last 5 bytes of the engine: tag kChecksumTag, then the CRC as 4 little-endian bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/npu_format.h"

namespace ratelnn {
namespace npu {

constexpr uint8_t kChecksumTag = uint8_t((field::Engine::checksum << 3) | 5);  // fixed32: 0x6d
constexpr size_t kChecksumBytes = 5;

// CRC-32 (reflected 0xEDB88320, init and final xor 0xFFFFFFFF) of data[0 .. size).
uint32_t engine_crc32(const uint8_t* data, size_t size);

// Checks the trailing checksum of engine bytes; returns the size of the bytes it covers
// (size - kChecksumBytes).  Throws EngineError (no engine prefix) when it is absent or wrong.
size_t verify_engine_checksum(const uint8_t* data, size_t size);

}  // namespace npu
}  // namespace ratelnn
