#include "dsa/cli/generate_ranks.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "dsa/dist/gather_text.h"

namespace dsa::cli {

namespace {

std::filesystem::path rank_file(const std::string& run_dir, int32_t rank) {
  return std::filesystem::path(run_dir) / fmt::format("rank_{}.out", rank);
}

std::filesystem::path exit_code_file(const std::string& run_dir) {
  return std::filesystem::path(run_dir) / "exit_code";
}

}  // namespace

StatusOr<int> launch_generate_ranks(const EngineSetup& setup) {
  DSA_ASSIGN_OR_RETURN(const std::string addr, export_init_addr(setup));
  std::string dir_template = (std::filesystem::temp_directory_path() / "dsa-ranks-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    return internal_error(
        fmt::format("--dp-processes: cannot make a run directory {}", dir_template));
  }
  const std::string run_dir = dir_template;
  ::setenv(kEnvRunDir, run_dir.c_str(), 1);
  const NodeRanks n = node_ranks(setup);
  if (setup.dist.nnodes > 1) {
    fmt::print(stderr,
               "dsa generate: node {} of {}: starting ranks {}..{} of {} (one process per {}), "
               "rank 0 at {}{}\n",
               setup.dist.node_rank, setup.dist.nnodes, n.first, n.first + n.local - 1,
               setup.dp_size, n.per, addr,
               setup.dist.node_rank == 0 ? "" : "; the output is written by node 0");
  } else {
    fmt::print(stderr, "dsa generate: starting {} rank processes (one per {}), rank 0 at {}\n",
               setup.dp_size, n.per, addr);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const Status launched = launch_node_ranks(setup);
  int code = 1;  // no exit code left: the ranks did not reach the end of the run
  bool merged = false;
  if (std::ifstream in(exit_code_file(run_dir)); in) {
    merged = true;
    in >> code;
  }
  if (!merged) {
    // The run broke before rank 0 gathered the others' output: what this node's ranks had
    // finished is still theirs to show (their requests were written as they finished), after rank
    // 0's. (Global rank 0 wrote to this stdout itself.)
    for (int32_t r = std::max(n.first, 1); r < n.first + n.local; ++r) {
      std::ifstream in(rank_file(run_dir, r), std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
  }
  std::error_code ec;
  std::filesystem::remove_all(run_dir, ec);
  if (!launched.ok()) {
    fmt::print(stderr, "dsa generate: {}\n", launched.to_string());
    return 1;
  }
  if (code >= 128) {
    fmt::print(stderr,
               "dsa generate: interrupted: the {} ranks stopped after the same step; what had "
               "finished was written{}\n",
               setup.dp_size, setup.dist.node_rank == 0 ? "" : " by node 0");
  }
  return code;
}

StatusOr<RankProcess> join_generate_ranks(const dist::RankEnvironment& env,
                                          const EngineSetup& setup, uint64_t flags_hash) {
  const char* run_dir = std::getenv(kEnvRunDir);
  if (run_dir == nullptr) {
    return invalid_argument(fmt::format(
        "{} must be set in a rank process of dsa generate (the dsa launcher sets it)", kEnvRunDir));
  }
  RankProcess p;
  p.env = env;
  p.run_dir = run_dir;
  if (env.rank > 0) {
    // One output stream in the end: a rank > 0 writes its results to its file, which rank 0
    // appends after the last step (merge_rank_outputs).
    const std::string path = rank_file(p.run_dir, env.rank).string();
    std::fflush(stdout);
    if (std::freopen(path.c_str(), "w", stdout) == nullptr) {
      return internal_error(fmt::format("rank {}: cannot write {}", env.rank, path));
    }
  }
  DSA_ASSIGN_OR_RETURN(p.group, join_rank_group(env, setup, flags_hash));
  return p;
}

Status merge_rank_outputs(RankProcess& p, int exit_code) {
  if (std::fflush(stdout) != 0) {
    // A full disk on a rank's file: say so rather than leave its output short. The collectives
    // still run, so the others are not left waiting for this rank.
    exit_code = std::max(exit_code, 1);
    fmt::print(stderr, "dsa generate: rank {}: writing its output failed\n", p.env.rank);
  }
  // Rank > 0: its file, for rank 0 through the group, since the ranks of several nodes share no
  // file system (rank 0 wrote to stdout as it went, and sends nothing).
  std::string mine;
  if (p.env.rank != 0) {
    const std::filesystem::path path = rank_file(p.run_dir, p.env.rank);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      // Still joins both collectives (with an empty text), so the others are not left waiting.
      exit_code = std::max(exit_code, 1);
      fmt::print(stderr, "dsa generate: rank {}: cannot read back its output {}\n", p.env.rank,
                 path.string());
    }
    mine.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  int64_t code[] = {exit_code};
  DSA_RETURN_IF_ERROR(p.group->all_reduce(code, dist::ReduceOp::kMax));
  DSA_ASSIGN_OR_RETURN(const std::vector<std::string> texts, dist::all_gather_text(*p.group, mine));
  if (p.env.rank == 0) {
    for (int32_t r = 1; r < p.env.world_size; ++r) {
      const std::string& text = texts[size_t(r)];
      if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size()) {
        return internal_error(fmt::format("writing rank {}'s output to stdout failed", r));
      }
    }
    if (std::fflush(stdout) != 0) {
      return internal_error("writing the ranks' output to stdout failed");
    }
  }
  // The code for this node's launcher (one writer per node): its sign that the output is whole.
  if (p.env.local_rank != 0) return ok_status();
  std::ofstream out(exit_code_file(p.run_dir));
  out << code[0] << "\n";
  if (!out) {
    return internal_error(fmt::format("cannot write {}", exit_code_file(p.run_dir).string()));
  }
  return ok_status();
}

}  // namespace dsa::cli
