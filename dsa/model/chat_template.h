// Chat messages -> the prompt text a model was trained on. The models dsa serves define their
// prompt layout in Python (DeepSeek-V3.2 ships encoding/encoding_dsv32.py and no Jinja template)
// or in Jinja (GLM-5), and there is no maintained C++ Jinja engine, so each layout is written out
// here by hand from its published source (docs/chat_formats.md lists them) and tested against
// worked examples from those sources.
//
// Only the plain chat path is implemented: roles system, user and assistant, text content, no
// tools and no thinking (reasoning) mode. A tool role is refused rather than dropped.
//
// The formats (S, U, A: the content of a system, user, assistant message):
//
//   kDeepSeekV32  DeepSeek-V3.2's "chat" thinking_mode (encoding_dsv32.py, encode_messages):
//                   BOS S <｜User｜>U<｜Assistant｜></think>A EOS
//                   <｜User｜>U<｜Assistant｜></think>
//                 BOS and EOS are bos_token and eos_token, or when those are empty DeepSeek's
//                 <｜begin▁of▁sentence｜> and <｜end▁of▁sentence｜> (｜ is U+FF5C, ▁ U+2581). The
//                 assistant prefix "<｜Assistant｜></think>" belongs to each user turn; with
//                 add_generation_prompt false it is left off the last message when that is a user
//                 turn (as the V3.2-Exp Jinja template does), so the prompt ends after U. A chat
//                 that ends with an assistant turn ends in EOS either way.
//
//   kGlm5         GLM-5's chat_template.jinja with enable_thinking false (no tools):
//                   [gMASK]<sop><|system|>S<|user|>U<|assistant|></think>A<|user|>U
//                 then "<|assistant|></think>" when add_generation_prompt. Assistant content is
//                 treated as the template does: reasoning written inline as "<think>R</think>A"
//                 is dropped, or kept as "<think>R</think>" for an assistant turn after the last
//                 user turn, and the answer is stripped of surrounding whitespace. There is no
//                 end-of-turn token: the next role token ends a turn.
//
//   kPlain        dsa's own layout for models without a chat template (models/tiny-dsa): each
//                 message as "<Role>: content\n\n" with Role System, User or Assistant, then
//                 "Assistant:" when add_generation_prompt. No special tokens, no BOS.
//                   System: S\n\nUser: U\n\nAssistant: A\n\nUser: U\n\nAssistant:
//
// Every format takes at most one system message, and only as the first message. The rendered
// text carries its own BOS ([gMASK]<sop> for GLM-5); tokenize it without adding another.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "dsa/core/status.h"

namespace dsa::model {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kPlain, kDeepSeekV32, kGlm5 };

struct ChatTemplate {
  ChatFormat format = ChatFormat::kPlain;
  // From tokenizer_config.json; empty when it has none.
  std::string bos_token;
  std::string eos_token;
};

// Reads the chat template of the model in `model_dir` and picks its format:
//   - DIR/chat_template.jinja, or else the "chat_template" of DIR/tokenizer_config.json (a string,
//     or a list of {"name", "template"} of which the "default" one is used), is matched by its
//     markers: "<｜Assistant｜>" -> kDeepSeekV32, "[gMASK]<sop>" -> kGlm5. Any other non-empty
//     template is InvalidArgument naming the supported formats (pass a format to the overload
//     below to use one anyway).
//   - With no template, DIR/encoding/encoding_dsv32.py (DeepSeek-V3.2 ships its encoding as
//     Python instead of a template) -> kDeepSeekV32; otherwise kPlain (models/tiny-dsa has none of
//     these files).
// bos_token and eos_token are read from tokenizer_config.json as strings or {"content": ...}
// objects (null or absent: empty). A file that is not valid JSON, or a key of the wrong type, is
// InvalidArgument naming the file and the key.
StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir);
// The same, with the format given (a --chat-template override): the template text is not matched,
// and the special tokens are still read.
StatusOr<ChatTemplate> load_chat_template(const std::filesystem::path& model_dir,
                                          ChatFormat format);

// Renders `messages` in `t.format` (see the top of this file). InvalidArgument naming the index
// and value for an empty list, a role other than system, user and assistant (tool roles
// included), and a system message that is not the first message.
StatusOr<std::string> render_chat(const ChatTemplate& t, std::span<const ChatMessage> messages,
                                  bool add_generation_prompt = true);

// "plain", "deepseek-v3.2", "glm-5": the names parse_chat_format accepts.
std::string_view chat_format_name(ChatFormat f);
// The format named `name` (as chat_format_name writes it); InvalidArgument listing the names
// otherwise.
StatusOr<ChatFormat> parse_chat_format(std::string_view name);

}  // namespace dsa::model
