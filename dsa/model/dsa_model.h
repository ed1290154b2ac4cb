// A loaded DeepSeek-V3.2-architecture model (SPEC.md §8) with its MTP layer (§6.5): weights,
// RoPE tables, the paged caches of every layer and their page pool, run through an op table.
// The engine hands it a ForwardBatch; the model builds the forward's metadata with the runtime's
// one builder (uniform batches padded to their bucket), so it reads its page table once.
// Weights, RoPE tables, caches and activations live in the op table's backend memory (device
// memory for cuda_ops(): uploaded once at load). A forward is three phases:
//   build   — the runtime's builder turns the batch into the forward's ForwardMetadata;
//   stage   — metadata, page table, token ids (and MTP hidden rows) reach fixed backend buffers by
//             one asynchronous copy (runtime/metadata_mirror.h);
//   body    — every launch, reading only backend buffers: the schedule is rebuilt from row_len,
//             the layers run, the LM head writes the sampled rows' logits; on CUDA with graphs a
//             uniform forward whose B_pad is a bucket replays the body's graph instead (§5,
//             runtime/graph_runner.h);
//   collect — what the caller asked for (ForwardOutputs: hidden states, logits) comes back to the
//             host ForwardOutput, then the device error word is read once (ops defer their checks,
//             so the body never synchronises). A forward that asks for nothing is only launched:
//             nothing is read back and the host does not wait (a draft chain, SPEC.md §6.7);
//             wait() or the next read catches up.
// The inputs of an MTP forward may be the previous forward's outputs where they are, in backend
// memory (ForwardInputs: the hidden rows gathered by row list, the tokens from draft slots written
// on the backend by draft_on_backend), so a chain of forwards runs without host round trips.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/kernels/op_table.h"
#include "dsa/model/backend_acceptance.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/decoder_block.h"
#include "dsa/model/fused_projections.h"
#include "dsa/model/memory_plan.h"
#include "dsa/model/model_caches.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/overlapped_sampler.h"
#include "dsa/model/weight_store.h"
#include "dsa/model/weight_stream.h"
#include "dsa/runtime/attention_step.h"
#include "dsa/runtime/device_timeline.h"
#include "dsa/runtime/forward_batch.h"
#include "dsa/runtime/forward_metadata.h"
#include "dsa/runtime/forward_mode.h"
#include "dsa/runtime/graph_runner.h"
#include "dsa/runtime/metadata_mirror.h"
#include "dsa/runtime/page_pool.h"
#include "dsa/runtime/workspace.h"

