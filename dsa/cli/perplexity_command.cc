#include "dsa/cli/perplexity_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "dsa/model/perplexity.h"
#include "dsa/model/tokenizer_check.h"

namespace dsa::cli {

namespace {

struct PerplexityArgs {
  std::string model_dir;
  std::string file;
  bool dense = false;
  int32_t window = 1024;
  int32_t max_windows = 0;
  bool no_mtp = false;
  std::string device = "cpu";
  bool json = false;
  bool progress = false;
};

// The longest window: the dense top-k bound (every visible position, SPEC.md's K <= 2048).
constexpr int32_t kMaxWindow = 2048;

Status check_args(const PerplexityArgs& a) {
  if (a.window < 2 || a.window > kMaxWindow) {
    return invalid_argument(fmt::format("--window = {}: must be in [2, {}]", a.window, kMaxWindow));
  }
  if (a.max_windows < 0) {
    return invalid_argument(
        fmt::format("--max-windows = {}: must be >= 0 (0 = all)", a.max_windows));
  }
  return ok_status();
}

// JSON objects keep the order written (index first). mtp_top1 and mtp_agree are null without MTP
// rows (0 would read as a measured rate).
nlohmann::ordered_json mtp_rate_json(int64_t rows, double rate) {
  return rows ? nlohmann::ordered_json(rate) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json window_json(const model::PerplexityWindow& w) {
  return {{"index", w.index},
          {"scored", w.scored},
          {"nll", w.nll},
          {"perplexity", w.perplexity},
          {"top1", w.top1},
          {"mtp_top1", mtp_rate_json(w.mtp_rows, w.mtp_top1)},
          {"mtp_agree", mtp_rate_json(w.mtp_rows, w.mtp_agree)},
          {"mtp_rows", w.mtp_rows}};
}

// The progress line on stderr, rewritten in place with '\r' after each window; stdout (text or
// JSON) never sees it.
class Progress {
 public:
  void show(const model::PerplexityWindow& w, int64_t scored, double seconds) {
    std::string line =
        fmt::format("[{}/{} windows, {} tokens scored, {:.1f} tokens/s]", w.index + 1, w.total,
                    scored, seconds > 0 ? double(scored) / seconds : 0.0);
    // Pad over the rest of a longer previous line.
    const size_t width = std::max(line.size(), shown_);
    fmt::print(stderr, "\r{:<{}}", line, width);
    std::fflush(stderr);
    shown_ = width;
  }
  // Blanks the line, so a JSON line written to the same terminal starts on a clean line.
  void clear() {
    if (shown_ == 0) return;
    fmt::print(stderr, "\r{:{}}\r", "", shown_);
    std::fflush(stderr);
  }
  // Ends the line (the last figures stay on screen).
  void finish() {
    if (shown_ > 0) fmt::print(stderr, "\n");
  }

 private:
  size_t shown_ = 0;  // width of the line on screen, 0 = none
};

Status run(const PerplexityArgs& a) {
  DSA_RETURN_IF_ERROR(check_args(a));
  if (std::filesystem::is_directory(a.file)) {
    return invalid_argument(fmt::format("--file {}: is a directory", a.file));
  }
  std::ifstream f(a.file, std::ios::binary);
  if (!f) return not_found(fmt::format("--file {}: cannot open", a.file));
  std::stringstream ss;
  ss << f.rdbuf();
  model::ModelOptions o;
  o.max_context = a.window;
  o.max_requests = 1;
  o.max_extend_rows = a.window;
  o.dense = a.dense;
  DSA_ASSIGN_OR_RETURN(
      const kernels::OpTable* ops,
      kernels::ops_for(a.device == "cuda" ? kernels::Backend::kCuda : kernels::Backend::kCpu));
  if (!std::filesystem::is_directory(a.model_dir)) {
    return not_found(fmt::format("--model {}: model directory does not exist", a.model_dir));
  }
  // The tokenizer is checked against config.json before the weights are read.
  DSA_ASSIGN_OR_RETURN(model::ModelConfig config,
                       model::load_model_config(a.model_dir + "/config.json"));
  DSA_ASSIGN_OR_RETURN(model::Tokenizer tok,
                       model::Tokenizer::load(a.model_dir + "/tokenizer.json"));
  DSA_RETURN_IF_ERROR(model::check_tokenizer_matches(tok, config));
  DSA_ASSIGN_OR_RETURN(auto m, model::DsaModel::load(a.model_dir, o, *ops));
  DSA_RETURN_IF_ERROR(
      tok.set_special_ids(int32_t(m->config().bos_token_id), int32_t(m->config().eos_token_id)));
  // Progress by default only for a person watching (stderr a terminal); --progress forces it.
  const bool progress = a.progress || isatty(fileno(stderr));
  auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&t0] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // stdout and stderr on one terminal: the JSON line replaces the progress line, which follows it.
  const bool shared_terminal = progress && isatty(fileno(stdout)) && isatty(fileno(stderr));
  Progress bar;
  int64_t scored = 0;
  model::PerplexityOptions po;
  po.window = a.window;
  po.max_windows = a.max_windows;
  po.with_mtp = !a.no_mtp;
  po.on_window = [&](const model::PerplexityWindow& w) {
    scored += w.scored;
    if (a.json) {
      if (shared_terminal) bar.clear();
      fmt::print("{}\n", window_json(w).dump());
      std::fflush(stdout);  // a window's line as soon as it is scored, also into a pipe
    }
    if (progress) bar.show(w, scored, elapsed());
  };
  StatusOr<model::PerplexityResult> evaluated = model::evaluate_perplexity(*m, tok, ss.str(), po);
  if (shared_terminal && a.json) {
    bar.clear();  // the summary line follows the windows' lines
  } else {
    bar.finish();
  }
  DSA_ASSIGN_OR_RETURN(model::PerplexityResult r, std::move(evaluated));
  const double s = elapsed();
  if (a.json) {
    nlohmann::ordered_json j = {{"summary",
                                 {{"model", a.model_dir},
                                  {"attention", a.dense ? "dense" : "sparse"},
                                  {"topk", m->metadata_config().topk},
                                  {"window", a.window},
                                  {"tokens", r.stream_tokens},
                                  {"scored", r.predicted},
                                  {"windows", r.windows},
                                  {"nll", r.nll},
                                  {"perplexity", r.perplexity},
                                  {"top1", r.top1},
                                  {"mtp_top1", mtp_rate_json(r.mtp_rows, r.mtp_top1)},
                                  {"mtp_agree", mtp_rate_json(r.mtp_rows, r.mtp_agree)},
                                  {"mtp_rows", r.mtp_rows},
                                  {"seconds", s},
                                  {"tokens_per_s", double(r.predicted) / s}}}};
    fmt::print("{}\n", j.dump());
    return ok_status();
  }
  fmt::print("model {}  attention {}  window {}\n", a.model_dir,
             a.dense ? "dense (every visible token)"
                     : fmt::format("sparse (top-{})", m->metadata_config().topk),
             a.window);
  fmt::print("tokens {}  scored {}  windows {}\n", r.stream_tokens, r.predicted, r.windows);
  fmt::print("perplexity {:.4f}  top-1 {:.4f}", r.perplexity, r.top1);
  if (r.mtp_rows) {
    fmt::print("  mtp top-1 {:.4f}, agrees with the target {:.4f} ({} rows)", r.mtp_top1,
               r.mtp_agree, r.mtp_rows);
  }
  fmt::print("\n{:.1f} s, {:.0f} tokens/s\n", s, double(r.predicted) / s);
  return ok_status();
}

}  // namespace

void add_perplexity_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text under a model");
  cmd->add_option("--model", a->model_dir,
                  "Model directory (config.json, model.safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--file", a->file, "UTF-8 text; blank lines separate documents")->required();
  cmd->add_flag("--dense", a->dense, "Attend to every visible token (the cost of sparsity)");
  // Ranges are checked in run(), so a bad value gets the one-line message naming the flag.
  cmd->add_option("--window", a->window, "Tokens per window (each a fresh request), 2..2048");
  cmd->add_option("--max-windows", a->max_windows, "Stop after this many windows (0 = all)");
  cmd->add_flag("--no-mtp", a->no_mtp, "Skip the MTP layer's acceptance measurement");
  cmd->add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--json", a->json,
                "One JSON object per window on stdout as it is scored, then a summary object");
  cmd->add_flag("--progress", a->progress,
                "Progress line on stderr even when stderr is not a terminal");
  cmd->callback([a, exit_code] {
    Status s = run(*a);
    if (!s.ok()) {
      fmt::print(stderr, "dsa perplexity: {}\n", s.to_string());
      *exit_code = 1;
    }
  });
}

}  // namespace dsa::cli
