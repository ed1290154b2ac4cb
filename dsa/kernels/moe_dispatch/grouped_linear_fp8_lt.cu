// The FP8 grouped linear's prefill form (SPEC.md §8.6, §8.8): where every group has many pairs
// (a prefill chunk: V3.2's 4096 rows x top-8 over 256 experts is 128 pairs a group), the tile
// kernel (grouped_linear_fp8_kernel.cuh, built for decode) runs at under 10% of the fp8 peak. Here
// the pairs are gathered into scratch rows and multiplied there:
//   1. the offsets and the weight pointer tables are read back (one stream synchronisation: this
//      form is never taken inside a graph capture, and a prefill's forward is long);
//   2. the host plan (grouped_prefill_plan.h) packs the groups' pairs into chunks of scratch rows,
//      each group's run padded to kPrefillPad rows;
//   3. per chunk: gather_quantize_kernel writes the pairs' x rows quantised (the tile path's
//      codes and scales, bit for bit) with each run's scales in [K blocks][rows] order; the GEMM
//      writes chunk rows of bf16; scatter_rows_kernel stores each pair's output row through y_row.
// The GEMM (DSA_GROUPED_FP8_PREFILL_GEMM): "wgmma" (default), the grouped kernel of
// grouped_prefill_gemm.cu, one launch per chunk for every group, on the caller's stream; or "lt",
// one cuBLASLt block-scaled GEMM per group and projection, spread over kSideStreams streams forked
// from the caller's and joined again (a group's GEMM of ~128 tokens fills a few dozen CTAs; even
// so, 256 launches a projection held it to 14-21% of the fp8 peak on the H100).
// A group whose weights or scales are null or misaligned is skipped (no GEMM, no store), and so
// is a pair with an out-of-range row index, as on the tile path. Class T (§8.8), as the dense
// linear's cuBLASLt path.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dsa/core/env_switch.h"
#include "dsa/cuda/cuda_check.h"
#include "dsa/cuda/graph.h"
#include "dsa/cuda/launch.h"
#include "dsa/cuda/launch_checks.h"
#include "dsa/cuda/pdl.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/linear/linear.h"
#include "dsa/kernels/moe_dispatch/grouped_fp8_quantize.cuh"
#include "dsa/kernels/moe_dispatch/grouped_linear_device.cuh"
#include "dsa/kernels/moe_dispatch/grouped_linear_fp8_cuda.h"
#include "dsa/kernels/moe_dispatch/grouped_prefill_gemm.h"
#include "dsa/kernels/moe_dispatch/grouped_prefill_plan.h"

