#include "dsa/model/tokenizer.h"

#include <algorithm>

#include "dsa/model/byte_level.h"

namespace dsa::model {

void Tokenizer::index_added_tokens() {
  added_by_first_byte_.assign(256, {});
  added_index_.assign(static_cast<size_t>(vocab_size_), -1);
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<uint8_t>(added_[i].content[0])].push_back(
        static_cast<int32_t>(i));
    added_index_[added_[i].id] = static_cast<int32_t>(i);
  }
  // Longest first, so that "<a><b>" wins over "<a>" at the same position (HF matches
  // leftmost-longest).
  for (auto& bucket : added_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](int32_t a, int32_t b) {
      return added_[a].content.size() > added_[b].content.size();
    });
  }
}

const AddedToken* Tokenizer::match_added(std::string_view text, size_t pos) const {
  for (int32_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
    const std::string& c = added_[i].content;
    if (text.compare(pos, c.size(), c) == 0) return &added_[i];
  }
  return nullptr;
}

std::vector<std::string_view> Tokenizer::pre_tokenize(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const Regex& split : splits_) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) split.split_isolated(piece, &next);
    pieces.swap(next);
  }
  return pieces;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  // A model without a BOS (GLM-5: bos_id() -1 from set_special_ids) gets nothing prepended.
  if (add_bos && bos_id_ >= 0) ids.push_back(bos_id_);
  auto encode_plain = [&](std::string_view plain) {
    for (std::string_view piece : pre_tokenize(plain)) bpe_->encode_word(piece, &ids);
  };
  size_t plain_begin = 0;
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* t = added_.empty() ? nullptr : match_added(text, pos);
    if (t == nullptr) {
      ++pos;
      continue;
    }
    encode_plain(text.substr(plain_begin, pos - plain_begin));
    ids.push_back(t->id);
    pos += t->content.size();
    plain_begin = pos;
  }
  encode_plain(text.substr(plain_begin));
  return ids;
}

StatusOr<std::string> Tokenizer::decode(std::span<const int32_t> ids,
                                        bool skip_special_tokens) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id >= 0 && id < vocab_size_ && added_index_[id] >= 0) {
      const AddedToken& t = added_[added_index_[id]];
      if (!(skip_special_tokens && t.special)) out += t.content;
      continue;
    }
    std::optional<std::string_view> token = bpe_->id_to_token(id);
    if (!token) {
      return invalid_argument("ids[" + std::to_string(i) + "] = " + std::to_string(id) +
                              ": not a token id (vocab size " + std::to_string(vocab_size_) + ")");
    }
    // HF's ByteLevel decoder: a token with a character outside the byte alphabet is emitted as
    // its own UTF-8.
    if (!byte_level_decode(*token, &out)) out += *token;
  }
  return out;
}

Status Tokenizer::set_special_ids(int32_t bos, int32_t eos) {
  for (auto [name, id] : {std::pair{"bos", bos}, std::pair{"eos", eos}}) {
    if (id == -1 && name[0] == 'b') continue;  // the model has no BOS
    if (!has_token(id)) {
      return invalid_argument(std::string(name) + " id " + std::to_string(id) +
                              ": not a token id (vocab size " + std::to_string(vocab_size_) + ")");
    }
  }
  bos_id_ = bos;
  eos_id_ = eos;
  return ok_status();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_) {
    if (t.content == token) return t.id;
  }
  return bpe_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id >= 0 && id < vocab_size_ && added_index_[id] >= 0) return added_[added_index_[id]].content;
  std::optional<std::string_view> token = bpe_->id_to_token(id);
  if (!token) return std::nullopt;
  return std::string(*token);
}

bool Tokenizer::has_token(int32_t id) const {
  return (id >= 0 && id < vocab_size_ && added_index_[id] >= 0) || bpe_->id_to_token(id);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && added_index_[id] >= 0 && added_[added_index_[id]].special;
}

}  // namespace dsa::model
