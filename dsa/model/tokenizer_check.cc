#include "dsa/model/tokenizer_check.h"

#include <algorithm>
#include <string>

namespace dsa::model {

namespace {

Status check_special(const Tokenizer& t, const char* key, int64_t config_id, int32_t own_id,
                     const char* own_name) {
  const std::string src = t.source();
  const std::string id = std::to_string(config_id);
  if (config_id < 0 || config_id >= t.vocab_size() ||
      !t.has_token(static_cast<int32_t>(config_id))) {
    return invalid_argument("config.json: " + std::string(key) + " = " + id +
                            ": names no token of " + src);
  }
  if (own_id >= 0 && own_id != config_id) {
    return invalid_argument("config.json: " + std::string(key) + " = " + id + ", but " + src +
                            " has its " + own_name + " token at id " + std::to_string(own_id));
  }
  return ok_status();
}

}  // namespace

Status check_tokenizer_matches(const Tokenizer& t, const ModelConfig& c) {
  const std::string src = t.source();
  const int64_t have = t.vocab_size();
  const std::string sizes =
      src + " has " + std::to_string(have) +
      " token ids (1 + its largest id), config.json vocab_size = " + std::to_string(c.vocab_size);
  if (have > c.vocab_size) {
    return invalid_argument(sizes + ": encode could give ids [" + std::to_string(c.vocab_size) +
                            ", " + std::to_string(have) + ") past the embedding's rows");
  }
  int64_t holes = 0, first_hole = -1;
  for (int64_t id = 0; id < have; ++id) {
    if (t.has_token(static_cast<int32_t>(id))) continue;
    if (holes++ == 0) first_hole = id;
  }
  if (holes > 0) {
    return invalid_argument(src + ": " + std::to_string(holes) + " ids below its largest id " +
                            std::to_string(have - 1) + " name no token (the first is " +
                            std::to_string(first_hole) +
                            "): the model could sample them and they would not decode");
  }
  if (c.has_bos()) {
    DSA_RETURN_IF_ERROR(check_special(t, "bos_token_id", c.bos_token_id, t.bos_id(), "BOS"));
  }
  if (c.eos_token_ids.size() <= 1) {
    return check_special(t, "eos_token_id", c.eos_token_id, t.eos_id(), "EOS");
  }
  // A list (GLM-5): each id names a token, and the tokenizer's own EOS, when it knows one, is
  // among them (GLM-5's <|endoftext|> is the first).
  for (int64_t id : c.eos_token_ids) {
    DSA_RETURN_IF_ERROR(check_special(t, "eos_token_id", id, -1, "EOS"));
  }
  const int32_t own = t.eos_id();
  if (own >= 0 &&
      std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), own) == c.eos_token_ids.end()) {
    return invalid_argument("config.json: eos_token_id lists none of " + src +
                            "'s EOS token at id " + std::to_string(own));
  }
  return ok_status();
}

int64_t sampleable_vocab(const Tokenizer* tokenizer, const ModelConfig& c) {
  if (tokenizer == nullptr) return c.vocab_size;
  return std::min<int64_t>(tokenizer->vocab_size(), c.vocab_size);
}

}  // namespace dsa::model
