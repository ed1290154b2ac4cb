#include "dsa/model/json_reader.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace dsa::model {

using nlohmann::json;

StatusOr<json> parse_json(std::string_view text, const std::string& file) {
  // nlohmann reports syntax errors only by exception; it is caught here, at the edge of the
  // library, and becomes a Status carrying the parser's line and column.
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return invalid_argument(file + ": not valid JSON: " + e.what());
  }
}

StatusOr<std::string> read_text_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return not_found(file + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return not_found(file + ": read failed: " + std::strerror(errno));
  return ss.str();
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
  return invalid_argument(file_ + ": " + qualified(key) + " = " + value.dump() + ": " +
                          std::string(why));
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

StatusOr<JsonReader> JsonReader::child(std::string_view key) const {
  DSA_ASSIGN_OR_RETURN(const json* v, find(key));
  if (!v->is_object()) return bad(key, *v, "must be an object");
  return JsonReader(file_, *v, qualified(key) + ".");
}

}  // namespace dsa::model