namespace dsa::kernels::grouped_fp8 {

namespace {

namespace gl = grouped_linear_detail;

// Scratch rows per chunk: bounds the form's scratch (V3.2's down projection: 4096 x 2048 codes +
// 4096 x 7168 bf16 outputs, 67 MB) while each GEMM still has a whole group's pairs.
constexpr int32_t kChunkRows = 4096;
// The auto rule's threshold: the mean pairs a group at or above which the prefill form runs.
constexpr int64_t kPrefillMinMeanPairs = 32;
constexpr int kScatterThreads = 256;
constexpr int kSideStreams = 8;

// Group masks: bit 0 the first projection's weights usable, bit 1 the second's.
constexpr uint8_t kFirst = 1, kSecond = 2;

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// Block k of chunk row t, quantised; its scale at [K blocks][rows] of its run (info: the plan's
// row words, grouped_prefill_plan.h). A padding row or a pair with an out-of-range x row is zeros.
__global__ void __launch_bounds__(kQuantWarps * 32)
    gather_quantize_kernel(GroupedLinearParams p, const int32_t* info, int32_t rows, int32_t nkb,
                           uint8_t* x8, float* sx) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  int32_t t = 0, k = 0;
  if (!quant_item(rows, nkb, &t, &k)) return;  // warp-uniform
  const int lane = threadIdx.x % 32;
  const int32_t* r = info + int64_t{t} * kRowInfoWords;
  const int32_t pair = r[0], row0 = r[1], run = r[2];
  const int32_t xr = pair >= 0 ? gl::pair_row(p.x_row, pair, p.x_rows) : -1;
  const int32_t in = p.in_features, j0 = k * kLinearBlock, m = min(kLinearBlock, in - j0);
  const bf16* src = xr >= 0 ? p.x + int64_t{xr} * in + j0 : nullptr;
  const float scale = quantize_block_warp(src, m, x8 + int64_t{t} * in + j0, lane);
  if (lane == 0) sx[int64_t{row0} * nkb + int64_t{k} * run + (t - row0)] = scale;
}

// Each real pair's output row from the chunk's GEMM outputs (c, and c_b for the paired form) to
// y / y_b through y_row, 16 bytes at a time (out % 8 == 0).
__global__ void __launch_bounds__(kScatterThreads)
    scatter_rows_kernel(GroupedLinearParams p, const int32_t* info, int32_t rows, const bf16* c,
                        const bf16* c_b) {
  cuda::pdl_wait();  // first: the PDL contract (cuda/pdl.h)
  cuda::pdl_trigger();
  const int32_t out = p.out_features, vecs = out / 8;
  const int64_t n = int64_t{rows} * vecs;
  for (int64_t e = int64_t{blockIdx.x} * kScatterThreads + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * kScatterThreads) {
    const int32_t t = static_cast<int32_t>(e / vecs), v = static_cast<int32_t>(e % vecs);
    const int32_t* r = info + int64_t{t} * kRowInfoWords;
    const int32_t pair = r[0];
    if (pair < 0) continue;
    const int32_t xr = gl::pair_row(p.x_row, pair, p.x_rows);
    const int32_t yr = gl::pair_row(p.y_row, pair, p.y_rows);
    if (xr < 0 || yr < 0) continue;  // an out-of-range index skips the whole pair
    const int64_t from = int64_t{t} * vecs + v, to = int64_t{yr} * vecs + v;
    if ((r[3] & kFirst) != 0) {
      reinterpret_cast<uint4*>(p.y)[to] = reinterpret_cast<const uint4*>(c)[from];
    }
    if ((r[3] & kSecond) != 0 && c_b != nullptr) {
      reinterpret_cast<uint4*>(p.y_b)[to] = reinterpret_cast<const uint4*>(c_b)[from];
    }
  }
}

// Launches scatter_rows_kernel for a chunk of `rows` rows (its row words at `words`) on `stream`.
Status launch_scatter(const GroupedLinearParams& p, const int32_t* words, int32_t rows,
                      const bf16* c, const bf16* c_b, cudaStream_t stream) {
  const int64_t vecs = int64_t{rows} * (p.out_features / 8);
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>((vecs + kScatterThreads - 1) / kScatterThreads, int64_t{4096}));
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(blocks), dim3(kScatterThreads), size_t(0), stream},
                   scatter_rows_kernel, p, words, rows, c, c_b));
  return cuda::launch_error("grouped_linear_fp8_scatter");
}

// Launches gather_quantize_kernel for a chunk of `rows` rows into buf's x8 / sx on `stream`.
Status launch_gather(const GroupedLinearParams& p, const int32_t* words, int32_t rows, int32_t nkb,
                     uint8_t* x8, float* sx, cudaStream_t stream) {
  const int64_t qblocks = (int64_t{rows} * nkb + kQuantWarps - 1) / kQuantWarps;
  DSA_CUDA_RETURN_IF_ERROR(
      cuda::launch(cuda::LaunchShape{dim3(static_cast<unsigned>(qblocks)), dim3(kQuantWarps * 32),
                                     size_t(0), stream},
                   gather_quantize_kernel, p, words, rows, nkb, x8, sx));
  return cuda::launch_error("grouped_linear_fp8_gather_quantize");
}

