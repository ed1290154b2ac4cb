#include "dsa/model/weight_stream.h"

#include <fmt/format.h>

#include <chrono>

namespace dsa::model {

StatusOr<StreamStats> stream_checkpoint(const Checkpoint& checkpoint, const ModelConfig& config,
                                        const StreamOptions& options, ModelWeights& out,
                                        WeightStore& store) {
  DSA_ASSIGN_OR_RETURN(
      runtime::StagedUpload up,
      runtime::StagedUpload::create(store.backend(), options.chunk_bytes, options.stage_on_host,
                                    runtime::ReadOptions{.readers = options.threads}));
  StreamStats stats;
  const auto start = std::chrono::steady_clock::now();
  WeightSink sink = [&](const void* key, const void* src, size_t bytes) {
    return store.stream(key, src, bytes, up);
  };
  DSA_RETURN_IF_ERROR(
      stream_model_weights(checkpoint, config, out, sink, options.progress, options.read_ahead));
  DSA_RETURN_IF_ERROR(up.finish());
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.bytes = checkpoint.total_bytes();
  stats.tensors = checkpoint.names().size();
  stats.staging = up.stats();
  stats.readers = options.threads;
  stats.read_ahead = options.read_ahead;
  DSA_RETURN_IF_ERROR(store.add_model(out));
  return stats;
}

std::string describe_load(const StreamStats& s) {
  const size_t slot = s.staging.slot_bytes;
  const std::string staging = slot == 0            ? std::string("copied straight from the mapping")
                              : slot >= (1u << 20) ? fmt::format("staging 2 x {} MiB", slot >> 20)
                                                   : fmt::format("staging 2 x {} B", slot);
  return fmt::format(
      "loaded checkpoint: {} tensors, {:.2f} GB in {:.2f} s, {:.2f} GB/s ({}, {} reader{}{})",
      s.tensors, double(s.bytes) / 1e9, s.seconds, s.gb_per_s(), staging, s.readers,
      s.readers == 1 ? "" : "s", s.read_ahead ? ", shards read ahead" : "");
}

}  // namespace dsa::model
