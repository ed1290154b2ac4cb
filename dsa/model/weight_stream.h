// The checkpoint load as a stream (issue 16): every tensor goes from its shard's read-only mapping
// to its backend buffer in the WeightStore through a bounded staging area
// (runtime/staged_upload.h: two page-locked chunks on CUDA, straight copies on the CPU), and its
// pages leave the process as soon as they are consumed (SafetensorsFile::drop_pages). The host
// never holds a copy of the checkpoint: only the staging chunks and, for the few tensors the loader
// converts (model_weights.h: stream_model_weights), a temporary of that one tensor. The weight
// structs keep their shapes with every vector empty; the store holds the one copy of the data
// (on the CPU backend, in host memory). A shard truncated or rewritten while it is read is a Status
// naming the shard and tensor, never SIGBUS (SafetensorsFile::check_intact before and after each
// tensor, MappingGuard during its copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa/core/status.h"
#include "dsa/model/checkpoint.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"
#include "dsa/runtime/staged_upload.h"

namespace dsa::model {

// Each of the two staging chunks: large enough that a copy's fixed cost is noise next to its
// transfer (a few microseconds against ~3 ms at 25 GB/s), small enough to be no real host memory.
inline constexpr size_t kDefaultLoadChunkBytes = size_t(64) << 20;
inline constexpr size_t kMinLoadChunkBytes = 4096, kMaxLoadChunkBytes = size_t(1) << 30;
// Threads reading each chunk from the shard's mapping (runtime/staged_upload.h): eight took a
// warm load (the shards in the page cache) from 2.81 to 3.57 GB/s on the lent H100 machine
// (bench/RESULTS.md); the disk itself is kept busy by the shard read-ahead (shard_read_ahead.h).
inline constexpr int kDefaultLoadThreads = 8;

struct StreamOptions {
  size_t chunk_bytes = kDefaultLoadChunkBytes;
  int threads = kDefaultLoadThreads;  // in [1, runtime::kMaxReaders]
  bool read_ahead = true;             // shard_read_ahead.h
  // Stage through the slots on the CPU backend too (tests: the CUDA path's chunking on the host).
  bool stage_on_host = false;
  LoadProgressFn progress;
};

// What the load did, counted as it ran.
struct StreamStats {
  size_t tensors = 0;
  uint64_t bytes = 0;  // checkpoint data read
  double seconds = 0;  // from the first read until the last copy landed
  int readers = 1;     // threads that read each chunk
  bool read_ahead = false;
  runtime::StagingStats staging;
  double gb_per_s() const { return seconds > 0 ? double(bytes) / 1e9 / seconds : 0; }
};

// Streams `checkpoint` into `store` and fills `out` (default-constructed, at the address the model
// keeps it at, since the store is keyed by its vectors) with the shapes; then the store's expert
// tables. Every error of load_model_weights, with the same file and tensor names.
StatusOr<StreamStats> stream_checkpoint(const Checkpoint& checkpoint, const ModelConfig& config,
                                        const StreamOptions& options, ModelWeights& out,
                                        WeightStore& store);

// "loaded checkpoint: 1184 tensors, 5.03 GB in 2.31 s, 2.18 GB/s (staging 2 x 64 MiB, 8 readers)".
std::string describe_load(const StreamStats& stats);

}  // namespace dsa::model
