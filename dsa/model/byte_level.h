// The byte-level alphabet of GPT-2-style BPE (Hugging Face ByteLevel pre-tokenizer and decoder):
// each of the 256 byte values is shown as one printable Unicode character, so any byte string,
// valid UTF-8 or not, becomes a string of vocabulary symbols and back without loss.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsa::model {

// UTF-8 of the character that stands for byte `b` ("A" for 0x41, "Ġ" for 0x20).
std::string_view byte_level_char(uint8_t b);

// Appends the byte-level spelling of `bytes` to `out`.
void append_byte_level(std::string_view bytes, std::string* out);

// Appends the bytes that the byte-level string `token` stands for. Returns false, leaving `out`
// as it was, when `token` holds a character outside the alphabet (or is not valid UTF-8).
bool byte_level_decode(std::string_view token, std::string* out);

// Length of the valid UTF-8 sequence at text[pos], or 0 when the bytes there are not one.
size_t utf8_sequence_length(std::string_view text, size_t pos);

}  // namespace dsa::model
