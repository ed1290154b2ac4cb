#include "dsa/model/byte_level.h"

#include <array>

namespace dsa::model {

namespace {

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    // The alphabet stops at U+0143, so three-byte forms never occur; kept for completeness.
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes take U+0100, U+0101, ... in byte order.
struct Tables {
  std::array<std::string, 256> chars;
  std::array<int16_t, 0x144> byte_of;  // code point -> byte, -1 outside the alphabet
  Tables() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? b : next++;
      append_utf8(cp, &chars[b]);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view byte_level_char(uint8_t b) { return tables().chars[b]; }

void append_byte_level(std::string_view bytes, std::string* out) {
  const Tables& t = tables();
  for (char c : bytes) *out += t.chars[static_cast<uint8_t>(c)];
}

size_t utf8_sequence_length(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = byte(pos);
  size_t len;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2, cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (pos + len > s.size()) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  // Reject overlong forms, surrogates and code points beyond U+10FFFF.
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
      (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return len;
}

bool byte_level_decode(std::string_view token, std::string* out) {
  const Tables& t = tables();
  const size_t start = out->size();
  for (size_t pos = 0; pos < token.size();) {
    const size_t len = utf8_sequence_length(token, pos);
    uint32_t cp = 0;
    if (len == 1) {
      cp = static_cast<uint8_t>(token[pos]);
    } else if (len == 2) {
      cp = ((static_cast<uint8_t>(token[pos]) & 0x1Fu) << 6) |
           (static_cast<uint8_t>(token[pos + 1]) & 0x3Fu);
    }
    if (len == 0 || len > 2 || cp >= t.byte_of.size() || t.byte_of[cp] < 0) {
      out->resize(start);
      return false;
    }
    out->push_back(static_cast<char>(t.byte_of[cp]));
    pos += len;
  }
  return true;
}

}  // namespace dsa::model
