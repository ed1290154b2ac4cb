// Incremental detokenization (what a streaming client and stop strings need): token ids go in as
// they are emitted, valid UTF-8 text comes out. The tokenizer's byte-level decoding yields raw
// bytes, and a token may end inside a multi-byte character, so the bytes of an incomplete trailing
// sequence are held back until the next token completes them. Invalid sequences become U+FFFD, one
// per maximal invalid subpart (the Unicode "substitution of maximal subparts" rule, which is what
// Python's bytes.decode(errors="replace") — and so Hugging Face's decode — does). Each token is
// decoded once: the cost per token is its own bytes, not the whole output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dsa/core/status.h"
#include "dsa/model/tokenizer.h"

namespace dsa::model {

// `bytes` as valid UTF-8 (invalid and truncated sequences replaced by U+FFFD).
std::string sanitize_utf8(std::string_view bytes);

class TextStream {
 public:
  explicit TextStream(const Tokenizer* tokenizer = nullptr) : tokenizer_(tokenizer) {}

  // Decodes `ids` (special tokens skipped) and appends what is now complete to text().
  // InvalidArgument for an id the tokenizer does not have.
  Status push(std::span<const int32_t> ids);
  // The end of the stream: a held-back incomplete sequence becomes U+FFFD.
  void finish();

  // Valid UTF-8 decoded so far (excluding a held-back incomplete sequence).
  const std::string& text() const { return text_; }
  // Cuts text() to its first `size` bytes (a stop string and what follows it are not emitted).
  void truncate(size_t size);

 private:
  const Tokenizer* tokenizer_;
  std::string text_;
  std::string pending_;  // raw bytes of an incomplete trailing sequence (at most 3)
};

}  // namespace dsa::model
