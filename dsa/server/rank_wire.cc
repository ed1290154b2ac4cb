#include "dsa/server/rank_wire.h"

#include <fmt/format.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "dsa/dist/gather_text.h"

namespace dsa::server::wire {

namespace {

using json = nlohmann::json;

constexpr int32_t kVersion = 1;  // both sides are the same binary; a check against a stray text

json bytes(const std::string& s) { return json::binary(std::vector<uint8_t>(s.begin(), s.end())); }

std::string to_text(const std::vector<uint8_t>& cbor) {
  return std::string(reinterpret_cast<const char*>(cbor.data()), cbor.size());
}

json request_json(const engine::GenerationRequest& r) {
  return {{"prompt", r.prompt},
          {"max_new_tokens", r.max_new_tokens},
          {"temperature", r.sampling.temperature},
          {"top_p", r.sampling.top_p},
          {"top_k", r.sampling.top_k},
          {"seed", r.sampling.seed},
          {"stop_token_ids", r.stop_token_ids},
          {"stop", r.stop},
          {"ignore_eos", r.ignore_eos}};
}

// Reads one field of an object with its type checked: every decode error names the field.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  const json& field(const char* name) const {
    if (!j_.is_object() || !j_.contains(name)) throw bad(name, "missing");
    return j_.at(name);
  }
  int64_t integer(const char* name, int64_t lo = 0,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json& v = field(name);
    if (!v.is_number_integer()) throw bad(name, "not an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) {
      throw bad(name, fmt::format("{} is outside [{}, {}]", v.get<uint64_t>(), lo, hi));
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) throw bad(name, fmt::format("{} is outside [{}, {}]", x, lo, hi));
    return x;
  }
  uint64_t unsigned_integer(const char* name) const {
    const json& v = field(name);
    if (!v.is_number_unsigned()) throw bad(name, "not an unsigned integer");
    return v.get<uint64_t>();
  }
  double number(const char* name) const {
    const json& v = field(name);
    if (!v.is_number()) throw bad(name, "not a number");
    return v.get<double>();
  }
  bool boolean(const char* name) const {
    const json& v = field(name);
    if (!v.is_boolean()) throw bad(name, "not a boolean");
    return v.get<bool>();
  }
  std::string text(const char* name) const {
    const json& v = field(name);
    if (!v.is_binary()) throw bad(name, "not a byte string");
    const auto& b = v.get_binary();
    return std::string(b.begin(), b.end());
  }
  std::vector<std::string> strings(const char* name) const {
    const json& v = field(name);
    if (!v.is_array()) throw bad(name, "not an array");
    std::vector<std::string> out;
    for (const json& s : v) {
      if (!s.is_string()) throw bad(name, "holds a value that is not a string");
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  template <typename T>
  std::vector<T> integers(const char* name, int64_t lo, int64_t hi) const {
    const json& v = field(name);
    if (!v.is_array()) throw bad(name, "not an array");
    std::vector<T> out;
    for (const json& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < lo || x.get<int64_t>() > hi) {
        throw bad(name, fmt::format("holds a value outside [{}, {}]", lo, hi));
      }
      out.push_back(T(x.get<int64_t>()));
    }
    return out;
  }
  const json& array(const char* name) const {
    const json& v = field(name);
    if (!v.is_array()) throw bad(name, "not an array");
    return v;
  }

 private:
  struct Bad : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  Bad bad(const char* name, const std::string& why) const {
    return Bad(fmt::format("{}.{}: {}", where_, name, why));
  }
  const json& j_;
  std::string where_;
};

constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();

engine::GenerationRequest read_request(const json& j, const std::string& where) {
  const Reader r(j, where);
  engine::GenerationRequest q;
  q.prompt = r.integers<int32_t>("prompt", 0, kI32);
  q.max_new_tokens = int32_t(r.integer("max_new_tokens", 0, kI32));
  q.sampling.temperature = float(r.number("temperature"));
  q.sampling.top_p = float(r.number("top_p"));
  q.sampling.top_k = int32_t(r.integer("top_k", 0, kI32));
  q.sampling.seed = r.unsigned_integer("seed");
  q.stop_token_ids = r.integers<int32_t>("stop_token_ids", 0, kI32);
  q.stop = r.strings("stop");
  q.ignore_eos = r.boolean("ignore_eos");
  return q;
}

json event_json(const RankEvent& e) {
  const RequestEvent& v = e.event;
  json j = {{"id", e.front_id},
            {"finished", v.kind == RequestEvent::Kind::kFinished},
            {"text", bytes(v.text)},
            {"num_tokens", v.num_tokens}};
  if (v.kind == RequestEvent::Kind::kFinished) {
    j["finish"] = int32_t(v.finish);
    j["error_code"] = int32_t(v.error.code());
    j["error"] = bytes(v.error.message());
    j["full_text"] = bytes(v.full_text);
    j["prompt_tokens"] = v.prompt_tokens;
    j["completion_tokens"] = v.completion_tokens;
    j["ttft_s"] = e.ttft_s;
    j["e2e_s"] = e.e2e_s;
    j["tpot_s"] = e.tpot_s;
    j["accept_length"] = e.accept_length;
  }
  return j;
}

RankEvent read_event(const json& j, const std::string& where) {
  const Reader r(j, where);
  RankEvent e;
  e.front_id = r.integer("id");
  RequestEvent& v = e.event;
  v.kind = r.boolean("finished") ? RequestEvent::Kind::kFinished : RequestEvent::Kind::kDelta;
  v.text = r.text("text");
  v.num_tokens = int32_t(r.integer("num_tokens", 0, kI32));
  if (v.kind == RequestEvent::Kind::kFinished) {
    v.finish = engine::FinishReason(r.integer("finish", int64_t(engine::FinishReason::kNone),
                                              int64_t(engine::FinishReason::kAborted)));
    const auto code = StatusCode(
        r.integer("error_code", int64_t(StatusCode::kOk), int64_t(StatusCode::kUnimplemented)));
    if (code != StatusCode::kOk) v.error = Status(code, r.text("error"));
    v.full_text = r.text("full_text");
    v.prompt_tokens = int32_t(r.integer("prompt_tokens", 0, kI32));
    v.completion_tokens = int32_t(r.integer("completion_tokens", 0, kI32));
    e.ttft_s = r.number("ttft_s");
    e.e2e_s = r.number("e2e_s");
    e.tpot_s = r.number("tpot_s");
    e.accept_length = r.number("accept_length");
  }
  return e;
}

// The message's object, its kind and version checked; what the Reader throws becomes a Status.
template <typename T, typename F>
StatusOr<T> decode(std::string_view bytes, const char* kind, F&& read) {
  try {
    // Inside the try: the parser throws for some malformed inputs (an array length beyond the
    // address space) even with exceptions off.
    const json j = json::from_cbor(bytes.begin(), bytes.end(), true, false);
    if (j.is_discarded() || !j.is_object()) {
      return invalid_argument(fmt::format("rank message: {} bytes are not a {} (not a CBOR object)",
                                          bytes.size(), kind));
    }
    const Reader r(j, kind);
    if (r.integer("version") != kVersion || r.field("kind") != kind) {
      return invalid_argument(
          fmt::format("rank message: not a {} of version {}: {}", kind, kVersion,
                      j.contains("kind") ? j["kind"].dump() : std::string("no kind")));
    }
    return read(r);
  } catch (const std::exception& e) {
    return invalid_argument(fmt::format("rank message: {}", e.what()));
  }
}

}  // namespace

