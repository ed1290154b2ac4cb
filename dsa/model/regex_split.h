// Regex splitting for pre-tokenizers (Hugging Face Split with behavior "Isolated", and the GPT-2
// regex of ByteLevel). Patterns use Unicode properties (\p{L}, \p{N}) and lookahead, so they run
// on PCRE2 in UTF + UCP mode, compiled once at load. Input need not be valid UTF-8: invalid bytes
// can never be matched and end up in the gaps, which are kept, so no byte is ever dropped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"

struct pcre2_real_code_8;  // pcre2.h's pcre2_code for 8-bit code units

namespace dsa::model {

// The GPT-2 pattern HF's ByteLevel pre-tokenizer applies when use_regex is true.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class Regex {
 public:
  // `literal` matches `pattern` verbatim (HF's {"String": ...} split patterns). A pattern that
  // does not compile is kInvalidArgument with PCRE2's message and offset.
  static StatusOr<Regex> compile(std::string_view pattern, bool literal = false);

  // Appends to `out` the non-empty pieces of `text` in order: every match and every gap between
  // matches (HF "Isolated"). The pieces concatenate back to `text`.
  void split_isolated(std::string_view text, std::vector<std::string_view>* out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Free {
    void operator()(pcre2_real_code_8* code) const;
  };
  std::string pattern_;
  std::unique_ptr<pcre2_real_code_8, Free> code_;
};

}  // namespace dsa::model
