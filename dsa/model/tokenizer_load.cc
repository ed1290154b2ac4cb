// Tokenizer::load: reads tokenizer.json into the parts of a Tokenizer, rejecting every feature
// the encoder does not implement (see tokenizer.h) with a Status naming the file and the key.
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "dsa/model/json_reader.h"
#include "dsa/model/model_limits.h"
#include "dsa/model/tokenizer.h"

namespace dsa::model {

using nlohmann::json;

namespace {
constexpr size_t kMaxPreTokenizerSteps = 64;
}  // namespace

class TokenizerLoader {
 public:
  TokenizerLoader(const std::string& file, const json& root)
      : file_(file), root_(root), r_(file, root) {}

  StatusOr<Tokenizer> load() {
    if (!root_.is_object()) return invalid_argument(file_ + ": top level must be a JSON object");
    DSA_RETURN_IF_ERROR(check_null_or_absent("normalizer"));
    DSA_RETURN_IF_ERROR(read_pre_tokenizer());
    DSA_RETURN_IF_ERROR(read_decoder());
    DSA_RETURN_IF_ERROR(read_model());
    DSA_RETURN_IF_ERROR(read_added_tokens());
    int32_t end = t_.bpe_->id_end();
    for (const AddedToken& a : t_.added_) end = std::max(end, a.id + 1);
    t_.vocab_size_ = end;
    t_.source_ = file_;
    t_.index_added_tokens();
    find_special_ids();
    return std::move(t_);
  }

 private:
  Status check_null_or_absent(const char* key) {
    if (!r_.has(key) || root_[key].is_null()) return ok_status();
    return unsupported(key, root_[key], "unsupported; only null is implemented");
  }
  Status unsupported(std::string_view key, const json& value, std::string_view why) {
    return Status(StatusCode::kUnimplemented,
                  file_ + ": " + std::string(key) + " = " + value.dump() + ": " + std::string(why));
  }

  // ByteLevel as the tokenizer.json writes it, at `key` (for messages).
  Status read_byte_level(const JsonReader& r, const std::string& key) {
    bool prefix = false, use_regex = true;
    if (r.has("add_prefix_space")) DSA_RETURN_IF_ERROR(r.get("add_prefix_space", &prefix));
    if (prefix) return unsupported(key + ".add_prefix_space", true, "unsupported");
    if (r.has("use_regex")) DSA_RETURN_IF_ERROR(r.get("use_regex", &use_regex));
    if (use_regex) return add_split(kGpt2SplitPattern, false, key);
    return ok_status();
  }

  Status add_split(std::string_view pattern, bool literal, const std::string& key) {
    StatusOr<Regex> re = Regex::compile(pattern, literal);
    if (!re.ok()) return re.status().with_context(file_ + ": " + key);
    t_.splits_.push_back(std::move(re).value());
    return ok_status();
  }

  Status read_split(const JsonReader& r, const std::string& key) {
    std::string behavior;
    DSA_RETURN_IF_ERROR(r.get("behavior", &behavior));
    if (behavior != "Isolated") {
      return unsupported(key + ".behavior", behavior, "unsupported; only \"Isolated\"");
    }
    bool invert = false;
    if (r.has("invert")) DSA_RETURN_IF_ERROR(r.get("invert", &invert));
    if (invert) return unsupported(key + ".invert", true, "unsupported");
    DSA_ASSIGN_OR_RETURN(JsonReader p, r.child("pattern"));
    std::string pattern;
    if (p.has("Regex")) {
      DSA_RETURN_IF_ERROR(p.get("Regex", &pattern));
      return add_split(pattern, false, key);
    }
    DSA_RETURN_IF_ERROR(p.get("String", &pattern));
    return add_split(pattern, true, key);
  }

