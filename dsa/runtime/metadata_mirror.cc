#include "dsa/runtime/metadata_mirror.h"

#include <span>

namespace dsa::runtime {

namespace {

struct Field {
  std::vector<int32_t> ForwardMetadata::*host;
  const int32_t* MetadataArrays::*view;
};
constexpr Field kFields[] = {
    {&ForwardMetadata::row_len, &MetadataArrays::row_len},
    {&ForwardMetadata::row_topk_len, &MetadataArrays::row_topk_len},
    {&ForwardMetadata::row_req, &MetadataArrays::row_req},
    {&ForwardMetadata::row_page, &MetadataArrays::row_page},
    {&ForwardMetadata::positions, &MetadataArrays::positions},
    {&ForwardMetadata::write_slot, &MetadataArrays::write_slot},
    {&ForwardMetadata::ks, &MetadataArrays::ks},
    {&ForwardMetadata::ke, &MetadataArrays::ke},
    {&ForwardMetadata::sample_row, &MetadataArrays::sample_row},
    {&ForwardMetadata::req_slot, &MetadataArrays::req_slot},
    {&ForwardMetadata::req_kv_len, &MetadataArrays::req_kv_len},
    {&ForwardMetadata::cu_q, &MetadataArrays::cu_q},
    {&ForwardMetadata::cu_kv, &MetadataArrays::cu_kv},
    {&ForwardMetadata::pg_req_slot, &MetadataArrays::pg_req_slot},
    {&ForwardMetadata::pg_row_len, &MetadataArrays::pg_row_len},
    {&ForwardMetadata::pg_row, &MetadataArrays::pg_row},
    {&ForwardMetadata::schedule, &MetadataArrays::schedule},
};

size_t page_table_size(const kernels::PageTable& pt) { return size_t(pt.num_rows) * pt.width; }

}  // namespace

MetadataArrays host_arrays(const ForwardMetadata& m, const kernels::PageTable& pt) {
  MetadataArrays a;
  for (const Field& f : kFields) a.*f.view = (m.*f.host).data();
  a.page_table = pt;
  return a;
}

Status MetadataMirror::upload(const ForwardMetadata& m, const kernels::PageTable& pt) {
  if (backend_ == kernels::Backend::kCpu) {
    arrays_ = host_arrays(m, pt);
    return ok_status();
  }
  size_t total = page_table_size(pt);
  for (const Field& f : kFields) total += (m.*f.host).size();
  if (total > block_.size()) {  // first use (capacities are fixed by the MetadataConfig)
    DSA_ASSIGN_OR_RETURN(block_, Buffer<int32_t>::alloc(backend_, total));
  }
  size_t offset = 0;
  for (const Field& f : kFields) {
    const std::vector<int32_t>& v = m.*f.host;
    DSA_RETURN_IF_ERROR(block_.upload(std::span<const int32_t>(v), offset));
    arrays_.*f.view = block_.data() + offset;
    offset += v.size();
  }
  DSA_RETURN_IF_ERROR(
      block_.upload(std::span<const int32_t>(pt.data, page_table_size(pt)), offset));
  arrays_.page_table = pt;
  arrays_.page_table.data = block_.data() + offset;
  return ok_status();
}

}  // namespace dsa::runtime
