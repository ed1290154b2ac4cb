#include "dsa/cli/perplexity_command.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "dsa/model/perplexity.h"

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
};

Status run(const PerplexityArgs& a) {
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
  DSA_ASSIGN_OR_RETURN(auto m, model::DsaModel::load(a.model_dir, o, *ops));
  DSA_ASSIGN_OR_RETURN(model::Tokenizer tok,
                       model::Tokenizer::load(a.model_dir + "/tokenizer.json"));
  DSA_RETURN_IF_ERROR(
      tok.set_special_ids(int32_t(m->config().bos_token_id), int32_t(m->config().eos_token_id)));
  auto t0 = std::chrono::steady_clock::now();
  model::PerplexityOptions po{a.window, a.max_windows, !a.no_mtp};
  DSA_ASSIGN_OR_RETURN(model::PerplexityResult r,
                       model::evaluate_perplexity(*m, tok, ss.str(), po));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("model {}  attention {}  window {}\n", a.model_dir,
             a.dense ? "dense (every visible token)"
                     : fmt::format("sparse (top-{})", m->metadata_config().topk),
             a.window);
  fmt::print("tokens {}  scored {}  windows {}\n", r.stream_tokens, r.predicted, r.windows);
  fmt::print("perplexity {:.4f}  top-1 {:.4f}", r.perplexity, r.top1);
  if (r.mtp_rows) fmt::print("  mtp top-1 {:.4f} ({} rows)", r.mtp_top1, r.mtp_rows);
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
  cmd->add_option("--window", a->window, "Tokens per window (each a fresh request)")
      ->check(CLI::Range(2, 2048));
  cmd->add_option("--max-windows", a->max_windows, "Stop after this many windows (0 = all)");
  cmd->add_flag("--no-mtp", a->no_mtp, "Skip the MTP layer's acceptance measurement");
  cmd->add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->callback([a, exit_code] {
    Status s = run(*a);
    if (!s.ok()) {
      fmt::print(stderr, "dsa perplexity: {}\n", s.to_string());
      *exit_code = 1;
    }
  });
}

}  // namespace dsa::cli