namespace dsa::model {

enum class MtpChainHidden { kPostNorm, kPreNorm };  // SPEC.md §6.5 `mtp_chain_hidden`

struct ModelOptions {
  int32_t max_context = 2048;      // max_ctx: the longest request served
  int32_t num_draft_tokens = 0;    // d in [0, runtime::kMaxDraftTokens] (0 = no speculation)
  int32_t max_requests = 8;        // B_max
  int32_t max_extend_rows = 1024;  // T_ext: rows of one EXTEND forward (chunked prefill)
  int32_t num_pages = 0;           // > 0: exactly this pool; 0 = planned (model/memory_plan.h)
  // Fraction of the memory available after the weights that the caches may take (0 = no
  // budget: max_requests full contexts), SGLang's --mem-fraction-static.
  double mem_fraction_static = 0;
  kernels::LatentFormat latent_format = kernels::LatentFormat::kBf16;
  bool dense = false;  // attend to every visible token (K = max_context rounded to 64, <= 2048)
  MtpChainHidden mtp_chain_hidden = MtpChainHidden::kPostNorm;
  // Bucket padding of uniform forwards (SPEC.md §5): the engine pads B to the smallest bucket
  // >= B (B itself above the last). Empty = no padding.
  std::vector<int32_t> buckets;
  // CUDA only: capture one graph per (model, mode, bucket) at load and replay them.
  bool cuda_graphs = false;
  // Called as each checkpoint file has been read (model/checkpoint.h); the CLI prints it.
  LoadProgressFn on_load_progress;
  // Each of the two staging chunks the checkpoint streams through (weight_stream.h), in
  // [kMinLoadChunkBytes, kMaxLoadChunkBytes].
  size_t load_chunk_bytes = kDefaultLoadChunkBytes;
  // Threads reading each staging chunk from the checkpoint's mappings, in [1,
  // runtime::kMaxReaders].
  int load_threads = kDefaultLoadThreads;
  // A thread reads each shard the load reaches into the page cache ahead of the copies.
  bool load_read_ahead = true;
  // Benchmarks: only config.json is read; the weights are generated with this seed where they
  // live (model/random_tensors.h on the host; on CUDA, model/device_random_weights.h).
  bool random_weights = false;
  uint64_t random_seed = 0;
  // Make random weights in backend memory (backend_random_weights.h) even on the CPU backend
  // (tests of the device path); CUDA always does.
  bool random_weights_in_backend = false;
  // Tests: fill the workspace's uninitialised takes with a NaN byte pattern (runtime/workspace.h)
  // instead of leaving them, so a buffer some consumer reads unwritten changes the outputs; and
  // each metadata region past the part a forward uses (runtime/metadata_mirror.h set_poison).
  bool poison_workspace = false;
  // --profile-device-time: the GPU time of every forward and decode step, by timing markers on
  // the stream (runtime/device_timeline.h; device_time()). Off: nothing recorded.
  bool profile_device_time = false;
  // Expert parallelism of the routed experts (model/expert_parallel.h, docs/multi_gpu.md): this
  // model is rank ep_rank of ep_size ranks that split them, over ep_group (outlives the model;
  // every rank runs every forward). All experts are still loaded; a rank computes only its own.
  int32_t ep_rank = 0, ep_size = 1;
  dist::DeviceCollective* ep_group = nullptr;
  // Projections fused at load (fused_projections.h): qkv_a and the shared expert, on by default.
  FuseOptions fuse;
};

// Host-side time of forwards (what graphs remove): host_s runs from the start of a forward until
// its last launch is enqueued (staging, metadata copy, launches or the graph launch); total_s
// adds collecting its results, waiting for them included — none for a launched-only forward,
// whose GPU time shows in the wait of the read that follows it.
struct ForwardTiming {
  int64_t forwards = 0, replays = 0;
  double host_s = 0, total_s = 0;
  // Where the host's time goes (steady_clock, always on): build = the metadata builder; stage =
  // staging the inputs and the one copy (+ the hand-off gathers); launch = enqueueing the body or
  // its graph; wait = synchronising for results (forwards and reads alike: the GPU's time shows
  // here); collect = the rest of collect (copies back, output bookkeeping); sample = the backend
  // sampling / acceptance / draft ops and their reads, less their wait.
  double build_s = 0, stage_s = 0, launch_s = 0, wait_s = 0, collect_s = 0, sample_s = 0;
  // Device-to-host reads of data (hidden states, logits, tokens, counts; the 16-byte error word
  // is not counted): how many copies and bytes. What a host round trip costs.
  int64_t readbacks = 0, readback_bytes = 0;
  // Host-to-backend bytes of the forwards' inputs (the metadata mirror's copies: the step block
  // and the changed page-table rows).
  int64_t staged_bytes = 0;
  // The same per (model, mode). A forward that was collected ends synchronised, so its seconds
  // are the forward run alone; a launched-only forward (waited = 0 of them) counts only its host
  // time, its GPU time showing in the wait of the read that follows.
  struct Kind {
    int64_t forwards = 0, waited = 0;
    double total_s = 0;
  };
  static constexpr size_t kModes = std::size(runtime::kAllForwardModes);
  std::array<Kind, 2 * kModes> by_kind{};
  static size_t index(runtime::ModelKind model, runtime::ForwardMode mode) {
    return size_t(model) * kModes + size_t(mode);
  }
  void add(const ForwardTiming& other) {
    forwards += other.forwards, replays += other.replays;
    host_s += other.host_s, total_s += other.total_s;
    build_s += other.build_s, stage_s += other.stage_s, launch_s += other.launch_s;
    wait_s += other.wait_s, collect_s += other.collect_s, sample_s += other.sample_s;
    readbacks += other.readbacks, readback_bytes += other.readback_bytes;
    staged_bytes += other.staged_bytes;
    for (size_t i = 0; i < by_kind.size(); ++i) {
      by_kind[i].forwards += other.by_kind[i].forwards;
      by_kind[i].waited += other.by_kind[i].waited;
      by_kind[i].total_s += other.by_kind[i].total_s;
    }
  }
};

// The GPU time of a run's decode steps and forwards (ModelOptions::profile_device_time): the
// engine's decode steps (open_step_span .. close_step_span) and each forward's staging and launch,
// per (model, mode) as ForwardTiming::by_kind. A step's inner_ms is its forwards' time; the rest
// of its time is the work between them (acceptance, sampling, drafts, copies) and the GPU's idle.
// Its between_ms is the stream's time outside decode steps: prefill forwards, and idle.
struct DeviceTime {
  runtime::DeviceTimeline::Total steps;
  std::array<runtime::DeviceTimeline::Total, 2 * ForwardTiming::kModes> by_kind{};
};

// Output of one forward: final hidden states of every row and fp32 logits of the sampled rows,
// with where the batch's rows landed (the header and row maps of the metadata it ran).
struct ForwardOutput {
  runtime::MetadataHeader header;   // rows, rows_pad, batch_pad, num_samples, ...
  std::vector<int32_t> row_start;   // [B] first row of each real request (cu_q)
  std::vector<int32_t> sample_row;  // [num_samples] the row each logits row was taken from (-1 pad)
  // [rows_pad, hidden]: post final norm (target) / per mtp_chain_hidden; empty unless asked for
  std::vector<bf16> hidden;
  std::vector<float> logits;  // [num_samples, vocab]; rows of sample_row == -1 are zeros
};

// Where a forward's logits go: copied into ForwardOutput::logits, or left in the backend's memory
// only (ForwardOutput::logits empty) for accept_last_verify / draft_on_backend.
enum class LogitsTo { kHost, kBackend };

// What of a forward comes back to the host. Nothing (hidden false, logits kBackend): the forward
// is only launched; its outputs stay in backend memory until the next forward overwrites them.
struct ForwardOutputs {
  bool hidden = true;
  LogitsTo logits = LogitsTo::kHost;
};

// Where ForwardInputs::token_rows index: the last sample_async's tokens ([its count]), or the
// draft slots of the last chain drafted on the backend (entry slot * draft_count() + row, slots
// [0, the slots written)).
enum class TokenSource { kLastSampling, kDraftSlots };

// How a forward is patched on the backend from the last acceptance's counts (launch_acceptance),
// SPEC.md §6.7's commit: the engine builds the forwards after a verify as if nothing was accepted
// and the step commit op moves them to the accepted counts where those are, so nothing is read
// between the verify and the end of the step. kDraftExtend: the MTP forward over the verify's rows
// (its tokens and sampled rows); kFirstDraftDecode / kDraftDecode: the draft chain's DECODEs
// (positions and lengths; the first also takes its hidden rows from the accepted rows).
// kVerify: the verify of a step launched before the previous one was read (EngineOptions::overlap
// with d > 0): it is built at the host's committed length + 1 and moved by the previous step's
// counts, its first token that step's y (step_commit.h's shift).
enum class AcceptedPatch { kNone, kVerify, kDraftExtend, kFirstDraftDecode, kDraftDecode };

// A forward's token ids and MTP hidden rows: host spans (forward()'s), or the previous forward's
// outputs in backend memory, gathered there (SPEC.md §6.7's hand-off), so nothing crosses to the
// host between the forwards of a chain.
struct ForwardInputs {
  // One id per real row (see forward()); ignored with draft_slot >= 0.
  std::span<const int32_t> tokens;
  // MTP: host hidden rows (see forward()); ignored with hidden_from_last.
  std::span<const bf16> hidden;
  // MTP: row r takes row hidden_rows[r] of the previous forward's hidden output, still in backend
  // memory (-1, and rows past the list: zeros), instead of host rows.
  bool hidden_from_last = false;
  std::span<const int32_t> hidden_rows;
  // >= 0 (a DECODE of draft_count() requests): request b's token is entry b of draft slot
  // draft_slot (draft_on_backend), token 0 where that entry has no token (the host drafter's rule).
  int32_t draft_slot = -1;
  // Tokens kept in backend memory (SPEC.md §6.7: the overlapped decode, drafts that stay on the
  // device): row r's token is entry token_rows[r] of `token_source` instead of tokens[r]; -1, and
  // rows past the list, keep tokens[r]. Not with draft_slot.
  std::span<const int32_t> token_rows;
  TokenSource token_source = TokenSource::kLastSampling;
  // The forward as built is the a = 0 one; patched on the backend before it runs (AcceptedPatch).
  AcceptedPatch accepted_patch = AcceptedPatch::kNone;
  // The step before this forward's is not read yet (built as if it accepted nothing): every
  // position moves by its counts too. The previous acceptance launch for kVerify, the one before
  // the last for the draft extend and the draft decodes (their own being the last).
  bool shifted = false;
};

class DsaModel {
 public:
  static StatusOr<std::unique_ptr<DsaModel>> load(const std::filesystem::path& dir,
                                                  const ModelOptions& options,
                                                  const kernels::OpTable& ops);

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const runtime::MetadataConfig& metadata_config() const { return metadata_config_; }
  // The one page pool of the model's caches: the engine's scheduler opens, reserves and closes
  // request rows in it; forwards read its page table.
  runtime::PagedCacheManager& pages() { return pages_; }
  // B_pad a uniform forward of b requests gets (options().buckets; b without buckets).
  int32_t batch_pad_for(int32_t b) const { return graphs_.batch_pad_for(b); }
  const ForwardTiming& timing() const { return timing_; }
  // Uploads that had to wait for the staging ring (runtime/metadata_mirror.h): 0 while every
  // back-to-back chain fits the ring.
  int64_t staging_ring_waits() const { return mirror_.ring_waits(); }
  const runtime::GraphStats& graph_stats() const { return graphs_.stats(); }
  // Its takes so far (zero-filled and not): what a forward's memset nodes come from.
  const runtime::Workspace::Counts& workspace_counts() const { return ws_.counts(); }
  // How the cache pool was sized (memory_plan.h); num_pages only when options().num_pages is set.
  const CachePlan& cache_plan() const { return cache_plan_; }
  // How the checkpoint was streamed in (all zero for weights generated in backend memory).
  const StreamStats& load_stats() const { return load_stats_; }
  // The layers whose projections were fused at load (fused_projections.h).
  const FuseCounts& fuse_counts() const { return fuse_counts_; }

