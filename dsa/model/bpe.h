// Byte-level BPE model: a vocabulary of byte-level strings and a ranked list of merges. A word
// (one pre-tokenized piece, as raw bytes) starts as one symbol per byte and the adjacent pair with
// the lowest merge rank is merged, leftmost first, until no pair has a merge - exactly the order
// of Hugging Face's BPE (its priority queue pops the lowest (rank, position) first).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dsa/core/status.h"

namespace dsa::model {

class Bpe {
 public:
  // `vocab`: token -> id (ids >= 0, distinct). `merges`: pairs of tokens, rank = index; each side
  // and their concatenation must be in the vocab. Every one of the 256 byte-level characters must
  // be in the vocab, which is what makes every byte string encodable. `ignore_merges`: a word
  // that is itself a token is emitted whole (HF's BPE option). Messages are prefixed by `file`.
  static StatusOr<Bpe> create(std::unordered_map<std::string, int32_t> vocab,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              bool ignore_merges, const std::string& file);

  // Appends the ids of `word` (raw bytes, any values).
  void encode_word(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The byte-level token of `id`, or nullopt when no vocab entry has that id.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // 1 + the largest vocab id.
  int32_t id_end() const { return static_cast<int32_t>(tokens_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;  // id of the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;  // id -> token; holes are empty with has_token_ false
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256] = {};  // id of each byte's one-character token
  bool ignore_merges_ = false;
};

}  // namespace dsa::model
