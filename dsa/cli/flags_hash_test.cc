// The flags hash of the bootstrap: one spelling or order of a command line hashes like another
// that means the same; changing any one shared flag changes it; the per-node flags do not.
#include "dsa/cli/flags_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "dsa/cli/engine_args_test_util.h"

namespace dsa::cli {
namespace {

// The shared flags of a speculative two-rank run, deterministic whatever DSA_CHECKED says.
const std::vector<std::string> kBase = {"--speculative-algorithm",
                                        "NEXTN",
                                        "--speculative-num-steps",
                                        "3",
                                        "--max-running-requests",
                                        "4",
                                        "--dp",
                                        "2",
                                        "--checked-mode",
                                        "off"};

uint64_t hash_of(const std::vector<std::string>& flags) {
  auto a = parse_engine_args(flags);
  DSA_CHECK(a.ok());
  auto s = resolve_engine_args(*a, tiny_config(), 0);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? engine_flags_hash(*a, *s) : 0;
}

std::vector<std::string> with(std::vector<std::string> flags, std::vector<std::string> more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

// `flags` with `change` ({flag} or {flag, value}): the value replaced where the flag is there.
std::vector<std::string> changed(std::vector<std::string> flags,
                                 const std::vector<std::string>& change) {
  const auto it = std::find(flags.begin(), flags.end(), change[0]);
  if (it == flags.end() || change.size() == 1) return with(flags, change);
  it[1] = change[1];
  return flags;
}

TEST(FlagsHash, IsFnv1a64) {
  // The published FNV-1a test vectors: the hash is a fixed function, not std::hash.
  EXPECT_EQ(fnv1a_64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a_64("foobar"), 0x85944171f73967e8ull);
}

TEST(FlagsHash, SpellingsAndOrderThatMeanTheSameAgree) {
  const uint64_t base = hash_of(kBase);
  // Aliases, another flag order, the draft tokens (steps + 1) instead of the steps, defaults
  // written out, a lower-case algorithm.
  EXPECT_EQ(hash_of({"--checked-mode", "off", "--data-parallel-size", "2", "--max-batch", "4",
                     "--speculative-num-draft-tokens", "4", "--speculative-algorithm", "nextn",
                     "--kv-cache-dtype", "bf16", "--ep", "1", "--nnodes", "1"}),
            base);
  // Flags that may differ between ranks: how a node reads its checkpoint, the address they meet at.
  EXPECT_EQ(hash_of(with(kBase, {"--load-chunk-bytes", "4194304"})), base);
  EXPECT_EQ(hash_of(with(kBase, {"--load-threads", "2"})), base);
  EXPECT_EQ(hash_of(with(kBase, {"--dist-init-addr", "node0:29500"})), base);
}

TEST(FlagsHash, EachSharedFlagChangesIt) {
  const std::vector<std::vector<std::string>> changes = {
      {"--model", "models/other"},
      {"--speculative-num-steps", "2"},
      {"--max-running-requests", "5"},
      {"--context-length", "4096"},
      {"--chunked-prefill-size", "256"},
      {"--max-prefill-tokens", "2048"},
      {"--dp", "4"},
      {"--ep", "2"},
      {"--kv-cache-dtype", "fp8_e4m3"},
      {"--mem-fraction-static", "0.8"},
      {"--mtp-chain-hidden", "pre_norm"},
      {"--random-weights"},
      {"--random-weights-seed", "1"},
      {"--simulate-accept-length", "2.5"},
      {"--sampling-on", "device"},
      {"--checked-mode", "on"},
  };
  std::set<uint64_t> seen = {hash_of(kBase)};
  for (const auto& change : changes) {
    EXPECT_TRUE(seen.insert(hash_of(changed(kBase, change))).second)
        << change[0] << " did not change the hash (or gave another change's)";
  }
}

TEST(FlagsHash, CoversWhatOnlyTheSetupHolds) {
  // Buckets and graphs exist on cuda only, more nodes are refused for now: change the resolved
  // setup directly. The node rank differs between nodes by design and must not count.
  auto a = parse_engine_args(kBase);
  ASSERT_TRUE(a.ok());
  auto s = resolve_engine_args(*a, tiny_config(), 0);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  const uint64_t base = engine_flags_hash(*a, *s);
  EngineSetup t = *s;
  ASSERT_TRUE(t.model.buckets.empty());  // the cpu pads nothing
  t.model.buckets = {1, 2, 4};
  const uint64_t four = engine_flags_hash(*a, t);
  t.model.buckets = {1, 2, 3};
  EXPECT_EQ(std::set<uint64_t>({base, four, engine_flags_hash(*a, t)}).size(), 3u);
  t = *s;
  t.model.cuda_graphs = !t.model.cuda_graphs;
  EXPECT_NE(engine_flags_hash(*a, t), base);
  t = *s;
  t.dist.nnodes = 2;
  const uint64_t two_nodes = engine_flags_hash(*a, t);
  EXPECT_NE(two_nodes, base);
  t.dist.node_rank = 1;
  EngineArgs b = *a;
  b.dist.node_rank = 1;
  EXPECT_EQ(engine_flags_hash(b, t), two_nodes);
}

}  // namespace
}  // namespace dsa::cli
