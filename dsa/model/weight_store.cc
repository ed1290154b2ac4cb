#include "dsa/model/weight_store.h"

#include <fmt/format.h>

#include <span>

#include "dsa/core/check.h"
#include "dsa/model/weight_vectors.h"
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

const void* WeightStore::get_bytes(const void* key, const void* host) const {
  auto it = copies_.find(key);
  if (it != copies_.end()) return it->second.data();
  DSA_CHECK(backend_ == kernels::Backend::kCpu || host == nullptr);
  return host;
}

namespace {

// The table of one projection (`part` picks it from an expert) over all experts.
template <typename Part>
Status build_table(const WeightStore& store, kernels::Backend backend, const MoeWeights& w,
                   const char* name, Part part, WeightStore::ExpertTable& t) {
  t.fp8 = !w.experts.empty() && part(w.experts[0]).is_fp8();
  std::vector<const bf16*> weights;
  std::vector<const uint8_t*> codes;
  std::vector<const float*> scales;
  for (size_t e = 0; e < w.experts.size(); ++e) {
    const LinearWeight& lw = part(w.experts[e]);
    if (lw.is_fp8() != t.fp8) {
      return invalid_argument(fmt::format(
          "weight store: expert {}'s {} weight is {} but expert 0's is {}: the experts of one "
          "MoE projection must share one weight form",
          e, name, lw.is_fp8() ? "FP8" : "bf16", t.fp8 ? "FP8" : "bf16"));
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

Status WeightStore::add_expert_tables(const MoeWeights& w) {
  ExpertTables t;
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, "gate", [](const MlpWeights& e) -> const LinearWeight& { return e.gate; },
      t.gate));
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, "up", [](const MlpWeights& e) -> const LinearWeight& { return e.up; },
      t.up));
  DSA_RETURN_IF_ERROR(build_table(
      *this, backend_, w, "down", [](const MlpWeights& e) -> const LinearWeight& { return e.down; },
      t.down));
  expert_tables_[&w] = std::move(t);
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
