#include "dsa/model/text_stream.h"

namespace dsa::model {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Seq { kComplete, kIncomplete, kInvalid };

// The sequence that starts at s[0] (Unicode Table 3-7, well-formed UTF-8): kComplete with its
// length; kIncomplete when s ends inside a valid prefix (length = the prefix); kInvalid with the
// length of the maximal subpart to replace by one U+FFFD (the lead byte and the continuation bytes
// that were still valid before the failing byte).
struct SeqInfo {
  Seq kind;
  size_t length;
};

SeqInfo next_sequence(std::string_view s) {
  const unsigned char c = static_cast<unsigned char>(s[0]);
  if (c < 0x80) return {Seq::kComplete, 1};
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Seq::kInvalid, 1};
  }
  for (size_t i = 1; i < len; ++i) {
    if (i >= s.size()) return {Seq::kIncomplete, i};
    const unsigned char x = static_cast<unsigned char>(s[i]);
    const bool ok = i == 1 ? (x >= lo && x <= hi) : (x >= 0x80 && x <= 0xBF);
    if (!ok) return {Seq::kInvalid, i};
  }
  return {Seq::kComplete, len};
}

// Appends the decodable prefix of `bytes` to `out` and returns what is held back: an incomplete
// sequence at the end, unless `final` (then it is replaced too).
std::string drain(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const SeqInfo q = next_sequence(bytes.substr(i));
    if (q.kind == Seq::kComplete) {
      out->append(bytes.substr(i, q.length));
    } else if (q.kind == Seq::kIncomplete && !final) {
      return std::string(bytes.substr(i));  // wait for the bytes that complete it
    } else {
      out->append(kReplacement);
    }
    i += q.length;
  }
  return {};
}

}  // namespace

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  drain(bytes, /*final=*/true, &out);
  return out;
}

Status TextStream::push(std::span<const int32_t> ids) {
  if (tokenizer_ == nullptr) return failed_precondition("TextStream: no tokenizer");
  DSA_ASSIGN_OR_RETURN(std::string bytes, tokenizer_->decode(ids, /*skip_special_tokens=*/true));
  pending_ += bytes;
  pending_ = drain(pending_, /*final=*/false, &text_);
  return ok_status();
}

void TextStream::finish() {
  drain(pending_, /*final=*/true, &text_);
  pending_.clear();
}

void TextStream::truncate(size_t size) {
  if (size < text_.size()) text_.resize(size);
  pending_.clear();
}

}  // namespace dsa::model
