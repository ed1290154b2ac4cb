// The host plan of the FP8 grouped linear's prefill form (grouped_linear_fp8_lt.cu): the groups'
// pairs gathered and quantised into chunks of scratch rows, then one grouped GEMM launch per chunk
// (the wgmma GEMM's row tiles) or one cuBLASLt block-scaled GEMM per group's run. From the offsets
// read back to the host it says which pairs land in which chunk rows and tiles. Pure host code, so
// the CPU tests cover it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dsa::kernels::grouped_fp8 {

// Rows per GEMM are padded to this: cuBLASLt's block-scaled FP8 GEMM takes a token count that is
// a multiple of 4 only, and a coarser step keeps the number of distinct shapes (each a cached plan
// with its own heuristic query) small. A padded row is zero and its output is never stored.
inline constexpr int32_t kPrefillPad = 16;

// A run of one group's pairs [pair0, pair0 + count) at chunk rows [row0, row0 + rows), rows =
// count rounded up to kPrefillPad: one GEMM of `rows` tokens.
struct PrefillPiece {
  int32_t group = 0;
  int32_t pair0 = 0, count = 0;
  int32_t row0 = 0, rows = 0;
};

// The pieces of one pass over the scratch: rows = their padded rows in all (<= the chunk's).
struct PrefillChunk {
  std::vector<PrefillPiece> pieces;
  int32_t rows = 0;
};

// The offsets the CUDA kernels use: eff[g] = min(capacity, max(0, offsets[0..g])), so bad
// offsets (unchecked mode) are clamped and made non-decreasing. offsets: G + 1 entries.
std::vector<int32_t> effective_offsets(std::span<const int32_t> offsets, int32_t capacity);

// Every group with pairs under eff (G + 1 entries), in group order, split into pieces of at most
// chunk_rows pairs and packed into chunks of at most chunk_rows rows. chunk_rows: a positive
// multiple of kPrefillPad.
std::vector<PrefillChunk> plan_prefill(std::span<const int32_t> eff, int32_t chunk_rows);

// Per row of a chunk, four int32: the pair (-1 for a padding row), the piece's row0 and rows (the
// scale layout of its GEMM: [K blocks][rows] from row0), and `mask` for the piece's group.
// Rows [0, c.rows).
inline constexpr int32_t kRowInfoWords = 4;
void chunk_row_info(const PrefillChunk& c, std::span<const uint8_t> group_mask,
                    std::vector<int32_t>* info);

// One row tile of the prefill GEMM (grouped_prefill_gemm.h): chunk rows [row0, row0 + rows) of a
// piece whose scales sit at [K blocks][run_rows] from run0 (chunk_row_info's row0 and rows), times
// weight `weight`: g for group g's first projection, G + g for its second (then second = 1).
struct PrefillTile {
  int32_t row0 = 0, rows = 0;
  int32_t run0 = 0, run_rows = 0;
  int32_t weight = 0;
  int32_t second = 0;
};

// The tiles of chunk c: per piece and projection whose bit is set in its group's mask (bit 0 the
// first, bit 1 the second), its real pairs (count, not the padded rows) in tiles of at most
// tile_rows rows; pieces in chunk order, each piece's first projection's tiles before its second's
// (neighbours in the grid, so the piece's rows are read from L2 the second time).
std::vector<PrefillTile> prefill_tiles(const PrefillChunk& c, std::span<const uint8_t> group_mask,
                                       int32_t num_groups, int32_t tile_rows);

}  // namespace dsa::kernels::grouped_fp8
