// Typed reads of JSON object keys with Status errors that name the file, the key and the value
// ("config.json: rope_scaling.factor = \"40\": must be a number"). Shared by the config and
// tokenizer loaders so every rejection of a hand-edited file reads the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::model {

// Parses `text`. Never throws: a syntax error or a number beyond double ("1e400") becomes
// kInvalidArgument "<file>: not valid JSON: <parser message with line and column> (near key
// \"k\")"; nesting deeper than kMaxJsonDepth and a key that appears twice in one object (which
// nlohmann would silently resolve to the last) are kInvalidArgument naming the key.
StatusOr<nlohmann::json> parse_json(std::string_view text, const std::string& file);

// Reads a whole regular file of at most `max_bytes`. kNotFound "<file>: cannot open: <errno
// text>" when it cannot be opened; kInvalidArgument for a directory, FIFO or device (which would
// block or never end) and for a file over the limit. Never blocks on a FIFO.
StatusOr<std::string> read_text_file(const std::string& file, int64_t max_bytes);

// Error messages quote what the file holds, which may be megabytes (a whole vocabulary, a
// 100 MB tensor name): values and names are cut to kMessageChars.
inline constexpr size_t kMessageChars = 120;
// `value` as JSON for a message: invalid UTF-8 replaced (dump() would throw), cut to
// kMessageChars.
std::string json_for_message(const nlohmann::json& value);
// `text` cut to `max_chars` bytes, with its full size noted when cut.
std::string clip_for_message(std::string_view text, size_t max_chars = kMessageChars);

class JsonReader {
 public:
  // `obj` must outlive the reader. `prefix` qualifies keys of nested objects ("rope_scaling.").
  JsonReader(std::string file, const nlohmann::json& obj, std::string prefix = "")
      : file_(std::move(file)), obj_(obj), prefix_(std::move(prefix)) {}

  bool has(std::string_view key) const;
  // kInvalidArgument "<file>: <prefix><key>: missing" when absent.
  StatusOr<const nlohmann::json*> find(std::string_view key) const;

  Status get(std::string_view key, int64_t* out) const;  // an integer (no fraction)
  Status get(std::string_view key, double* out) const;   // any finite number
  Status get(std::string_view key, bool* out) const;
  Status get(std::string_view key, std::string* out) const;
  // An integer in [lo, hi]; "<file>: <key> = <value>: must be in [lo, hi]" otherwise.
  Status get_in_range(std::string_view key, int64_t lo, int64_t hi, int64_t* out) const;

  // "<file>: <prefix><key> = <value as JSON>: <why>"
  Status bad(std::string_view key, const nlohmann::json& value, std::string_view why) const;
  // ok when `cond`, else bad(key, value, why).
  Status require(bool cond, std::string_view key, const nlohmann::json& value,
                 std::string_view why) const {
    return cond ? ok_status() : bad(key, value, why);
  }
  // A reader for the nested object at `key`; kInvalidArgument when it is missing or not an object.
  StatusOr<JsonReader> child(std::string_view key) const;

  const std::string& file() const { return file_; }

 private:
  std::string qualified(std::string_view key) const { return prefix_ + std::string(key); }

  std::string file_;
  const nlohmann::json& obj_;
  std::string prefix_;
};

}  // namespace dsa::model
