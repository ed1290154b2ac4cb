#include "dsa/cli/engine_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "dsa/core/checked_mode.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/graph_runner.h"

namespace dsa::cli {

namespace {

// Upper bounds the engine can honour (int32 metadata; see model/dsa_model.cc).
constexpr int64_t kMaxRunningRequests = 4096;
// T_ext sizes the fixed output buffers (T_ext x vocab fp32 logits): 2^16 rows is 1.6 GB of logits
// at the tiny model's vocabulary and 34 GB at V3.2's; SGLang's default is 16384.
constexpr int64_t kMaxPrefillTokens = 1 << 16;

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// d from the speculative flags (SGLang: with top-k 1, draft tokens = steps + 1).
StatusOr<int32_t> draft_steps(const EngineArgs& a, const model::ModelConfig& config) {
  const bool steps_set = a.speculative_num_steps.has_value(),
             drafts_set = a.speculative_num_draft_tokens.has_value();
  if (a.speculative_algorithm.empty()) {
    if (drafts_set) {
      return invalid_argument(fmt::format(
          "--speculative-num-draft-tokens = {} needs --speculative-algorithm NEXTN (or EAGLE); "
          "it counts the verified tokens, steps + 1, as in SGLang: for d draft steps write "
          "--speculative-algorithm NEXTN --speculative-num-steps d",
          *a.speculative_num_draft_tokens));
    }
    if (steps_set) {
      return invalid_argument(
          fmt::format("--speculative-num-steps = {} needs --speculative-algorithm NEXTN (or EAGLE)",
                      *a.speculative_num_steps));
    }
    if (a.speculative_eagle_topk != 1) {
      return invalid_argument(fmt::format(
          "--speculative-eagle-topk = {} needs --speculative-algorithm NEXTN (or EAGLE)",
          a.speculative_eagle_topk));
    }
    return 0;
  }
  const std::string alg = upper(a.speculative_algorithm);
  if (alg != "NEXTN" && alg != "EAGLE") {
    return invalid_argument(fmt::format(
        "--speculative-algorithm = {}: must be NEXTN or EAGLE (both run the model's MTP layer)",
        a.speculative_algorithm));
  }
  if (a.speculative_eagle_topk != 1) {
    return invalid_argument(fmt::format(
        "--speculative-eagle-topk = {}: only 1 is supported (top-1 MTP drafts; tree drafts are "
        "not implemented)",
        a.speculative_eagle_topk));
  }
  // Ranges first: the arithmetic below must not overflow on any int64 a user types.
  if (steps_set) {
    DSA_RETURN_IF_ERROR(check_range("--speculative-num-steps", *a.speculative_num_steps, 1,
                                    runtime::kMaxDraftTokens));
  }
  if (drafts_set) {
    DSA_RETURN_IF_ERROR(check_range("--speculative-num-draft-tokens",
                                    *a.speculative_num_draft_tokens, 2,
                                    runtime::kMaxDraftTokens + 1));
  }
  const int64_t d = steps_set    ? *a.speculative_num_steps
                    : drafts_set ? *a.speculative_num_draft_tokens - 1
                                 : 3;
  if (steps_set && drafts_set && *a.speculative_num_draft_tokens != d + 1) {
    return invalid_argument(fmt::format(
        "--speculative-num-draft-tokens = {} with --speculative-num-steps = {}: with top-k 1 the "
        "draft tokens are steps + 1 = {}",
        *a.speculative_num_draft_tokens, *a.speculative_num_steps, d + 1));
  }
  if (!config.has_mtp()) {
    return invalid_argument(
        fmt::format("--speculative-algorithm {}: the checkpoint has no MTP layer "
                    "(num_nextn_predict_layers = 0)",
                    a.speculative_algorithm));
  }
  return int32_t(d);
}

}  // namespace

CLI::Validator int64_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range) {
          return text + " is outside the 64-bit integer range";
        }
        if (ec != std::errc() || p != end) return text + " is not an integer";
        return {};
      },
      "", "int64");
}

