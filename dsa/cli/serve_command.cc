#include "dsa/cli/serve_command.h"

#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "dsa/cli/engine_args.h"
#include "dsa/cli/flags_hash.h"
#include "dsa/cli/generate_dp.h"
#include "dsa/cli/rank_process.h"
#include "dsa/cli/serve_ranks.h"
#include "dsa/cli/warmup_run.h"
#include "dsa/core/log.h"
#include "dsa/dist/local_device_group.h"
#include "dsa/dist/rank_env.h"
#include "dsa/engine/dp_engine_group.h"
#include "dsa/engine/engine.h"
#include "dsa/model/chat_template.h"
#include "dsa/model/memory_plan.h"
#include "dsa/model/tokenizer.h"
#include "dsa/model/tokenizer_check.h"
#include "dsa/model/weight_stream.h"
#include "dsa/server/engine_loop.h"
#include "dsa/server/http_server.h"
#include "dsa/server/rank_wire.h"
#include "dsa/server/server_metrics.h"

namespace dsa::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct ServeArgs {
  EngineArgs engine;
  std::string host = "127.0.0.1";
  int64_t port = 30000;
  std::string served_model_name;
  int64_t max_queued_requests = 256;
  int64_t max_request_bytes = int64_t(1) << 20;
  double shutdown_grace_s = 10;
  int64_t http_timeout_s = 30;
  std::string chat_template;  // empty: from the model directory; else a format name
};

// SIGINT / SIGTERM are taken by one thread with sigwait (they are blocked in every other thread,
// which inherit the mask): no async handler, so the shutdown runs as ordinary code.
class Signals {
 public:
  Signals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    // A client that closes its socket mid-write must not kill the server: the write fails.
    std::signal(SIGPIPE, SIG_IGN);
    thread_ = std::thread([this] {
      while (true) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0) continue;
        std::lock_guard lock(mu_);
        if (quit_) return;
        ++count_;
        last_ = sig;
        cv_.notify_all();
      }
    });
  }
  ~Signals() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    // Wakes the sigwait thread with a signal it takes (blocked here, so it is queued for it).
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  // Waits until `n` signals arrived, `until` passes or wake() is called; the number that arrived.
  int wait(int n, Clock::time_point until = Clock::time_point::max()) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, until, [&] { return count_ >= n || woken_; });
    return count_;
  }
  void wake() {
    std::lock_guard lock(mu_);
    woken_ = true;
    cv_.notify_all();
  }
  int count() {
    std::lock_guard lock(mu_);
    return count_;
  }
  const char* last_name() {
    std::lock_guard lock(mu_);
    return last_ == SIGINT ? "SIGINT" : "SIGTERM";
  }

 private:
  sigset_t set_, old_;
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0, last_ = 0;
  bool quit_ = false, woken_ = false;
  std::thread thread_;
};

StatusOr<model::Tokenizer> load_tokenizer(const std::filesystem::path& dir,
                                          const model::ModelConfig& config) {
  DSA_ASSIGN_OR_RETURN(model::Tokenizer tok, model::Tokenizer::load(dir / "tokenizer.json"));
  DSA_RETURN_IF_ERROR(model::check_tokenizer_matches(tok, config));
  DSA_RETURN_IF_ERROR(
      tok.set_special_ids(int32_t(config.bos_token_id), int32_t(config.eos_token_id)));
  return tok;
}

// --dp-size N in this process: N instances of the same weights, one per rank, as `dsa generate
// --dp-size` (generate_dp.h); the caches share --mem-fraction-static, each rank planning its share.
// --ep-size N (= N): the ranks' MoE collectives, made before the models (and destroyed after them).
Status load_dp_models(const EngineSetup& setup, const std::filesystem::path& dir,
                      const kernels::OpTable& ops,
                      std::unique_ptr<dist::LocalDeviceGroup>* ep_group,
                      std::vector<std::unique_ptr<model::DsaModel>>* out) {
  model::ModelOptions mo = setup.model;
  mo.mem_fraction_static /= double(setup.dp_size);
  if (setup.ep_size > 1) {
    DSA_ASSIGN_OR_RETURN(*ep_group,
                         dist::LocalDeviceGroup::create(setup.ep_size, engine::kDpWatchdog));
  }
  for (int32_t r = 0; r < setup.dp_size; ++r) {
    if (*ep_group) {
      mo.ep_rank = r;
      mo.ep_size = setup.ep_size;
      mo.ep_group = &(*ep_group)->rank(r);
    }
    StatusOr<std::unique_ptr<model::DsaModel>> m = model::DsaModel::load(dir, mo, ops);
    if (!m.ok()) {
      return setup.dp_size > 1 ? m.status().with_context(fmt::format("dp rank {}", r)) : m.status();
    }
    out->push_back(std::move(*m));
  }
  return ok_status();
}

