// Chat prompts: the messages of a chat request rendered into the text the model was trained on.
// STAND-IN (plain format only) until the real chat_template lands; the interface is the one the
// server is written against.
#pragma once

#include <filesystem>
#include <span>
#include <string>

#include "dsa/core/status.h"

namespace dsa::model {

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

enum class ChatFormat { kPlain, kDeepSeekV32, kGlm5 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kPlain;
  std::string bos_token;
  std::string eos_token;
};

// Reads DIR/tokenizer_config.json if present (bos/eos tokens) and picks the format; kPlain when
// the model has none (the tiny model).
StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir);

// kPlain: "<Role>: content\n\n" per message (Role = System, User, Assistant), then "Assistant:"
// when add_generation_prompt. InvalidArgument for an empty list or an unknown role.
StatusOr<std::string> render_chat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                  bool add_generation_prompt = true);

}  // namespace dsa::model
