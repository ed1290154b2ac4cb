#include "dsa/cli/generate_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "dsa/cli/engine_args.h"
#include "dsa/cli/flags_hash.h"
#include "dsa/cli/generate_dp.h"
#include "dsa/cli/generate_ranks.h"
#include "dsa/cli/generate_report.h"
#include "dsa/cli/warmup_run.h"
#include "dsa/core/splitmix64.h"
#include "dsa/dist/local_device_group.h"
#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/dp_placement.h"
#include "dsa/engine/dp_rank_loop.h"
#include "dsa/engine/engine.h"
#include "dsa/model/memory_plan.h"
#include "dsa/model/text_stream.h"
#include "dsa/model/tokenizer.h"
#include "dsa/model/tokenizer_check.h"
#include "dsa/model/weight_stream.h"

namespace dsa::cli {

namespace {

struct GenerateArgs {
  EngineArgs engine;
  std::string prompt;
  std::string prompts_file;
  int64_t max_new_tokens = 64;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  int64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  bool json = false;
  bool progress = false;
  bool profile_device_time = false;
  std::optional<int64_t> random_prompt_len;  // random token-id prompts (benchmarks)
  int64_t num_prompts = 1;                   // how many, with random_prompt_len
};

// The prompts as token ids, and as they are shown (the text, or a note for random ids).
struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> shown;
};

// `len` token ids uniform in [0, vocab) for prompt `index`: SplitMix64 seeded by (seed, index), so
// each prompt is fixed by --seed whatever the others are.
std::vector<int32_t> random_prompt(int64_t len, int64_t vocab, uint64_t seed, uint64_t index) {
  SplitMix64 rng{seed ^ (index * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull)};
  std::vector<int32_t> ids(static_cast<size_t>(len));
  for (int32_t& t : ids) t = int32_t(rng.next() % uint64_t(vocab));
  return ids;
}

// "loading checkpoint: 3/8 files, 410/1184 tensors, 1.20/5.00 GB, 2.1 GB/s" on stderr: one line
// rewritten in place on a terminal, one line per report otherwise (--progress into a log).
void print_load_progress(const model::LoadProgress& p) {
  const double gb = double(p.bytes_done) / 1e9, total = double(p.bytes_total) / 1e9;
  const double rate = p.seconds > 0 ? gb / p.seconds : 0;
  const bool tty = isatty(STDERR_FILENO) != 0;
  const bool last = p.shards_done == p.shards_total;
  fmt::print(stderr,
             "{}loading checkpoint: {}/{} files, {}/{} tensors, {:.2f}/{:.2f} GB, {:.2f} GB/s{}",
             tty ? "\r" : "", p.shards_done, p.shards_total, p.tensors_done, p.tensors_total, gb,
             total, rate, !tty || last ? "\n" : "");
  std::fflush(stderr);
}

// SIGINT / SIGTERM: stop admitting work; what has finished is already written.
volatile std::sig_atomic_t g_signal = 0;
// The first signal asks for a clean stop. A second one 2 s or more later ends the process at once
// (the default action), even if a step hangs; one within 2 s is the same request delivered twice
// (GNU timeout, for one, signals the child and then its whole process group). clock_gettime and
// raise are async-signal-safe.
volatile std::sig_atomic_t g_first_signal_s = 0;
extern "C" void on_signal(int sig) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_signal == 0) {
    g_signal = sig;
    g_first_signal_s = std::sig_atomic_t(now.tv_sec);
    return;
  }
  if (now.tv_sec - g_first_signal_s >= 2) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