  // One forward of batch.model over batch (SPEC.md §4): the metadata is built here from the page
  // table (a uniform batch with batch_pad 0 is padded to its bucket). tokens: one id per real row
  // (rows in request order; extra ids up to rows_pad are used, the rest of the padded rows take
  // id 0). hidden (MTP only, §6.5): row r is the hidden state row r's token pairs with — the
  // preceding target forward's, or the MTP layer's own when chaining — at least the real rows,
  // padded with zeros up to rows_pad. InvalidArgument for an MTP batch without an MTP layer's
  // inputs, too few tokens or hidden rows; the builder's errors otherwise (nothing runs then).
  Status forward(runtime::ForwardBatch batch, std::span<const int32_t> tokens,
                 std::span<const bf16> hidden, ForwardOutput* out,
                 LogitsTo logits_to = LogitsTo::kHost);
  // The same with its inputs possibly in backend memory and only `what` read back (nothing: the
  // forward is launched and this returns without waiting). InvalidArgument for a hand-off with
  // no previous forward, a row index past its rows, or a draft slot not written.
  Status forward(runtime::ForwardBatch batch, const ForwardInputs& in, ForwardOutput* out,
                 ForwardOutputs what);
  // Waits for everything launched and reads the device error word (the errors of launched-only
  // forwards surface here or at the next read).
  Status wait();