// The form's scratch of one stream, in two allocations grown independently: the row words (sized
// by the call's rows, so a longer prompt regrows only them) and the two chunk buffers (sized by the
// shape alone). Allocated outside any capture (the form is never taken in one), kept for the
// process. The one host thread that runs a stream's forwards uses its scratch (the model's rule).
struct Region {
  void* base = nullptr;
  size_t bytes = 0;
};
struct StreamScratch {
  Region words, chunks;
  Region tables;  // the wgmma GEMM's weight maps, scale pointers and tiles
};
std::mutex g_scratch_mutex;
std::map<cudaStream_t, StreamScratch>* g_scratch = nullptr;  // never destroyed (driver at exit)

// At least `bytes` of `r`; null when the device has no memory for it (the caller then takes the
// tile path, which needs none). The old block may still be read by this stream or its side
// streams: the device is synchronised before it is freed (rare: growth only).
StatusOr<void*> grow(Region& r, size_t bytes) {
  if (r.bytes >= bytes) return r.base;
  if (r.base != nullptr) {
    DSA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    DSA_CUDA_RETURN_IF_ERROR(cudaFree(r.base));
    r = Region{};
  }
  const cudaError_t e = cudaMalloc(&r.base, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it, and let the tile path run
    r = Region{};
    return static_cast<void*>(nullptr);
  }
  DSA_CUDA_RETURN_IF_ERROR(e);
  r.bytes = bytes;
  return r.base;
}

// The side streams of one caller stream, with the events that fork them from it and join them
// back: created on first use (never inside a capture: the form is not taken there), kept for the
// process. Each side stream has its own cuBLASLt workspace (cuda/cublaslt.h).
struct SideStreams {
  cudaStream_t stream[kSideStreams] = {};
  // Per chunk buffer (the chunks alternate between two): the fork after its gather, and each
  // side stream's end of its GEMMs.
  cudaEvent_t fork[2] = {};
  cudaEvent_t done[2][kSideStreams] = {};
};
std::map<cudaStream_t, SideStreams>* g_sides = nullptr;  // guarded by g_scratch_mutex

StatusOr<SideStreams> sides_for(cudaStream_t caller) {
  std::lock_guard<std::mutex> lock(g_scratch_mutex);
  if (g_sides == nullptr) g_sides = new std::map<cudaStream_t, SideStreams>();
  auto it = g_sides->find(caller);
  if (it != g_sides->end()) return it->second;
  SideStreams s;
  for (int b = 0; b < 2; ++b) {
    DSA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.fork[b], cudaEventDisableTiming));
    for (cudaEvent_t& e : s.done[b]) {
      DSA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }
  for (cudaStream_t& stream : s.stream) {
    DSA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  g_sides->emplace(caller, s);
  return s;
}

// Makes `stream` the current one until destroyed (the cuBLASLt call reads the current stream).
struct CurrentStream {
  cudaStream_t saved;
  explicit CurrentStream(cudaStream_t stream) : saved(cuda::current_stream()) {
    cuda::set_current_stream(stream);
  }
  ~CurrentStream() { cuda::set_current_stream(saved); }
  CurrentStream(const CurrentStream&) = delete;
  CurrentStream& operator=(const CurrentStream&) = delete;
};

// A call's scratch: every chunk's row words (uploaded at once, so no copy waits between chunks),
// and two chunk buffers of quantised rows, scales and GEMM outputs: chunk c uses buffer c % 2, so
// its gather and GEMMs are queued while chunk c - 1's GEMMs still run.
struct ChunkBuffer {
  uint8_t* x8;
  float* sx;
  bf16* c;
  bf16* c_b;  // null unless paired
};
struct ChunkScratch {
  int32_t* info;  // [total rows][kRowInfoWords]
  ChunkBuffer buf[2];
};
// Bytes of one chunk buffer's regions, each 256-byte aligned.
struct BufferBytes {
  size_t x8, sx, c;
  size_t total(bool paired) const { return x8 + sx + (paired ? 2 : 1) * c; }
};
BufferBytes buffer_bytes(const GroupedLinearParams& p, int32_t nkb) {
  const size_t rows = kChunkRows;
  return {align256(rows * size_t(p.in_features)), align256(rows * size_t(nkb) * sizeof(float)),
          align256(rows * size_t(p.out_features) * sizeof(bf16))};
}
// The two chunk buffers in one block of 2 * buffer_bytes(p, nkb).total(paired).
ChunkScratch carve(int32_t* info, void* chunks, const GroupedLinearParams& p, int32_t nkb,
                   bool paired) {
  const BufferBytes bb = buffer_bytes(p, nkb);
  uint8_t* at = static_cast<uint8_t*>(chunks);
  ChunkScratch s{};
  s.info = info;
  for (ChunkBuffer& b : s.buf) {
    b.x8 = at;
    b.sx = reinterpret_cast<float*>(at + bb.x8);
    b.c = reinterpret_cast<bf16*>(at + bb.x8 + bb.sx);
    b.c_b = paired ? reinterpret_cast<bf16*>(at + bb.x8 + bb.sx + bb.c) : nullptr;
    at += bb.total(paired);
  }
  return s;
}

