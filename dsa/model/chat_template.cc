// The chat formats of chat_template.h: loading (which format a model directory uses, and its
// special tokens) and rendering. Sources of each layout: docs/chat_formats.md.
#include "dsa/model/chat_template.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "dsa/model/json_reader.h"
#include "dsa/model/model_limits.h"

namespace dsa::model {

using nlohmann::json;

namespace {

// DeepSeek's special tokens use U+FF5C (fullwidth vertical line) and U+2581 (lower one eighth
// block), not '|' and '_': the ASCII look-alikes would be tokenized as plain text.
constexpr std::string_view kDeepSeekBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kDeepSeekEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kDeepSeekUser = "<｜User｜>";
constexpr std::string_view kDeepSeekAssistant = "<｜Assistant｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kGlmPrefix = "[gMASK]<sop>";
constexpr std::string_view kGlmSystem = "<|system|>";
constexpr std::string_view kGlmUser = "<|user|>";
constexpr std::string_view kGlmAssistant = "<|assistant|>";

constexpr std::string_view kFormatNames = "plain, deepseek-v3.2, glm-5";

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// ---- Loading ----------------------------------------------------------------------------------

bool file_exists(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

// A special token as tokenizer_config.json writes it: a string, {"content": "..."} (an
// AddedToken), or null / absent (none).
Status read_token(const JsonReader& r, const json& root, const char* key, std::string* out) {
  if (!r.has(key) || root[key].is_null()) return ok_status();
  const json& v = root[key];
  if (v.is_string()) return r.get(key, out);
  if (v.is_object()) {
    DSA_ASSIGN_OR_RETURN(JsonReader token, r.child(key));
    return token.get("content", out);
  }
  return r.bad(key, v, "must be a string, an object with \"content\", or null");
}

// tokenizer_config.json's chat_template: a string, or a list of {"name", "template"} (named
// templates; the "default" one is the chat template). Null or absent: none.
Status read_template_field(const JsonReader& r, const json& root, std::optional<std::string>* out) {
  if (!r.has("chat_template") || root["chat_template"].is_null()) return ok_status();
  const json& v = root["chat_template"];
  if (v.is_string()) {
    *out = v.get<std::string>();
    return ok_status();
  }
  if (!v.is_array()) return r.bad("chat_template", v, "must be a string or a list of templates");
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string key = "chat_template[" + std::to_string(i) + "]";
    const json& entry = v[i];
    if (!entry.is_object()) return r.bad(key, entry, "must be an object {\"name\", \"template\"}");
    JsonReader e(r.file(), entry, key + ".");
    std::string name;
    DSA_RETURN_IF_ERROR(e.get("name", &name));
    if (name != "default") continue;
    std::string text;
    DSA_RETURN_IF_ERROR(e.get("template", &text));
    *out = std::move(text);
    return ok_status();
  }
  return r.bad("chat_template", v, "a list of templates without one named \"default\"");
}

// The format of a non-empty template, by markers that only that family's templates contain.
StatusOr<ChatFormat> detect_format(std::string_view text, const std::string& source) {
  if (contains(text, kDeepSeekAssistant)) return ChatFormat::kDeepSeekV32;
  if (contains(text, kGlmPrefix)) return ChatFormat::kGlm5;
  return invalid_argument(
      source + ": chat_template " + json_for_message(json(std::string(text))) +
      ": not a format dsa implements (no \"<｜Assistant｜>\" for deepseek-v3.2, no "
      "\"[gMASK]<sop>\" for glm-5); supported formats: " +
      std::string(kFormatNames) + "; an explicit format (--chat-template) overrides this");
}

StatusOr<ChatTemplate> load(const std::filesystem::path& dir, std::optional<ChatFormat> forced) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return not_found("model_dir = \"" + dir.string() + "\": not a directory");
  }
  ChatTemplate t;
  std::optional<std::string> text;
  std::string source;

