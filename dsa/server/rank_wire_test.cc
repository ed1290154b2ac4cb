// The messages between the front and the rank processes of `dsa serve` (rank_wire.h): every field
// survives the round trip, text bytes exactly (invalid UTF-8 and zero bytes included), and a
// corrupt, truncated or mistyped message is refused with the field named.
#include "dsa/server/rank_wire.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace dsa::server::wire {
namespace {

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = char(rng() & 0xff);
  return s;
}

FrontControl sample_control() {
  FrontControl c;
  PlacedRequest p;
  p.rank = 2;
  p.front_id = 41;
  p.stream = true;
  p.req.prompt = {0, 17, 6143, 5};
  p.req.max_new_tokens = 33;
  p.req.sampling.temperature = 0.7f;
  p.req.sampling.top_p = 0.9f;
  p.req.sampling.top_k = 40;
  p.req.sampling.seed = 0xfedcba9876543210ull;  // above int64's range
  p.req.stop_token_ids = {1, 2};
  p.req.stop = {"\n\n", "The end"};
  p.req.ignore_eos = true;
  c.admit.push_back(p);
  p.rank = 1;
  p.front_id = 42;
  p.stream = false;
  p.req = {};
  c.admit.push_back(p);
  c.abort = {7, 9};
  c.abort_all = true;
  c.stop = false;
  return c;
}

TEST(RankWire, ControlRoundTrips) {
  const FrontControl c = sample_control();
  StatusOr<FrontControl> back = decode_control(encode(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->admit.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const PlacedRequest &a = c.admit[i], &b = back->admit[i];
    EXPECT_EQ(b.rank, a.rank);
    EXPECT_EQ(b.front_id, a.front_id);
    EXPECT_EQ(b.stream, a.stream);
    EXPECT_EQ(b.req.prompt, a.req.prompt);
    EXPECT_EQ(b.req.max_new_tokens, a.req.max_new_tokens);
    EXPECT_EQ(b.req.sampling.temperature, a.req.sampling.temperature);
    EXPECT_EQ(b.req.sampling.top_p, a.req.sampling.top_p);
    EXPECT_EQ(b.req.sampling.top_k, a.req.sampling.top_k);
    EXPECT_EQ(b.req.sampling.seed, a.req.sampling.seed);
    EXPECT_EQ(b.req.stop_token_ids, a.req.stop_token_ids);
    EXPECT_EQ(b.req.stop, a.req.stop);
    EXPECT_EQ(b.req.ignore_eos, a.req.ignore_eos);
  }
  EXPECT_EQ(back->abort, c.abort);
  EXPECT_TRUE(back->abort_all);
  EXPECT_FALSE(back->stop);
  FrontControl stop;
  stop.stop = true;
  StatusOr<FrontControl> s = decode_control(encode(stop));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->stop);
  EXPECT_TRUE(s->admit.empty());
}

