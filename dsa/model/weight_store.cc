#include "dsa/model/weight_store.h"

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

Status WeightStore::add_expert_tables(const MoeWeights& w) {
  std::vector<const bf16*> gate, up, down;
  for (const MlpWeights& e : w.experts) {
    if (e.gate.is_fp8() || e.up.is_fp8() || e.down.is_fp8()) return ok_status();
    gate.push_back(get(e.gate.bf16_w));
    up.push_back(get(e.up.bf16_w));
    down.push_back(get(e.down.bf16_w));
  }
  ExpertTables t;
  using Table = runtime::Buffer<const bf16*>;
  DSA_ASSIGN_OR_RETURN(t.gate, Table::from_host(backend_, std::span<const bf16* const>(gate)));
  DSA_ASSIGN_OR_RETURN(t.up, Table::from_host(backend_, std::span<const bf16* const>(up)));
  DSA_ASSIGN_OR_RETURN(t.down, Table::from_host(backend_, std::span<const bf16* const>(down)));
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
