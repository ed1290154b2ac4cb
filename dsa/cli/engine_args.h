// The engine's command-line options, shared by every command that runs the engine (`dsa
// generate`, later `dsa serve`), under SGLang's names and meanings: a command line written for
// SGLang's DeepSeek MTP serving means the same here (--speculative-num-draft-tokens = steps + 1),
// except --mem-fraction-static, a fraction of the memory left after the weights (not of the total,
// model/memory_plan.h).
// The old dsa names stay as aliases (--max-batch, --max-context, --no-graphs); the old meaning of
// --speculative-num-draft-tokens (d draft steps) is refused with a pointer, never reinterpreted.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "dsa/cli/dist_args.h"
#include "dsa/core/status.h"
#include "dsa/engine/engine.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/model_config.h"
#include "dsa/model/weight_stream.h"

namespace dsa::cli {

struct EngineArgs {
  std::string model_dir;
  std::string device = "cpu";
  std::string speculative_algorithm;             // empty = no speculation; NEXTN or EAGLE = MTP
  std::optional<int64_t> speculative_num_steps;  // d (unset: from the other speculative flags)
  int64_t speculative_eagle_topk = 1;            // 1 only (top-1 MTP drafts, no trees)
  std::optional<int64_t> speculative_num_draft_tokens;  // d + 1 (unset: from the steps)
  int64_t max_running_requests = 8;
  int64_t context_length = 2048;
  int64_t chunked_prefill_size = 512;
  int64_t max_prefill_tokens = 1024;
  bool disable_cuda_graph = false;
  std::string kv_cache_dtype = "auto";
  double mem_fraction_static = 0.9;
  std::string mtp_chain_hidden = "post_norm";
  // Benchmarks: the mean accept length the engine simulates (engine/simulated_acceptance.h).
  std::optional<double> simulate_accept_length;
  // Benchmarks: weights generated from config.json alone (no safetensors read).
  bool random_weights = false;
  int64_t random_weights_seed = 0;
  // Data-parallel ranks (SGLang's --data-parallel-size / --dp-size; its docs write --dp, which
  // argparse's prefix matching accepts). Registered by add_dp_option, for the commands that run
  // several ranks (generate); 1 elsewhere.
  int64_t dp_size = 1;
  // Expert-parallel ranks of the routed experts (SGLang's --ep-size / --ep; docs/multi_gpu.md):
  // 1, or the dp size (each DP rank computes its share of the experts for every rank's rows).
  // Registered with --dp-size.
  int64_t ep_size = 1;
  // One process per DP rank (`dsa generate --dp-processes`), started by dsa itself; implied by
  // --device cuda with --dp-size > 1 (one process per GPU).
  bool dp_processes = false;
  // Each of the loader's two staging chunks (model/weight_stream.h); neither SGLang nor vLLM has
  // such a flag, so the name is dsa's own.
  int64_t load_chunk_bytes = int64_t(model::kDefaultLoadChunkBytes);
  int64_t load_threads = model::kDefaultLoadThreads;
  bool disable_load_read_ahead = false;
  bool disable_fused_qkv_a = false;
  bool disable_fused_q_b = false;
  bool disable_fused_row_ops = false;
  bool disable_shared_experts_fusion = false;
  // Where sampled rows are decided (engine::AcceptOn): auto, device (the model's backend: only
  // tokens and accept counts leave it) or host (the logits are copied, the host rules run).
  std::string sampling_on = "auto";
  // SGLang's flag: every decode step reads its tokens before the next is launched
  // (engine::EngineOptions::overlap off).
  bool disable_overlap_schedule = false;
  // A speculative step reads its acceptance before its draft extend is built
  // (engine::EngineOptions::device_commit off).
  bool disable_device_commit = false;
  bool skip_warmup = false;
  // SPEC.md §1.3's checked mode: on, off, or auto (DSA_CHECKED when set, else on in debug builds
  // and off in release builds; scripts/test.sh and CI set DSA_CHECKED=1).
  std::string checked_mode = "auto";
  // --nnodes, --node-rank, --dist-init-addr (dist_args.h); registered with --dp-size.
  DistArgs dist;
};

// Registers the options on `cmd` (defaults shown in --help).
void add_engine_options(CLI::App& cmd, EngineArgs& a);
// Registers --dp-size (aliases --dp, --data-parallel-size), --ep-size (alias --ep) and the
// multi-node flags (add_dist_options) on `cmd`.
void add_dp_option(CLI::App& cmd, EngineArgs& a);

// Most data-parallel ranks: on the CPU each is a whole model instance and a thread in this
// process (engine/dp_engine_group.h); SGLang runs at most one per GPU, 8 on a node.
constexpr int64_t kMaxDpSize = 64;

// --load-chunk-bytes: below 1 MiB each copy's fixed cost starts to show in the load time; 1 GiB is
// the loader's own limit (two of them stay page-locked for the whole load). The loader accepts
// chunks down to 4 KiB for its tests; the flag does not offer them.
constexpr int64_t kMinLoadChunkFlagBytes = int64_t(1) << 20;

struct EngineSetup {
  kernels::Backend backend = kernels::Backend::kCpu;
  int32_t num_draft_tokens = 0;
  model::ModelOptions model;
  int32_t prefill_chunk = 512;
  double simulate_accept_length = 0;  // 0 = real acceptance
  engine::AcceptOn accept_on = engine::AcceptOn::kAuto;
  bool overlap = true;        // engine::EngineOptions::overlap
  bool device_commit = true;  // engine::EngineOptions::device_commit
  bool warmup = false;        // one warm-up request before the timed ones (cli/warmup_run.h)
  bool checked = false;       // resolve_engine_args has applied it (set_checked_mode)
  int32_t dp_size = 1;        // data-parallel ranks, in [1, kMaxDpSize]
  int32_t ep_size = 1;        // expert-parallel ranks: 1 or dp_size, dividing the routed experts
  bool dp_processes = false;  // one process per rank (cli/generate_ranks.h), not in-process ranks
  DistSetup dist;             // nodes (dp_size / nnodes ranks on each) and the bootstrap address
};

// Every rule between the flags and against the model's config.json: ranges, the speculative
// flags' consistency, the context within max_position_embeddings; --dp-size > 1 on --device cuda
// and --nnodes > 1 imply one process per rank (dp_processes).
// InvalidArgument with one line naming the flag as typed and its value. `num_requests` caps the
// running requests (0: no cap).
StatusOr<EngineSetup> resolve_engine_args(const EngineArgs& a, const model::ModelConfig& config,
                                          int64_t num_requests);

// A CLI11 check that an integer option's text fits int64 (CLI11 itself saturates overflowing
// numbers silently): "--seed: 99999999999999999999 is outside the 64-bit integer range".
CLI::Validator int64_range();

// InvalidArgument "<flag> = <value>: must be in [lo, hi]" unless lo <= v <= hi.
Status check_range(std::string_view flag, int64_t v, int64_t lo, int64_t hi);

}  // namespace dsa::cli
