#include "dsa/model/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <vector>

#include "dsa/model/model_limits.h"

namespace dsa::model {

using nlohmann::json;

namespace {

// State of one parse: nesting depth, the keys seen in each open object, and the last key read,
// which locates an error by key (a hand-edited file is searched by key more easily than by
// column; nlohmann's number-overflow error carries no position at all).
class ParseGuard {
 public:
  bool on_event(int depth, json::parse_event_t event, const json& parsed) {
    if (!error_.empty()) return false;  // discard the rest; the parse fails anyway
    const bool opens =
        event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth) {
      error_ = "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels";
      return false;
    }
    if (event == json::parse_event_t::object_start) {
      if (keys_.size() <= static_cast<size_t>(depth)) keys_.resize(depth + 1);
      keys_[depth].clear();
    } else if (event == json::parse_event_t::key) {
      // A key's depth counts its own object, whose keys live at depth - 1.
      const std::string& key = parsed.get_ref<const std::string&>();
      last_key_ = key;
      if (!keys_[depth - 1].insert(key).second) {
        error_ = "key \"" + clip_for_message(key) + "\" appears twice in one object";
        return false;
      }
    }
    return true;
  }
  const std::string& error() const { return error_; }
  // " (near key \"k\")" after the last key read, or "" before any.
  std::string near_key() const {
    return last_key_.empty() ? "" : " (near key \"" + clip_for_message(last_key_) + "\")";
  }

 private:
  std::string last_key_;
  std::vector<std::unordered_set<std::string>> keys_;  // by object depth
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
  ParseGuard guard;
  json root;
  // nlohmann reports errors only by exception; they are caught here, at the edge of the library.
  // Every json::exception is caught, not only parse_error: "1e400" throws out_of_range.
  try {
    root = json::parse(
        text.begin(), text.end(),
        [&](int depth, json::parse_event_t event, json& parsed) {
          return guard.on_event(depth, event, parsed);
        },
        /*allow_exceptions=*/true);
  } catch (const json::parse_error& e) {
    // A nesting or duplicate-key error found first is the one to report.
    if (!guard.error().empty()) return invalid_argument(file + ": " + guard.error());
    // The parser quotes the token it stopped in, which may be a whole unterminated string.
    return invalid_argument(file + ": not valid JSON: " + clip_for_message(e.what(), 400) +
                            guard.near_key());
  } catch (const json::exception& e) {
    if (!guard.error().empty()) return invalid_argument(file + ": " + guard.error());
    return invalid_argument(file + ": not valid JSON: " + clip_for_message(e.what(), 400) +
                            guard.near_key());
  }
  if (!guard.error().empty()) return invalid_argument(file + ": " + guard.error());
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
  if (!obj_.is_object()) return invalid_argument(file_ + ": " + prefix_ + ": not a JSON object");
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