  Status read_pre_tokenizer() {
    DSA_ASSIGN_OR_RETURN(JsonReader pre, r_.child("pre_tokenizer"));
    std::string type;
    DSA_RETURN_IF_ERROR(pre.get("type", &type));
    if (type == "ByteLevel") return read_byte_level(pre, "pre_tokenizer");
    if (type != "Sequence") {
      return unsupported("pre_tokenizer.type", type, "unsupported; ByteLevel or Sequence");
    }
    DSA_ASSIGN_OR_RETURN(const json* steps, pre.find("pretokenizers"));
    // Every piece of every input goes through each step; real files have four or five.
    if (!steps->is_array() || steps->empty() || steps->size() > kMaxPreTokenizerSteps) {
      return pre.bad(
          "pretokenizers", *steps,
          "must be an array of 1 to " + std::to_string(kMaxPreTokenizerSteps) + " steps");
    }
    for (size_t i = 0; i < steps->size(); ++i) {
      const std::string key = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
      const json& step = (*steps)[i];
      JsonReader sr(file_, step, key + ".");
      std::string step_type;
      DSA_RETURN_IF_ERROR(sr.get("type", &step_type));
      const bool last = i + 1 == steps->size();
      // ByteLevel maps bytes to the BPE alphabet, so it must come after every split.
      if (step_type == "ByteLevel" && last) {
        DSA_RETURN_IF_ERROR(read_byte_level(sr, key));
      } else if (step_type == "Split") {
        DSA_RETURN_IF_ERROR(read_split(sr, key));
      } else {
        return unsupported(key + ".type", step_type,
                           "unsupported; Split steps followed by one final ByteLevel");
      }
      if (last && step_type != "ByteLevel") {
        return unsupported(key + ".type", step_type, "the sequence must end with ByteLevel");
      }
    }
    return ok_status();
  }

  Status read_decoder() {
    DSA_ASSIGN_OR_RETURN(JsonReader dec, r_.child("decoder"));
    std::string type;
    DSA_RETURN_IF_ERROR(dec.get("type", &type));
    if (type != "ByteLevel") return unsupported("decoder.type", type, "unsupported; ByteLevel");
    return ok_status();
  }

  Status read_model() {
    DSA_ASSIGN_OR_RETURN(JsonReader m, r_.child("model"));
    std::string type;
    DSA_RETURN_IF_ERROR(m.get("type", &type));
    if (type != "BPE") return unsupported("model.type", type, "unsupported; only \"BPE\"");
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
      if (!m.has(key)) continue;
      const json& v = root_["model"][key];
      if (!(v.is_null() || (v.is_string() && v.get<std::string>().empty()))) {
        return unsupported(std::string("model.") + key, v, "unsupported; must be null");
      }
    }
    bool byte_fallback = false, ignore_merges = false;
    if (m.has("byte_fallback")) DSA_RETURN_IF_ERROR(m.get("byte_fallback", &byte_fallback));
    if (byte_fallback) return unsupported("model.byte_fallback", true, "unsupported");
    if (m.has("ignore_merges")) DSA_RETURN_IF_ERROR(m.get("ignore_merges", &ignore_merges));

