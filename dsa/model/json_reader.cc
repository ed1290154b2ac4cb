#include "dsa/model/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dsa/model/model_limits.h"

namespace dsa::model {

using nlohmann::json;

namespace {

// Builds the document from nlohmann's SAX events, refusing what the DOM parser would accept
// silently or expensively: nesting deeper than kMaxJsonDepth and a key given twice in one object
// (the DOM parser keeps the last). Errors come back as values, never exceptions. Its own builder
// rather than nlohmann's callback parser, whose end_object scans the whole parent container (an
// array of 200k objects takes 20 s to parse).
class DocumentBuilder : public json::json_sax_t {
 public:
  explicit DocumentBuilder(json* root) : root_(root) {}

  bool null() override { return put(nullptr); }
  bool boolean(bool v) override { return put(v); }
  bool number_integer(json::number_integer_t v) override { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) override { return put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) override { return put(v); }
  bool string(json::string_t& v) override { return put(std::move(v)); }
  bool binary(json::binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(json::string_t& k) override {
    last_key_ = k;
    if (open_.back()->contains(k)) {
      error_ = "key \"" + clip_for_message(k) + "\" appears twice in one object";
      return false;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) override {
    // The parser quotes the token it stopped in, which may be a whole unterminated string.
    error_ = "not valid JSON: " + clip_for_message(e.what(), 400) + near_key();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  // Where the next value goes: the root, the end of the open array, or the open object at key_.
  json* slot() {
    if (open_.empty()) return root_;
    json& top = *open_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return &top[key_];
  }
  template <class V>
  bool put(V&& v) {
    *slot() = json(std::forward<V>(v));
    return true;
  }
  bool open(json empty) {
    if (open_.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      error_ = "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels" + near_key();
      return false;
    }
    // Pointers to open containers stay valid: only the innermost one grows.
    json* container = slot();
    *container = std::move(empty);
    open_.push_back(container);
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  // Locates an error by key: a hand-edited file is searched by key more easily than by column,
  // and nlohmann's number-overflow error carries no position at all.
  std::string near_key() const {
    return last_key_.empty() ? "" : " (near key \"" + clip_for_message(last_key_) + "\")";
  }

  json* root_;
  std::vector<json*> open_;
  std::string key_;
  std::string last_key_;
  std::string error_;
};

}  // namespace

std::string clip_for_message(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return std::string(text.substr(0, max_chars)) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::string json_for_message(const json& value) {
  // Replacing invalid UTF-8 keeps dump() from throwing on strings built from file bytes.
  const std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() <= kMessageChars) return s;
  return s.substr(0, kMessageChars) + "...";
}

StatusOr<json> parse_json(std::string_view text, const std::string& file) {
  json root;
  DocumentBuilder builder(&root);
  bool parsed = false;
  try {
    parsed = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& e) {
    // sax_parse reports errors to the builder; this is only a guard at the library's edge.
    return invalid_argument(file + ": not valid JSON: " + clip_for_message(e.what(), 400));
  }
  if (!parsed) {
    const std::string why = builder.error().empty() ? "not valid JSON" : builder.error();
    return invalid_argument(file + ": " + why);
  }
  return root;
}

StatusOr<std::string> read_text_file(const std::string& file, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return not_found(file + ": cannot open: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return not_found(file + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return invalid_argument(file + ": not a regular file (a directory, FIFO or device)");
  }
  if (st.st_size > max_bytes) {
    return invalid_argument(file + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                            std::to_string(max_bytes) + " a file of this kind may have");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return not_found(file + ": read failed: " + std::strerror(errno));
    if (n == 0) break;  // shrank while being read: parse what is there
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

bool JsonReader::has(std::string_view key) const {
  return obj_.is_object() && obj_.contains(std::string(key));
}

StatusOr<const json*> JsonReader::find(std::string_view key) const {
  if (!obj_.is_object()) {
    if (prefix_.empty()) return invalid_argument(file_ + ": top level must be a JSON object");
    // prefix_ ends with the '.' that would lead to the key.
    return invalid_argument(file_ + ": " + clip_for_message(prefix_.substr(0, prefix_.size() - 1)) +
                            " = " + json_for_message(obj_) + ": must be an object");
  }
  auto it = obj_.find(std::string(key));
  if (it == obj_.end()) return invalid_argument(file_ + ": " + qualified(key) + ": missing");
  return &*it;
}

Status JsonReader::bad(std::string_view key, const json& value, std::string_view why) const {
  return invalid_argument(file_ + ": " + clip_for_message(qualified(key)) + " = " +
                          json_for_message(value) + ": " + std::string(why));
}

Status JsonReader::get(std::string_view key, int64_t* out) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_number_integer()) return bad(key, *v, "must be an integer");
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return bad(key, *v, "out of the int64 range");
  }
  *out = v->get<int64_t>();
  return ok_status();
}

Status JsonReader::get(std::string_view key, double* out) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_number()) return bad(key, *v, "must be a number");
  *out = v->get<double>();
  if (!std::isfinite(*out)) return bad(key, *v, "must be finite");
  return ok_status();
}

Status JsonReader::get(std::string_view key, bool* out) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_boolean()) return bad(key, *v, "must be true or false");
  *out = v->get<bool>();
  return ok_status();
}

Status JsonReader::get(std::string_view key, std::string* out) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_string()) return bad(key, *v, "must be a string");
  *out = v->get<std::string>();
  return ok_status();
}

Status JsonReader::get_in_range(std::string_view key, int64_t lo, int64_t hi, int64_t* out) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_number_integer()) return bad(key, *v, "must be an integer");
  const std::string range = "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  // Beyond int64 (2^63 and up) is out of any range; say which one rather than "int64".
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return bad(key, *v, range);
  }
  *out = v->get<int64_t>();
  return require(*out >= lo && *out <= hi, key, *out, range);
}

StatusOr<JsonReader> JsonReader::child(std::string_view key) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_object()) return bad(key, *v, "must be an object");
  return JsonReader(file_, *v, qualified(key) + ".");
}

}  // namespace dsa::model
