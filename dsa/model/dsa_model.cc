#include "dsa/model/dsa_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dsa/core/checked_mode.h"
#include "dsa/model/backend_random_weights.h"
#include "dsa/model/memory_plan.h"
#include "dsa/model/random_tensors.h"
#include "dsa/model/weight_stream.h"
#include "dsa/runtime/backend_control.h"
#include "dsa/runtime/metadata_builder.h"

namespace dsa::model {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

// Upper bounds the runtime's int32 metadata (rows, positions, slot ids) can hold with margin.
constexpr int32_t kMaxRequestsCap = 4096;
constexpr int32_t kMaxExtendRowsCap = 1 << 20;

StatusOr<runtime::MetadataConfig> metadata_config_for(const ModelConfig& c, const ModelOptions& o) {
  if (o.max_context < 1 || o.max_context > c.max_position_embeddings) {
    return invalid_argument(
        fmt::format("max_context = {}: must be in [1, max_position_embeddings = {}]", o.max_context,
                    c.max_position_embeddings));
  }
  if (o.max_requests < 1 || o.max_requests > kMaxRequestsCap) {
    return invalid_argument(
        fmt::format("max_requests = {}: must be in [1, {}]", o.max_requests, kMaxRequestsCap));
  }
  if (o.max_extend_rows < 1 || o.max_extend_rows > kMaxExtendRowsCap) {
    return invalid_argument(fmt::format("max_extend_rows = {}: must be in [1, {}]",
                                        o.max_extend_rows, kMaxExtendRowsCap));
  }
  if (o.num_pages < 0) {
    return invalid_argument(fmt::format("num_pages = {}: must be >= 0", o.num_pages));
  }
  if (!(o.mem_fraction_static >= 0 && o.mem_fraction_static <= 1)) {
    return invalid_argument(fmt::format(
        "mem_fraction_static = {}: must be in (0, 1] (0 = no budget)", o.mem_fraction_static));
  }
  if (o.load_chunk_bytes < kMinLoadChunkBytes || o.load_chunk_bytes > kMaxLoadChunkBytes) {
    return invalid_argument(fmt::format("load_chunk_bytes = {}: must be in [{}, {}]",
                                        o.load_chunk_bytes, kMinLoadChunkBytes,
                                        kMaxLoadChunkBytes));
  }
  if (o.load_threads < 1 || o.load_threads > runtime::kMaxReaders) {
    return invalid_argument(
        fmt::format("load_threads = {}: must be in [1, {}]", o.load_threads, runtime::kMaxReaders));
  }
  if (o.num_draft_tokens < 0 || o.num_draft_tokens > runtime::kMaxDraftTokens) {
    return invalid_argument(fmt::format("num_draft_tokens = {}: must be in [0, {}]",
                                        o.num_draft_tokens, runtime::kMaxDraftTokens));
  }
  runtime::MetadataConfig m;
  m.num_draft_tokens = o.num_draft_tokens;
  m.topk = int32_t(c.index_topk);
  if (o.dense) {
    if (o.max_context > kernels::kMaxTopk) {
      return invalid_argument(fmt::format(
          "dense attention needs max_context <= {} (top-k covers every position); got {}",
          kernels::kMaxTopk, o.max_context));
    }
    m.topk = std::max<int32_t>(64, (o.max_context + 63) / 64 * 64);
  }
  const int32_t n = o.num_draft_tokens + 1;
  // W covers max_ctx plus the speculative lookahead (§1.1: (F + 2)(d + 1) with F <= 1).
  m.page_table_width = (o.max_context + 3 * n + kernels::kPageSize - 1) / kernels::kPageSize;
  m.num_consumers = 132;
  m.max_requests = o.max_requests;
  m.max_extend_rows = o.max_extend_rows;
  const int64_t extend_kv = int64_t(o.max_requests) * m.page_table_width * kernels::kPageSize;
  if (extend_kv > int64_t(INT32_MAX)) {
    return invalid_argument(fmt::format(
        "max_requests = {} x max_context = {}: {} gathered keys per EXTEND exceed int32",
        o.max_requests, o.max_context, extend_kv));
  }
  m.max_extend_kv = int32_t(extend_kv);
  m.num_rows = o.max_requests + 1;
  m.num_pages = o.num_pages;  // 0: planned at load
  return m;
}

}  // namespace

DsaModel::DsaModel(ModelConfig config, ModelWeights weights, const ModelOptions& options,
                   const runtime::MetadataConfig& mc, const kernels::OpTable& ops)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      options_(options),
      metadata_config_(mc),
      ops_(ops),
      store_(ops.backend),
      pages_(mc.num_pages, mc.num_rows, mc.page_table_width),
      caches_(int32_t(config_.num_hidden_layers + (config_.has_mtp() ? 1 : 0)), mc.num_pages,
              options.latent_format),
      attention_(
          ops, mc,
          runtime::AttentionDims{int32_t(config_.index_n_heads),
                                 int32_t(config_.num_attention_heads), float(config_.sm_scale())}),
      meta_(mc),
      patched_meta_(mc),
      mirror_(ops.backend, mc, config_.hidden_size),
      ws_(ops.backend),
      graphs_(ops.backend, options.buckets) {
  ws_.set_poison(options.poison_workspace);
  mirror_.set_poison(options.poison_workspace);
}

