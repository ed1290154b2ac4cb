#include "dsa/model/weight_store.h"

#include <fmt/format.h>

#include <span>
#include <string>

#include "dsa/core/check.h"
#include "dsa/model/weight_vectors.h"
#include "dsa/runtime/backend_memory.h"
#include "dsa/runtime/random_fill.h"

namespace dsa::model {

Status WeightStore::add_bytes(const void* key, const void* host, size_t bytes) {
  if (backend_ == kernels::Backend::kCpu || host == nullptr || bytes == 0) return ok_status();
  if (copies_.contains(key)) return ok_status();
  auto src = std::span<const uint8_t>(static_cast<const uint8_t*>(host), bytes);
  DSA_ASSIGN_OR_RETURN(auto copy, runtime::Buffer<uint8_t>::from_host(backend_, src));
  copies_.emplace(key, std::move(copy));
  return ok_status();
}

Status WeightStore::stream(const void* key, const void* src, size_t bytes,
                           runtime::StagedUpload& up) {
  if (copies_.contains(key)) return internal_error("weight store: one vector streamed twice");
  if (bytes == 0) return ok_status();
  DSA_ASSIGN_OR_RETURN(auto buf, runtime::Buffer<uint8_t>::alloc(backend_, bytes));
  DSA_RETURN_IF_ERROR(up.copy(buf.data(), src, bytes));
  copies_.emplace(key, std::move(buf));
  return ok_status();
}

Status WeightStore::generate_bytes(const void* key, size_t elem_bytes, size_t count,
                                   const FillSpec& spec) {
  DSA_CHECK(elem_bytes == fill_elem_bytes(spec.kind));
  if (count == 0 || copies_.contains(key)) return ok_status();
  DSA_ASSIGN_OR_RETURN(auto buf, runtime::Buffer<uint8_t>::alloc(backend_, count * elem_bytes));
  DSA_RETURN_IF_ERROR(runtime::random_fill(backend_, buf.data(), count, spec));
  copies_.emplace(key, std::move(buf));
  return ok_status();
}

Status WeightStore::concat(const void* dst_key, std::span<const Piece> pieces) {
  if (copies_.contains(dst_key)) return internal_error("weight store: a fused vector made twice");
  size_t total = 0;
  for (const Piece& p : pieces) total += p.bytes;
  if (total == 0) return ok_status();
  const runtime::MemoryOps& mem = runtime::memory_ops(backend_);
  DSA_ASSIGN_OR_RETURN(auto buf, runtime::Buffer<uint8_t>::alloc(backend_, total));
  size_t at = 0;
  for (const Piece& p : pieces) {
    DSA_RETURN_IF_ERROR(mem.copy(buf.data() + at, get_bytes(p.key, p.host), p.bytes));
    at += p.bytes;
  }
  // The copies read the parts' buffers: done before those are released.
  DSA_RETURN_IF_ERROR(mem.sync());
  for (const Piece& p : pieces) {
    copies_.erase(p.key);
    released_.insert(p.key);
  }
  copies_.emplace(dst_key, std::move(buf));
  return ok_status();
}

Status WeightStore::fuse_rows(const LinearWeight& dst, std::span<const LinearWeight* const> parts) {
  if (parts.empty()) return invalid_argument("weight store: fuse_rows: no parts");
  const bool fp8 = parts[0]->is_fp8();
  const int32_t in = parts[0]->in;
  int64_t out = 0;
  std::vector<Piece> codes, scales;
  for (size_t i = 0; i < parts.size(); ++i) {
    const LinearWeight& w = *parts[i];
    if (w.in != in || w.is_fp8() != fp8) {
      return invalid_argument(fmt::format(
          "weight store: fuse_rows: part {} is [{}, {}] {} but part 0 is [.., {}] {}: fused parts "
          "share one input width and weight form",
          i, w.out, w.in, w.is_fp8() ? "FP8" : "bf16", in, fp8 ? "FP8" : "bf16"));
    }
    if (fp8 && i + 1 < parts.size() && w.out % 128 != 0) {
      return invalid_argument(
          fmt::format("weight store: fuse_rows: FP8 part {} has out = {}, not a multiple of the "
                      "128-row scale block (only the last part may end inside a block)",
                      i, w.out));
    }
    out += w.out;
    const size_t values = size_t(w.out) * size_t(w.in);
    if (fp8) {
      const size_t blocks = size_t((w.out + 127) / 128) * size_t((w.in + 127) / 128);
      codes.push_back({&w.fp8_w, w.fp8_w.data(), values});
      scales.push_back({&w.scale_inv, w.scale_inv.data(), blocks * sizeof(float)});
    } else {
      codes.push_back({&w.bf16_w, w.bf16_w.data(), values * sizeof(bf16)});
    }
  }
  if (dst.out != out || dst.in != in || dst.is_fp8() != fp8) {
    return invalid_argument(fmt::format(
        "weight store: fuse_rows: the fused weight is [{}, {}] {}, its parts [{}, {}] {}", dst.out,
        dst.in, dst.is_fp8() ? "FP8" : "bf16", out, in, fp8 ? "FP8" : "bf16"));
  }
  if (!fp8) return concat(&dst.bf16_w, codes);
  DSA_RETURN_IF_ERROR(concat(&dst.fp8_w, codes));
  return concat(&dst.scale_inv, scales);
}

const void* WeightStore::get_bytes(const void* key, const void* host) const {
  DSA_CHECK(!released_.contains(key));  // a fused part: its rows live in the fused weight now
  auto it = copies_.find(key);
  if (it != copies_.end()) return it->second.data();
  DSA_CHECK(backend_ == kernels::Backend::kCpu || host == nullptr);
  return host;
}

namespace {

// The table of one projection (`part` picks it from an expert) over all experts.
template <typename Part>
Status build_table(const WeightStore& store, kernels::Backend backend, const MoeWeights& w,
                   bool with_shared, const char* name, Part part, WeightStore::ExpertTable& t) {
  const LinearWeight& first = part(w.experts[0]);  // add_expert_tables refused no experts
  t.fp8 = first.is_fp8();
  std::vector<const bf16*> weights;
  std::vector<const uint8_t*> codes;
  std::vector<const float*> scales;
  const size_t n = w.experts.size() + (with_shared ? 1 : 0);
  for (size_t e = 0; e < n; ++e) {
    const LinearWeight& lw = part(e < w.experts.size() ? w.experts[e] : *w.shared);
    if (e == w.experts.size() && (lw.out != first.out || lw.in != first.in)) {
      return invalid_argument(fmt::format(
          "weight store: the shared expert's {} weight is [{}, {}] but the routed experts' are "
          "[{}, {}]: only an expert of their shape joins their grouped linear",
          name, lw.out, lw.in, first.out, first.in));
    }
    if (lw.is_fp8() != t.fp8) {
      return invalid_argument(fmt::format(
          "weight store: expert {}'s {} weight is {} but expert 0's is {}: the experts of one "
          "MoE projection must share one weight form",
          e == w.experts.size() ? std::string("shared") : std::to_string(e), name,
          lw.is_fp8() ? "FP8" : "bf16", t.fp8 ? "FP8" : "bf16"));
    }
    if (t.fp8) {
      codes.push_back(store.get(lw.fp8_w));
      scales.push_back(store.get(lw.scale_inv));
    } else {
      weights.push_back(store.get(lw.bf16_w));
    }
  }
  if (t.fp8) {
    DSA_ASSIGN_OR_RETURN(t.weights_fp8, runtime::Buffer<const uint8_t*>::from_host(
                                            backend, std::span<const uint8_t* const>(codes)));
    DSA_ASSIGN_OR_RETURN(t.scales, runtime::Buffer<const float*>::from_host(
                                       backend, std::span<const float* const>(scales)));
  } else {
    DSA_ASSIGN_OR_RETURN(t.weights, runtime::Buffer<const bf16*>::from_host(
                                        backend, std::span<const bf16* const>(weights)));
  }
  return ok_status();
}

}  // namespace

Status WeightStore::add_expert_tables(const MoeWeights& w, bool with_shared) {
  if (with_shared && !w.shared) {
    return invalid_argument(
        "weight store: the shared expert joins the tables of a layer without one");
  }
  if (w.experts.empty()) return invalid_argument("weight store: an MoE layer without experts");
  ExpertTables t;
  t.shared_in_table = with_shared;
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, with_shared, "gate",
      [](const MlpWeights& e) -> const LinearWeight& { return e.gate; }, t.gate));
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, with_shared, "up",
      [](const MlpWeights& e) -> const LinearWeight& { return e.up; }, t.up));
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, with_shared, "down",
      [](const MlpWeights& e) -> const LinearWeight& { return e.down; }, t.down));
  expert_tables_.insert_or_assign(&w, std::move(t));
  return ok_status();
}

const WeightStore::ExpertTables* WeightStore::expert_tables(const MoeWeights& w) const {
  auto it = expert_tables_.find(&w);
  return it == expert_tables_.end() ? nullptr : &it->second;
}

Status WeightStore::add_model(const ModelWeights& w) {
  // Every vector first, then the expert tables, which read the experts' backend copies.
  Status s = ok_status();
  std::vector<const MoeWeights*> moes;
  for_each_weight_vector(
      w,
      [&](const auto& v) {
        if (s.ok()) s = add(v);
      },
      [&](const MoeWeights& m) { moes.push_back(&m); });
  DSA_RETURN_IF_ERROR(s);
  for (const MoeWeights* m : moes) DSA_RETURN_IF_ERROR(add_expert_tables(*m));
  return ok_status();
}

}  // namespace dsa::model
