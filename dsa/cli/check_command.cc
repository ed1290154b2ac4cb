#include "dsa/cli/check_command.h"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <string>

#include "dsa/cli/check_cases.h"
#include "dsa/kernels/op_table.h"

namespace dsa::cli {

namespace {

struct CheckOptions {
  std::string device = "cpu";
  std::string shapes = "all";
  std::string filter;
  uint64_t seed = 0;
};

int run_checks(const CheckOptions& opt) {
  if (opt.device == "cuda") {
    // The check entries stage their inputs in host memory; CUDA ops take device pointers. Until
    // the entries stage through device buffers, the gpu-labelled tests are the CUDA checks.
    fmt::print(stderr,
               "dsa check: --device cuda is not supported yet; run the gpu-labelled tests "
               "(ctest -L gpu, scripts/gpu_check.sh)\n");
    return 2;
  }
  auto backend = kernels::Backend::kCpu;
  auto ops = kernels::ops_for(backend);
  if (!ops.ok()) {
    fmt::print(stderr, "dsa check: {}\n", ops.status().to_string());
    return 2;
  }
  uint64_t seed = opt.seed ? opt.seed : std::random_device{}();
  fmt::print("dsa check: backend {}, seed {} (--seed {} replays)\n", (*ops)->name, seed, seed);
  int failures = 0, ran = 0;
  for (const CheckCase& c : check_cases(**ops)) {
    bool small = c.shape_class == ShapeClass::kSmall;
    if ((opt.shapes == "small" && !small) || (opt.shapes == "v32" && small)) continue;
    if (!opt.filter.empty() && c.op.find(opt.filter) == std::string::npos) continue;
    auto t0 = std::chrono::steady_clock::now();
    Status s = c.run(seed + static_cast<uint64_t>(ran));
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++ran;
    fmt::print("{:4}  {:<22} {:<6} {:<52} {:>10.1f} ms\n", s.ok() ? "PASS" : "FAIL", c.op,
               small ? "small" : "v3.2", c.shape, ms);
    if (!s.ok()) {
      ++failures;
      fmt::print("      {}\n", s.to_string());
    }
    std::fflush(stdout);
  }
  if (ran == 0) {
    fmt::print(stderr, "dsa check: no case matched the filters\n");
    return 2;
  }
  fmt::print("dsa check: {} of {} passed\n", ran - failures, ran);
  return failures == 0 ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Run every op on random inputs and compare with an independent formulation");
  cmd->add_option("--device", opt->device, "Backend to check")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--shapes", opt->shapes, "small, v32 (DeepSeek-V3.2 shapes) or all")
      ->check(CLI::IsMember({"small", "v32", "all"}));
  cmd->add_option("--filter", opt->filter, "Only ops whose name contains this text");
  cmd->add_option("--seed", opt->seed, "Random seed (0 = fresh)");
  cmd->callback([opt, exit_code] { *exit_code = run_checks(*opt); });
}

}  // namespace dsa::cli