std::string encode(const FrontControl& c) {
  json admit = json::array();
  for (const PlacedRequest& p : c.admit) {
    admit.push_back({{"rank", p.rank},
                     {"id", p.front_id},
                     {"stream", p.stream},
                     {"request", request_json(p.req)}});
  }
  const json j = {{"version", kVersion}, {"kind", "control"},        {"admit", admit},
                  {"abort", c.abort},    {"abort_all", c.abort_all}, {"stop", c.stop}};
  return to_text(json::to_cbor(j));
}

std::string encode(const RankReport& r) {
  json events = json::array();
  for (const RankEvent& e : r.events) events.push_back(event_json(e));
  const RankStatus& s = r.status;
  const json status = {{"load", s.load},
                       {"running", s.running},
                       {"waiting", s.waiting},
                       {"kv_pages_used", s.kv_pages_used},
                       {"kv_pages_free", s.kv_pages_free},
                       {"steps", s.steps},
                       {"emitted", s.emitted},
                       {"accept_histogram", s.accept_histogram}};
  const json j = {
      {"version", kVersion}, {"kind", "report"}, {"events", events}, {"status", status}};
  return to_text(json::to_cbor(j));
}

StatusOr<FrontControl> decode_control(std::string_view bytes) {
  return decode<FrontControl>(bytes, "control", [](const Reader& r) {
    FrontControl c;
    const json& admit = r.array("admit");
    for (size_t i = 0; i < admit.size(); ++i) {
      const std::string where = fmt::format("control.admit[{}]", i);
      const Reader a(admit[i], where);
      PlacedRequest p;
      p.rank = int32_t(a.integer("rank", 0, kI32));
      p.front_id = a.integer("id");
      p.stream = a.boolean("stream");
      p.req = read_request(a.field("request"), where + ".request");
      c.admit.push_back(std::move(p));
    }
    c.abort = r.integers<int64_t>("abort", 0, std::numeric_limits<int64_t>::max());
    c.abort_all = r.boolean("abort_all");
    c.stop = r.boolean("stop");
    return c;
  });
}

StatusOr<RankReport> decode_report(std::string_view bytes) {
  return decode<RankReport>(bytes, "report", [](const Reader& r) {
    RankReport out;
    const json& events = r.array("events");
    for (size_t i = 0; i < events.size(); ++i) {
      out.events.push_back(read_event(events[i], fmt::format("report.events[{}]", i)));
    }
    const Reader s(r.field("status"), "report.status");
    RankStatus& st = out.status;
    st.load = s.integer("load");
    st.running = s.integer("running");
    st.waiting = s.integer("waiting");
    st.kv_pages_used = s.integer("kv_pages_used");
    st.kv_pages_free = s.integer("kv_pages_free");
    st.steps = s.integer("steps");
    st.emitted = s.integer("emitted");
    st.accept_histogram =
        s.integers<int64_t>("accept_histogram", 0, std::numeric_limits<int64_t>::max());
    return out;
  });
}

StatusOr<std::vector<std::string>> exchange(dist::Collective& group, std::string_view mine) {
  return dist::all_gather_text(group, mine);
}

StatusOr<Vote> vote(dist::Collective& group, bool work, bool events) {
  int64_t v[] = {work ? 1 : 0, events ? 1 : 0};
  DSA_RETURN_IF_ERROR(group.all_reduce(v, dist::ReduceOp::kMax));
  return Vote{v[0] != 0, v[1] != 0};
}

}  // namespace dsa::server::wire