StatusOr<std::unique_ptr<DsaModel>> DsaModel::load(const std::filesystem::path& dir,
                                                   const ModelOptions& options,
                                                   const kernels::OpTable& ops) {
  if (!std::filesystem::is_directory(dir)) {
    return not_found(fmt::format("model directory {} does not exist", dir.string()));
  }
  DSA_RETURN_IF_ERROR(runtime::GraphRunner::validate(ops.backend, options.cuda_graphs,
                                                     options.buckets, options.max_requests));
  DSA_RETURN_IF_ERROR(runtime::use_forward_stream(ops.backend));
  DSA_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir / "config.json"));
  DSA_RETURN_IF_ERROR(
      validate_expert_parallel(options.ep_rank, options.ep_size, options.ep_group, config));
  DSA_ASSIGN_OR_RETURN(runtime::MetadataConfig mc, metadata_config_for(config, options));
  CachePlan plan;
  if (mc.num_pages == 0) {
    CachePlanInput in;
    in.cache_layers = config.num_hidden_layers + (config.has_mtp() ? 1 : 0);
    in.latent_format = options.latent_format;
    in.max_requests = options.max_requests;
    in.page_table_width = mc.page_table_width;
    in.mem_fraction_static = options.mem_fraction_static;
    // The weights are streamed after the plan (weight_stream.h): the files' size stands for them;
    // the output buffers are allocated at capacity.
    in.weight_bytes =
        size_t(options.random_weights ? random_weight_bytes(config) : checkpoint_file_bytes(dir));
    in.output_bytes = size_t(mc.row_capacity()) *
                      (size_t(config.vocab_size) * sizeof(float) + size_t(config.hidden_size) * 2);
    DSA_ASSIGN_OR_RETURN(plan, plan_cache_pages(in, runtime::memory_ops(ops.backend)));
    mc.num_pages = plan.num_pages;
  } else {
    plan.num_pages = mc.num_pages;
    plan.page_bytes = cache_page_bytes(config.num_hidden_layers + (config.has_mtp() ? 1 : 0),
                                       options.latent_format);
    plan.page_table_width = mc.page_table_width;
  }
  // Options and the memory plan are checked: only now is the checkpoint read (or, with random
  // weights, generated: the same tensors make-checkpoint writes, from an image in memory). The
  // weights are filled in place (the store is keyed by the model's own vectors).
  const bool in_backend = options.random_weights && (options.random_weights_in_backend ||
                                                     ops.backend != kernels::Backend::kCpu);
  std::unique_ptr<DsaModel> m(new DsaModel(std::move(config), ModelWeights{}, options, mc, ops));
  if (in_backend) {
    m->weights_ = model_weight_layout(m->config_);  // shapes only: the data is made in place below
  } else {
    DSA_ASSIGN_OR_RETURN(Checkpoint file, options.random_weights
                                              ? random_checkpoint(m->config_, options.random_seed)
                                              : Checkpoint::open(dir));
    StreamOptions so;
    so.chunk_bytes = options.load_chunk_bytes;
    so.threads = options.load_threads;
    so.read_ahead = options.load_read_ahead;
    so.progress = options.on_load_progress;
    DSA_ASSIGN_OR_RETURN(m->load_stats_,
                         stream_checkpoint(file, m->config_, so, m->weights_, m->store_));
  }
  m->cache_plan_ = plan;

  kernels::RopeConfig rc;
  rc.theta = m->config_.rope_theta;
  rc.factor = m->config_.rope_scaling.factor;
  rc.original_max_position = int32_t(m->config_.rope_scaling.original_max_position_embeddings);
  rc.beta_fast = m->config_.rope_scaling.beta_fast;
  rc.beta_slow = m->config_.rope_scaling.beta_slow;
  rc.mscale = m->config_.rope_scaling.mscale;
  rc.mscale_all_dim = m->config_.rope_scaling.mscale_all_dim;
  m->rope_.num_positions = mc.page_table_width * kernels::kPageSize;  // >= max_ctx + lookahead
  m->rope_.cos.resize(sz(m->rope_.num_positions) * kernels::kRopePairs);
  m->rope_.sin.resize(m->rope_.cos.size());
  kernels::RopeTableParams tp{rc, m->rope_.num_positions, m->rope_.cos.data(), m->rope_.sin.data()};
  DSA_RETURN_IF_ERROR(kernels::rope_table_ref(tp));  // host-built, class E (§8.3)
  // Into the backend's memory once (for the CPU backend all of this reads the host copies).
  DSA_RETURN_IF_ERROR(m->caches_.allocate(ops.backend));
  if (in_backend) {
    DSA_RETURN_IF_ERROR(
        generate_backend_weights(m->store_, m->weights_, m->config_, options.random_seed));
  }
  DSA_ASSIGN_OR_RETURN(m->fuse_counts_,
                       fuse_projections(options.fuse, options.ep_size > 1, m->weights_, m->store_));
  DSA_RETURN_IF_ERROR(m->store_.add(m->rope_.cos));
  DSA_RETURN_IF_ERROR(m->store_.add(m->rope_.sin));
  if (options.ep_size > 1) {
    ExpertParallel& ep = m->ep_;
    ep = {options.ep_rank, options.ep_size, options.ep_group};
    m->ep_tables_ = expert_parallel_tables(int32_t(m->config_.n_routed_experts),
                                           int32_t(m->config_.hidden_size), ep.rank, ep.size);
    DSA_RETURN_IF_ERROR(m->store_.add(m->ep_tables_.owned));
    DSA_RETURN_IF_ERROR(m->store_.add(m->ep_tables_.foreign));
    DSA_RETURN_IF_ERROR(m->store_.add(m->ep_tables_.negative_zero));
    ep.owned = m->store_.get(m->ep_tables_.owned);
    ep.foreign = m->store_.get(m->ep_tables_.foreign);
    ep.negative_zero = m->store_.get(m->ep_tables_.negative_zero);
  }
  DSA_RETURN_IF_ERROR(m->allocate_outputs());
  if (options.cuda_graphs) DSA_RETURN_IF_ERROR(m->capture_graphs());
  if (options.profile_device_time) {
    // Label 0: the decode steps; 1 + ForwardTiming::index: the forwards.
    m->timeline_ = std::make_unique<runtime::DeviceTimeline>(
        runtime::memory_ops(ops.backend), int32_t(1 + 2 * ForwardTiming::kModes));
  }
  return m;
}

