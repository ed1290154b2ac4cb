#include "dsa/runtime/workspace.h"

#include <algorithm>

namespace dsa::runtime {

namespace {
constexpr size_t kAlign = 256;
constexpr size_t kChunkBytes = size_t{64} << 20;
}  // namespace

StatusOr<void*> Workspace::take_bytes(size_t bytes, Fill fill) {
  const size_t rounded = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  while (chunk_ < chunks_.size() && offset_ + rounded > chunks_[chunk_].size()) {
    ++chunk_;
    offset_ = 0;
  }
  if (chunk_ == chunks_.size()) {
    DSA_ASSIGN_OR_RETURN(Buffer<uint8_t> b,
                         Buffer<uint8_t>::alloc(mem_->backend, std::max(kChunkBytes, rounded)));
    chunks_.push_back(std::move(b));
    offset_ = 0;
  }
  void* p = chunks_[chunk_].data() + offset_;
  offset_ += rounded;
  if (fill == Fill::kZero) {
    ++counts_.zeroed;
    DSA_RETURN_IF_ERROR(mem_->zero(p, bytes));
  } else {
    ++counts_.uninit;
    if (poison_) DSA_RETURN_IF_ERROR(mem_->fill(p, kWorkspacePoisonByte, bytes));
  }
  return p;
}

}  // namespace dsa::runtime