// The scratch of this call on `stream`: null info when the device had no memory for it.
StatusOr<ChunkScratch> scratch_for(cudaStream_t stream, const GroupedLinearParams& p, int32_t nkb,
                                   bool paired, size_t total_rows) {
  std::lock_guard<std::mutex> lock(g_scratch_mutex);
  if (g_scratch == nullptr) g_scratch = new std::map<cudaStream_t, StreamScratch>();
  StreamScratch& s = (*g_scratch)[stream];
  DSA_ASSIGN_OR_RETURN(void* words, grow(s.words, total_rows * kRowInfoWords * sizeof(int32_t)));
  DSA_ASSIGN_OR_RETURN(void* chunks, grow(s.chunks, 2 * buffer_bytes(p, nkb).total(paired)));
  if (words == nullptr || chunks == nullptr) return ChunkScratch{};
  return carve(static_cast<int32_t*>(words), chunks, p, nkb, paired);
}

template <typename T>
Status read_back(std::vector<T>* to, const T* from, size_t n, cudaStream_t stream) {
  to->resize(n);
  if (n == 0) return ok_status();
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(to->data(), from, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  return ok_status();
}

// Whether group g's weights of one projection can be read (the tile path's rule).
bool usable(const uint8_t* w, const float* s) {
  return w != nullptr && s != nullptr && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}
// cuBLASLt's block-scale pointers are taken 16-byte aligned; the tile path reads them by the
// float, so a usable group with other scales sends the whole call there.
bool lt_scales_aligned(const float* s) { return reinterpret_cast<uintptr_t>(s) % 16 == 0; }

// Shapes (in, out, paired) for which cuBLASLt offered no algorithm once: the form is not tried
// for them again (each try costs a read-back and part of the work before the tile path reruns it).
std::mutex g_refused_mutex;
std::set<std::tuple<int32_t, int32_t, bool>>* g_refused = nullptr;
bool refused(const GroupedLinearParams& p) {
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  return g_refused != nullptr &&
         g_refused->count({p.in_features, p.out_features, p.y_b != nullptr}) > 0;
}
void remember_refused(const GroupedLinearParams& p) {
  std::lock_guard<std::mutex> lock(g_refused_mutex);
  if (g_refused == nullptr) g_refused = new std::set<std::tuple<int32_t, int32_t, bool>>();
  g_refused->insert({p.in_features, p.out_features, p.y_b != nullptr});
}

// Each side stream marks the end of its GEMMs so far with done[b] (a chunk's, for buffer b).
Status mark_done(const SideStreams& sides, int b) {
  for (int i = 0; i < kSideStreams; ++i) {
    DSA_CUDA_RETURN_IF_ERROR(cudaEventRecord(sides.done[b][i], sides.stream[i]));
  }
  return ok_status();
}
// The caller's stream waits for the marks done[b].
Status join(const SideStreams& sides, int b, cudaStream_t stream) {
  for (cudaEvent_t e : sides.done[b]) DSA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, e, 0));
  return ok_status();
}