TEST(RankWire, ReportRoundTripsEveryByte) {
  std::mt19937 rng(20261207);
  RankReport r;
  for (int i = 0; i < 20; ++i) {
    RankEvent e;
    e.front_id = 1000 + i;
    // Every byte value, invalid UTF-8 and NULs: a byte-fallback token's text is not UTF-8.
    e.event.text = random_bytes(rng, size_t(i) * 7);
    e.event.num_tokens = i;
    if (i % 3 == 2) {
      e.event.kind = RequestEvent::Kind::kFinished;
      e.event.finish = engine::FinishReason(i % 8);
      e.event.full_text = random_bytes(rng, 300);
      if (i % 2 == 0) e.event.error = resource_exhausted("no pages \xff for request");
      e.event.prompt_tokens = 3 * i;
      e.event.completion_tokens = i + 1;
      e.ttft_s = 0.001 * i;
      e.e2e_s = 0.5 + i;
      e.tpot_s = 1.0 / (i + 1);
      e.accept_length = 2.0 + 0.125 * i;
    }
    r.events.push_back(e);
  }
  r.status = {.load = 77,
              .running = 3,
              .waiting = 1,
              .kv_pages_used = 12,
              .kv_pages_free = 900,
              .steps = 123456,
              .emitted = 999,
              .accept_histogram = {5, 0, 7, 1}};
  StatusOr<RankReport> back = decode_report(encode(r));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  ASSERT_EQ(back->events.size(), r.events.size());
  for (size_t i = 0; i < r.events.size(); ++i) {
    const RankEvent &a = r.events[i], &b = back->events[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(b.front_id, a.front_id);
    EXPECT_EQ(b.event.kind, a.event.kind);
    EXPECT_EQ(b.event.text, a.event.text);
    EXPECT_EQ(b.event.num_tokens, a.event.num_tokens);
    EXPECT_EQ(b.event.finish, a.event.finish);
    EXPECT_EQ(b.event.error.code(), a.event.error.code());
    EXPECT_EQ(b.event.error.message(), a.event.error.message());
    EXPECT_EQ(b.event.full_text, a.event.full_text);
    EXPECT_EQ(b.event.prompt_tokens, a.event.prompt_tokens);
    EXPECT_EQ(b.event.completion_tokens, a.event.completion_tokens);
    EXPECT_EQ(b.ttft_s, a.ttft_s);
    EXPECT_EQ(b.e2e_s, a.e2e_s);
    EXPECT_EQ(b.tpot_s, a.tpot_s);
    EXPECT_EQ(b.accept_length, a.accept_length);
  }
  EXPECT_EQ(back->status.load, 77);
  EXPECT_EQ(back->status.running, 3);
  EXPECT_EQ(back->status.waiting, 1);
  EXPECT_EQ(back->status.kv_pages_used, 12);
  EXPECT_EQ(back->status.kv_pages_free, 900);
  EXPECT_EQ(back->status.steps, 123456);
  EXPECT_EQ(back->status.emitted, 999);
  EXPECT_EQ(back->status.accept_histogram, r.status.accept_histogram);
}

void expect_refused(const StatusOr<FrontControl>& got, const std::string& names) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find(names), std::string::npos) << got.status().message();
}

TEST(RankWire, CorruptMessagesAreRefusedByName) {
  const std::string good = encode(sample_control());
  // Every strict prefix is refused (a truncated exchange), never a crash.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(decode_control(good.substr(0, n)).ok()) << "prefix of " << n << " bytes";
  }
  expect_refused(decode_control("not cbor at all"), "not a control");
  // An array length beyond the address space: nlohmann's parser throws even with exceptions off.
  expect_refused(decode_control(std::string("\x9b\x7f\xff\xff\xff\xff\xff\xff\xff", 9)),
                 "rank message");
  // A report is not a control, and the other way round.
  expect_refused(decode_control(encode(RankReport{})), "not a control of version");
  EXPECT_FALSE(decode_report(good).ok());

  using json = nlohmann::json;
  json j = json::from_cbor(good);
  const auto with = [&](const std::function<void(json&)>& edit) {
    json k = j;
    edit(k);
    const std::vector<uint8_t> b = json::to_cbor(k);
    return decode_control(std::string(b.begin(), b.end()));
  };
  expect_refused(with([](json& k) { k["admit"][0]["request"].erase("seed"); }),
                 "control.admit[0].request.seed: missing");
  expect_refused(with([](json& k) {
                   k["admit"][1]["request"]["prompt"] = {1, -4};
                 }),
                 "control.admit[1].request.prompt: holds a value outside");
  expect_refused(with([](json& k) { k["admit"][0]["rank"] = "two"; }),
                 "control.admit[0].rank: not an integer");
  expect_refused(with([](json& k) { k["abort"] = 3; }), "control.abort: not an array");
  expect_refused(with([](json& k) { k["stop"] = 1; }), "control.stop: not a boolean");
  expect_refused(with([](json& k) { k["version"] = 2; }), "not a control of version 1");

  RankReport r;
  RankEvent e;
  e.event.kind = RequestEvent::Kind::kFinished;
  r.events.push_back(e);
  json rj = json::from_cbor(encode(r));
  rj["events"][0]["finish"] = 99;
  const std::vector<uint8_t> b = json::to_cbor(rj);
  StatusOr<RankReport> bad = decode_report(std::string(b.begin(), b.end()));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("report.events[0].finish: 99 is outside"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace dsa::server::wire