Status check_range(std::string_view flag, int64_t v, int64_t lo, int64_t hi) {
  if (v >= lo && v <= hi) return ok_status();
  return invalid_argument(fmt::format("{} = {}: must be in [{}, {}]", flag, v, lo, hi));
}

void add_engine_options(CLI::App& cmd, EngineArgs& a) {
  cmd.add_option("--model,--model-path", a.model_dir,
                 "Model directory (config.json, model.safetensors, tokenizer.json)")
      ->required();
  cmd.add_option("--device", a.device, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--speculative-algorithm", a.speculative_algorithm,
                 "NEXTN or EAGLE: MTP speculative decoding with the model's MTP layer (default: "
                 "none)");
  cmd.add_option("--speculative-num-steps", a.speculative_num_steps,
                 "Draft steps d per speculative step (default 3 with an algorithm)");
  cmd.add_option("--speculative-eagle-topk", a.speculative_eagle_topk,
                 "Drafts per step (1 only: top-1 MTP)")
      ->capture_default_str();
  cmd.add_option("--speculative-num-draft-tokens", a.speculative_num_draft_tokens,
                 "Tokens verified per step, steps + 1 (SGLang's meaning)");
  cmd.add_option("--max-running-requests,--max-batch", a.max_running_requests,
                 "Most requests decoded together")
      ->capture_default_str();
  cmd.add_option("--context-length,--max-context", a.context_length,
                 "Longest request (prompt + new tokens), at most the model's "
                 "max_position_embeddings")
      ->capture_default_str();
  cmd.add_option("--chunked-prefill-size", a.chunked_prefill_size,
                 "Most prompt tokens one request prefills per step")
      ->capture_default_str();
  cmd.add_option("--max-prefill-tokens", a.max_prefill_tokens,
                 "Most prompt tokens of all requests in one prefill forward")
      ->capture_default_str();
  cmd.add_flag("--disable-cuda-graph,--no-graphs", a.disable_cuda_graph,
               "cuda: run every forward eagerly (the same bucket-padded batches) instead of "
               "replaying CUDA graphs");
  cmd.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                 "MLA latent cache: auto (bf16), bf16, bfloat16, or fp8_e4m3 (FP8-656: e4m3 with "
                 "power-of-two tile scales, bf16 RoPE part)")
      ->capture_default_str();
  cmd.add_option("--mem-fraction-static", a.mem_fraction_static,
                 "Fraction of the memory available after the weights that the KV caches may take")
      ->capture_default_str();
  cmd.add_option("--mtp-chain-hidden", a.mtp_chain_hidden,
                 "Hidden state chained between draft steps (SPEC.md §6.5)")
      ->check(CLI::IsMember({"post_norm", "pre_norm"}))
      ->capture_default_str();
  cmd.add_option("--simulate-accept-length", a.simulate_accept_length,
                 "Benchmarks: every draft and verify runs, but the accepted drafts per step are "
                 "drawn with this mean accept length (in [1, d + 1]); the output says SIMULATED");
  cmd.add_flag("--random-weights", a.random_weights,
               "Benchmarks: build the model from --model DIR's config.json alone with random "
               "weights made where they live (host, or on the GPU); no safetensors are read");
  cmd.add_option("--random-weights-seed", a.random_weights_seed, "Seed of --random-weights")
      ->capture_default_str();
  cmd.add_option("--load-chunk-bytes", a.load_chunk_bytes,
                 "Checkpoint load: bytes of each of the two staging chunks a tensor is copied "
                 "through on its way to the device (cuda; on the cpu, tensors are copied straight)")
      ->capture_default_str();
  cmd.add_option("--load-threads", a.load_threads,
                 "Checkpoint load: threads reading each chunk from the shard files at once (more "
                 "reads in flight keep a disk's queue full)")
      ->capture_default_str();
  cmd.add_flag("--disable-load-read-ahead", a.disable_load_read_ahead,
               "Checkpoint load: do not read each shard into the page cache ahead of the copies "
               "(one thread streams the shard the load reached, and the next, from the disk)");
  cmd.add_flag("--disable-fused-qkv-a", a.disable_fused_qkv_a,
               "Run q_a, the indexer's wk and kv_a as three linears, not one over their rows "
               "fused at load");
  cmd.add_flag("--disable-fused-q-b", a.disable_fused_q_b,
               "Run q_b and the indexer's wq_b as two linears, not one over their rows fused at "
               "load");
  cmd.add_flag("--disable-fused-row-ops", a.disable_fused_row_ops,
               "Run the attention's row transforms (the q_a and latent norms, the indexer key's "
               "norm, RoPE and Hadamard; the indexer queries' RoPE, Hadamard and quantisation) "
               "as separate ops, not as two fused launches per layer");
  cmd.add_flag("--disable-shared-experts-fusion", a.disable_shared_experts_fusion,
               "Run the shared expert as its own MLP, not as one more expert of the routed "
               "experts' grouped linears");
  cmd.add_option("--checked-mode", a.checked_mode,
                 "Device data validation on every op (SPEC.md §1.3; slower: the FP8 linears take "
                 "the checking kernel): on, off, or auto (DSA_CHECKED when set, else on in debug "
                 "and off in release builds)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd.add_option("--sampling-on", a.sampling_on,
                 "Where tokens are sampled, drafts chosen and drafts accepted: device (the model's "
                 "backend; only tokens and accept counts leave it), host (every sampled row's "
                 "logits are copied to the host), or auto (device on cuda, except a step's target "
                 "rows when a request filters by top-k or top-p; host on cpu)")
      ->check(CLI::IsMember({"auto", "device", "host"}))
      ->capture_default_str();
  cmd.add_flag("--disable-overlap-schedule", a.disable_overlap_schedule,
               "Read every decode step's tokens before launching the next (by default a decode "
               "step decided on the device, speculative or not, is launched while the host reads "
               "the previous step's tokens: the same tokens, each emitted one step later)");
  cmd.add_flag("--disable-device-commit", a.disable_device_commit,
               "Read a speculative step's acceptance before building its draft extend and draft "
               "chain (by default they are built at once and moved to the accepted counts on the "
               "device, so the step's forwards run back to back: the same tokens)");
  cmd.add_flag("--skip-warmup", a.skip_warmup,
               "Skip the warm-up request run after loading on cuda (by default one short "
               "request goes through the engine first, so the first real request's prefill does "
               "not pay the prefill kernels' first launches); nothing to skip on cpu");
  for (const char* name :
       {"--random-weights-seed", "--load-chunk-bytes", "--load-threads", "--speculative-num-steps",
        "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--max-running-requests",
        "--context-length", "--chunked-prefill-size", "--max-prefill-tokens"}) {
    cmd.get_option(name)->check(int64_range());
  }
}