StatusOr<std::vector<std::string>> read_prompts(const GenerateArgs& a) {
  if (!a.prompts_file.empty()) {
    if (std::filesystem::is_directory(a.prompts_file)) {
      return invalid_argument(fmt::format("--prompts-file {}: is a directory", a.prompts_file));
    }
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

// The per-request flags, checked once with the flag names (the engine checks each request too).
StatusOr<engine::GenerationRequest> request_template(const GenerateArgs& a, int64_t context,
                                                     int64_t vocab) {
  DSA_RETURN_IF_ERROR(check_range("--max-new-tokens", a.max_new_tokens, 1, context - 1));
  DSA_RETURN_IF_ERROR(check_range("--top-k", a.top_k, 0, INT32_MAX));
  DSA_RETURN_IF_ERROR(check_range("--seed", a.seed, 0, INT64_MAX));
  if (!(a.temperature >= 0 && a.temperature <= 1e6)) {
    return invalid_argument(fmt::format("--temperature = {}: must be in [0, 1e6]", a.temperature));
  }
  if (!(a.top_p > 0 && a.top_p <= 1)) {
    return invalid_argument(fmt::format("--top-p = {}: must be in (0, 1]", a.top_p));
  }
  engine::GenerationRequest r;
  r.max_new_tokens = int32_t(a.max_new_tokens);
  r.sampling = {float(a.temperature), float(a.top_p), int32_t(a.top_k), uint64_t(a.seed)};
  for (size_t i = 0; i < a.stop.size(); ++i) {
    if (a.stop[i].empty()) return invalid_argument(fmt::format("--stop #{} is empty", i + 1));
    // Outputs are valid UTF-8 (model/text_stream.h): an invalid stop string could never match.
    if (model::sanitize_utf8(a.stop[i]) != a.stop[i]) {
      return invalid_argument(fmt::format("--stop #{}: not valid UTF-8", i + 1));
    }
  }
  r.stop = a.stop;
  for (int64_t id : a.stop_token_ids) {
    DSA_RETURN_IF_ERROR(check_range("--stop-token-ids", id, 0, vocab - 1));
    r.stop_token_ids.push_back(int32_t(id));
  }
  r.ignore_eos = a.ignore_eos;
  return r;
}

// Runs the engine over the prompts; results are written as requests finish. Returns the exit code
// (0, 1 when a request failed, 128 + signal when interrupted).
// --random-prompt-len prompts (token ids), or the text prompts encoded with the tokenizer (there
// is one unless --random-weights found no tokenizer.json).
StatusOr<Prompts> make_prompts(const GenerateArgs& a, std::vector<std::string> texts,
                               const model::Tokenizer* tok, const model::ModelConfig& config) {
  Prompts p;
  if (a.random_prompt_len) {
    const int64_t len = *a.random_prompt_len;
    DSA_RETURN_IF_ERROR(check_range("--random-prompt-len", len, 1, a.engine.context_length - 1));
    for (int64_t i = 0; i < a.num_prompts; ++i) {
      p.ids.push_back(random_prompt(len, config.vocab_size, uint64_t(a.seed), uint64_t(i)));
      p.shown.push_back(fmt::format("[random prompt #{}: {} token ids]\n", i, len));
    }
    return p;
  }
  if (tok == nullptr) {
    return invalid_argument(fmt::format(
        "--random-weights: {} has no tokenizer.json, so prompts must be token ids: give "
        "--random-prompt-len N (and --num-prompts K)",
        a.engine.model_dir));
  }
  p.shown = std::move(texts);
  for (const std::string& text : p.shown) p.ids.push_back(tok->encode(text, /*add_bos=*/true));
  return p;
}

// What every rank of a run with a process per rank must share: the engine flags (flags_hash.h),
// and the prompts and per-request settings each rank reads for itself, since every rank places all
// of them and runs its share (a prompts file edited while the ranks start is refused by rank 0).
uint64_t run_hash(const GenerateArgs& a, const EngineSetup& setup, const Prompts& prompts,
                  const engine::GenerationRequest& proto) {
  std::string text = engine_flags_text(a.engine, setup);
  for (const std::vector<int32_t>& ids : prompts.ids) {
    text += fmt::format("prompt={}\n", fmt::join(ids, ","));
  }
  text += fmt::format("max_new_tokens={} temperature={} top_p={} top_k={} seed={} ignore_eos={}\n",
                      proto.max_new_tokens, proto.sampling.temperature, proto.sampling.top_p,
                      proto.sampling.top_k, proto.sampling.seed, proto.ignore_eos);
  for (const std::string& s : proto.stop) text += fmt::format("stop={}\n", s);
  for (int32_t id : proto.stop_token_ids) text += fmt::format("stop_token_id={}\n", id);
  return fnv1a_64(text);
}

// One engine's requests as `dsa generate` writes them: each written when it finishes (with its
// prompt index) and released after the step that finished it, so the engine may forget it.
class RequestBook {
 public:
  explicit RequestBook(GenerateReport& report) : report_(report) {}
  // Before the engine is made: its finish callback writes through this book.
  void attach(engine::EngineOptions& eo) {
    eo.on_finish = [this](const engine::RequestState& r) {
      report_.finished(index_of_.at(r.id), r);
      written_.push_back(r.id);
    };
  }
  // Prompt `index`'s request on `eng`; a refusal is written as the request's result.
  bool add(engine::Engine& eng, size_t index, engine::GenerationRequest req) {
    auto id = eng.add_request(std::move(req));
    if (!id.ok()) {
      report_.refused(index, id.status());
      return false;
    }
    index_of_[*id] = index;
    return true;
  }
  // After each step.
  Status release_written(engine::Engine& eng) {
    for (int64_t id : written_) DSA_RETURN_IF_ERROR(eng.release(id));
    written_.clear();
    return ok_status();
  }

 private:
  GenerateReport& report_;
  std::map<int64_t, size_t> index_of_;  // request id -> prompt index
  std::vector<int64_t> written_;        // finished and written since the last release
};

// One rank of a run with a process per rank (generate_ranks.h): the placement every rank computes
// alike picks its requests, which it runs stepping with the others until no rank has work; its
// results and summary go to this process's stdout as requests finish. Returns the exit code the
// run would have alone (0, 1 when one of its requests failed, 128 + signal when interrupted).
StatusOr<int> run_rank(RankProcess& p, model::DsaModel& model, engine::EngineOptions eo,
                       std::vector<engine::GenerationRequest> requests, GenerateReport& report,
                       const std::function<bool()>& stop) {
  const int32_t world = p.env.world_size, me = p.env.rank;
  std::vector<int64_t> costs;
  for (const engine::GenerationRequest& r : requests) {
    costs.push_back(engine::placement_cost(int64_t(r.prompt.size()), r.max_new_tokens));
  }
  const std::vector<int64_t> no_load(size_t(world), 0);
  DSA_ASSIGN_OR_RETURN(const std::vector<int32_t> owner, engine::place_requests(no_load, costs));
  DpSummary dp{world, std::vector<int64_t>(size_t(world), 0),
               std::vector<int64_t>(size_t(world), 0)};
  dp.rank = me;
  for (int32_t o : owner) ++dp.requests[size_t(o)];
  RequestBook book(report);
  book.attach(eo);
  engine::Engine eng(model, eo, p.group.get());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (owner[i] == me) book.add(eng, i, std::move(requests[i]));
  }
  report.start();
  DSA_ASSIGN_OR_RETURN(const int64_t steps, engine::run_rank_to_completion(eng, stop, [&] {
                         return book.release_written(eng);
                       }));
  // Every rank took every step (the loop's collective decides for all), so the counts agree.
  for (int64_t& n : dp.steps) n = steps;
  report.summary(eng.metrics(), model.timing(), model.graph_stats(), model.cache_plan(), dp);
  if (stop && stop()) return 128 + int(g_signal);
  return report.num_failed() > 0 ? 1 : 0;
}

// Runs the engine over the prompts; results are written as requests finish. Returns the exit code
// (0, 1 when a request failed, 128 + signal when interrupted).
StatusOr<int> run(const GenerateArgs& a) {
  if (!std::filesystem::is_directory(a.engine.model_dir)) {
    return not_found(fmt::format("--model {}: no such model directory", a.engine.model_dir));
  }
  DSA_RETURN_IF_ERROR(check_range("--num-prompts", a.num_prompts, 1, 1 << 20));
  if (a.num_prompts != 1 && !a.random_prompt_len) {
    return invalid_argument(
        fmt::format("--num-prompts = {} needs --random-prompt-len", a.num_prompts));
  }
  std::vector<std::string> texts;
  if (!a.random_prompt_len) {
    DSA_ASSIGN_OR_RETURN(texts, read_prompts(a));
  }
  const std::filesystem::path dir = a.engine.model_dir;
  DSA_ASSIGN_OR_RETURN(model::ModelConfig config, model::load_model_config(dir / "config.json"));
  const int64_t num_prompts = a.random_prompt_len ? a.num_prompts : int64_t(texts.size());
  DSA_ASSIGN_OR_RETURN(EngineSetup setup, resolve_engine_args(a.engine, config, num_prompts));
  DSA_ASSIGN_OR_RETURN(engine::GenerationRequest proto,
                       request_template(a, a.engine.context_length, config.vocab_size));
  // Random weights need no tokenizer (prompts are then token ids and the output has no text).
  std::optional<model::Tokenizer> tok;
  if (!a.engine.random_weights || std::filesystem::exists(dir / "tokenizer.json")) {
    DSA_ASSIGN_OR_RETURN(tok, model::Tokenizer::load(dir / "tokenizer.json"));
    DSA_RETURN_IF_ERROR(model::check_tokenizer_matches(*tok, config));
    DSA_RETURN_IF_ERROR(
        tok->set_special_ids(int32_t(config.bos_token_id), int32_t(config.eos_token_id)));
  } else if (!a.stop.empty()) {
    return invalid_argument("--stop: stop strings need a tokenizer.json in --model");
  }
  DSA_ASSIGN_OR_RETURN(Prompts prompts,
                       make_prompts(a, std::move(texts), tok ? &*tok : nullptr, config));
  if (a.profile_device_time && setup.dp_size > 1) {
    return invalid_argument(fmt::format(
        "--profile-device-time with --dp-size = {}: profiles one engine only (use --dp-size 1)",
        setup.dp_size));
  }
  // One process per rank (generate_ranks.h): this process is the launcher, or one of its ranks.
  std::optional<RankProcess> rank;
  if (setup.dp_processes) {
    DSA_ASSIGN_OR_RETURN(const std::optional<dist::RankEnvironment> env, dist::rank_environment());
    if (!env && !a.prompts_file.empty() && !std::filesystem::is_regular_file(a.prompts_file)) {
      // The launcher has read it, and every rank reads it again: a pipe would be empty for them.
      return invalid_argument(fmt::format(
          "--prompts-file {} with one process per rank: must be a regular file (every rank reads "
          "it)",
          a.prompts_file));
    }
    if (!env) {
      // The backend's refusal (no device, a host-only build) once, here, not from every rank.
      DSA_RETURN_IF_ERROR(kernels::ops_for(setup.backend).status());
      return launch_generate_ranks(setup);
    }
    // A signal from here on asks for a clean stop (the ranks vote and leave after the same step)
    // instead of killing this rank during its load, which would read as a broken rank.
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    DSA_ASSIGN_OR_RETURN(rank,
                         join_generate_ranks(*env, setup, run_hash(a, setup, prompts, proto)));
  }
  // cuda: FailedPrecondition without a device, Unimplemented in a host-only build.
  DSA_ASSIGN_OR_RETURN(const kernels::OpTable* ops, kernels::ops_for(setup.backend));
  model::ModelOptions mo = setup.model;
  mo.profile_device_time = a.profile_device_time;
  // The ranks of a run share the terminal's stderr: rank 0 speaks for them.
  const bool quiet = rank && rank->env.rank > 0;
  if ((a.progress || isatty(STDERR_FILENO)) && !quiet) mo.on_load_progress = print_load_progress;
  BenchmarkModes modes;
  modes.simulated_accept_length = setup.simulate_accept_length;
  modes.random_weights = a.engine.random_weights;
  for (const std::string& line : quiet ? std::vector<std::string>{} : benchmark_banner(modes)) {
    fmt::print(stderr, "dsa generate: {}\n", line);
  }
  // --dp-size N: N instances of the same weights, one per rank (generate_dp.h); the caches
  // share --mem-fraction-static, each rank planning its share of what is left when it loads.
  // --ep-size N (= N): the ranks' MoE collectives. In-process ranks share one LocalDeviceGroup,
  // made before the models that use it (and destroyed after them); a rank process adapts its
  // options to its process (rank_process.h).
  std::unique_ptr<dist::LocalDeviceGroup> ep_group;
  if (rank) {
    DSA_RETURN_IF_ERROR(adapt_to_rank_process(setup, *rank->group, &mo));
  } else {
    mo.mem_fraction_static /= double(setup.dp_size);
    if (setup.ep_size > 1) {
      DSA_ASSIGN_OR_RETURN(ep_group,
                           dist::LocalDeviceGroup::create(setup.ep_size, engine::kDpWatchdog));
    }
  }
  std::vector<std::unique_ptr<model::DsaModel>> models;
  for (int32_t r = 0; r < (rank ? 1 : setup.dp_size); ++r) {
    if (ep_group) {
      mo.ep_rank = r;
      mo.ep_size = setup.ep_size;
      mo.ep_group = &ep_group->rank(r);
    }
    DSA_ASSIGN_OR_RETURN(auto m, model::DsaModel::load(dir, mo, *ops));
    models.push_back(std::move(m));
  }
  model::DsaModel* model = models[0].get();
  // With the load progress (a terminal, or --progress); the summary always carries it.
  if (mo.on_load_progress) {
    if (model->load_stats().tensors > 0) {
      fmt::print(stderr, "dsa generate: {}\n", model::describe_load(model->load_stats()));
    }
    fmt::print(stderr, "dsa generate: {}\n", model::describe_fusion(model->fuse_counts()));
    fmt::print(stderr, "dsa generate: {}{}\n", setup.dp_size > 1 ? "per rank: " : "",
               model::describe_cache_plan(model->cache_plan()));
  }
  if (setup.dp_size > 1 && !rank) {
    fmt::print(stderr, "dsa generate: {}\n", describe_dp_memory(models));
  }
  if (setup.ep_size > 1 && !quiet) {
    fmt::print(stderr,
               "dsa generate: --ep-size {}: each rank computes {} of the {} routed experts for "
               "every rank's rows (every rank loads all of them)\n",
               setup.ep_size, config.n_routed_experts / setup.ep_size, config.n_routed_experts);
  }

  const bool stream = prompts.ids.size() == 1 && !a.json && setup.dp_size == 1 && !rank;
  GenerateReport report(prompts.shown, a.json, stream, setup.num_draft_tokens, modes);
  engine::EngineOptions eo;
  eo.prefill_chunk = setup.prefill_chunk;
  eo.simulate_accept_length = setup.simulate_accept_length;
  eo.accept_on = setup.accept_on;
  eo.overlap = setup.overlap;
  eo.device_commit = setup.device_commit;
  eo.tokenizer = tok ? &*tok : nullptr;
  std::vector<engine::GenerationRequest> requests;
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    engine::GenerationRequest req = proto;
    req.prompt = std::move(prompts.ids[i]);
    req.sampling.seed = proto.sampling.seed + i;
    requests.push_back(std::move(req));
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  if (rank) {
    DSA_ASSIGN_OR_RETURN(const int code, run_rank(*rank, *model, eo, std::move(requests), report,
                                                  [] { return g_signal != 0; }));
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    DSA_RETURN_IF_ERROR(merge_rank_outputs(*rank, code));
    // The run's code travels to the launcher through merge_rank_outputs: a rank process that
    // exits non-zero would make the launcher stop the others.
    return 0;
  } else if (setup.dp_size > 1) {
    DSA_ASSIGN_OR_RETURN(DpRunResult run, run_dp(models, eo, std::move(requests), report,
                                                 [] { return g_signal != 0; }));
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    report.summary(run.metrics, run.timing, run.graphs, model->cache_plan(), run.dp);
  } else {
    // One GPU: a warm-up request first (on cuda), outside the timed run. The ranks of a
    // data-parallel run take no warm-up: every rank would have to take it together.
    DSA_RETURN_IF_ERROR(run_warmup(*model, eo, setup, eo.tokenizer));
    if (stream) {
      eo.on_tokens = [&](const engine::RequestState& r, std::span<const int32_t>) {
        report.stream(r);
      };
    }
    RequestBook book(report);
    book.attach(eo);
    engine::Engine eng(*model, eo);
    DpSummary dp{1, {0}, {0}};
    for (size_t i = 0; i < requests.size(); ++i) {
      dp.requests[0] += book.add(eng, i, std::move(requests[i])) ? 1 : 0;
    }
    report.start();
    while (eng.has_work() && g_signal == 0) {
      DSA_RETURN_IF_ERROR(eng.step());
      DSA_RETURN_IF_ERROR(book.release_written(eng));
    }
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    dp.steps[0] = eng.metrics().steps;
    DSA_ASSIGN_OR_RETURN(const model::DeviceTime device_time, model->device_time());
    report.summary(eng.metrics(), model->timing(), model->graph_stats(), model->cache_plan(), dp,
                   model->profiling_device_time() ? &device_time : nullptr);
  }
  if (g_signal != 0) {
    fmt::print(stderr, "dsa generate: interrupted ({}): {} of {} requests finished and written\n",
               g_signal == SIGINT ? "SIGINT" : "SIGTERM", report.num_written(), prompts.ids.size());
    return 128 + int(g_signal);
  }
  return report.num_failed() > 0 ? 1 : 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text (MTP speculative decoding, continuous batching)");
  add_engine_options(*cmd, a->engine);
  add_dp_option(*cmd, a->engine);
  auto* p = cmd->add_option("--prompt", a->prompt, "Prompt text");
  auto* f = cmd->add_option("--prompts-file", a->prompts_file,
                            "One prompt per line, run concurrently (continuous batching)");
  p->excludes(f);
  auto* rp = cmd->add_option("--random-prompt-len", a->random_prompt_len,
                             "Benchmarks: prompts of N random token ids (from --seed) instead of "
                             "text; the way to prompt --random-weights without a tokenizer");
  rp->excludes(p)->excludes(f);
  cmd->add_option("--num-prompts", a->num_prompts,
                  "With --random-prompt-len: how many prompts, run concurrently")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate per request")
      ->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass")->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed (request i uses seed + i)")
      ->capture_default_str();
  cmd->add_option("--stop", a->stop,
                  "Stop string (repeatable): the request finishes when its text contains it; the "
                  "text ends before it");
  cmd->add_option("--stop-token-ids", a->stop_token_ids,
                  "Token ids that finish a request (kept in the output, as EOS)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at EOS (fixed output lengths)");
  for (const char* name : {"--max-new-tokens", "--top-k", "--seed", "--stop-token-ids",
                           "--random-prompt-len", "--num-prompts"}) {
    cmd->get_option(name)->check(int64_range());
  }
  cmd->add_flag(
      "--progress", a->progress,
      "Print checkpoint loading progress on stderr (on by default when it is a terminal)");
  cmd->add_flag("--json", a->json,
                "One JSON object per request as it finishes, then a summary object");
  cmd->add_flag("--profile-device-time", a->profile_device_time,
                "Time every decode step and forward on the device (timing events on the stream, "
                "read after the run; adds a few microseconds of host time per forward) and "
                "report them: the summary's device_time (with --json) or a table");
  cmd->callback([a, exit_code] {
    StatusOr<int> rc = run(*a);
    if (!rc.ok()) {
      fmt::print(stderr, "dsa generate: {}\n", rc.status().to_string());
      *exit_code = 1;
    } else {
      *exit_code = *rc;
    }
  });
}

}  // namespace dsa::cli
