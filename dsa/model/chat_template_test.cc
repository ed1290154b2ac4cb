#include "dsa/model/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dsa/model/model_test_util.h"

namespace dsa::model {
namespace {

using nlohmann::json;
using testing::TempDir;
using testing::write_file;

using Messages = std::vector<ChatMessage>;

const ChatTemplate kDeepSeek{ChatFormat::kDeepSeekV32, "", ""};
const ChatTemplate kGlm{ChatFormat::kGlm5, "", "<|endoftext|>"};
const ChatTemplate kPlainT{ChatFormat::kPlain, "", ""};

std::string render_ok(const ChatTemplate& t, const Messages& m, bool gen = true) {
  StatusOr<std::string> s = render_chat(t, m, gen);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : std::string();
}

// ---- DeepSeek-V3.2 ----------------------------------------------------------------------------

// The worked example of the DeepSeek-V3.2 model card, "Chat Template" section
// (https://huggingface.co/deepseek-ai/DeepSeek-V3.2, also quoted in
// https://github.com/alibaba/rtp-llm/pull/415). The card encodes it in thinking mode, ending in
// "<｜Assistant｜><think>"; in chat mode encoding_dsv32.py (render_message, role "user") closes
// every user turn with "<｜Assistant｜></think>" and drops the assistant's reasoning_content.
TEST(ChatTemplate, DeepSeekModelCardExampleInChatMode) {
  Messages m = {{"user", "hello"}, {"assistant", "Hello! I am DeepSeek."}, {"user", "1+1=?"}};
  EXPECT_EQ(render_ok(kDeepSeek, m),
            "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>Hello! I am "
            "DeepSeek.<｜end▁of▁sentence｜><｜User｜>1+1=?<｜Assistant｜></think>");
}

// The special tokens are the fullwidth ones (U+FF5C, U+2581), byte for byte.
TEST(ChatTemplate, DeepSeekTokensAreFullwidth) {
  const std::string out = render_ok(kDeepSeek, {{"user", "x"}});
  EXPECT_EQ(out,
            "<\xEF\xBD\x9C"
            "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"
            "<\xEF\xBD\x9CUser\xEF\xBD\x9C>x<\xEF\xBD\x9C"
            "Assistant\xEF\xBD\x9C></think>");
}

// encoding_dsv32.py's system template is "{content}": bare text right after BOS.
TEST(ChatTemplate, DeepSeekSystemMultiTurn) {
  Messages m = {{"system", "You are a helpful assistant."},
                {"user", "Hi"},
                {"assistant", "Hello!"},
                {"user", "Who are you?"},
                {"assistant", "DeepSeek."}};
  EXPECT_EQ(render_ok(kDeepSeek, m),
            "<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hi<｜Assistant｜></think>"
            "Hello!<｜end▁of▁sentence｜><｜User｜>Who are you?<｜Assistant｜></think>"
            "DeepSeek.<｜end▁of▁sentence｜>");
}

TEST(ChatTemplate, DeepSeekWithoutGenerationPrompt) {
  // The last user turn stays open (no assistant prefix), as in the V3.2-Exp Jinja template.
  EXPECT_EQ(render_ok(kDeepSeek, {{"system", "S"}, {"user", "U"}}, false),
            "<｜begin▁of▁sentence｜>S<｜User｜>U");
  // A conversation ending with the assistant is the same either way: it ends in EOS.
  Messages done = {{"user", "U"}, {"assistant", "A"}};
  const std::string expected =
      "<｜begin▁of▁sentence｜><｜User｜>U<｜Assistant｜></think>A<｜end▁of▁sentence｜>";
  EXPECT_EQ(render_ok(kDeepSeek, done, false), expected);
  EXPECT_EQ(render_ok(kDeepSeek, done, true), expected);
}

TEST(ChatTemplate, DeepSeekUsesConfiguredTokens) {
  const ChatTemplate t{ChatFormat::kDeepSeekV32, "<B>", "<E>"};
  EXPECT_EQ(render_ok(t, {{"user", "U"}, {"assistant", "A"}, {"user", "V"}}),
            "<B><｜User｜>U<｜Assistant｜></think>A<E><｜User｜>V<｜Assistant｜></think>");
}

// ---- GLM-5 ------------------------------------------------------------------------------------

// The GLM-5 chat_template.jinja (https://huggingface.co/zai-org/GLM-5, same layout as
// https://huggingface.co/zai-org/GLM-4.7/blob/main/chat_template.jinja) with
// enable_thinking=false: "[gMASK]<sop>", role tokens with no newline after them, past assistant
// turns as "<|assistant|></think>answer", the generation prompt "<|assistant|></think>".
TEST(ChatTemplate, GlmSingleUser) {
  EXPECT_EQ(render_ok(kGlm, {{"user", "你好"}}), "[gMASK]<sop><|user|>你好<|assistant|></think>");
}

TEST(ChatTemplate, GlmMultiTurn) {
  Messages m = {{"user", "1+1="}, {"assistant", "2"}, {"user", "2+2="}};
  EXPECT_EQ(render_ok(kGlm, m),
            "[gMASK]<sop><|user|>1+1=<|assistant|></think>2<|user|>2+2=<|assistant|></think>");
}

TEST(ChatTemplate, GlmSystem) {
  Messages m = {{"system", "You are a helpful assistant."}, {"user", "Hi"}};
  EXPECT_EQ(render_ok(kGlm, m),
            "[gMASK]<sop><|system|>You are a helpful assistant.<|user|>Hi<|assistant|></think>");
}

TEST(ChatTemplate, GlmWithoutGenerationPrompt) {
  EXPECT_EQ(render_ok(kGlm, {{"user", "Hi"}}, false), "[gMASK]<sop><|user|>Hi");
  EXPECT_EQ(render_ok(kGlm, {{"user", "Hi"}, {"assistant", "Hello"}}, false),
            "[gMASK]<sop><|user|>Hi<|assistant|></think>Hello");
}

// The template strips assistant answers (Python str.strip: Unicode whitespace too) but not user
// or system content.
TEST(ChatTemplate, GlmStripsAssistantContentOnly) {
  Messages m = {{"system", " S\n"}, {"user", " U\n"}, {"assistant", "\n\u3000 A b\t\n"}};
  EXPECT_EQ(render_ok(kGlm, m, false),
            "[gMASK]<sop><|system|> S\n<|user|> U\n<|assistant|></think>A b");
}

// Bytes that are not well-formed UTF-8 are never whitespace: an overlong space (C0 A0) and a cut
// sequence stay.
TEST(ChatTemplate, GlmStripKeepsMalformedBytes) {
  EXPECT_EQ(render_ok(kGlm,
                      {{"assistant",
                        " \xC0\xA0"
                        "A\xE3\x80 "}},
                      false),
            "[gMASK]<sop><|assistant|></think>\xC0\xA0"
            "A\xE3\x80");
}

// Reasoning written inline is dropped from turns before the last user turn and kept after it.
TEST(ChatTemplate, GlmInlineReasoning) {
  Messages past = {
      {"user", "Q1"}, {"assistant", "<think>\nplan\n</think>\n\nanswer"}, {"user", "Q2"}};
  EXPECT_EQ(render_ok(kGlm, past),
            "[gMASK]<sop><|user|>Q1<|assistant|></think>answer<|user|>Q2<|assistant|></think>");
  Messages current = {{"user", "Q1"}, {"assistant", "<think>\n plan \n</think>\n\nanswer"}};
  EXPECT_EQ(render_ok(kGlm, current, false),
            "[gMASK]<sop><|user|>Q1<|assistant|><think>plan</think>answer");
}

// ---- Plain ------------------------------------------------------------------------------------

TEST(ChatTemplate, PlainMultiTurn) {
  Messages m = {{"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "U2"}};
  EXPECT_EQ(render_ok(kPlainT, m),
            "System: S\n\nUser: U\n\nAssistant: A\n\nUser: U2\n\nAssistant:");
  EXPECT_EQ(render_ok(kPlainT, m, false), "System: S\n\nUser: U\n\nAssistant: A\n\nUser: U2\n\n");
}

// ---- Rejections -------------------------------------------------------------------------------

void expect_invalid(const Messages& m, const std::string& part) {
  for (const ChatTemplate& t : {kDeepSeek, kGlm, kPlainT}) {
    StatusOr<std::string> s = render_chat(t, m);
    ASSERT_FALSE(s.ok()) << chat_format_name(t.format);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(part), std::string::npos) << s.status().to_string();
  }
}

TEST(ChatTemplate, RejectsEmptyList) { expect_invalid({}, "messages: empty"); }

TEST(ChatTemplate, RejectsUnknownRole) {
  expect_invalid({{"user", "U"}, {"robot", "R"}}, "messages[1].role = \"robot\": unknown role");
  expect_invalid({{"User", "U"}}, "messages[0].role = \"User\": unknown role");
}

TEST(ChatTemplate, RejectsToolRoles) {
  expect_invalid({{"user", "U"}, {"assistant", ""}, {"tool", "42"}},
                 "messages[2].role = \"tool\": tool calls and tool results are not supported");
}

TEST(ChatTemplate, RejectsSystemNotFirst) {
  expect_invalid({{"user", "U"}, {"system", "S"}},
                 "messages[1].role = \"system\": a system message must be the first message");
  expect_invalid({{"system", "S"}, {"system", "T"}}, "messages[1].role = \"system\"");
}

// ---- Format names -----------------------------------------------------------------------------

TEST(ChatTemplate, FormatNamesRoundTrip) {
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kDeepSeekV32, ChatFormat::kGlm5}) {
    StatusOr<ChatFormat> p = parse_chat_format(chat_format_name(f));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(*p, f);
  }
  EXPECT_EQ(chat_format_name(ChatFormat::kDeepSeekV32), "deepseek-v3.2");
  StatusOr<ChatFormat> bad = parse_chat_format("chatml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "chat format = \"chatml\": expected one of plain, deepseek-v3.2, glm-5");
}

// ---- Loading ----------------------------------------------------------------------------------

StatusOr<ChatTemplate> load_with_config(const TempDir& dir, const json& config) {
  write_file(dir / "tokenizer_config.json", config.dump(2));
  return load_chat_template(dir / "");
}

// Shaped like DeepSeek-V3.2-Exp's tokenizer_config.json: AddedToken objects, a Jinja template
// with the fullwidth role tokens.
TEST(ChatTemplate, LoadsDeepSeekConfigWithTokenObjects) {
  TempDir dir;
  json config = {{"add_bos_token", false},
                 {"bos_token", {{"__type", "AddedToken"}, {"content", "<｜begin▁of▁sentence｜>"}}},
                 {"eos_token", {{"__type", "AddedToken"}, {"content", "<｜end▁of▁sentence｜>"}}},
                 {"chat_template",
                  "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
                  "{{'<｜User｜>' + m['content']}}{% endif %}{% endfor %}"
                  "{{'<｜Assistant｜></think>'}}"}};
  StatusOr<ChatTemplate> t = load_with_config(dir, config);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kDeepSeekV32);
  EXPECT_EQ(t->bos_token, "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(t->eos_token, "<｜end▁of▁sentence｜>");
  EXPECT_EQ(render_ok(*t, {{"user", "hi"}}),
            "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
}

// Shaped like GLM-5's: tokens as strings, no BOS, the template in tokenizer_config.json.
TEST(ChatTemplate, LoadsGlmConfigWithTokenStrings) {
  TempDir dir;
  json config = {{"bos_token", nullptr},
                 {"eos_token", "<|endoftext|>"},
                 {"chat_template",
                  "[gMASK]<sop>{%- for m in messages -%}<|{{ m.role }}|>"
                  "{%- endfor -%}"}};
  StatusOr<ChatTemplate> t = load_with_config(dir, config);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kGlm5);
  EXPECT_EQ(t->bos_token, "");
  EXPECT_EQ(t->eos_token, "<|endoftext|>");
}

// GLM-5 keeps its template in chat_template.jinja, which wins over tokenizer_config.json's.
TEST(ChatTemplate, LoadsChatTemplateJinjaFile) {
  TempDir dir;
  write_file(dir / "chat_template.jinja", "[gMASK]<sop>\n{%- if tools -%}<|system|>{%- endif -%}");
  StatusOr<ChatTemplate> t =
      load_with_config(dir, {{"eos_token", "<|endoftext|>"}, {"chat_template", "{{ x }}"}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kGlm5);
  EXPECT_EQ(t->eos_token, "<|endoftext|>");
}

TEST(ChatTemplate, LoadsNamedTemplateList) {
  TempDir dir;
  json list = json::array({{{"name", "tool_use"}, {"template", "{{ tools }}"}},
                           {{"name", "default"}, {"template", "[gMASK]<sop>{{ m }}"}}});
  StatusOr<ChatTemplate> t = load_with_config(dir, {{"chat_template", list}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kGlm5);
  StatusOr<ChatTemplate> none =
      load_with_config(dir, {{"chat_template", json::array({{{"name", "x"}, {"template", "y"}}})}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("without one named \"default\""), std::string::npos);
}

// DeepSeek-V3.2 ships no template but encoding/encoding_dsv32.py.
TEST(ChatTemplate, LoadsDeepSeekEncodingWithoutTemplate) {
  TempDir dir;
  std::filesystem::create_directory(dir / "encoding");
  write_file(dir / "encoding" / "encoding_dsv32.py", "def encode_messages(): ...\n");
  StatusOr<ChatTemplate> t =
      load_with_config(dir, {{"bos_token", {{"content", "<｜begin▁of▁sentence｜>"}}}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kDeepSeekV32);
  EXPECT_EQ(t->bos_token, "<｜begin▁of▁sentence｜>");
}

TEST(ChatTemplate, PlainWithoutTemplate) {
  TempDir dir;
  StatusOr<ChatTemplate> none = load_chat_template(dir / "");  // no tokenizer_config.json
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none->format, ChatFormat::kPlain);
  StatusOr<ChatTemplate> empty =
      load_with_config(dir, {{"eos_token", "</s>"}, {"chat_template", ""}});
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_EQ(empty->format, ChatFormat::kPlain);
  EXPECT_EQ(empty->eos_token, "</s>");
}

TEST(ChatTemplate, TinyModelIsPlain) {
  StatusOr<ChatTemplate> t =
      load_chat_template(std::filesystem::path(DSA_SOURCE_DIR) / "models" / "tiny-dsa");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->format, ChatFormat::kPlain);
  EXPECT_EQ(render_ok(*t, {{"user", "Hello"}}), "User: Hello\n\nAssistant:");
}

TEST(ChatTemplate, RejectsUnrecognisedTemplateUnlessOverridden) {
  TempDir dir;
  json config = {{"chat_template", "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}};
  StatusOr<ChatTemplate> t = load_with_config(dir, config);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("tokenizer_config.json: chat_template \"{% for m"),
            std::string::npos)
      << t.status().to_string();
  EXPECT_NE(t.status().message().find("supported formats: plain, deepseek-v3.2, glm-5"),
            std::string::npos)
      << t.status().to_string();
  StatusOr<ChatTemplate> forced = load_chat_template(dir / "", ChatFormat::kPlain);
  ASSERT_TRUE(forced.ok()) << forced.status().to_string();
  EXPECT_EQ(forced->format, ChatFormat::kPlain);
}

TEST(ChatTemplate, RejectsBadJson) {
  TempDir dir;
  write_file(dir / "tokenizer_config.json", "{\"eos_token\": \"</s>\",");
  StatusOr<ChatTemplate> t = load_chat_template(dir / "");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("tokenizer_config.json: not valid JSON"), std::string::npos)
      << t.status().to_string();
  // The override does not skip reading the file: its tokens are still needed.
  EXPECT_FALSE(load_chat_template(dir / "", ChatFormat::kGlm5).ok());
}

TEST(ChatTemplate, RejectsBadFieldTypes) {
  TempDir dir;
  StatusOr<ChatTemplate> bos = load_with_config(dir, {{"bos_token", 7}});
  ASSERT_FALSE(bos.ok());
  EXPECT_NE(bos.status().message().find("bos_token = 7: must be a string"), std::string::npos)
      << bos.status().to_string();
  StatusOr<ChatTemplate> eos = load_with_config(dir, {{"eos_token", {{"id", 1}}}});
  ASSERT_FALSE(eos.ok());
  EXPECT_NE(eos.status().message().find("eos_token.content"), std::string::npos)
      << eos.status().to_string();
  StatusOr<ChatTemplate> tmpl = load_with_config(dir, {{"chat_template", true}});
  ASSERT_FALSE(tmpl.ok());
  EXPECT_NE(tmpl.status().message().find("chat_template = true"), std::string::npos)
      << tmpl.status().to_string();
  StatusOr<ChatTemplate> top = load_with_config(dir, json::array({1}));
  ASSERT_FALSE(top.ok());
  EXPECT_NE(top.status().message().find("top level must be a JSON object"), std::string::npos);
}

TEST(ChatTemplate, RejectsMissingDirectory) {
  TempDir dir;
  StatusOr<ChatTemplate> t = load_chat_template(dir / "absent");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("absent\": not a directory"), std::string::npos)
      << t.status().to_string();
}

}  // namespace
}  // namespace dsa::model
