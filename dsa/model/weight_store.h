// The weights (and RoPE tables) where the op table reads them: for the CPU backend the host
// vectors themselves, for CUDA one device copy of each vector, uploaded once at load. Lookups go by
// the host vector object (its address, not its data: a weight generated in backend memory —
// --random-weights, backend_random_weights.h — has an empty host vector and only a backend copy),
// so the weight structs (model_weights.h) stay host-side and backend-agnostic; they must not move
// once added.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "dsa/core/random_fill.h"
#include "dsa/core/status.h"
#include "dsa/model/model_weights.h"
#include "dsa/runtime/buffer.h"
#include "dsa/runtime/staged_upload.h"

namespace dsa::model {

class WeightStore {
 public:
  explicit WeightStore(kernels::Backend backend) : backend_(backend) {}
  WeightStore(WeightStore&&) = default;
  kernels::Backend backend() const { return backend_; }

  template <typename T>
  Status add(const std::vector<T>& v) {
    return add_bytes(&v, v.data(), v.size() * sizeof(T));
  }
  // A backend buffer for `v` (which stays empty) of `count` elements filled by `spec` where it
  // lives (runtime/random_fill.h), on any backend; sizeof(T) must be the fill's element size.
  template <typename T>
  Status generate(const std::vector<T>& v, size_t count, const FillSpec& spec) {
    return generate_bytes(&v, sizeof(T), count, spec);
  }
  // Every vector of the checkpoint's weights (those already streamed are kept as they are), then
  // the expert tables.
  Status add_model(const ModelWeights& w);
  // The streamed load (weight_stream.h): a backend buffer for `key` (a host vector left empty)
  // holding [src, src + bytes), copied through `up`; on the CPU backend too, where this buffer is
  // then the one host copy. Internal error for a key already present.
  Status stream(const void* key, const void* src, size_t bytes, runtime::StagedUpload& up);

  // The backend's copy of `v` (DSA_CHECK: it was added or generated, unless the backend is the CPU
  // and `v` holds the data itself).
  template <typename T>
  const T* get(const std::vector<T>& v) const {
    return static_cast<const T*>(get_bytes(&v, v.data()));
  }

  // Per MoE layer: arrays (in backend memory) of the backend's expert weight pointers, which the
  // grouped linear reads on the device (SPEC.md §8.6, graph modes). One projection's table holds
  // either the bf16 weights or (FP8 experts, §8.8) the e4m3 codes and their block scales.
  struct ExpertTable {
    bool fp8 = false;
    runtime::Buffer<const bf16*> weights;         // bf16: [E]
    runtime::Buffer<const uint8_t*> weights_fp8;  // FP8: [E] e4m3 codes
    runtime::Buffer<const float*> scales;         // FP8: [E] block scales (scale_inv)
  };
  struct ExpertTables {
    ExpertTable gate, up, down;
  };
  // Builds the tables of `w`; its experts must have been added. InvalidArgument when the experts
  // of one projection mix bf16 and FP8 weights (one grouped linear runs one weight form).
  Status add_expert_tables(const MoeWeights& w);
  // nullptr when no tables were built for `w`.
  const ExpertTables* expert_tables(const MoeWeights& w) const;

 private:
  Status add_bytes(const void* key, const void* host, size_t bytes);
  Status generate_bytes(const void* key, size_t elem_bytes, size_t count, const FillSpec& spec);
  const void* get_bytes(const void* key, const void* host) const;

  kernels::Backend backend_;
  std::unordered_map<const void*, runtime::Buffer<uint8_t>> copies_;
  std::unordered_map<const MoeWeights*, ExpertTables> expert_tables_;
};

}  // namespace dsa::model