// On an error return after the first fork, the caller's stream still waits for every side
// stream's work, so nothing the side streams run outlives the call unordered (best effort: the
// call's error is what is returned).
struct JoinOnError {
  const SideStreams& sides;
  cudaStream_t stream;
  bool armed = true;
  ~JoinOnError() {
    if (!armed) return;
    for (int b = 0; b < 2; ++b) {
      (void)mark_done(sides, b);
      (void)join(sides, b, stream);
    }
  }
};

// The groups' weights and scales as read back (w_b, s_b empty unless paired).
struct WeightTables {
  const std::vector<const uint8_t*>& w;
  const std::vector<const float*>& s;
  const std::vector<const uint8_t*>& w_b;
  const std::vector<const float*>& s_b;
};

// At least `bytes` of the stream's table region (null when the device has no memory for it).
StatusOr<void*> tables_for(cudaStream_t stream, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_scratch_mutex);
  if (g_scratch == nullptr) g_scratch = new std::map<cudaStream_t, StreamScratch>();
  return grow((*g_scratch)[stream].tables, bytes);
}

// The chunks' GEMMs by the grouped wgmma kernel (grouped_prefill_gemm.h), all on the caller's
// stream: per chunk the gather, one GEMM launch over every group's tiles, the scatter. The weight
// maps, scale pointers and every chunk's tiles are uploaded at once beforehand. false: no device
// memory for the tables (the tile path then runs).
StatusOr<bool> run_wgmma(const GroupedLinearParams& p, const std::vector<PrefillChunk>& chunks,
                         const std::vector<uint8_t>& mask, const WeightTables& wt,
                         const ChunkScratch& cs, int32_t nkb, cudaStream_t stream) {
  namespace pg = prefill_gemm;
  const size_t G = size_t(p.num_groups);
  const int32_t in = p.in_features, out = p.out_features;
  // Host tables: [2G maps | 2G scale pointers | tiles of every chunk], each part 256-aligned.
  std::vector<CUtensorMap> maps(2 * G);
  std::vector<const float*> scales(2 * G, nullptr);
  std::memset(static_cast<void*>(maps.data()), 0, maps.size() * sizeof(CUtensorMap));
  for (size_t g = 0; g < G; ++g) {
    if ((mask[g] & kFirst) != 0) {
      DSA_RETURN_IF_ERROR(pg::weight_map(wt.w[g], in, out, &maps[g]));
      scales[g] = wt.s[g];
    }
    if ((mask[g] & kSecond) != 0) {
      DSA_RETURN_IF_ERROR(pg::weight_map(wt.w_b[g], in, out, &maps[G + g]));
      scales[G + g] = wt.s_b[g];
    }
  }
  std::vector<PrefillTile> tiles;
  std::vector<size_t> first_tile(chunks.size() + 1, 0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const std::vector<PrefillTile> t = prefill_tiles(chunks[c], mask, p.num_groups, pg::kTileRows);
    tiles.insert(tiles.end(), t.begin(), t.end());
    first_tile[c + 1] = tiles.size();
  }
  const size_t maps_bytes = align256(maps.size() * sizeof(CUtensorMap));
  const size_t scales_bytes = align256(scales.size() * sizeof(const float*));
  const size_t tiles_bytes = tiles.size() * sizeof(PrefillTile);
  std::vector<uint8_t> host(maps_bytes + scales_bytes + tiles_bytes, 0);
  std::memcpy(host.data(), maps.data(), maps.size() * sizeof(CUtensorMap));
  std::memcpy(host.data() + maps_bytes, scales.data(), scales.size() * sizeof(const float*));
  if (!tiles.empty()) {
    std::memcpy(host.data() + maps_bytes + scales_bytes, tiles.data(), tiles_bytes);
  }
  DSA_ASSIGN_OR_RETURN(void* tables, tables_for(stream, host.size()));
  if (tables == nullptr) return false;
  // Pageable memory: staged by the call itself, so `host` may go when this returns.
  DSA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(tables, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  uint8_t* const base = static_cast<uint8_t*>(tables);
  pg::Args a;
  a.weight_maps = reinterpret_cast<const CUtensorMap*>(base);
  a.weight_scales = reinterpret_cast<const float* const*>(base + maps_bytes);
  a.nkb = nkb;
  a.out = out;
  const PrefillTile* const device_tiles =
      reinterpret_cast<const PrefillTile*>(base + maps_bytes + scales_bytes);
  const int32_t* words = cs.info;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkBuffer& buf = cs.buf[c % 2];
    DSA_RETURN_IF_ERROR(launch_gather(p, words, chunks[c].rows, nkb, buf.x8, buf.sx, stream));
    CUtensorMap tokens;
    DSA_RETURN_IF_ERROR(pg::token_map(buf.x8, kChunkRows, in, &tokens));
    a.tiles = device_tiles + first_tile[c];
    a.num_tiles = static_cast<int32_t>(first_tile[c + 1] - first_tile[c]);
    a.sx = buf.sx;
    a.c = buf.c;
    a.c_b = buf.c_b;
    DSA_RETURN_IF_ERROR(pg::launch(tokens, a, stream));
    DSA_RETURN_IF_ERROR(launch_scatter(p, words, chunks[c].rows, buf.c, buf.c_b, stream));
    words += int64_t{chunks[c].rows} * kRowInfoWords;
  }
  return true;
}

}  // namespace