  // A decode step's span on the device timeline (no-ops unless options().profile_device_time); a
  // step in which no forward was launched is dropped. device_time() waits for the work of every
  // closed span: call it after the run (zeros when profiling is off).
  Status open_step_span();
  Status close_step_span();
  StatusOr<DeviceTime> device_time();
  bool profiling_device_time() const { return timeline_ != nullptr; }
  // Starts timing() and the device timeline over, after a warm-up (engine/warmup.h): waits for
  // the work launched so far. FailedPrecondition with a step span open.
  Status reset_measurements();

  kernels::Backend backend() const { return ops_.backend; }
  // Acceptance (SPEC.md §6.2, §6.3) of the drafts of the last forward, a TARGET_VERIFY whose first
  // B (d + 1) sampled rows are the B real requests' verify rows, by the op table's accept_drafts
  // on the logits still in the backend's memory (backend_acceptance.h); vocab: the sampleable ids.
  // draft_rows (empty, or one per request): >= 0 takes request b's drafts from row draft_rows[b]
  // of the draft slots (draft s + 1 in slot s, as the last chain left them) instead of `drafts`.
  Status accept_last_verify(int32_t vocab, int32_t d, std::span<const int32_t> drafts,
                            std::span<const kernels::SamplingParams> params,
                            std::span<const int32_t> first_position, VerifyAcceptance* out,
                            std::span<const int32_t> draft_rows = {});
  // accept_last_verify in two halves: the launch (nothing read; the counts stay in backend memory
  // for the forwards patched from them, ForwardInputs::accepted_patch, until the next launch) and
  // the one read of its counts and tokens, which waits for everything launched since. shifted:
  // the previous launch's step is not read (the same requests in order); its counts move the
  // first positions on the backend.
  Status launch_acceptance(int32_t vocab, int32_t d, std::span<const int32_t> drafts,
                           std::span<const kernels::SamplingParams> params,
                           std::span<const int32_t> first_position,
                           std::span<const int32_t> draft_rows = {}, bool shifted = false);
  Status read_acceptance(VerifyAcceptance* out);
  // The overlapped speculative step: the last launch's counts and tokens copied back behind a
  // marker, nothing waited for; collect_acceptance waits only for that copy (the forwards launched
  // after it keep running). A device error raised by then is returned there.
  StatusOr<AcceptTicket> readback_acceptance();
  Status collect_acceptance(const AcceptTicket& t, VerifyAcceptance* out);
  // The MTP layer's greedy drafts (argmax over ids [0, vocab)) of the last forward's first
  // `count` sampled rows, decided on the backend into draft slot `slot` < kMaxDraftTokens; nothing
  // is read back. Every slot of one chain holds the same count (slot 0 sets it).
  Status draft_on_backend(int32_t vocab, int32_t count, int32_t slot);
  int32_t draft_count() const { return draft_count_; }
  // Waits (wait()) and reads slots [0, slots) of draft_count() entries each, slot-major; -1 where
  // a row had no eligible token.
  Status read_drafts(int32_t slots, std::vector<int32_t>* out);