  const std::filesystem::path config = dir / "tokenizer_config.json";
  if (file_exists(config)) {
    source = config.string();
    DSA_ASSIGN_OR_RETURN(std::string bytes, read_text_file(source, kMaxConfigFileBytes));
    DSA_ASSIGN_OR_RETURN(json root, parse_json(bytes, source));
    if (!root.is_object()) return invalid_argument(source + ": top level must be a JSON object");
    JsonReader r(source, root);
    DSA_RETURN_IF_ERROR(read_token(r, root, "bos_token", &t.bos_token));
    DSA_RETURN_IF_ERROR(read_token(r, root, "eos_token", &t.eos_token));
    DSA_RETURN_IF_ERROR(read_template_field(r, root, &text));
  }
  // Newer checkpoints (GLM-5) keep the template in its own file, which transformers prefers over
  // the one in tokenizer_config.json; so does this.
  const std::filesystem::path jinja = dir / "chat_template.jinja";
  if (file_exists(jinja)) {
    source = jinja.string();
    DSA_ASSIGN_OR_RETURN(text, read_text_file(source, kMaxConfigFileBytes));
  }

  if (forced) {
    t.format = *forced;
  } else if (text && !text->empty()) {
    DSA_ASSIGN_OR_RETURN(t.format, detect_format(*text, source));
  } else if (file_exists(dir / "encoding" / "encoding_dsv32.py")) {
    // DeepSeek-V3.2 publishes its encoding as this Python file instead of a template.
    t.format = ChatFormat::kDeepSeekV32;
  } else {
    t.format = ChatFormat::kPlain;
  }
  return t;
}

// ---- Rendering --------------------------------------------------------------------------------

std::string quoted(const std::string& s) { return json_for_message(json(s)); }

Status validate(std::span<const ChatMessage> messages) {
  if (messages.empty())
    return invalid_argument("messages: empty; a chat needs one message or more");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    const std::string where = "messages[" + std::to_string(i) + "].role = " + quoted(role);
    if (role == "system") {
      if (i != 0) return invalid_argument(where + ": a system message must be the first message");
    } else if (role == "tool" || role == "function" || role == "ipython") {
      return invalid_argument(where + ": tool calls and tool results are not supported");
    } else if (role != "user" && role != "assistant") {
      return invalid_argument(where + ": unknown role; expected system, user or assistant");
    }
  }
  return ok_status();
}