// One rank process's own model (serve_ranks.h).
Status load_rank_model(const EngineSetup& setup, const std::filesystem::path& dir,
                       const kernels::OpTable& ops, dist::Collective& group,
                       std::vector<std::unique_ptr<model::DsaModel>>* out) {
  model::ModelOptions mo = setup.model;
  DSA_RETURN_IF_ERROR(adapt_to_rank_process(setup, group, &mo));
  DSA_ASSIGN_OR_RETURN(std::unique_ptr<model::DsaModel> m, model::DsaModel::load(dir, mo, ops));
  out->push_back(std::move(m));
  return ok_status();
}

Status check_serve_args(const ServeArgs& a) {
  DSA_RETURN_IF_ERROR(check_range("--port", a.port, 0, 65535));
  DSA_RETURN_IF_ERROR(check_range("--max-queued-requests", a.max_queued_requests, 0, 1 << 20));
  DSA_RETURN_IF_ERROR(
      check_range("--max-request-bytes", a.max_request_bytes, 1024, int64_t(1) << 30));
  DSA_RETURN_IF_ERROR(check_range("--http-timeout-s", a.http_timeout_s, 1, 3600));
  if (!(a.shutdown_grace_s >= 0 && a.shutdown_grace_s <= 3600)) {
    return invalid_argument(
        fmt::format("--shutdown-grace-s = {}: must be in [0, 3600]", a.shutdown_grace_s));
  }
  if (a.host.empty()) return invalid_argument("--host is empty");
  return ok_status();
}

