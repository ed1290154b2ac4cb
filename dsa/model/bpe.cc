#include "dsa/model/bpe.h"

#include <algorithm>
#include <functional>

#include "dsa/model/byte_level.h"
#include "dsa/model/json_reader.h"
#include "dsa/model/model_limits.h"

namespace dsa::model {

namespace {

// Ids index dense tables (id -> token here, id -> added token in Tokenizer) and, through the
// model, the embedding: the vocabulary cap of model_limits.h bounds them all.
constexpr int64_t kMaxTokenId = kMaxVocabSize;

// A token of the file in a message: vocab keys and merges may be arbitrarily long.
std::string in_quotes(std::string_view token) {
  std::string s = "\"";
  s += clip_for_message(token);
  s += '"';
  return s;
}

}  // namespace

StatusOr<Bpe> Bpe::create(std::unordered_map<std::string, int32_t> vocab,
                          const std::vector<std::pair<std::string, std::string>>& merges,
                          bool ignore_merges, const std::string& file) {
  Bpe b;
  b.ignore_merges_ = ignore_merges;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= kMaxTokenId) {
      return invalid_argument(file + ": model.vocab[" + in_quotes(token) +
                              "] = " + std::to_string(id) + ": must be in [0, " +
                              std::to_string(kMaxTokenId) + ")");
    }
    if (static_cast<size_t>(id) >= b.tokens_.size()) {
      b.tokens_.resize(id + 1);
      b.has_token_.resize(id + 1, false);
    }
    if (b.has_token_[id]) {
      return invalid_argument(file + ": model.vocab: id " + std::to_string(id) +
                              " is given to both " + in_quotes(b.tokens_[id]) + " and " +
                              in_quotes(token));
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
    auto l = b.vocab_.find(left), r = b.vocab_.find(right), m = b.vocab_.find(left + right);
    if (l == b.vocab_.end() || r == b.vocab_.end() || m == b.vocab_.end()) {
      const std::string where = file + ": model.merges[" + std::to_string(rank) +
                                "] = " + in_quotes(left + " " + right) + ": ";
      if (l == b.vocab_.end())
        return invalid_argument(where + in_quotes(left) + " is not in the vocab");
      if (r == b.vocab_.end()) {
        return invalid_argument(where + in_quotes(right) + " is not in the vocab");
      }
      return invalid_argument(where + "the merged token " + in_quotes(left + right) +
                              " is not in the vocab");
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
  // One symbol per byte in a linked list; candidate merges in a min-heap by (rank, position of
  // the left symbol). Popping the least valid candidate and merging it is the same order as
  // rescanning for the lowest rank, leftmost first, but O(n log n) instead of O(n^2): a long
  // run that pre-tokenization keeps whole (a megabyte of letters) must not stall encode.
  constexpr size_t kNone = static_cast<size_t>(-1);
  struct Symbol {
    int32_t id;   // -1 once merged into its left neighbour
    size_t prev;  // kNone at the ends
    size_t next;
  };
  using Candidate = std::pair<int32_t, size_t>;  // (rank, left symbol)
  // Scratch reused across calls on this thread: most words are a few bytes, and allocating per
  // word would cost more than merging them. Released again after an unusually long word.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.resize(word.size());
  heap.clear();
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(word[i])], i == 0 ? kNone : i - 1,
                  i + 1 == word.size() ? kNone : i + 1};
  }
  auto merge_at = [&](size_t left) -> const Merge* {
    const size_t right = symbols[left].next;
    if (right == kNone) return nullptr;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    return it == merges_.end() ? nullptr : &it->second;
  };
  const auto later = std::greater<Candidate>();  // makes the std heap a min-heap
  auto push = [&](size_t left) {
    if (const Merge* m = merge_at(left)) {
      heap.emplace_back(m->rank, left);
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (size_t i = 0; i + 1 < word.size(); ++i) {
    if (const Merge* m = merge_at(i)) heap.emplace_back(m->rank, i);
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const auto [rank, left] = heap.back();
    heap.pop_back();
    // A candidate goes stale when either symbol has changed since it was pushed; a rank names
    // one pair, so the pair there now still having this rank means it is current.
    if (symbols[left].id < 0) continue;
    const Merge* m = merge_at(left);
    if (m == nullptr || m->rank != rank) continue;
    Symbol& l = symbols[left];
    Symbol& r = symbols[l.next];
    l.id = m->id;
    r.id = -1;
    l.next = r.next;
    if (l.next != kNone) symbols[l.next].prev = left;
    if (l.prev != kNone) push(l.prev);
    push(left);
  }
  for (size_t i = 0; i != kNone; i = symbols[i].next) out->push_back(symbols[i].id);
  if (symbols.capacity() > (size_t{1} << 16)) {
    symbols = {};
    heap = {};
  }
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