Status DsaModel::allocate_outputs() {
  const size_t rows = sz(metadata_config_.row_capacity());
  DSA_RETURN_IF_ERROR(mirror_.allocate(pages_.page_table()));
  DSA_ASSIGN_OR_RETURN(hidden_out_,
                       runtime::Buffer<bf16>::alloc(ops_.backend, rows * sz(config_.hidden_size)));
  DSA_ASSIGN_OR_RETURN(logits_out_,
                       runtime::Buffer<float>::alloc(ops_.backend, rows * sz(config_.vocab_size)));
  // The hand-off's draft slots (one sampled row per request) and the identity the token gather
  // reads through.
  DSA_ASSIGN_OR_RETURN(
      drafts_, runtime::Buffer<int32_t>::alloc(
                   ops_.backend, sz(runtime::kMaxDraftTokens) * sz(metadata_config_.max_requests)));
  std::vector<int32_t> iota(sz(config_.vocab_size));
  for (size_t v = 0; v < iota.size(); ++v) iota[v] = int32_t(v);
  DSA_ASSIGN_OR_RETURN(iota_, runtime::Buffer<int32_t>::from_host(ops_.backend, iota));
  DSA_RETURN_IF_ERROR(ws_.memory().sync());  // `iota` goes out of scope (pageable or not)
  DSA_ASSIGN_OR_RETURN(const void* error_word, runtime::device_error_word_address(ops_.backend));
  // A verify: requests <= rows.
  DSA_RETURN_IF_ERROR(acceptance_.reserve(ops_.backend, rows, rows, error_word));
  return sampler_.reserve(ops_.backend, sz(metadata_config_.max_requests), error_word);
}

// The graph runner captures one graph per key (runtime/graph_runner.h): its stage is this model's
// all-padding metadata and inputs, its body the model's body.
Status DsaModel::capture_graphs() {
  const bool has_mtp = weights_.mtp.has_value();
  const std::vector<runtime::GraphKey> keys =
      runtime::graph_keys(options_.num_draft_tokens, has_mtp, options_.buckets);
  auto padding_only = [&](const runtime::GraphKey& k) -> Status {
    runtime::ForwardBatch b;
    b.model = k.model;
    b.mode = k.mode;
    b.batch_pad = k.batch_pad;
    DSA_RETURN_IF_ERROR(
        runtime::build_forward_metadata(b, metadata_config_, pages_.page_table(), meta_)
            .with_context("graph capture metadata"));
    return stage(ForwardInputs{});
  };
  return graphs_.capture(keys, padding_only,
                         [&](runtime::ModelKind kind) { return body(kind, meta_); });
}

BlockContext DsaModel::block_context(const runtime::ForwardMetadata& meta) {
  return BlockContext{ops_, config_,          store_, rope_, attention_,
                      meta, mirror_.arrays(), ws_,    &ep_,  options_.fuse.row_ops};
}

// The LM head over the header's sample count: fixed per (mode, B_pad) in uniform modes (padded
// requests carry -1 entries, which gather zero rows), so a graph computes exactly what eager does.
Status DsaModel::head(const runtime::ForwardMetadata& meta, const bf16* normed, const bf16* hidden,
                      const LinearWeight& lm_head) {
  const int32_t D = int32_t(config_.hidden_size);
  const int32_t rows = meta.header.rows_pad, samples = meta.header.num_samples;
  if (hidden != hidden_out_.data()) {
    DSA_RETURN_IF_ERROR(
        ws_.memory().copy(hidden_out_.data(), hidden, sz(rows) * sz(D) * sizeof(bf16)));
  }
  if (samples == 0) return ok_status();
  // sample_row -1 (padded requests) gathers a zero row, whose logits must be zeros: the gather
  // writes it (zero_skipped), no zero fill first.
  DSA_ASSIGN_OR_RETURN(bf16 * x, ws_.take_uninit<bf16>(sz(samples) * D));
  const int64_t row_bytes = int64_t{D} * int64_t{sizeof(bf16)};
  kernels::RowCopyParams g{normed,    x,         mirror_.arrays().sample_row,
                           row_bytes, row_bytes, row_bytes,
                           samples,   rows,      kernels::RowCopyMode::kGather};
  g.zero_skipped = true;
  DSA_RETURN_IF_ERROR(ops_.row_copy(g));
  return run_linear(ops_, store_, lm_head, x, samples, nullptr, logits_out_.data());
}

Status DsaModel::body(runtime::ModelKind kind, const runtime::ForwardMetadata& meta) {
  ws_.reset();  // the previous forward's activations are dead
  // First node: the schedule from the row_len this forward's kernels read (inv. 15).
  DSA_RETURN_IF_ERROR(mirror_.rebuild_schedule(ops_, meta));
  switch (kind) {
    case runtime::ModelKind::kTarget:
      return target_body(meta);
    case runtime::ModelKind::kMtp:
      return mtp_body(meta);
  }
  return ok_status();
}

