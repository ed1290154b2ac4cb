// --nnodes, --node-rank and --dist-init-addr through the same parse and resolve as `dsa generate`:
// each bad value refused with the flag and the value; a good multi-node set resolved, one process
// per rank implied, and --dp-size refused unless the nodes split it evenly.
#include "dsa/cli/dist_args.h"

#include <gtest/gtest.h>

#include "dsa/cli/engine_args_test_util.h"

namespace dsa::cli {
namespace {

void expect_refused(const std::vector<std::string>& flags, const std::string& want) {
  auto s = resolve(flags);
  ASSERT_FALSE(s.ok()) << want;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().to_string();
}

TEST(DistArgs, DefaultsAreOneNode) {
  auto s = resolve({});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->dist.nnodes, 1);
  EXPECT_EQ(s->dist.node_rank, 0);
  EXPECT_FALSE(s->dist.init_addr.has_value());
}

TEST(DistArgs, RefusesEachBadValueNamingTheFlag) {
  expect_refused({"--nnodes", "0"}, "--nnodes = 0: must be in [1, 1024]");
  expect_refused({"--nnodes", "-3"}, "--nnodes = -3: must be in [1, 1024]");
  expect_refused({"--nnodes", "1025"}, "--nnodes = 1025: must be in [1, 1024]");
  expect_refused({"--nnodes", "99999999999999999999"},
                 "99999999999999999999 is outside the 64-bit integer range");
  expect_refused({"--node-rank", "1"}, "--node-rank = 1: must be in [0, 1) (--nnodes = 1)");
  expect_refused({"--nnodes", "2", "--node-rank", "2", "--dist-init-addr", "n0:29500"},
                 "--node-rank = 2: must be in [0, 2) (--nnodes = 2)");
  expect_refused({"--nnodes", "2", "--node-rank", "-1", "--dist-init-addr", "n0:29500"},
                 "--node-rank = -1: must be in [0, 2)");
  expect_refused({"--nnodes", "2", "--node-rank", "1"}, "--nnodes = 2 needs --dist-init-addr");
  expect_refused({"--dist-init-addr", "nohost"}, "--dist-init-addr = 'nohost': expected host:port");
  expect_refused({"--nnodes", "2", "--dist-init-addr", "n0:65536"},
                 "--dist-init-addr = 'n0:65536': the port must be a number in [1, 65535]");
}

TEST(DistArgs, ResolvesAMultiNodeSet) {
  auto a = parse_engine_args({"--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "n0:29500"});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto d = resolve_dist_args(a->dist);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->nnodes, 2);
  EXPECT_EQ(d->node_rank, 1);
  ASSERT_TRUE(d->init_addr.has_value());
  EXPECT_EQ(d->init_addr->host, "n0");
  EXPECT_EQ(d->init_addr->port, 29500);
  // The engine's resolution: several nodes mean one process per rank, dp_size / nnodes a node.
  auto s =
      resolve({"--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "n0:29500", "--dp", "4"});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->dp_processes);
  EXPECT_EQ(s->dp_size, 4);
  EXPECT_EQ(s->dist.nnodes, 2);
  expect_refused({"--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "n0:29500"},
                 "--dp-size = 1 with --nnodes = 2: the ranks are split evenly over the nodes");
  expect_refused({"--nnodes", "2", "--dist-init-addr", "n0:29500", "--dp", "3"},
                 "--dp-size = 3 with --nnodes = 2");
}

TEST(DistArgs, OneNodeMayNameAnAddress) {
  auto s = resolve({"--dist-init-addr", "[::1]:7"});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->dist.init_addr.has_value());
  EXPECT_EQ(s->dist.init_addr->host, "::1");
  EXPECT_EQ(s->dist.init_addr->port, 7);
}

}  // namespace
}  // namespace dsa::cli
