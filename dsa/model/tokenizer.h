// Tokenizer: byte-level BPE read from a Hugging Face tokenizer.json (GPT-2, DeepSeek-V3 layouts).
//
// Supported file: normalizer null; pre_tokenizer ByteLevel (add_prefix_space false, GPT-2 regex
// when use_regex) or a Sequence of Split(Regex|String, behavior Isolated, invert false) steps
// ending in ByteLevel; model BPE (merges as "a b" strings or [a, b] pairs, no dropout, no
// subword prefix/suffix, no byte_fallback); decoder ByteLevel; added_tokens without
// lstrip/rstrip/single_word. post_processor is ignored: BOS is added by encode's flag. Anything
// else is rejected at load with a Status naming the file and the feature, rather than tokenizing
// differently from HF.
//
// Encoding never fails and never drops a byte: decode(encode(s)) == s for every byte string s.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/model/bpe.h"
#include "dsa/model/regex_split.h"

namespace dsa::model {

struct AddedToken {
  int32_t id = 0;
  std::string content;  // matched verbatim in the input, before pre-tokenization
  bool special = false;
};

class Tokenizer {
 public:
  static StatusOr<Tokenizer> load(const std::filesystem::path& path);
  // Same, on text in memory; `file` only names the source in messages.
  static StatusOr<Tokenizer> parse(std::string_view json_text, const std::string& file);

  // Added tokens are cut out first (leftmost, longest); the text between them is pre-tokenized
  // and each piece BPE-encoded. `add_bos` prepends bos_id(); nothing when that is -1 (a model
  // without a BOS, such as GLM-5).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false) const;
  // Concatenates the bytes of each id (added tokens give their content). kInvalidArgument
  // "ids[3] = 99999: not a token id (vocab size 6144)" for an id no token has. The result is raw
  // bytes: unlike HF, invalid UTF-8 is kept rather than replaced by U+FFFD, so round trips are
  // exact; callers that print it must sanitise.
  StatusOr<std::string> decode(std::span<const int32_t> ids,
                               bool skip_special_tokens = false) const;

  // 1 + the largest id of the vocab and the added tokens (HF's get_vocab_size(true)).
  int32_t vocab_size() const { return vocab_size_; }
  // From well-known added tokens (<｜begin▁of▁sentence｜>, <s>; <｜end▁of▁sentence｜>, </s>,
  // <|endoftext|>) at load, or set_special_ids; -1 when unknown.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Takes BOS/EOS from config.json (bos_token_id, eos_token_id); both must name tokens, except
  // bos -1: the model has none (ModelConfig::has_bos).
  Status set_special_ids(int32_t bos, int32_t eos);

  // Whether `id` names a token (of the vocab or an added one); ids in [0, vocab_size()) may have
  // none when the file leaves holes.
  bool has_token(int32_t id) const;
  // The file the tokenizer was read from, for messages.
  const std::string& source() const { return source_; }

  // Added-token content or byte-level vocab string ("Ġworld") -> id.
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // The pre-tokenized pieces of `text` (no added-token matching), in order; exposed for tests.
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;

 private:
  friend class TokenizerLoader;
  Tokenizer() = default;
  void index_added_tokens();
  const AddedToken* match_added(std::string_view text, size_t pos) const;

  std::optional<Bpe> bpe_;
  std::vector<Regex> splits_;  // applied in order, each to every piece of the previous step
  std::vector<AddedToken> added_;
  std::vector<std::vector<int32_t>> added_by_first_byte_;  // indices into added_, longest first
  std::vector<int32_t> added_index_;                       // id -> index into added_, -1 when none
  std::string source_;
  int32_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

}  // namespace dsa::model