StatusOr<int> run(const ServeArgs& a) {
  DSA_RETURN_IF_ERROR(check_serve_args(a));
  if (!std::filesystem::is_directory(a.engine.model_dir)) {
    return not_found(fmt::format("--model {}: no such model directory", a.engine.model_dir));
  }
  const std::filesystem::path dir = a.engine.model_dir;
  DSA_ASSIGN_OR_RETURN(model::ModelConfig config, model::load_model_config(dir / "config.json"));
  DSA_ASSIGN_OR_RETURN(EngineSetup setup, resolve_engine_args(a.engine, config, 0));
  // One process per rank (serve_ranks.h): this process is the launcher, the front (global rank
  // 0, which serves HTTP) or a follower.
  std::unique_ptr<dist::Collective> group;
  // Before any thread starts, so every thread inherits the blocked mask: the front's before its
  // process group, whose NCCL threads would otherwise take a SIGTERM with the default action
  // (the front was killed by it on the H100, stop 47).
  std::unique_ptr<Signals> signals;
  if (setup.dp_processes) {
    DSA_ASSIGN_OR_RETURN(const std::optional<dist::RankEnvironment> env, dist::rank_environment());
    if (!env) {
      // The backend's refusal (no device, a host-only build) once, here, not from every rank.
      DSA_RETURN_IF_ERROR(kernels::ops_for(setup.backend).status());
      return launch_serve_ranks(setup);
    }
    // The front leads the shutdown: a signal to a follower (the launcher forwards the user's, a
    // terminal sends its ^C to every rank) must not end it under the front's feet.
    if (env->rank > 0) {
      std::signal(SIGINT, SIG_IGN);
      std::signal(SIGTERM, SIG_IGN);
    } else {
      signals = std::make_unique<Signals>();
    }
    DSA_ASSIGN_OR_RETURN(group, join_rank_group(*env, setup, engine_flags_hash(a.engine, setup)));
    if (env->rank > 0) {
      DSA_ASSIGN_OR_RETURN(const model::Tokenizer tok, load_tokenizer(dir, config));
      DSA_RETURN_IF_ERROR(run_serve_follower(a.engine, setup, tok, *group));
      return 0;
    }
  }
  const std::string model_name =
      !a.served_model_name.empty()
          ? a.served_model_name
          : std::filesystem::absolute(dir).lexically_normal().filename().string();

  if (!signals) signals = std::make_unique<Signals>();
  server::ServerMetrics metrics(setup.num_draft_tokens);
  server::HttpOptions ho;
  ho.host = a.host;
  ho.port = int(a.port);
  ho.max_request_bytes = size_t(a.max_request_bytes);
  // A connection per running or queued request (streams hold theirs), and a few for /health,
  // /metrics and the 429s beyond the queue.
  ho.threads = int(std::min<int64_t>(
      a.engine.max_running_requests * setup.dp_size + a.max_queued_requests + 16, 4096));
  ho.read_timeout_s = ho.write_timeout_s = int(a.http_timeout_s);
  server::HttpServer http(ho, &metrics);
  DSA_ASSIGN_OR_RETURN(const int port, http.bind());
  http.start();
  DSA_LOG_INFO("dsa serve: listening on http://{}:{} (loading {})", a.host, port, dir.string());

  // The listener answers 503 meanwhile (/health included).
  DSA_ASSIGN_OR_RETURN(const model::Tokenizer tok, load_tokenizer(dir, config));
  model::ChatTemplate chat;
  if (a.chat_template.empty()) {
    DSA_ASSIGN_OR_RETURN(chat, model::load_chat_template(dir));
  } else {
    StatusOr<model::ChatFormat> format = model::parse_chat_format(a.chat_template);
    if (!format.ok()) {
      return invalid_argument("--chat-template = " + a.chat_template + ": " +
                              format.status().message());
    }
    DSA_ASSIGN_OR_RETURN(chat, model::load_chat_template(dir, *format));
  }
  DSA_LOG_INFO("dsa serve: chat format {}", model::chat_format_name(chat.format));
  // cuda: FailedPrecondition without a device, Unimplemented in a host-only build.
  DSA_ASSIGN_OR_RETURN(const kernels::OpTable* ops, kernels::ops_for(setup.backend));

  server::ServingContext ctx;
  ctx.tokenizer = &tok;
  ctx.chat = chat;
  ctx.model_name = model_name;
  ctx.context_length = a.engine.context_length;
  ctx.vocab_size = config.vocab_size;

  // The engine thread loads the model and steps it: one thread owns the model from its load (the
  // CUDA backend keeps the forward stream, on which the graphs are captured, per thread).
  enum class State { kLoading, kReady, kFailed, kAbandoned };
  std::mutex mu;
  State state = State::kLoading;
  Status load_error;
  server::EngineLoop* loop = nullptr;
  // Both outlive the HTTP threads (a handler may still hold the loop while the server drains):
  // they are made on the engine thread and destroyed here, after the listener has stopped.
  // --dp-size N: N instances of the same weights, one per rank, as `dsa generate --dp-size`
  // (generate_dp.h); the caches share --mem-fraction-static, each rank planning its share.
  // --ep-size N (= N): the ranks' MoE collectives, made before the models and destroyed after.
  std::unique_ptr<dist::LocalDeviceGroup> ep_group;
  std::vector<std::unique_ptr<model::DsaModel>> models;
  std::unique_ptr<server::EngineLoop> engine_loop;
  std::thread engine_thread([&] {
    std::vector<std::unique_ptr<model::DsaModel>> loaded_models;
    Status loaded = ok_status();
    try {
      loaded = group ? load_rank_model(setup, dir, *ops, *group, &loaded_models)
                     : load_dp_models(setup, dir, *ops, &ep_group, &loaded_models);
    } catch (const std::exception& e) {  // an exception here would end the process unreported
      loaded = internal_error(fmt::format("loading the model: {}", e.what()));
    }
    std::unique_lock lock(mu);
    bool ranks_serve = false;  // the ranks agreed that every one loaded
    if (group) {
      // Every rank takes this collective after its load, so none starts serving (or waits in a
      // step) beside a rank that failed or a front that was stopped meanwhile.
      const LoadOutcome mine = !loaded.ok()                 ? LoadOutcome::kFailed
                               : state == State::kAbandoned ? LoadOutcome::kAbandoned
                                                            : LoadOutcome::kLoaded;
      lock.unlock();
      StatusOr<LoadOutcome> all = agree_on_load(*group, mine);
      lock.lock();
      if (loaded.ok() && !all.ok()) loaded = all.status();
      if (loaded.ok() && *all == LoadOutcome::kFailed) {
        loaded = failed_precondition(
            "another rank failed to load its model (its error is on stderr above)");
      }
      ranks_serve = loaded.ok() && *all == LoadOutcome::kLoaded;
    }
    if (!loaded.ok()) {
      load_error = loaded;
      state = State::kFailed;
      return;
    }
    models = std::move(loaded_models);
    if (state == State::kAbandoned) {  // a signal arrived while loading
      if (ranks_serve) {
        // It came while the ranks agreed, after this rank voted to serve: the others wait in
        // their first exchange, and this one tells them to stop.
        lock.unlock();
        server::wire::FrontControl stop;
        stop.stop = true;
        (void)server::wire::exchange(*group, server::wire::encode(stop));
      }
      return;
    }
    const engine::EngineOptions eo = serve_engine_options(setup, &tok);
    if (!group && models.size() == 1) {
      // One GPU: a warm-up request before the first client's (on cuda); the listener answers 503
      // meanwhile. Data-parallel ranks take none: every rank would have to take it together.
      if (Status warmed = run_warmup(*models[0], eo, setup, &tok); !warmed.ok()) {
        load_error = warmed;
        state = State::kFailed;
        return;
      }
    }
    const server::EngineLoopOptions limits{
        .max_running = int64_t(models[0]->metadata_config().max_requests) * setup.dp_size,
        .max_queued = a.max_queued_requests,
        .num_draft_tokens = setup.num_draft_tokens};
    std::vector<model::DsaModel*> ranks;
    for (const auto& m : models) ranks.push_back(m.get());
    StatusOr<std::unique_ptr<server::EngineLoop>> made =
        group ? server::EngineLoop::create_front(*ranks[0], eo, limits, &metrics, *group)
              : server::EngineLoop::create(ranks, eo, limits, &metrics);
    if (!made.ok()) {
      load_error = made.status();
      state = State::kFailed;
      return;
    }
    engine_loop = std::move(*made);
    const model::DsaModel* model = models[0].get();
    loop = engine_loop.get();
    ctx.loop = loop;
    ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    http.set_ready(&ctx);
    state = State::kReady;
    lock.unlock();
    DSA_LOG_INFO("dsa serve: ready: model {} on {}, d = {}, {} running + {} queued requests{}",
                 model_name, a.engine.device, setup.num_draft_tokens,
                 int64_t(model->metadata_config().max_requests) * setup.dp_size,
                 a.max_queued_requests,
                 setup.dp_size > 1 ? fmt::format(" over {} DP ranks (placed by load{})",
                                                 setup.dp_size, group ? ", one process each" : "")
                                   : "");
    if (model->load_stats().tensors > 0) {
      DSA_LOG_INFO("dsa serve: {}{}", setup.dp_size > 1 ? "per rank: " : "",
                   model::describe_load(model->load_stats()));
    }
    DSA_LOG_INFO("dsa serve: {}", model::describe_fusion(model->fuse_counts()));
    DSA_LOG_INFO("dsa serve: {}{}", setup.dp_size > 1 ? "per rank: " : "",
                 model::describe_cache_plan(model->cache_plan()));
    if (setup.dp_size > 1 && !group) {
      DSA_LOG_INFO("dsa serve: {}", describe_dp_memory(models));
    }
    if (a.engine.random_weights) {
      DSA_LOG_WARN(
          "dsa serve: random weights (--random-weights: benchmark mode, the text is meaningless; "
          "no checkpoint was read)");
    }
    if (setup.simulate_accept_length > 0) {
      DSA_LOG_WARN(
          "dsa serve: accept length SIMULATED: {} (--simulate-accept-length; benchmark mode, the "
          "drafts' real acceptance is not measured)",
          setup.simulate_accept_length);
    }
    loop->run();  // until the shutdown below
  });

  // Until the model is loaded (or failed to) or a signal arrives; loading cannot be interrupted.
  while (true) {
    {
      std::lock_guard lock(mu);
      if (state == State::kFailed) break;
      // The rank processes' loop ends on its own when a rank or the group fails.
      if (state == State::kReady && loop->failed()) break;
      if (signals->count() > 0) {
        if (state == State::kLoading) state = State::kAbandoned;
        break;
      }
    }
    signals->wait(1, Clock::now() + std::chrono::milliseconds(50));
  }
  State at_stop;
  {
    std::lock_guard lock(mu);
    at_stop = state;
  }
  if (at_stop != State::kReady) {
    engine_thread.join();
    http.stop();
    http.join();
    if (at_stop == State::kFailed) return load_error;
    DSA_LOG_INFO("dsa serve: {} while loading: exiting", signals->last_name());
    return 0;
  }

  // Draining: new requests get 503; what runs may finish within the grace period, then is
  // aborted. A second signal ends the grace period at once.
  http.set_draining();
  const auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(a.shutdown_grace_s));
  {
    std::lock_guard lock(mu);
    if (loop->failed()) {
      DSA_LOG_ERROR("dsa serve: the ranks' engine loop failed: stopping");
    } else {
      DSA_LOG_INFO("dsa serve: {}: finishing {} requests (grace {} s)", signals->last_name(),
                   loop->in_flight(), a.shutdown_grace_s);
    }
    loop->shutdown(Clock::now() + grace);
  }
  std::thread second([&] {
    if (signals->wait(2, Clock::now() + grace) >= 2) loop->shutdown(Clock::now());
  });
  engine_thread.join();
  signals->wake();
  second.join();
  // Every request has its final event; give the HTTP threads a moment to write it out.
  const auto flush_until = Clock::now() + std::chrono::seconds(2);
  while (http.busy() > 0 && Clock::now() < flush_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http.stop();
  http.join();
  // A failed rank group ends the server with its error (so the launcher stops the other ranks);
  // the in-process ranks' failure leaves it answering 503 until a signal, as before.
  if (group && loop->failed()) return loop->failure();
  DSA_LOG_INFO("dsa serve: stopped");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  add_engine_options(*cmd, a->engine);
  add_dp_option(*cmd, a->engine);
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on (0: any free port)")->capture_default_str();
  cmd->add_option("--served-model-name", a->served_model_name,
                  "Model name in responses and /v1/models (default: the model directory's name)");
  cmd->add_option("--max-queued-requests", a->max_queued_requests,
                  "Requests waiting beyond the running batch; more are refused with 429")
      ->capture_default_str();
  cmd->add_option("--max-request-bytes", a->max_request_bytes,
                  "Largest request body; larger ones are refused with 413")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace-s", a->shutdown_grace_s,
                  "On SIGINT/SIGTERM, seconds in-flight requests may take to finish before they "
                  "are aborted")
      ->capture_default_str();
  cmd->add_option("--chat-template", a->chat_template,
                  "Chat format: plain, deepseek-v3.2 or glm-5 (default: detected from the "
                  "model's chat template; plain when it has none)");
  cmd->add_option("--http-timeout-s", a->http_timeout_s,
                  "Seconds a connection may stay silent while a request is read or written")
      ->capture_default_str();
  for (const char* name :
       {"--port", "--max-queued-requests", "--max-request-bytes", "--http-timeout-s"}) {
    cmd->get_option(name)->check(int64_range());
  }
  cmd->callback([a, exit_code] {
    StatusOr<int> rc = run(*a);
    if (!rc.ok()) {
      fmt::print(stderr, "dsa serve: {}\n", rc.status().to_string());
      *exit_code = 1;
    } else {
      *exit_code = *rc;
    }
  });
}

}  // namespace dsa::cli