StatusOr<bool> takes_prefill_form(const GroupedLinearParams& p) {
  DSA_ASSIGN_OR_RETURN(const std::string_view form,
                       env_choice("DSA_GROUPED_FP8_PREFILL", {"auto", "lt", "kernel"}, "auto"));
  if (form == "kernel" || cuda::stream_capturing()) return false;
  if (p.capacity == 0 || p.x_rows == 0) return false;
  if (!linear_lt_shape_supported(p.in_features) || p.out_features % 8 != 0) return false;
  if (!cuda::is_aligned(p.y, 16) || (p.y_b != nullptr && !cuda::is_aligned(p.y_b, 16))) {
    return false;
  }
  if (refused(p)) return false;
  if (form == "lt") return true;
  return int64_t{p.capacity} >= kPrefillMinMeanPairs * p.num_groups;
}

StatusOr<bool> launch_prefill(const GroupedLinearParams& p) {
  const cudaStream_t stream = cuda::current_stream();
  const size_t G = size_t(p.num_groups);
  const bool paired = p.y_b != nullptr;
  std::vector<int32_t> offsets;
  std::vector<const uint8_t*> w, w_b;
  std::vector<const float*> s, s_b;
  DSA_RETURN_IF_ERROR(read_back(&offsets, p.offsets, G + 1, stream));
  DSA_RETURN_IF_ERROR(read_back(&w, p.weights_fp8, G, stream));
  DSA_RETURN_IF_ERROR(read_back(&s, p.weight_scales, G, stream));
  if (paired) {
    DSA_RETURN_IF_ERROR(read_back(&w_b, p.weights_fp8_b, G, stream));
    DSA_RETURN_IF_ERROR(read_back(&s_b, p.weight_scales_b, G, stream));
  }
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  DSA_ASSIGN_OR_RETURN(const std::string_view gemm,
                       env_choice("DSA_GROUPED_FP8_PREFILL_GEMM", {"wgmma", "lt"}, "wgmma"));
  std::vector<uint8_t> mask(G, 0);
  for (size_t g = 0; g < G; ++g) {
    if (usable(w[g], s[g])) mask[g] |= kFirst;
    if (paired && usable(w_b[g], s_b[g])) mask[g] |= kSecond;
    // cuBLASLt's scale pointers must be 16-byte aligned; the wgmma GEMM reads them by the float.
    const bool misaligned = ((mask[g] & kFirst) != 0 && !lt_scales_aligned(s[g])) ||
                            ((mask[g] & kSecond) != 0 && !lt_scales_aligned(s_b[g]));
    if (gemm == "lt" && misaligned) return false;
  }
  const std::vector<PrefillChunk> chunks =
      plan_prefill(effective_offsets(offsets, p.capacity), kChunkRows);
  if (chunks.empty()) return true;  // no pair: nothing is written, as on the tile path
  const int32_t in = p.in_features, out = p.out_features;
  const int32_t nkb = (in + kLinearBlock - 1) / kLinearBlock;
  std::vector<int32_t> info, chunk_info;
  for (const PrefillChunk& chunk : chunks) {
    chunk_row_info(chunk, mask, &chunk_info);
    info.insert(info.end(), chunk_info.begin(), chunk_info.end());
  }
  const size_t total_rows = info.size() / kRowInfoWords;
  DSA_ASSIGN_OR_RETURN(const ChunkScratch cs, scratch_for(stream, p, nkb, paired, total_rows));
  if (cs.info == nullptr) return false;  // no device memory for the scratch: the tile path
  // Pageable memory: staged by the call itself, so `info` may go when this returns.
  DSA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(cs.info, info.data(), info.size() * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, stream));
  if (gemm == "wgmma") {
    const WeightTables weights{w, s, w_b, s_b};
    return run_wgmma(p, chunks, mask, weights, cs, nkb, stream);
  }
  DSA_ASSIGN_OR_RETURN(const SideStreams sides, sides_for(stream));
  JoinOnError guard{sides, stream};
  // Chunk c's scatter, on the caller's stream once the side streams finished its GEMMs.
  std::vector<const int32_t*> words_of(chunks.size());
  const auto scatter = [&](size_t c) -> Status {
    const int b = int(c % 2);
    DSA_RETURN_IF_ERROR(join(sides, b, stream));
    return launch_scatter(p, words_of[c], chunks[c].rows, cs.buf[b].c, cs.buf[b].c_b, stream);
  };
  const int32_t* chunk_words = cs.info;
  int next_side = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const PrefillChunk& chunk = chunks[ci];
    const int b = int(ci % 2);
    const ChunkBuffer& buf = cs.buf[b];
    words_of[ci] = chunk_words;
    chunk_words += int64_t{chunk.rows} * kRowInfoWords;
    // Buffer b was last used by chunk ci - 2, whose scatter is already queued on this stream (the
    // previous iteration), so this gather follows its GEMMs and its scatter.
    DSA_RETURN_IF_ERROR(launch_gather(p, words_of[ci], chunk.rows, nkb, buf.x8, buf.sx, stream));
    // Fork: every side stream waits for the gather; the GEMMs go round the side streams.
    DSA_CUDA_RETURN_IF_ERROR(cudaEventRecord(sides.fork[b], stream));
    for (cudaStream_t side : sides.stream) {
      DSA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(side, sides.fork[b], 0));
    }
    for (const PrefillPiece& piece : chunk.pieces) {
      for (const bool second : {false, true}) {
        if ((mask[size_t(piece.group)] & (second ? kSecond : kFirst)) == 0) continue;
        LinearParams q;
        q.weight_fp8 = (second ? w_b : w)[size_t(piece.group)];
        q.weight_scale_inv = (second ? s_b : s)[size_t(piece.group)];
        q.y = (second ? buf.c_b : buf.c) + int64_t{piece.row0} * out;
        q.num_tokens = piece.rows;
        q.in_features = in;
        q.out_features = out;
        bool ran = false;
        {
          const CurrentStream on(sides.stream[next_side]);
          next_side = (next_side + 1) % kSideStreams;
          DSA_RETURN_IF_ERROR(linear_fp8_prequantized_cuda(
              q, buf.x8 + int64_t{piece.row0} * in, buf.sx + int64_t{piece.row0} * nkb, &ran));
        }
        if (!ran) {  // no algorithm: the tile path rewrites every output, after the side streams
          remember_refused(p);
          return false;  // the guard joins them
        }
      }
    }
    DSA_RETURN_IF_ERROR(mark_done(sides, b));
    // Join: the previous chunk's scatter waits for its GEMMs, while this chunk's run.
    if (ci > 0) DSA_RETURN_IF_ERROR(scatter(ci - 1));
  }
  DSA_RETURN_IF_ERROR(scatter(chunks.size() - 1));  // and the caller's stream joins every side
  guard.armed = false;
  return true;
}

}  // namespace dsa::kernels::grouped_fp8