// Python's str.isspace for one code point (what Jinja's .strip() removes).
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The code point that all of `s` encodes as one UTF-8 sequence; 0xFFFFFFFF when `s` is not one
// well-formed sequence (never a space, so stripping stops there).
char32_t decode_utf8(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  if (s.size() == 1 && b(0) < 0x80) return b(0);
  if (s.size() < 2 || s.size() > 4) return 0xFFFFFFFF;
  const unsigned lead_bits[] = {0, 0, 0x1F, 0x0F, 0x07};
  const unsigned lead_tag[] = {0, 0, 0xC0, 0xE0, 0xF0};
  if ((b(0) & ~lead_bits[s.size()] & 0xFF) != lead_tag[s.size()]) return 0xFFFFFFFF;
  char32_t c = b(0) & lead_bits[s.size()];
  for (size_t i = 1; i < s.size(); ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0xFFFFFFFF;
    c = (c << 6) | (b(i) & 0x3F);
  }
  const char32_t min_value[] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
  return c < min_value[s.size()] ? 0xFFFFFFFF : c;
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

// Python's str.strip(): leading and trailing Unicode whitespace removed.
std::string_view py_strip(std::string_view s) {
  while (!s.empty()) {
    const size_t n = utf8_length(static_cast<unsigned char>(s[0]));
    if (n == 0 || n > s.size() || !is_py_space(decode_utf8(s.substr(0, n)))) break;
    s.remove_prefix(n);
  }
  while (!s.empty()) {
    size_t start = s.size() - 1;  // back over continuation bytes to the lead byte
    while (start > 0 && s.size() - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    if (!is_py_space(decode_utf8(s.substr(start)))) break;
    s.remove_suffix(s.size() - start);
  }
  return s;
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string render_deepseek(const ChatTemplate& t, std::span<const ChatMessage> messages,
                            bool add_generation_prompt) {
  const std::string_view bos = t.bos_token.empty() ? kDeepSeekBos : t.bos_token;
  const std::string_view eos = t.eos_token.empty() ? kDeepSeekEos : t.eos_token;
  std::string out(bos);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      out += m.content;  // the system prompt is bare text right after BOS
    } else if (m.role == "user") {
      out += kDeepSeekUser;
      out += m.content;
      // encoding_dsv32 closes every user turn with the assistant prefix; "</think>" (an empty
      // thought) selects chat mode. It is the generation prompt when this is the last message.
      if (i + 1 < messages.size() || add_generation_prompt) {
        out += kDeepSeekAssistant;
        out += kThinkClose;
      }
    } else {
      out += m.content;
      out += eos;
    }
  }
  return out;
}

// An assistant turn of the GLM-5 template: reasoning written inline ("<think>R</think>A") is
// split off; it is kept only after the last user turn (the current turn's reasoning), otherwise
// an empty thought "</think>" stands for it. The answer is stripped.
void append_glm_assistant(std::string_view content, bool after_last_user, std::string* out) {
  std::string_view reasoning;
  if (const size_t first_close = content.find(kThinkClose); first_close != content.npos) {
    std::string_view before = rstrip_newlines(content.substr(0, first_close));
    if (const size_t open = before.rfind(kThinkOpen); open != before.npos) {
      before.remove_prefix(open + kThinkOpen.size());
    }
    reasoning = lstrip_newlines(before);
    content = lstrip_newlines(content.substr(content.rfind(kThinkClose) + kThinkClose.size()));
  }
  *out += kGlmAssistant;
  if (after_last_user && !reasoning.empty()) {
    *out += kThinkOpen;
    *out += py_strip(reasoning);
  }
  *out += kThinkClose;
  *out += py_strip(content);
}

std::string render_glm(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  size_t last_user = messages.size();  // none
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role == "user") last_user = i;
  }
  std::string out(kGlmPrefix);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system") {
      out += kGlmSystem;
      out += m.content;
    } else if (m.role == "user") {
      out += kGlmUser;
      out += m.content;
    } else {
      append_glm_assistant(m.content, last_user == messages.size() || i > last_user, &out);
    }
  }
  if (add_generation_prompt) {
    out += kGlmAssistant;
    out += kThinkClose;  // enable_thinking=false: the model answers without reasoning first
  }
  return out;
}

std::string render_plain(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += m.role == "system" ? "System: " : m.role == "user" ? "User: " : "Assistant: ";
    out += m.content;
    out += "\n\n";
  }
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

}  // namespace

StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir) {
  return load(model_dir, std::nullopt);
}

StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir,
                                          ChatFormat format) {
  return load(model_dir, format);
}

StatusOr<std::string> render_chat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) {
  DSA_RETURN_IF_ERROR(validate(messages));
  switch (t.format) {
    case ChatFormat::kDeepSeekV32:
      return render_deepseek(t, messages, add_generation_prompt);
    case ChatFormat::kGlm5:
      return render_glm(messages, add_generation_prompt);
    case ChatFormat::kPlain:
      return render_plain(messages, add_generation_prompt);
  }
  return invalid_argument("format = " + std::to_string(static_cast<int>(t.format)) +
                          ": not a ChatFormat");
}

std::string_view chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kPlain:
      return "plain";
    case ChatFormat::kDeepSeekV32:
      return "deepseek-v3.2";
    case ChatFormat::kGlm5:
      return "glm-5";
  }
  return "unknown";
}

StatusOr<ChatFormat> parse_chat_format(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kDeepSeekV32, ChatFormat::kGlm5}) {
    if (name == chat_format_name(f)) return f;
  }
  return invalid_argument("chat format = " + quoted(std::string(name)) + ": expected one of " +
                          std::string(kFormatNames));
}

}  // namespace dsa::model
