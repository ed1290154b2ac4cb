// Every rank's bytes to every rank, over the one collective every group has (Collective's
// all_reduce over host int64). It is how a run's ranks hand their output to rank 0 at the end
// (cli/generate_ranks.h): the ranks of a multi-node run share no file system, and NcclGroup's
// all_gather takes device memory. `dsa serve`'s rank processes exchange their small per-iteration
// messages with it too (server/rank_wire.h): two all-reduces for a few KB. General, not fast:
// nothing on a forward's path.
//
// Two phases. The lengths: each rank puts its own at its index of a world-size vector, zeros
// elsewhere; a max all-reduce gives every rank every length. The bytes: the concatenation in rank
// order, packed eight to an int64, each rank writing only its own byte range and zeros elsewhere;
// a sum all-reduce of those disjoint ranges is exact (integer addition of zero and one value).
// The bytes travel in chunks of at most kMaxAllReduceValues values per call (collective.h's bound
// on one all_reduce); every rank makes the same calls in the same order, as the contract asks.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "dsa/core/status.h"
#include "dsa/dist/collective.h"

namespace dsa::dist {

// Most bytes one rank may send (far above a run's output; keeps the world's total in int64 and
// every rank's buffers bounded): InvalidArgument naming the rank and its size beyond it.
inline constexpr size_t kMaxGatherBytesPerRank = size_t{1} << 30;

// Returns [world_size] texts, rank r's at r, on every rank. A broken group's error as it comes;
// a rank over the bound is refused on every rank (the lengths are exchanged first), naming it.
StatusOr<std::vector<std::string>> all_gather_text(Collective& group, std::string_view mine);

}  // namespace dsa::dist