void add_dp_option(CLI::App& cmd, EngineArgs& a) {
  cmd.add_option("--dp-size,--dp,--data-parallel-size", a.dp_size,
                 "Data-parallel ranks, each with its own requests and caches (placed by load); "
                 "cpu: N model instances in this process, one thread each, and "
                 "--mem-fraction-static shared among them")
      ->check(int64_range())
      ->capture_default_str();
  cmd.add_option("--ep-size,--ep,--expert-parallel-size", a.ep_size,
                 "Expert-parallel ranks: 1, or the --dp-size, each DP rank then computing its "
                 "share of the routed experts for every rank's rows (exact: the same tokens and "
                 "logits as --ep 1); cpu: every rank still loads every expert")
      ->check(int64_range())
      ->capture_default_str();
  cmd.add_flag("--dp-processes", a.dp_processes,
               "One process per data-parallel rank, started by dsa (the launcher) with the same "
               "arguments: over NCCL on cuda (implied there by --dp-size > 1: one GPU each), over "
               "TCP on the cpu. generate: the output is one stream, rank by rank; serve: rank 0 "
               "serves HTTP and places the requests on every rank");
  add_dist_options(cmd, a.dist);
}

StatusOr<EngineSetup> resolve_engine_args(const EngineArgs& a, const model::ModelConfig& config,
                                          int64_t num_requests) {
  EngineSetup s;
  DSA_ASSIGN_OR_RETURN(s.num_draft_tokens, draft_steps(a, config));
  if (a.simulate_accept_length) {
    const double L = *a.simulate_accept_length;
    if (s.num_draft_tokens == 0) {
      return invalid_argument(fmt::format(
          "--simulate-accept-length = {} needs --speculative-algorithm NEXTN (or EAGLE): it "
          "simulates the acceptance of drafts",
          L));
    }
    if (!(std::isfinite(L) && L >= 1 && L <= s.num_draft_tokens + 1)) {
      return invalid_argument(fmt::format(
          "--simulate-accept-length = {}: must be in [1, {}] (accepted drafts + 1, with {} draft "
          "steps)",
          L, s.num_draft_tokens + 1, s.num_draft_tokens));
    }
    s.simulate_accept_length = L;
  }
  DSA_RETURN_IF_ERROR(
      check_range("--max-running-requests", a.max_running_requests, 1, kMaxRunningRequests));
  DSA_RETURN_IF_ERROR(
      check_range("--context-length", a.context_length, 2, config.max_position_embeddings));
  DSA_RETURN_IF_ERROR(
      check_range("--max-prefill-tokens", a.max_prefill_tokens, 1, kMaxPrefillTokens));
  DSA_RETURN_IF_ERROR(
      check_range("--chunked-prefill-size", a.chunked_prefill_size, 1, a.max_prefill_tokens));
  if (!(a.mem_fraction_static > 0 && a.mem_fraction_static <= 1)) {
    return invalid_argument(
        fmt::format("--mem-fraction-static = {}: must be in (0, 1]", a.mem_fraction_static));
  }
  DSA_RETURN_IF_ERROR(check_range("--random-weights-seed", a.random_weights_seed, 0, INT64_MAX));
  DSA_RETURN_IF_ERROR(check_range("--dp-size", a.dp_size, 1, kMaxDpSize));
  DSA_RETURN_IF_ERROR(check_range("--load-chunk-bytes", a.load_chunk_bytes, kMinLoadChunkFlagBytes,
                                  int64_t(model::kMaxLoadChunkBytes)));
  DSA_RETURN_IF_ERROR(check_range("--load-threads", a.load_threads, 1, runtime::kMaxReaders));
  // One process per rank: asked for, or the only way several GPUs run (in-process ranks would
  // share one GPU). The launcher starts them (cli/generate_ranks.h).
  s.dp_processes = a.dp_processes || (a.dp_size > 1 && a.device == "cuda");
  s.dp_size = int32_t(a.dp_size);
  DSA_RETURN_IF_ERROR(check_range("--ep-size", a.ep_size, 1, kMaxDpSize));
  if (a.ep_size > 1) {
    if (a.dp_size == 1) {
      return invalid_argument(fmt::format(
          "--ep-size = {} needs --dp-size {}: expert parallelism splits the experts over the "
          "data-parallel ranks (docs/multi_gpu.md)",
          a.ep_size, a.ep_size));
    }
    if (a.ep_size != a.dp_size) {
      return invalid_argument(fmt::format(
          "--ep-size = {} with --dp-size = {}: expert parallelism runs over exactly the DP "
          "ranks, so --ep-size must be 1 or the --dp-size",
          a.ep_size, a.dp_size));
    }
    if (config.n_routed_experts % a.ep_size != 0) {
      return invalid_argument(fmt::format(
          "--ep-size = {}: must divide the model's {} routed experts (n_routed_experts)", a.ep_size,
          config.n_routed_experts));
    }
  }
  s.ep_size = int32_t(a.ep_size);
  if (s.dp_processes && a.ep_size > 1 && a.device == "cuda") {
    // The rank processes on the cpu run it over SocketGroup's host-memory collectives; on GPUs the
    // same model path over NcclGroup's all_gather / reduce_scatter has not run on two GPUs yet,
    // and a collective that hangs or mis-sums there would be found by a user, not by a test.
    return invalid_argument(fmt::format(
        "--ep-size = {} with --device cuda: expert parallelism across GPUs has not run on a "
        "multi-GPU machine yet (docs/multi_gpu.md); --ep-size 1 on GPUs, or --ep with "
        "--dp-processes on the cpu",
        a.ep_size));
  }
  DSA_ASSIGN_OR_RETURN(s.dist, resolve_dist_args(a.dist));
  if (s.dist.nnodes > 1) {
    // Ranks on several nodes are processes by nature; each node's launcher starts its share.
    s.dp_processes = true;
    if (s.dp_size % s.dist.nnodes != 0) {
      return invalid_argument(
          fmt::format("--dp-size = {} with --nnodes = {}: the ranks are split evenly over the "
                      "nodes, so --dp-size must be a multiple of --nnodes",
                      s.dp_size, s.dist.nnodes));
    }
  }
  if (a.checked_mode == "on" || a.checked_mode == "off") {
    s.checked = a.checked_mode == "on";
  } else if (a.checked_mode == "auto") {
    const char* env = std::getenv("DSA_CHECKED");
#ifdef NDEBUG
    s.checked = env != nullptr && std::strcmp(env, "0") != 0;
#else
    s.checked = !(env != nullptr && std::strcmp(env, "0") == 0);
#endif
  } else {
    return invalid_argument(
        fmt::format("--checked-mode = {}: must be auto, on or off", a.checked_mode));
  }
  set_checked_mode(s.checked);
  s.overlap = !a.disable_overlap_schedule;
  s.device_commit = !a.disable_device_commit;
  if (a.sampling_on == "auto") {
    s.accept_on = engine::AcceptOn::kAuto;
  } else if (a.sampling_on == "device") {
    s.accept_on = engine::AcceptOn::kBackend;
  } else if (a.sampling_on == "host") {
    s.accept_on = engine::AcceptOn::kHost;
  } else {
    return invalid_argument(
        fmt::format("--sampling-on = {}: must be auto, device or host", a.sampling_on));
  }
  model::ModelOptions& o = s.model;
  o.random_weights = a.random_weights;
  o.random_seed = uint64_t(a.random_weights_seed);
  o.load_chunk_bytes = size_t(a.load_chunk_bytes);
  o.load_threads = int(a.load_threads);
  o.load_read_ahead = !a.disable_load_read_ahead;
  o.fuse.qkv_a = !a.disable_fused_qkv_a;
  o.fuse.q_b = !a.disable_fused_q_b;
  o.fuse.row_ops = !a.disable_fused_row_ops;
  o.fuse.shared_experts = !a.disable_shared_experts_fusion;
  if (a.kv_cache_dtype == "auto" || a.kv_cache_dtype == "bf16" || a.kv_cache_dtype == "bfloat16") {
    o.latent_format = kernels::LatentFormat::kBf16;
  } else if (a.kv_cache_dtype == "fp8_e4m3") {
    o.latent_format = kernels::LatentFormat::kFp8_656;
  } else {
    return invalid_argument(fmt::format(
        "--kv-cache-dtype = {}: must be auto, bf16, bfloat16 or fp8_e4m3", a.kv_cache_dtype));
  }
  s.backend = a.device == "cuda" ? kernels::Backend::kCuda : kernels::Backend::kCpu;
  s.warmup = !a.skip_warmup && s.backend == kernels::Backend::kCuda;
  o.max_context = int32_t(a.context_length);
  o.num_draft_tokens = s.num_draft_tokens;
  o.max_requests = int32_t(num_requests > 0 ? std::min(a.max_running_requests, num_requests)
                                            : a.max_running_requests);
  o.max_extend_rows = int32_t(a.max_prefill_tokens);
  o.mem_fraction_static = a.mem_fraction_static;
  o.mtp_chain_hidden = a.mtp_chain_hidden == "pre_norm" ? model::MtpChainHidden::kPreNorm
                                                        : model::MtpChainHidden::kPostNorm;
  if (s.backend == kernels::Backend::kCuda) {
    // Uniform forwards are padded to buckets either way, so --disable-cuda-graph runs the very
    // same padded batches eagerly (graphs on and off are bit-identical, SPEC.md §5).
    o.buckets = runtime::default_buckets(o.max_requests);
    o.cuda_graphs = !a.disable_cuda_graph;
  }
  s.prefill_chunk = int32_t(a.chunked_prefill_size);
  return s;
}

}  // namespace dsa::cli
