#include "dsa/cli/generate_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dsa/engine/engine.h"
#include "dsa/model/tokenizer.h"

namespace dsa::cli {

namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  std::string prompts_file;
  int32_t max_new_tokens = 64;
  int32_t draft_tokens = 0;
  float temperature = 0.f, top_p = 1.f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  std::string device = "cpu";
  bool json = false;
  int32_t max_context = 2048;
  int32_t max_batch = 8;
  std::string mtp_chain_hidden = "post_norm";
  bool no_graphs = false;
};

StatusOr<std::vector<std::string>> read_prompts(const GenerateArgs& a) {
  if (!a.prompts_file.empty()) {
    std::ifstream f(a.prompts_file);
    if (!f) return not_found(fmt::format("--prompts-file {}: cannot open", a.prompts_file));
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) {
      if (!line.empty()) out.push_back(line);
    }
    if (out.empty())
      return invalid_argument(fmt::format("--prompts-file {}: no prompts in it", a.prompts_file));
    return out;
  }
  if (a.prompt.empty()) return invalid_argument("--prompt is empty (give text, or --prompts-file)");
  return std::vector<std::string>{a.prompt};
}

Status run(const GenerateArgs& a) {
  if (a.draft_tokens < 0 || a.draft_tokens > runtime::kMaxDraftTokens) {
    return invalid_argument(fmt::format("--speculative-num-draft-tokens = {}: must be in [0, {}]",
                                        a.draft_tokens, runtime::kMaxDraftTokens));
  }
  if (a.max_new_tokens <= 0) {
    return invalid_argument(fmt::format("--max-new-tokens = {}: must be >= 1", a.max_new_tokens));
  }
  if (!std::filesystem::is_directory(a.model_dir)) {
    return not_found(fmt::format("--model {}: no such model directory", a.model_dir));
  }
  DSA_ASSIGN_OR_RETURN(std::vector<std::string> prompts, read_prompts(a));
  model::ModelOptions o;
  o.max_context = a.max_context;
  o.num_draft_tokens = a.draft_tokens;
  o.max_requests = std::min<int32_t>(a.max_batch, int32_t(prompts.size()));
  o.max_extend_rows = 1024;
  o.mtp_chain_hidden = a.mtp_chain_hidden == "pre_norm" ? model::MtpChainHidden::kPreNorm
                                                        : model::MtpChainHidden::kPostNorm;
  if (a.device == "cuda") {
    // Uniform forwards are padded to buckets either way, so --no-graphs runs the very same
    // padded batches eagerly (graphs on and off are bit-identical, SPEC.md §5).
    o.buckets = runtime::default_buckets(o.max_requests);
    o.cuda_graphs = !a.no_graphs;
  }
  // cuda: FailedPrecondition without a device, Unimplemented in a host-only build.
  DSA_ASSIGN_OR_RETURN(
      const kernels::OpTable* ops,
      kernels::ops_for(a.device == "cuda" ? kernels::Backend::kCuda : kernels::Backend::kCpu));
  DSA_ASSIGN_OR_RETURN(auto model, model::DsaModel::load(a.model_dir, o, *ops));
  DSA_ASSIGN_OR_RETURN(model::Tokenizer tok,
                       model::Tokenizer::load(a.model_dir + "/tokenizer.json"));
  DSA_RETURN_IF_ERROR(tok.set_special_ids(int32_t(model->config().bos_token_id),
                                          int32_t(model->config().eos_token_id)));

  const bool stream = prompts.size() == 1 && !a.json;
  engine::EngineOptions eo;
  std::string streamed;
  if (stream) {
    eo.on_tokens = [&](const engine::RequestState& r, std::span<const int32_t>) {
      auto text = tok.decode(r.output, /*skip_special_tokens=*/true);
      if (text.ok() && text->size() > streamed.size()) {
        std::fwrite(text->data() + streamed.size(), 1, text->size() - streamed.size(), stdout);
        std::fflush(stdout);
        streamed = *text;
      }
    };
  }
  engine::Engine eng(*model, eo);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerationRequest req;
    req.prompt = tok.encode(prompts[i], /*add_bos=*/true);
    req.max_new_tokens = a.max_new_tokens;
    req.sampling = {a.temperature, a.top_p, a.top_k, a.seed + i};
    auto id = eng.add_request(std::move(req));
    if (!id.ok()) return id.status().with_context(fmt::format("prompt {}", i + 1));
    ids.push_back(*id);
  }
  if (stream) fmt::print("{}", prompts[0]);
  const auto t0 = std::chrono::steady_clock::now();
  size_t done_before = 0;
  while (eng.has_work()) {
    DSA_RETURN_IF_ERROR(eng.step());
    if (!stream && !a.json) {
      size_t done = 0;
      for (int64_t id : ids) done += eng.request(id).phase == engine::RequestPhase::kFinished;
      if (done != done_before)
        fmt::print(stderr, "\r[{}/{} requests done, {} tokens]", done, ids.size(),
                   eng.metrics().emitted);
      done_before = done;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!stream && !a.json) fmt::print(stderr, "\n");

  for (int64_t id : ids) {
    const engine::RequestState& r = eng.request(id);
    const engine::RequestFigures f = engine::request_figures(r);
    DSA_ASSIGN_OR_RETURN(std::string text, tok.decode(r.output, true));
    if (a.json) {
      nlohmann::json j = {{"text", text},
                          {"token_ids", r.output},
                          {"finish_reason", std::string(engine::finish_reason_name(r.finish))},
                          {"accept_length_mean", f.accept_length_mean},
                          {"per_position_acceptance", f.per_position_acceptance},
                          {"tokens_per_s", f.tokens_per_s}};
      fmt::print("{}\n", j.dump());
    } else if (!stream) {
      fmt::print("--- request {} ({} tokens, {}) ---\n{}{}\n", id, r.output.size(),
                 engine::finish_reason_name(r.finish), prompts[size_t(id)], text);
    }
  }
  const model::ForwardTiming& ft = model->timing();
  const int64_t steps = std::max<int64_t>(1, eng.metrics().steps);
  // Time per output token of each request after its first, averaged over requests.
  const double tpot_ms = 1000.0 * eng.metrics().mean_tpot_s();
  if (a.json) {
    const engine::EngineMetrics& m = eng.metrics();
    nlohmann::json j = {
        {"summary",
         {{"requests", ids.size()},
          {"tokens", m.emitted},
          {"seconds", secs},
          {"tokens_per_s", double(m.emitted) / secs},
          {"ms_per_output_token", 1000.0 * secs / double(std::max<int64_t>(1, m.emitted))},
          {"tpot_ms", tpot_ms},
          {"accept_length_mean", m.mean_accept_length()},
          {"steps", m.steps},
          {"forwards", ft.forwards},
          {"graph_replays", ft.replays},
          {"host_ms_per_step", 1000.0 * ft.host_s / double(steps)},
          {"forward_ms_per_step", 1000.0 * ft.total_s / double(steps)},
          {"graphs", model->graph_stats().graphs},
          {"graph_nodes", model->graph_stats().nodes},
          {"graph_capture_s", model->graph_stats().capture_s}}}};
    fmt::print("{}\n", j.dump());
  }
  if (!a.json) {
    const engine::EngineMetrics& m = eng.metrics();
    fmt::print("\n");
    fmt::print(
        "[{} requests, {} tokens in {:.2f} s: {:.1f} tokens/s, {:.1f} ms per output token, mean "
        "TTFT {:.0f} ms]\n",
        ids.size(), m.emitted, secs, double(m.emitted) / secs,
        1000.0 * secs / double(std::max<int64_t>(1, m.emitted)), 1000.0 * m.mean_ttft_s());
    fmt::print(
        "[{} steps, {} forwards ({} graph replays): host {:.3f} ms per step launching, {:.3f} "
        "ms per step in forwards; {:.2f} ms per output token per request]\n",
        m.steps, ft.forwards, ft.replays, 1000.0 * ft.host_s / double(steps),
        1000.0 * ft.total_s / double(steps), tpot_ms);
    if (a.draft_tokens > 0) {
      fmt::print("[d = {}: mean accept length {:.3f} over {} verify steps; per-position acceptance",
                 a.draft_tokens, m.mean_accept_length(), m.verify_steps);
      for (double x : m.per_position_acceptance()) fmt::print(" {:.3f}", x);
      fmt::print("]\n");
    }
  }
  return ok_status();
}

}  // namespace

