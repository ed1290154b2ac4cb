#include "dsa/model/bpe.h"

#include <limits>

#include "dsa/model/byte_level.h"

namespace dsa::model {

namespace {

// Ids index a dense table; anything near INT32_MAX is surely a corrupt file, not a vocabulary.
constexpr int32_t kMaxTokenId = 1 << 24;

}  // namespace

StatusOr<Bpe> Bpe::create(std::unordered_map<std::string, int32_t> vocab,
                          const std::vector<std::pair<std::string, std::string>>& merges,
                          bool ignore_merges, const std::string& file) {
  Bpe b;
  b.ignore_merges_ = ignore_merges;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      return invalid_argument(file + ": model.vocab[\"" + token + "\"] = " + std::to_string(id) +
                              ": must be in [0, " + std::to_string(kMaxTokenId) + ")");
    }
    if (static_cast<size_t>(id) >= b.tokens_.size()) {
      b.tokens_.resize(id + 1);
      b.has_token_.resize(id + 1, false);
    }
    if (b.has_token_[id]) {
      return invalid_argument(file + ": model.vocab: id " + std::to_string(id) +
                              " is given to both \"" + b.tokens_[id] + "\" and \"" + token + "\"");
    }
    b.tokens_[id] = token;
    b.has_token_[id] = true;
  }
  b.vocab_ = std::move(vocab);
  for (int v = 0; v < 256; ++v) {
    auto it = b.vocab_.find(std::string(byte_level_char(static_cast<uint8_t>(v))));
    if (it == b.vocab_.end()) {
      return invalid_argument(file + ": model.vocab lacks the byte-level token \"" +
                              std::string(byte_level_char(static_cast<uint8_t>(v))) +
                              "\" for byte " + std::to_string(v) +
                              ", so not every input could be encoded");
    }
    b.byte_ids_[v] = it->second;
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const std::string where =
        file + ": model.merges[" + std::to_string(rank) + "] = \"" + left + " " + right + "\": ";
    auto l = b.vocab_.find(left), r = b.vocab_.find(right), m = b.vocab_.find(left + right);
    if (l == b.vocab_.end())
      return invalid_argument(where + "\"" + left + "\" is not in the vocab");
    if (r == b.vocab_.end())
      return invalid_argument(where + "\"" + right + "\" is not in the vocab");
    if (m == b.vocab_.end()) {
      return invalid_argument(where + "the merged token \"" + left + right +
                              "\" is not in the vocab");
    }
    // A repeated pair keeps its first (lowest) rank.
    b.merges_.try_emplace(pair_key(l->second, r->second),
                          Merge{static_cast<int32_t>(rank), m->second});
  }
  return b;
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    std::string spelled;
    append_byte_level(word, &spelled);
    auto it = vocab_.find(spelled);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  for (char c : word) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  // Quadratic in the word length, which pre-tokenization keeps short; a long run (thousands of
  // spaces) is slow but still correct.
  while (symbols.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    int32_t best_id = -1;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = merges_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = i;
        best_id = it->second.id;
      }
    }
    if (best_id < 0) break;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<ptrdiff_t>(best) + 1);
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> Bpe::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return std::nullopt;
  return std::string_view(tokens_[id]);
}

}  // namespace dsa::model
