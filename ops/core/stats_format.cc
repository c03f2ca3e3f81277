#include "core/stats_format.h"

#include <charconv>
#include <cstdio>

namespace ratelnn {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 bytes pass through
    }
  }
  return out + "\"";
}

std::string FormatFloat(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// {"range_exp": e, "bins": [...]} with each run of zero bins written as -(run length).
std::string HistogramJson(const AbsHistogram& h) {
  std::string out = "{\"range_exp\": " + std::to_string(h.range_exp) + ", \"bins\": [";
  out.reserve(out.size() + h.bins.size() * 8);
  int64_t zeros = 0;
  bool first = true;
  auto emit = [&](int64_t value) {  // to_chars: the digits of to_string, without its allocation
    char buf[24] = {',', ' '};
    char* begin = first ? buf + 2 : buf;
    first = false;
    const char* end = std::to_chars(buf + 2, buf + sizeof(buf), value).ptr;  // never fails
    out.append(begin, static_cast<size_t>(end - begin));
  };
  for (int64_t count : h.bins) {
    if (count == 0) {
      ++zeros;
      continue;
    }
    if (zeros > 0) emit(-zeros);
    zeros = 0;
    emit(count);
  }
  if (zeros > 0) emit(-zeros);
  return out + "]}";
}

}  // namespace

uint32_t Crc32(const char* data, size_t size) {
  static const auto* table = [] {
    auto* t = new uint32_t[256];
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc = table[(crc ^ static_cast<unsigned char>(data[i])) & 0xFFu] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

std::string SerializeStatistics(const std::map<std::string, TensorStatistics>& tensors) {
  std::string payload = "{\"tensors\": {";
  bool first = true;
  for (const auto& [name, s] : tensors) {
    if (!first) payload += ", ";
    first = false;
    payload += JsonString(name) + ": {\"min\": " + FormatFloat(s.min) +
               ", \"max\": " + FormatFloat(s.max) + ", \"ema_min\": " + FormatFloat(s.ema_min) +
               ", \"ema_max\": " + FormatFloat(s.ema_max) +
               ", \"batches\": " + std::to_string(s.batches) +
               ", \"count\": " + std::to_string(s.count);
    if (!s.histogram.bins.empty()) payload += ", \"hist\": " + HistogramJson(s.histogram);
    payload += "}";
  }
  payload += "}}\n";
  char header[64];
  std::snprintf(header, sizeof(header), "RATELSTATS %d %08x %zu\n", kStatsFormatVersion,
                Crc32(payload.data(), payload.size()), payload.size());
  return header + payload;
}

}  // namespace ratelnn
