// The weights (and RoPE tables) where the op table reads them: for the CPU backend the host
// vectors themselves, for CUDA one device copy of each vector, uploaded once at load. Lookups go by
// the host vector object (its address, not its data: a weight generated in backend memory —
// --random-weights, backend_random_weights.h — has an empty host vector and only a backend copy),
// so the weight structs (model_weights.h) stay host-side and backend-agnostic; they must not move
// once added.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <unordered_set>
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

  // `dst` (host vectors empty; out = the parts' outs summed; their in and weight form): one backend
  // buffer of the parts' rows one part after another, and for FP8 one of their block scales
  // likewise, so one linear reads its input once for every part (fused_projections.h). The parts'
  // backend copies are released: on CUDA they must not be read after (their host vectors, where a
  // CPU test filled them, stay). InvalidArgument naming the part when the parts differ in `in` or
  // form, when an FP8 part other than the last has `out` not a multiple of 128 (its last scale
  // block would cover the next part's rows), or when `dst`'s shape is not theirs.
  Status fuse_rows(const LinearWeight& dst, std::span<const LinearWeight* const> parts);

  // The backend's copy of `v` (DSA_CHECK: it was added or generated, unless the backend is the CPU
  // and `v` holds the data itself; and it is not a part fuse_rows released).
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
    bool shared_in_table = false;  // entry E (after the routed experts) is the shared expert
  };
  // Builds the tables of `w` (replacing any built before); its experts must have been added.
  // `with_shared`: the shared expert is entry E of every table (shared_in_table), so the grouped
  // linears run it as one more expert (fused_projections.h). InvalidArgument when the experts of
  // one projection mix bf16 and FP8 weights (one grouped linear runs one weight form), or when
  // `with_shared` and the shared expert is absent or not of the routed experts' shapes.
  Status add_expert_tables(const MoeWeights& w, bool with_shared = false);
  // nullptr when no tables were built for `w`.
  const ExpertTables* expert_tables(const MoeWeights& w) const;

 private:
  // One vector of a fused weight's part: its key, host data (may be empty) and size in bytes.
  struct Piece {
    const void* key;
    const void* host;
    size_t bytes;
  };
  Status concat(const void* dst_key, std::span<const Piece> pieces);
  Status add_bytes(const void* key, const void* host, size_t bytes);
  Status generate_bytes(const void* key, size_t elem_bytes, size_t count, const FillSpec& spec);
  const void* get_bytes(const void* key, const void* host) const;

  kernels::Backend backend_;
  std::unordered_map<const void*, runtime::Buffer<uint8_t>> copies_;
  std::unordered_set<const void*> released_;  // fused parts (fuse_rows): never read again
  std::unordered_map<const MoeWeights*, ExpertTables> expert_tables_;
};

}  // namespace dsa::model