  // The overlapped decode (overlapped_sampler.h): the last forward's first params.size() sampled
  // rows sampled on the backend (row i with params[i] at positions[i], the same tokens as
  // accept_last_verify at d = 0), nothing waited for. The tokens stay in backend memory for the
  // next forward's token_rows, and come back with collect_sampled(), which waits only for this
  // launch: the forwards launched after it keep running. At most two launches are uncollected.
  StatusOr<SampleTicket> sample_async(int32_t vocab,
                                      std::span<const kernels::SamplingParams> params,
                                      std::span<const int32_t> positions);
  // The ticket's tokens (one per row; -1 where a row had no eligible token). A device error raised
  // by the work before the launch's copy is returned here (after a synchronisation).
  Status collect_sampled(const SampleTicket& ticket, std::vector<int32_t>* tokens);

 private:
  DsaModel(ModelConfig config, ModelWeights weights, const ModelOptions& options,
           const runtime::MetadataConfig& mc, const kernels::OpTable& ops);
  Status allocate_outputs();
  Status capture_graphs();
  // Stages the built metadata with tokens and hidden rows padded to rows_pad (one copy).
  Status stage(const ForwardInputs& in);
  // The hand-off gathers into the mirror after its copy (kept and draft tokens; the step commit),
  // and the host hidden rows into hidden_out_, where the MTP body's hnorm reads them.
  Status stage_from_backend(const ForwardInputs& in);
  // Every launch of a forward; reads only backend buffers (capturable).
  Status body(runtime::ModelKind kind, const runtime::ForwardMetadata& meta);
  Status target_body(const runtime::ForwardMetadata& meta);
  Status mtp_body(const runtime::ForwardMetadata& meta);
  Status collect(const runtime::ForwardMetadata& meta, ForwardOutput* out, ForwardOutputs what);
  // Entries ForwardInputs::token_rows may name in `source`.
  int32_t kept_tokens(TokenSource source) const;
  // Synchronises, then the mirror's ring is free and the device error word is read.
  Status sync_and_check(std::string_view context);
  void count_readback(size_t bytes) {
    ++timing_.readbacks;
    timing_.readback_bytes += int64_t(bytes);
  }
  // Logits of the sampled rows of `normed` and the rows of `hidden` into the output buffers (a
  // copy of `hidden` unless the body already wrote it in place there).
  Status head(const runtime::ForwardMetadata& meta, const bf16* normed, const bf16* hidden,
              const LinearWeight& lm_head);
  BlockContext block_context(const runtime::ForwardMetadata& meta);

