// GPU tests only: a CUDA op run on host buffers — the adapter through which a `dsa check` entry,
// written for host pointers, drives the CUDA op. Each listed member of the params is given a
// device copy and repointed: In is uploaded, Out only allocated, InOut both; after a successful
// call the Out and InOut copies come back into the host arrays.
#pragma once

#include <cstddef>
#include <type_traits>

#include "dsa/core/status.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/testing/device_copy.h"

namespace dsa::testing {

template <auto kMember, bool kUploads, bool kDownloads>
struct DeviceField {
  static constexpr auto member = kMember;
  static constexpr bool uploads = kUploads;
  static constexpr bool downloads = kDownloads;
  size_t count;  // elements the op reads or writes through the member
};

template <auto kMember>
using In = DeviceField<kMember, true, false>;
template <auto kMember>
using Out = DeviceField<kMember, false, true>;
template <auto kMember>
using InOut = DeviceField<kMember, true, true>;

namespace host_buffers_detail {

template <typename>
struct MemberPointer;
template <typename Params, typename Pointer>
struct MemberPointer<Pointer Params::*> {
  using Element = std::remove_cv_t<std::remove_pointer_t<Pointer>>;
};

template <typename Params, typename Op>
Status run_fields(Params& q, Op& op) {
  return op(q);
}

// One field per level, so every device copy lives until the op has run and its output is back.
template <typename Params, typename Op, typename Field, typename... Rest>
Status run_fields(Params& q, Op& op, const Field& field, const Rest&... rest) {
  using T = typename MemberPointer<std::remove_cv_t<decltype(Field::member)>>::Element;
  auto* const host_array = q.*Field::member;
  cuda::DeviceBuffer<T> d;
  if constexpr (Field::uploads) {
    DSA_ASSIGN_OR_RETURN(d, to_device(host_array, field.count));
  } else {
    DSA_ASSIGN_OR_RETURN(d, cuda::DeviceBuffer<T>::alloc(field.count));
  }
  q.*Field::member = d.data();
  DSA_RETURN_IF_ERROR(run_fields(q, op, rest...));
  if constexpr (Field::downloads) return copy_to_host(d, host_array, field.count);
  return ok_status();
}

}  // namespace host_buffers_detail

template <typename Params, typename Op, typename... Fields>
Status run_on_host_buffers(const Params& host_params, Op&& op, const Fields&... fields) {
  Params q = host_params;
  return host_buffers_detail::run_fields(q, op, fields...);
}

}  // namespace dsa::testing