Status DsaModel::target_body(const runtime::ForwardMetadata& meta) {
  const int32_t rows = meta.header.rows_pad;
  // h starts as the embedding of the tokens, gathered by the first block's input norm.
  DSA_ASSIGN_OR_RETURN(bf16 * h, ws_.take_uninit<bf16>(sz(rows) * sz(config_.hidden_size)));
  const BlockContext ctx = block_context(meta);
  DSA_ASSIGN_OR_RETURN(bf16 * branch, ws_.take_uninit<bf16>(sz(rows) * sz(config_.hidden_size)));
  ResidualStream r{h, branch};
  r.table = store_.get(weights_.embed);
  r.ids = mirror_.tokens();
  r.vocab = int32_t(config_.vocab_size);
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    DSA_RETURN_IF_ERROR(run_decoder_block(ctx, weights_.layers[l], caches_.layer(int32_t(l)), r)
                            .with_context(fmt::format("layer {}", l)));
  }
  // The final norm (with the last block's pending add) writes straight into the hidden-state
  // output (no copy there in head()).
  bf16* normed = hidden_out_.data();
  DSA_RETURN_IF_ERROR(norm_residual(ctx, r, weights_.final_norm, normed, rows));
  return head(meta, normed, normed, weights_.lm_head);
}

Status DsaModel::mtp_body(const runtime::ForwardMetadata& meta) {
  const MtpWeights& m = *weights_.mtp;
  const int32_t rows = meta.header.rows_pad;
  const int32_t D = int32_t(config_.hidden_size);
  // concat(enorm(emb(t)), hnorm(h)): embedding half first (§6.5). Each norm gathers its rows: the
  // embedding rows of the tokens, and the hidden rows of the last forward where it left them
  // (hidden_out_, by the staged row list; -1 rows are zeros). This body overwrites hidden_out_
  // only in its head, after both. The bound is the buffer's (a graph cannot hold the last
  // forward's row count): stage() checks host row lists against last_rows_pad_, and the step
  // commit's row b n + a_b < B n is below it by construction.
  const BlockContext ctx = block_context(meta);
  DSA_ASSIGN_OR_RETURN(bf16 * cat, ws_.take_uninit<bf16>(sz(rows) * 2 * D));
  // Both norms in one launch (rmsnorm_pair): one kernel fewer per MTP forward.
  DSA_RETURN_IF_ERROR(
      ops_.rmsnorm_pair(gathered_rmsnorm_params(ctx, store_.get(weights_.mtp_embed()),
                                                mirror_.tokens(), int32_t(config_.vocab_size),
                                                false, nullptr, m.enorm, cat, rows, 2 * D),
                        gathered_rmsnorm_params(ctx, hidden_out_.data(), mirror_.hidden_rows(),
                                                metadata_config_.row_capacity(), true, nullptr,
                                                m.hnorm, cat + D, rows, 2 * D)));
  DSA_ASSIGN_OR_RETURN(bf16 * h, ws_.take_uninit<bf16>(sz(rows) * D));
  DSA_RETURN_IF_ERROR(run_linear(ops_, store_, m.eh_proj, cat, rows, h));
  const int32_t mtp_layer = int32_t(config_.num_hidden_layers);
  DSA_ASSIGN_OR_RETURN(bf16 * branch, ws_.take_uninit<bf16>(sz(rows) * D));
  ResidualStream r{h, branch};
  DSA_RETURN_IF_ERROR(
      run_decoder_block(ctx, m.block, caches_.layer(mtp_layer), r).with_context("mtp layer"));
  // Post-norm chain hidden: the norm writes straight into the hidden-state output, as in target.
  // Pre-norm: h, which the norm's pending add has completed.
  const bool post_norm = options_.mtp_chain_hidden == MtpChainHidden::kPostNorm;
  bf16* normed = hidden_out_.data();
  if (!post_norm) {
    DSA_ASSIGN_OR_RETURN(normed, ws_.take_uninit<bf16>(sz(rows) * D));
  }
  DSA_RETURN_IF_ERROR(norm_residual(ctx, r, m.shared_head_norm, normed, rows));
  return head(meta, normed, post_norm ? normed : h, weights_.mtp_head());
}

Status DsaModel::collect(const runtime::ForwardMetadata& meta, ForwardOutput* out,
                         ForwardOutputs what) {
  const runtime::MemoryOps& mem = ws_.memory();
  const size_t V = sz(config_.vocab_size);
  out->header = meta.header;
  out->row_start.assign(meta.cu_q.begin(), meta.cu_q.begin() + meta.header.num_requests);
  out->sample_row.assign(meta.sample_row.begin(),
                         meta.sample_row.begin() + meta.header.num_samples);
  out->hidden.clear();
  out->logits.clear();
  if (what.hidden) {
    out->hidden.resize(sz(meta.header.rows_pad) * sz(config_.hidden_size));
    DSA_RETURN_IF_ERROR(
        mem.copy(out->hidden.data(), hidden_out_.data(), out->hidden.size() * sizeof(bf16)));
    count_readback(out->hidden.size() * sizeof(bf16));
  }
  if (what.logits == LogitsTo::kHost && meta.header.num_samples > 0) {
    out->logits.resize(sz(meta.header.num_samples) * V);
    DSA_RETURN_IF_ERROR(
        mem.copy(out->logits.data(), logits_out_.data(), out->logits.size() * sizeof(float)));
    count_readback(out->logits.size() * sizeof(float));
  }
  // Nothing asked for: launched only. The next read (or wait()) synchronises and takes the
  // device error word, so an error of this forward still surfaces before its results are used.
  if (!what.hidden && what.logits == LogitsTo::kBackend) return ok_status();
  return sync_and_check("forward");
}