  ModelConfig config_;
  ModelWeights weights_;
  ModelOptions options_;
  runtime::MetadataConfig metadata_config_;
  const kernels::OpTable& ops_;
  RopeTables rope_;
  WeightStore store_;
  runtime::PagedCacheManager pages_;
  ModelCaches caches_;  // num_pages from the cache plan
  runtime::AttentionStep attention_;
  runtime::ForwardMetadata meta_;          // the current forward's, built in place (fixed capacity)
  runtime::ForwardMetadata patched_meta_;  // checked mode: a patched forward read back
  runtime::MetadataMirror mirror_;
  runtime::Workspace ws_;
  // Outputs at capacity (row_capacity rows), at fixed addresses: what graphs write.
  runtime::Buffer<bf16> hidden_out_;
  runtime::Buffer<float> logits_out_;
  BackendAcceptance acceptance_;
  OverlappedSampler sampler_;
  runtime::GraphRunner graphs_;
  ForwardTiming timing_;
  std::unique_ptr<runtime::DeviceTimeline> timeline_;  // profile_device_time only
  int64_t spans_kept_ = 0, spans_at_step_open_ = 0;    // forward spans kept on the timeline
  CachePlan cache_plan_;
  StreamStats load_stats_;
  FuseCounts fuse_counts_;
  std::vector<int32_t> padded_tokens_;  // a padded forward's token rows (reused)
  std::vector<bf16> padded_hidden_;
  std::vector<int32_t> identity_rows_;  // 0, 1, ...: host hidden rows' row list
  ExpertParallelTables ep_tables_;      // host copies; ep_ points at their backend copies
  ExpertParallel ep_;
  // The hand-off (ForwardInputs): rows of hidden_out_ the last forward wrote (0: none yet), the
  // draft slots on the backend ([kMaxDraftTokens, draft_count_], slot-major), how many entries
  // each holds and which slots were written since slot 0; iota_[v] = v (the clamping gather).
  int32_t last_rows_pad_ = 0;
  runtime::Buffer<int32_t> drafts_;
  int32_t draft_count_ = 0, drafts_written_ = 0;
  runtime::Buffer<int32_t> iota_;
};

}  // namespace dsa::model
