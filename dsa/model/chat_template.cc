#include "dsa/model/chat_template.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dsa::model {

namespace {

// tokenizer_config.json writes a special token as a string or as {"content": "..."}.
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return {};
}

}  // namespace

StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir) {
  ChatTemplate t;
  const std::filesystem::path file = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(file)) return t;
  std::ifstream f(file);
  if (!f) return not_found(fmt::format("{}: cannot open", file.string()));
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return invalid_argument(fmt::format("{}: not a JSON object", file.string()));
  }
  if (j.contains("bos_token")) t.bos_token = token_text(j["bos_token"]);
  if (j.contains("eos_token")) t.eos_token = token_text(j["eos_token"]);
  return t;  // the stand-in renders every model in the plain format
}

StatusOr<std::string> render_chat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) {
  if (t.format != ChatFormat::kPlain) {
    return unimplemented("render_chat: only the plain format is implemented");
  }
  if (messages.empty()) return invalid_argument("render_chat: no messages");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    const char* name = role == "system"      ? "System"
                       : role == "user"      ? "User"
                       : role == "assistant" ? "Assistant"
                                             : nullptr;
    if (name == nullptr) {
      return invalid_argument(fmt::format(
          "render_chat: messages[{}].role = \"{}\": must be system, user or assistant", i, role));
    }
    out += fmt::format("{}: {}\n\n", name, messages[i].content);
  }
  if (add_generation_prompt) out += "Assistant:";
  return out;
}

}  // namespace dsa::model
