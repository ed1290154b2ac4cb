// The flags every rank of a run must share, as one 64-bit hash for the bootstrap's hello
// (dist::BootstrapConfig::flags_hash, docs/multi_gpu.md "Multi-node bootstrap"): rank 0 refuses a
// rank whose hash differs, before any collective could hang on a different bucket, draft count or
// parallel layout. The hash is taken over the resolved setup, so spellings that mean the same
// (aliases, --speculative-num-steps 3 or --speculative-num-draft-tokens 4, flag order) agree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dsa/cli/engine_args.h"

namespace dsa::cli {

// "name=value" lines, one per shared flag, in a fixed order: what the hash covers, and what each
// rank logs so that the flag that differs can be found. Left out because they may differ between
// ranks: --node-rank, --load-chunk-bytes and --load-threads (how a node reads), --dist-init-addr
// (the ranks meet there, so it agrees). `s` must come from resolve_engine_args(a, ...) with the
// same num_requests on every rank (it caps the running requests and so the buckets).
std::string engine_flags_text(const EngineArgs& a, const EngineSetup& s);

// FNV-1a (64-bit) of engine_flags_text: a fixed function of the text, the same in every build
// and process (std::hash promises neither).
uint64_t engine_flags_hash(const EngineArgs& a, const EngineSetup& s);

uint64_t fnv1a_64(std::string_view bytes);

}  // namespace dsa::cli
