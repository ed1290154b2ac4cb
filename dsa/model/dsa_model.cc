#include "dsa/model/dsa_model.h"

#include <fmt/format.h>

namespace dsa::model {

namespace {

size_t sz(int64_t v) { return static_cast<size_t>(v); }

StatusOr<runtime::MetadataConfig> metadata_config_for(const ModelConfig& c, const ModelOptions& o) {
  if (o.max_context < 1)
    return invalid_argument(fmt::format("max_context = {}: must be >= 1", o.max_context));
  if (o.num_draft_tokens < 0 || o.num_draft_tokens > 7) {
    return invalid_argument(
        fmt::format("num_draft_tokens = {}: must be in [0, 7]", o.num_draft_tokens));
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
  m.max_extend_kv = o.max_requests * m.page_table_width * kernels::kPageSize;
  m.num_rows = o.max_requests + 1;
  m.num_pages = o.num_pages > 0 ? o.num_pages : o.max_requests * m.page_table_width + 1;
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
      mirror_(ops.backend),
      ws_(ops.backend) {}

StatusOr<std::unique_ptr<DsaModel>> DsaModel::load(const std::filesystem::path& dir,
                                                   const ModelOptions& options,
                                                   const kernels::OpTable& ops) {
  if (!std::filesystem::is_directory(dir)) {
    return not_found(fmt::format("model directory {} does not exist", dir.string()));
  }
  DSA_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(dir / "config.json"));
  DSA_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(dir / "model.safetensors"));
  DSA_ASSIGN_OR_RETURN(ModelWeights weights, load_model_weights(file, config));
  DSA_ASSIGN_OR_RETURN(runtime::MetadataConfig mc, metadata_config_for(config, options));
  std::unique_ptr<DsaModel> m(
      new DsaModel(std::move(config), std::move(weights), options, mc, ops));

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
  DSA_RETURN_IF_ERROR(m->store_.add_model(m->weights_));
  DSA_RETURN_IF_ERROR(m->store_.add(m->rope_.cos));
  DSA_RETURN_IF_ERROR(m->store_.add(m->rope_.sin));
  return m;
}

Status DsaModel::begin_forward(const runtime::ForwardMetadata& meta) {
  ws_.reset();  // the previous forward's activations are dead
  return mirror_.upload(meta, pages_.page_table());
}

BlockContext DsaModel::block_context(const runtime::ForwardMetadata& meta) {
  return BlockContext{ops_, config_, store_, rope_, attention_, meta, mirror_.arrays(), ws_};
}

StatusOr<bf16*> DsaModel::embed(const std::vector<bf16>& table, std::span<const int32_t> tokens,
                                int32_t rows) {
  if (int64_t(tokens.size()) < rows) {
    return invalid_argument(fmt::format("forward: {} tokens for {} rows", tokens.size(), rows));
  }
  DSA_ASSIGN_OR_RETURN(int32_t * ids, ws_.take<int32_t>(sz(rows)));
  DSA_RETURN_IF_ERROR(ws_.memory().copy(ids, tokens.data(), sz(rows) * sizeof(int32_t)));
  DSA_ASSIGN_OR_RETURN(bf16 * h, ws_.take<bf16>(sz(rows) * sz(config_.hidden_size)));
  kernels::EmbeddingParams p{ids,  store_.get(table),           h,
                             rows, int32_t(config_.vocab_size), int32_t(config_.hidden_size)};
  DSA_RETURN_IF_ERROR(ops_.embedding(p));
  return h;
}

Status DsaModel::rmsnorm(const bf16* x, const std::vector<bf16>& w, bf16* y, int32_t rows,
                         int64_t y_stride) {
  kernels::RmsNormParams n;
  n.x = x;
  n.weight = store_.get(w);
  n.y = y;
  n.num_tokens = rows;
  n.dim = int32_t(config_.hidden_size);
  n.y_stride = y_stride;
  n.eps = float(config_.rms_norm_eps);
  return ops_.rmsnorm(n);
}

Status DsaModel::head(const runtime::ForwardMetadata& meta, const bf16* normed, const bf16* hidden,
                      const LinearWeight& lm_head, ForwardOutput* out) {
  const int32_t D = int32_t(config_.hidden_size), V = int32_t(config_.vocab_size);
  const int32_t rows = meta.header.rows_pad, samples = meta.header.num_samples;
  const runtime::MemoryOps& mem = ws_.memory();
  out->hidden.resize(sz(rows) * D);
  DSA_RETURN_IF_ERROR(mem.copy(out->hidden.data(), hidden, out->hidden.size() * sizeof(bf16)));
  out->logits.assign(sz(samples) * V, 0.f);
  if (samples > 0) {
    DSA_ASSIGN_OR_RETURN(bf16 * x, ws_.take<bf16>(sz(samples) * D));  // sample_row -1: zero rows
    const int64_t row_bytes = int64_t{D} * int64_t{sizeof(bf16)};
    kernels::RowCopyParams g{normed,    x,         mirror_.arrays().sample_row,
                             row_bytes, row_bytes, row_bytes,
                             samples,   rows,      kernels::RowCopyMode::kGather};
    DSA_RETURN_IF_ERROR(ops_.row_copy(g));
    DSA_ASSIGN_OR_RETURN(float* logits, ws_.take<float>(out->logits.size()));
    DSA_RETURN_IF_ERROR(run_linear(ops_, store_, lm_head, x, samples, nullptr, logits));
    DSA_RETURN_IF_ERROR(mem.copy(out->logits.data(), logits, out->logits.size() * sizeof(float)));
  }
  return mem.sync();
}

Status DsaModel::forward_target(const runtime::ForwardMetadata& meta,
                                std::span<const int32_t> tokens, ForwardOutput* out) {
  const int32_t rows = meta.header.rows_pad;
  DSA_RETURN_IF_ERROR(begin_forward(meta));
  DSA_ASSIGN_OR_RETURN(bf16 * h, embed(weights_.embed, tokens, rows));
  const BlockContext ctx = block_context(meta);
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    DSA_RETURN_IF_ERROR(run_decoder_block(ctx, weights_.layers[l], caches_.layer(int32_t(l)), h)
                            .with_context(fmt::format("layer {}", l)));
  }
  DSA_ASSIGN_OR_RETURN(bf16 * normed, ws_.take<bf16>(sz(rows) * sz(config_.hidden_size)));
  DSA_RETURN_IF_ERROR(rmsnorm(h, weights_.final_norm, normed, rows));
  return head(meta, normed, normed, weights_.lm_head, out);
}

Status DsaModel::forward_mtp(const runtime::ForwardMetadata& meta, std::span<const int32_t> tokens,
                             std::span<const bf16> target_hidden, ForwardOutput* out) {
  if (!weights_.mtp) return failed_precondition("forward_mtp: the checkpoint has no MTP layer");
  const MtpWeights& m = *weights_.mtp;
  const int32_t rows = meta.header.rows_pad;
  const int32_t D = int32_t(config_.hidden_size);
  if (int64_t(target_hidden.size()) < int64_t(rows) * D) {
    return invalid_argument(fmt::format("forward_mtp: target_hidden has {} values for {} rows",
                                        target_hidden.size(), rows));
  }
  DSA_RETURN_IF_ERROR(begin_forward(meta));
  DSA_ASSIGN_OR_RETURN(bf16 * e, embed(weights_.mtp_embed(), tokens, rows));
  DSA_ASSIGN_OR_RETURN(bf16 * th, ws_.take<bf16>(sz(rows) * D));
  DSA_RETURN_IF_ERROR(ws_.memory().copy(th, target_hidden.data(), sz(rows) * D * sizeof(bf16)));
  // concat(enorm(emb(t)), hnorm(h)): embedding half first (§6.5).
  DSA_ASSIGN_OR_RETURN(bf16 * cat, ws_.take<bf16>(sz(rows) * 2 * D));
  DSA_RETURN_IF_ERROR(rmsnorm(e, m.enorm, cat, rows, 2 * D));
  DSA_RETURN_IF_ERROR(rmsnorm(th, m.hnorm, cat + D, rows, 2 * D));
  DSA_ASSIGN_OR_RETURN(bf16 * h, ws_.take<bf16>(sz(rows) * D));
  DSA_RETURN_IF_ERROR(run_linear(ops_, store_, m.eh_proj, cat, rows, h));
  const int32_t mtp_layer = int32_t(config_.num_hidden_layers);
  DSA_RETURN_IF_ERROR(run_decoder_block(block_context(meta), m.block, caches_.layer(mtp_layer), h)
                          .with_context("mtp layer"));
  DSA_ASSIGN_OR_RETURN(bf16 * normed, ws_.take<bf16>(sz(rows) * D));
  DSA_RETURN_IF_ERROR(rmsnorm(h, m.shared_head_norm, normed, rows));
  const bf16* hidden = options_.mtp_chain_hidden == MtpChainHidden::kPostNorm ? normed : h;
  return head(meta, normed, hidden, weights_.mtp_head(), out);
}

}  // namespace dsa::model