void add_generate_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text (MTP speculative decoding, continuous batching)");
  cmd->add_option("--model", a->model_dir, "Model directory")->required();
  auto* p = cmd->add_option("--prompt", a->prompt, "Prompt text");
  auto* f =
      cmd->add_option("--prompts-file", a->prompts_file, "One prompt per line, run concurrently");
  p->excludes(f);
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate per request");
  cmd->add_option("--speculative-num-draft-tokens", a->draft_tokens,
                  "Draft tokens d (0 = plain decoding)");
  cmd->add_option("--temperature", a->temperature, "0 = greedy");
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass");
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)");
  cmd->add_option("--seed", a->seed, "Sampling seed (request i uses seed + i)");
  cmd->add_option("--device", a->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--json", a->json, "One JSON object per request instead of text");
  cmd->add_option("--max-context", a->max_context, "Longest request (prompt + new tokens)");
  cmd->add_option("--max-batch", a->max_batch, "Most requests decoded together");
  cmd->add_flag("--no-graphs", a->no_graphs,
                "cuda: run every forward eagerly (the same bucket-padded batches) instead of "
                "replaying CUDA graphs");
  cmd->add_option("--mtp-chain-hidden", a->mtp_chain_hidden,
                  "Hidden state chained between draft steps (SPEC.md §6.5)")
      ->check(CLI::IsMember({"post_norm", "pre_norm"}));
  cmd->callback([a, exit_code] {
    Status s = run(*a);
    if (!s.ok()) {
      fmt::print(stderr, "dsa generate: {}\n", s.to_string());
      *exit_code = 1;
    }
  });
}

}  // namespace dsa::cli
