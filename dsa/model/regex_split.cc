#include "dsa/model/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "dsa/model/byte_level.h"

namespace dsa::model {

namespace {

struct MatchDataFree {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

void Regex::Free::operator()(pcre2_code* code) const { pcre2_code_free(code); }

StatusOr<Regex> Regex::compile(std::string_view pattern, bool literal) {
  // MATCH_INVALID_UTF lets arbitrary bytes be matched against (invalid sequences simply never
  // match); UCP makes \s, \w and friends Unicode-aware like HF's Oniguruma patterns.
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    return invalid_argument("regex \"" + std::string(pattern) + "\" does not compile at offset " +
                            std::to_string(offset) + ": " + reinterpret_cast<char*>(msg));
  }
  pcre2_jit_compile(code,
                    PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
  Regex r;
  r.pattern_ = std::string(pattern);
  r.code_.reset(code);
  return r;
}

void Regex::split_isolated(std::string_view text, std::vector<std::string_view>* out) const {
  std::unique_ptr<pcre2_match_data, MatchDataFree> md(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t emitted = 0;  // end of the last piece pushed
  size_t start = 0;    // where the next search begins
  while (start <= text.size()) {
    int rc = pcre2_match(code_.get(), subject, text.size(), start, 0, md.get(), nullptr);
    // No match, or a matcher error (match limit): the rest of the text stays one gap.
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0], end = ov[1];
    if (begin == end) {
      // An empty match yields no piece; step over one character (or one invalid byte).
      if (begin >= text.size()) break;
      const size_t len = utf8_sequence_length(text, begin);
      start = begin + (len == 0 ? 1 : len);
      continue;
    }
    if (begin > emitted) out->push_back(text.substr(emitted, begin - emitted));
    out->push_back(text.substr(begin, end - begin));
    emitted = start = end;
  }
  if (emitted < text.size()) out->push_back(text.substr(emitted));
}

}  // namespace dsa::model
