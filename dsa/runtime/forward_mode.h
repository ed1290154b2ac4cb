// Forward modes and their properties (SPEC.md §4.1). Every property is an exhaustive switch with
// no default (-Werror=switch-enum), so adding a mode does not compile until each one handles it.
#pragma once

#include <cstdint>
#include <string_view>

namespace dsa::runtime {

enum class ForwardMode { kExtend, kDecode, kTargetVerify, kDraftExtend, kIdle };
enum class ModelKind { kTarget, kMtp };

inline constexpr ForwardMode kAllForwardModes[] = {ForwardMode::kExtend, ForwardMode::kDecode,
                                                   ForwardMode::kTargetVerify,
                                                   ForwardMode::kDraftExtend, ForwardMode::kIdle};

std::string_view mode_name(ForwardMode mode);
std::string_view model_name(ModelKind model);

// Uniform modes have the same number n of query rows for every request (IDLE counts: it runs the
// step's uniform shape on padding only).
bool is_uniform(ForwardMode mode);

// Rows per request in a uniform mode with d draft tokens: 1 in DECODE, d + 1 in verify and
// draft-extend. EXTEND has per-request row counts (returns 0); IDLE takes the step's n.
int32_t uniform_rows_per_request(ForwardMode mode, int32_t num_draft_tokens);

// Whether the mode runs as a CUDA graph replay (SPEC.md §5); EXTEND always runs eagerly.
bool uses_cuda_graph(ForwardMode mode);

// Whether a real request of this mode may take EXTEND's ragged indexer path (gather + ragged
// logits); every other request reads the paged pool directly.
bool may_use_ragged_indexer(ForwardMode mode);

// Whether the mode writes new rows into the caches (IDLE writes nothing).
bool writes_cache(ForwardMode mode);

}  // namespace dsa::runtime