Status DsaModel::sync_and_check(std::string_view context) {
  const auto t0 = std::chrono::steady_clock::now();
  DSA_RETURN_IF_ERROR(ws_.memory().sync());
  mirror_.synchronised();  // every copy from the staging ring has run
  Status s = runtime::take_device_errors(ops_.backend, context);
  timing_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

Status DsaModel::wait() { return sync_and_check("forward"); }

Status DsaModel::reset_measurements() {
  DSA_RETURN_IF_ERROR(wait());
  timing_ = ForwardTiming{};
  if (timeline_) DSA_RETURN_IF_ERROR(timeline_->reset());
  return ok_status();
}

Status DsaModel::open_step_span() {
  if (!timeline_) return ok_status();
  spans_at_step_open_ = spans_kept_;
  return timeline_->open(0);
}

Status DsaModel::close_step_span() {
  if (!timeline_) return ok_status();
  // Kept when a forward span inside it was: the step's inner time is then its forwards'.
  return timeline_->close(0, spans_kept_ > spans_at_step_open_);
}

StatusOr<DeviceTime> DsaModel::device_time() {
  DeviceTime t;
  if (!timeline_) return t;
  DSA_RETURN_IF_ERROR(timeline_->resolve());
  t.steps = timeline_->total(0);
  for (size_t i = 0; i < t.by_kind.size(); ++i) t.by_kind[i] = timeline_->total(int32_t(1 + i));
  return t;
}

Status DsaModel::stage(const ForwardInputs& in) {
  const runtime::MetadataHeader& h = meta_.header;
  const size_t rows = sz(h.rows_pad), D = sz(config_.hidden_size);
  std::span<const int32_t> tokens = in.tokens;
  if (in.draft_slot >= 0) {
    // The drafts' gather (stage_from_backend) fills the real rows; padded rows keep token 0.
    // An idle DP rank's forward (IDLE, no requests) takes an empty slot.
    const bool decode = h.mode == runtime::ForwardMode::kDecode ||
                        (h.mode == runtime::ForwardMode::kIdle && draft_count_ == 0);
    if (!decode || h.num_requests != draft_count_ || in.draft_slot >= drafts_written_) {
      return invalid_argument(fmt::format(
          "forward: draft_slot = {}: needs a DECODE of the {} requests of the {} draft slots "
          "written (got {} of {} requests)",
          in.draft_slot, draft_count_, drafts_written_, runtime::mode_name(h.mode),
          h.num_requests));
    }
    padded_tokens_.assign(rows, 0);
    tokens = padded_tokens_;
  } else {
    if (int64_t(tokens.size()) < h.rows) {
      return invalid_argument(
          fmt::format("forward: {} token ids for {} rows", tokens.size(), h.rows));
    }
    // Padded rows take token 0 (any id in range).
    if (tokens.size() < rows) {
      padded_tokens_.assign(tokens.begin(), tokens.end());
      padded_tokens_.resize(rows, 0);
      tokens = padded_tokens_;
    }
  }
  if (!in.token_rows.empty()) {
    if (in.draft_slot >= 0) {
      return invalid_argument("forward: token_rows and draft_slot both name the tokens");
    }
    if (in.token_rows.size() > rows) {
      return invalid_argument(
          fmt::format("forward: {} token row indices for {} rows", in.token_rows.size(), rows));
    }
    const int32_t bound = kept_tokens(in.token_source);
    for (size_t r = 0; r < in.token_rows.size(); ++r) {
      if (in.token_rows[r] < -1 || in.token_rows[r] >= bound) {
        return invalid_argument(fmt::format(
            "forward: token_rows[{}] = {}: not one of the {} tokens kept ({})", r, in.token_rows[r],
            bound, in.token_source == TokenSource::kDraftSlots ? "draft slots" : "last sampling"));
      }
    }
  }
  std::span<const bf16> hidden;
  std::span<const int32_t> hidden_rows;
  if (h.model == runtime::ModelKind::kMtp && in.hidden_from_last) {
    if (last_rows_pad_ == 0) {
      return invalid_argument("forward: hidden rows from the last forward, but none has run");
    }
    if (in.hidden_rows.size() > rows) {
      return invalid_argument(
          fmt::format("forward: {} hidden row indices for {} rows", in.hidden_rows.size(), rows));
    }
    for (size_t r = 0; r < in.hidden_rows.size(); ++r) {
      if (in.hidden_rows[r] < -1 || in.hidden_rows[r] >= last_rows_pad_) {
        return invalid_argument(
            fmt::format("forward: hidden_rows[{}] = {}: not a row of the last forward ({} rows)", r,
                        in.hidden_rows[r], last_rows_pad_));
      }
    }
    hidden_rows = in.hidden_rows;
  } else if (h.model == runtime::ModelKind::kMtp) {
    hidden = in.hidden;
    if (int64_t(hidden.size()) < int64_t(h.rows) * int64_t(D)) {
      return invalid_argument(
          fmt::format("forward: {} hidden values for {} rows of {}", hidden.size(), h.rows, D));
    }
    // The MTP hidden rows of padded requests are zeros.
    if (hidden.size() < rows * D) {
      padded_hidden_.assign(hidden.begin(), hidden.end());
      padded_hidden_.resize(rows * D, bf16{});
      hidden = padded_hidden_;
    }
    // The body's hnorm gathers from hidden_out_ (stage_from_backend copies the staged rows
    // there): row r is row r.
    if (identity_rows_.size() < rows) {
      identity_rows_.resize(rows);
      for (size_t r = 0; r < rows; ++r) identity_rows_[r] = int32_t(r);
    }
    hidden_rows = std::span<const int32_t>(identity_rows_).first(rows);
  }
  DSA_RETURN_IF_ERROR(mirror_.upload(meta_, pages_, tokens, hidden, hidden_rows, in.token_rows));
  return stage_from_backend(in);
}

// After the mirror's copy, on the same stream: the previous forward's body has written the draft
// slots before these gathers read them (stream order, graphs included). The hidden rows an MTP
// forward takes from the last forward are gathered by its own body (mtp_body).
Status DsaModel::stage_from_backend(const ForwardInputs& in) {
  const runtime::MetadataHeader& h = meta_.header;
  // The token gathers below, run by the step commit's launch instead where there is one.
  bool tokens_gathered = false;
  // An IDLE forward (a DP rank without requests) has nothing to patch.
  if (in.accepted_patch != AcceptedPatch::kNone && h.num_requests > 0) {
    // First: the token gathers (below, or the commit's own) skip the patched token rows, and the
    // body's hnorm reads the patched hidden rows.
    // The verify's shift is the last acceptance; the others' counts are the last and their shift
    // the one before (AcceptedPatch, ForwardInputs::shifted).
    const int32_t d = acceptance_.last_drafts();
    const bool verify = in.accepted_patch == AcceptedPatch::kVerify;
    const int32_t own = verify ? h.num_requests : acceptance_.last_requests();
    const int32_t before = !in.shifted ? h.num_requests
                           : verify    ? acceptance_.last_requests()
                                       : acceptance_.previous_requests();
    if (d < 1 || own != h.num_requests || before != h.num_requests || (verify && !in.shifted)) {
      return invalid_argument(fmt::format(
          "forward: patched from the acceptance launches (d = {}; the last of {} requests, the one "
          "before of {}{}), but this forward has {} requests",
          d, acceptance_.last_requests(), acceptance_.previous_requests(),
          in.shifted ? ", shifted" : "", h.num_requests));
    }
    using kernels::StepCommitTarget;
    const StepCommitTarget target = verify ? StepCommitTarget::kVerify
                                    : in.accepted_patch == AcceptedPatch::kDraftExtend
                                        ? StepCommitTarget::kDraftExtend
                                        : StepCommitTarget::kChainDecode;
    const int32_t* shift_accepted = !in.shifted ? nullptr
                                    : verify    ? acceptance_.accepted()
                                                : acceptance_.previous_accepted();
    const int32_t* shift_emitted = !in.shifted ? nullptr
                                   : verify    ? acceptance_.emitted()
                                               : acceptance_.previous_emitted();
    // The commit gathers the tokens too (one launch fewer) where its requests' rows hold every
    // row the gather lists: the draft slot of a draft decode, or the kept tokens of the verify
    // and the draft extend.
    runtime::CommitTokens tokens;
    if (target == StepCommitTarget::kChainDecode) {
      if (in.draft_slot >= 0 && draft_count_ == h.num_requests) {
        tokens.drafts = drafts_.data() + sz(in.draft_slot) * sz(draft_count_);
        tokens.vocab = int32_t(config_.vocab_size);
      }
    } else if (!in.token_rows.empty() && kept_tokens(in.token_source) > 0 &&
               in.token_rows.size() <= sz(h.num_requests) * sz(h.rows_per_request)) {
      tokens.kept =
          in.token_source == TokenSource::kDraftSlots ? drafts_.data() : sampler_.tokens();
      tokens.kept_count = kept_tokens(in.token_source);
    }
    DSA_RETURN_IF_ERROR(mirror_.commit_step(
        ops_, meta_, target, verify ? nullptr : acceptance_.accepted(),
        verify ? nullptr : acceptance_.emitted(), shift_accepted, shift_emitted, d,
        // Host hidden rows are staged in order: nothing to patch there.
        in.accepted_patch == AcceptedPatch::kFirstDraftDecode && in.hidden_from_last, tokens));
    tokens_gathered = tokens.kept != nullptr || tokens.drafts != nullptr;
    // Checked mode: the device-built metadata meets the invariants the host build is checked
    // for (SPEC.md §4.6), read back here (a synchronisation: checked mode trades speed for it).
    if (checked_mode()) {
      DSA_RETURN_IF_ERROR(sync_and_check("step commit"));
      DSA_RETURN_IF_ERROR(mirror_.validate_uploaded(meta_, pages_, &patched_meta_));
    }
  }
  if (h.model == runtime::ModelKind::kMtp && !in.hidden_from_last && h.rows_pad > 0) {
    // Host hidden rows: where the body's hnorm reads the last forward's (mtp_body), by the
    // identity row list stage() staged.
    DSA_RETURN_IF_ERROR(ws_.memory().copy(hidden_out_.data(), mirror_.hidden(),
                                          sz(h.rows_pad) * sz(config_.hidden_size) * sizeof(bf16)));
  }
  if (!in.token_rows.empty() && !tokens_gathered) {
    // The kept tokens into their rows; rows listed -1 keep the staged host token. A kept -1 (a
    // row with no eligible logit) reaches the embedding's gather (the first norm's), which refuses
    // it (checked mode) or reads zeros: only a model whose logits are all NaN or -inf gets there.
    const int64_t w = int64_t(sizeof(int32_t));
    const bool drafts = in.token_source == TokenSource::kDraftSlots;
    kernels::RowCopyParams g{drafts ? drafts_.data() : sampler_.tokens(),
                             mirror_.mutable_tokens(),
                             mirror_.token_rows(),
                             w,
                             w,
                             w,
                             int32_t(in.token_rows.size()),
                             kept_tokens(in.token_source),
                             kernels::RowCopyMode::kGather};
    DSA_RETURN_IF_ERROR(ops_.row_copy(g));
  }
  if (in.draft_slot >= 0 && draft_count_ > 0 && !tokens_gathered) {
    // Through the identity table: an entry of -1 (no eligible token) is skipped and its row keeps
    // the staged token 0, the host drafter's rule, with no kernel of its own.
    const int64_t w = int64_t(sizeof(int32_t));
    kernels::RowCopyParams g{iota_.data(),
                             mirror_.mutable_tokens(),
                             drafts_.data() + sz(in.draft_slot) * sz(draft_count_),
                             w,
                             w,
                             w,
                             draft_count_,
                             int32_t(config_.vocab_size),
                             kernels::RowCopyMode::kGather};
    DSA_RETURN_IF_ERROR(ops_.row_copy(g));
  }
  return ok_status();
}

Status DsaModel::forward(runtime::ForwardBatch batch, std::span<const int32_t> tokens,
                         std::span<const bf16> hidden, ForwardOutput* out, LogitsTo logits_to) {
  ForwardInputs in;
  in.tokens = tokens;
  in.hidden = hidden;
  return forward(std::move(batch), in, out, ForwardOutputs{true, logits_to});
}

Status DsaModel::forward(runtime::ForwardBatch batch, const ForwardInputs& in, ForwardOutput* out,
                         ForwardOutputs what) {
  using clock = std::chrono::steady_clock;
  const auto secs = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (batch.model == runtime::ModelKind::kMtp && !weights_.mtp) {
    return failed_precondition("forward: the checkpoint has no MTP layer");
  }
  const auto tb = clock::now();
  if (runtime::is_uniform(batch.mode) && batch.batch_pad == 0) {
    batch.batch_pad = batch_pad_for(int32_t(batch.requests.size()));
  }
  DSA_RETURN_IF_ERROR(
      runtime::build_forward_metadata(batch, metadata_config_, pages_.page_table(), meta_));
  // Timed from here, as when the engine built the metadata: host_s is staging and launching.
  const auto t0 = clock::now();
  clock::time_point ts;
  {
    runtime::DeferDeviceErrors defer(ops_.backend);
    // On the device timeline the forward is its staging copies, gathers, patches and launch.
    const int32_t span = 1 + int32_t(ForwardTiming::index(batch.model, batch.mode));
    if (timeline_) DSA_RETURN_IF_ERROR(timeline_->open(span));
    const Status launched = [&]() -> Status {
      const int64_t staged_before = mirror_.staged_bytes();
      DSA_RETURN_IF_ERROR(stage(in));
      timing_.staged_bytes += mirror_.staged_bytes() - staged_before;
      ts = clock::now();
      DSA_ASSIGN_OR_RETURN(const bool replayed,
                           graphs_.run(meta_.header, [&] { return body(batch.model, meta_); }));
      timing_.replays += replayed ? 1 : 0;
      return ok_status();
    }();
    // The forward's own error first: a timeline error must not hide it.
    const Status closed = timeline_ ? timeline_->close(span, launched.ok()) : ok_status();
    DSA_RETURN_IF_ERROR(launched);
    DSA_RETURN_IF_ERROR(closed);
    if (timeline_) ++spans_kept_;
  }
  last_rows_pad_ = meta_.header.rows_pad;  // what hidden_out_ holds once this body has run
  const auto t1 = clock::now();
  const double waited_before = timing_.wait_s;
  DSA_RETURN_IF_ERROR(collect(meta_, out, what));
  const auto t2 = clock::now();
  const bool waited = what.hidden || what.logits == LogitsTo::kHost;
  ++timing_.forwards;
  timing_.host_s += secs(t0, t1);
  timing_.total_s += secs(t0, t2);
  timing_.build_s += secs(tb, t0);
  timing_.stage_s += secs(t0, ts);
  timing_.launch_s += secs(ts, t1);
  timing_.collect_s += secs(t1, t2) - (timing_.wait_s - waited_before);
  ForwardTiming::Kind& kind = timing_.by_kind[ForwardTiming::index(batch.model, batch.mode)];
  ++kind.forwards;
  kind.waited += waited ? 1 : 0;
  kind.total_s += secs(t0, t2);
  return ok_status();
}

int32_t DsaModel::kept_tokens(TokenSource source) const {
  return source == TokenSource::kDraftSlots ? drafts_written_ * draft_count_
                                            : sampler_.last_count();
}

Status DsaModel::accept_last_verify(int32_t vocab, int32_t d, std::span<const int32_t> drafts,
                                    std::span<const kernels::SamplingParams> params,
                                    std::span<const int32_t> first_position, VerifyAcceptance* out,
                                    std::span<const int32_t> draft_rows) {
  DSA_RETURN_IF_ERROR(launch_acceptance(vocab, d, drafts, params, first_position, draft_rows));
  return read_acceptance(out);
}

Status DsaModel::launch_acceptance(int32_t vocab, int32_t d, std::span<const int32_t> drafts,
                                   std::span<const kernels::SamplingParams> params,
                                   std::span<const int32_t> first_position,
                                   std::span<const int32_t> draft_rows, bool shifted) {
  if (!draft_rows.empty()) {
    if (draft_rows.size() != params.size()) {
      return invalid_argument(fmt::format("accept_last_verify: {} draft rows for {} requests",
                                          draft_rows.size(), params.size()));
    }
    for (size_t b = 0; b < draft_rows.size(); ++b) {
      if (draft_rows[b] < -1 || draft_rows[b] >= draft_count_ || d > drafts_written_) {
        return invalid_argument(fmt::format(
            "accept_last_verify: draft_rows[{}] = {}: not a row of the draft slots ({} rows, {} "
            "slots written, d = {})",
            b, draft_rows[b], draft_count_, drafts_written_, d));
      }
    }
  }
  if (params.size() * (size_t(d) + 1) > logits_out_.size() / sz(config_.vocab_size)) {
    return invalid_argument(fmt::format("accept_last_verify: {} requests x {} rows: over capacity",
                                        params.size(), d + 1));
  }
  const auto t0 = std::chrono::steady_clock::now();
  {
    // The op's checks join the forward's: read once, after the one read back.
    runtime::DeferDeviceErrors defer(ops_.backend);
    DSA_RETURN_IF_ERROR(acceptance_.launch(ops_, logits_out_.data(), config_.vocab_size, vocab, d,
                                           drafts, params, first_position,
                                           {drafts_.data(), draft_count_, draft_rows}, shifted));
  }
  timing_.sample_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

StatusOr<AcceptTicket> DsaModel::readback_acceptance() {
  DSA_ASSIGN_OR_RETURN(AcceptTicket t, acceptance_.readback());
  t.uploads_before = mirror_.uploads();
  return t;
}

Status DsaModel::collect_acceptance(const AcceptTicket& t, VerifyAcceptance* out) {
  const auto t0 = std::chrono::steady_clock::now();
  bool error_seen = false;
  DSA_RETURN_IF_ERROR(acceptance_.collect(t, out, &error_seen));
  mirror_.completed(t.uploads_before);  // their staging slots are free again
  if (t.requests > 0) count_readback(sz(t.requests) * sz(t.n + 1) * sizeof(int32_t));
  timing_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The word as it was after this launch: set, it is decoded (and cleared) the checked way.
  if (error_seen) return sync_and_check("overlapped speculative step");
  return ok_status();
}

Status DsaModel::read_acceptance(VerifyAcceptance* out) {
  const auto t1 = std::chrono::steady_clock::now();
  DSA_ASSIGN_OR_RETURN(const size_t bytes, acceptance_.read(out));
  if (bytes > 0) count_readback(bytes);
  // The copy above waits for the stream on CUDA (pageable destination): all of it is the wait.
  timing_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  DSA_RETURN_IF_ERROR(sync_and_check("acceptance"));
  acceptance_.unpack(out);
  return ok_status();
}

Status DsaModel::draft_on_backend(int32_t vocab, int32_t count, int32_t slot) {
  const auto t0 = std::chrono::steady_clock::now();
  if (slot < 0 || slot >= runtime::kMaxDraftTokens) {
    return invalid_argument(fmt::format("draft_on_backend: slot = {}: must be in [0, {})", slot,
                                        runtime::kMaxDraftTokens));
  }
  if (count < 0 || count > metadata_config_.max_requests || count > meta_.header.num_samples) {
    return invalid_argument(fmt::format(
        "draft_on_backend: count = {}: must be in [0, min(max_requests = {}, the last forward's "
        "{} sampled rows)]",
        count, metadata_config_.max_requests, meta_.header.num_samples));
  }
  if (slot == 0) {
    draft_count_ = count;
    drafts_written_ = 0;
  } else if (count != draft_count_ || slot > drafts_written_) {
    return invalid_argument(fmt::format(
        "draft_on_backend: slot {} of {} rows after {} slots of {}: slots are written in order, "
        "each with slot 0's count",
        slot, count, drafts_written_, draft_count_));
  }
  {
    runtime::DeferDeviceErrors defer(ops_.backend);
    DSA_RETURN_IF_ERROR(acceptance_.launch_greedy(ops_, logits_out_.data(), config_.vocab_size,
                                                  vocab, count,
                                                  drafts_.data() + sz(slot) * sz(count)));
  }
  drafts_written_ = std::max(drafts_written_, slot + 1);
  timing_.sample_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

StatusOr<SampleTicket> DsaModel::sample_async(int32_t vocab,
                                              std::span<const kernels::SamplingParams> params,
                                              std::span<const int32_t> positions) {
  const auto t0 = std::chrono::steady_clock::now();
  if (int64_t(params.size()) > meta_.header.num_samples) {
    return invalid_argument(fmt::format("sample_async: {} rows, the last forward sampled {}",
                                        params.size(), meta_.header.num_samples));
  }
  StatusOr<SampleTicket> t = [&] {
    runtime::DeferDeviceErrors defer(ops_.backend);
    return sampler_.launch(ops_, logits_out_.data(), config_.vocab_size, vocab, params, positions);
  }();
  if (t.ok()) t->uploads_before = mirror_.uploads();
  timing_.sample_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

Status DsaModel::collect_sampled(const SampleTicket& ticket, std::vector<int32_t>* tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  bool error_seen = false;
  DSA_RETURN_IF_ERROR(sampler_.collect(ticket, tokens, &error_seen));
  mirror_.completed(ticket.uploads_before);  // their staging slots are free again
  if (ticket.count > 0) count_readback(sz(ticket.count) * sizeof(int32_t));
  timing_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The word as it was after this launch: set, it is decoded (and cleared) the checked way.
  if (error_seen) return sync_and_check("overlapped decode");
  return ok_status();
}

Status DsaModel::read_drafts(int32_t slots, std::vector<int32_t>* out) {
  if (slots < 0 || slots > drafts_written_) {
    return invalid_argument(
        fmt::format("read_drafts: {} slots, {} written", slots, drafts_written_));
  }
  out->resize(sz(slots) * sz(draft_count_));
  const auto t0 = std::chrono::steady_clock::now();
  if (!out->empty()) {
    DSA_RETURN_IF_ERROR(
        ws_.memory().copy(out->data(), drafts_.data(), out->size() * sizeof(int32_t)));
    count_readback(out->size() * sizeof(int32_t));
  }
  timing_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sync_and_check("draft chain");
}

}  // namespace dsa::model