    DSA_ASSIGN_OR_RETURN(const json* jv, m.find("vocab"));
    if (!jv->is_object()) {
      return invalid_argument(file_ + ": model.vocab is " + jv->type_name() +
                              ", must be an object of token -> id");
    }
    std::unordered_map<std::string, int32_t> vocab;
    for (const auto& [token, id] : jv->items()) {
      // Unsigned values past int64 read as negative here, so they fail the same test.
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxVocabSize) {
        return m.bad("vocab[\"" + token + "\"]", id,
                     "must be an integer id in [0, " + std::to_string(kMaxVocabSize - 1) + "]");
      }
      vocab.emplace(token, id.get<int32_t>());
    }
    DSA_ASSIGN_OR_RETURN(auto merges, read_merges(m));
    DSA_ASSIGN_OR_RETURN(Bpe bpe, Bpe::create(std::move(vocab), merges, ignore_merges, file_));
    t_.bpe_.emplace(std::move(bpe));
    return ok_status();
  }

  StatusOr<std::vector<std::pair<std::string, std::string>>> read_merges(const JsonReader& m) {
    DSA_ASSIGN_OR_RETURN(const json* jm, m.find("merges"));
    if (!jm->is_array()) {
      return invalid_argument(file_ + ": model.merges is " + std::string(jm->type_name()) +
                              ", must be an array");
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(jm->size());
    for (size_t i = 0; i < jm->size(); ++i) {
      const json& e = (*jm)[i];
      const std::string key = "merges[" + std::to_string(i) + "]";
      if (e.is_string()) {
        // HF's legacy form "a b": exactly one space (byte-level tokens never contain one).
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos) {
          return m.bad(key, e, "must be \"left right\" with exactly one space");
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        return m.bad(key, e, "must be \"left right\" or [\"left\", \"right\"]");
      }
    }
    return merges;
  }

  Status read_added_tokens() {
    if (!r_.has("added_tokens")) return ok_status();
    const json& list = root_["added_tokens"];
    if (!list.is_array()) return r_.bad("added_tokens", list, "must be an array");
    std::unordered_set<int32_t> added_ids;
    std::unordered_map<std::string, int32_t> added_contents;
    for (size_t i = 0; i < list.size(); ++i) {
      JsonReader a(file_, list[i], "added_tokens[" + std::to_string(i) + "].");
      AddedToken t;
      int64_t id;
      DSA_RETURN_IF_ERROR(a.get_in_range("id", 0, kMaxVocabSize - 1, &id));
      t.id = static_cast<int32_t>(id);
      DSA_RETURN_IF_ERROR(a.get("content", &t.content));
      DSA_RETURN_IF_ERROR(a.require(!t.content.empty(), "content", t.content, "must not be empty"));
      if (a.has("special")) DSA_RETURN_IF_ERROR(a.get("special", &t.special));
      for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
        bool on = false;
        if (a.has(flag)) DSA_RETURN_IF_ERROR(a.get(flag, &on));
        if (on) {
          return unsupported("added_tokens[" + std::to_string(i) + "]." + flag, true,
                             "unsupported");
        }
      }
      // The vocab may list the same token under the same id; a different token there is a
      // conflict that would make decode ambiguous.
      std::optional<std::string_view> in_vocab = t_.bpe_->id_to_token(t.id);
      if (in_vocab && *in_vocab != t.content) {
        return a.bad("id", id, "already the vocab's id of \"" + std::string(*in_vocab) + "\"");
      }
      // Hashed, not a scan of the earlier ones: a file may list a million added tokens.
      auto id_seen = added_ids.find(t.id);
      if (id_seen != added_ids.end() || added_contents.count(t.content) != 0) {
        const int32_t other = id_seen != added_ids.end() ? t.id : added_contents.at(t.content);
        return a.bad("content", t.content, "duplicates added token id " + std::to_string(other));
      }
      added_ids.insert(t.id);
      added_contents.emplace(t.content, t.id);
      t_.added_.push_back(std::move(t));
    }
    return ok_status();
  }

  void find_special_ids() {
    auto first_of = [&](std::initializer_list<std::string_view> names) {
      for (std::string_view n : names) {
        for (const AddedToken& a : t_.added_) {
          if (a.special && a.content == n) return a.id;
        }
      }
      return -1;
    };
    t_.bos_id_ = first_of({"<｜begin▁of▁sentence｜>", "<s>"});
    t_.eos_id_ = first_of({"<｜end▁of▁sentence｜>", "</s>", "<|endoftext|>"});
  }

  const std::string& file_;
  const json& root_;
  JsonReader r_;
  Tokenizer t_;
};

StatusOr<Tokenizer> Tokenizer::parse(std::string_view json_text, const std::string& file) {
  DSA_ASSIGN_OR_RETURN(json root, parse_json(json_text, file));
  return TokenizerLoader(file, root).load();
}

StatusOr<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  DSA_ASSIGN_OR_RETURN(std::string text, read_text_file(path.string(), kMaxTokenizerFileBytes));
  return parse(text, path.string());
}

}  // namespace dsa::model
