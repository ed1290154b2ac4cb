// GPU tests of indexer_gather_cuda and latent_gather_cuda against the CPU references (SPEC.md
// §3h, class E): whole output buffers compared byte for byte, rows past S included (they are
// poisoned before each run and must keep their poison).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/error_word.h"
#include "dsa/kernels/gather/gather.h"
#include "dsa/kernels/gather/gather_check.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/pools.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::host;
using testing::or_die;
using testing::random_bytes;
using testing::Rng;

template <typename T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// First differing row of two [rows, width]-element buffers, or "".
template <typename T>
std::string first_diff_row(const std::vector<T>& got, const std::vector<T>& want, size_t width) {
  if (got.size() != want.size()) return "sizes differ";
  for (size_t r = 0; r * width < got.size(); ++r) {
    if (std::memcmp(&got[r * width], &want[r * width], width * sizeof(T)) != 0) {
      return "row " + std::to_string(r) + " differs";
    }
  }
  return "";
}

// A gather problem: page table, requests, and the three pools (indexer, bf16 latent with random
// bytes everywhere but page 0 so NaN payloads must survive the copy, FP8-656 from the quantiser).
struct Scenario {
  int32_t batch_pad = 0, width = 0, num_pages = 0, num_rows = 0, capacity = 0;
  std::vector<int32_t> table, req_slot, cu_kv;
  std::vector<uint8_t> indexer_pool, bf16_pool, fp8_pool;

  int32_t total() const { return cu_kv[size_t(batch_pad)]; }
  PageTable page_table(const int32_t* data) const { return {data, num_rows, width, num_pages}; }
};

void fill_pools(Rng& rng, Scenario& s) {
  testing::IndexerPoolBuffer ipool(s.num_pages);
  ipool.fill_random(rng);
  s.indexer_pool = ipool.bytes();
  testing::LatentPoolBuffer fpool(s.num_pages, LatentFormat::kFp8_656);
  fpool.fill_random(rng, rng.uniform(0.01f, 30.f));
  s.fp8_pool = fpool.bytes();
  s.bf16_pool.assign(size_t(s.num_pages) * kPageSize * kBf16LatentBytes, 0);
  const size_t page0 = size_t(kPageSize) * kBf16LatentBytes;
  testing::fill_random_bytes(rng, s.bf16_pool.data() + page0, s.bf16_pool.size() - page0);
}

// `batch` real requests with lengths from `lens` (0 = a paged-path request: req_slot 0), then
// `pad` padded requests (length 0, req_slot garbage that must never be read). Pages are drawn
// shuffled; request 1 shares its first page with request 0 (prefix cache) when both have one.
Scenario make_scenario(Rng& rng, const std::vector<int32_t>& lens, int32_t pad, int32_t width,
                       int32_t extra_capacity) {
  Scenario s;
  const auto batch = int32_t(lens.size());
  s.batch_pad = batch + pad;
  s.width = width;
  s.num_rows = batch + 2;
  int32_t pages_needed = 0;
  for (int32_t len : lens) pages_needed += (len + kPageSize - 1) / kPageSize;
  s.num_pages = pages_needed + 3;
  s.table.assign(size_t(s.num_rows) * width, 0);
  std::vector<int32_t> free_pages = rng.permutation(1, s.num_pages);
  std::vector<int32_t> rows = rng.permutation(1, s.num_rows);
  s.cu_kv.push_back(0);
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t len = lens[size_t(b)];
    s.req_slot.push_back(len == 0 ? 0 : rows[size_t(b)]);
    for (int32_t i = 0; i < (len + kPageSize - 1) / kPageSize; ++i) {
      s.table[size_t(s.req_slot.back()) * width + size_t(i)] = free_pages.back();
      free_pages.pop_back();
    }
    s.cu_kv.push_back(s.cu_kv.back() + len);
  }
  if (batch >= 2 && lens[0] > 0 && lens[1] > 0) {
    s.table[size_t(s.req_slot[1]) * width] = s.table[size_t(s.req_slot[0]) * width];
  }
  const int32_t garbage[] = {-7, INT32_MAX, 0, s.num_rows, INT32_MIN};
  for (int32_t b = 0; b < pad; ++b) {
    s.req_slot.push_back(garbage[b % 5]);
    s.cu_kv.push_back(s.cu_kv.back());
  }
  s.capacity = s.total() + extra_capacity;
  fill_pools(rng, s);
  return s;
}

// Outputs of one gather run: status and the whole output buffers.
struct IndexerOut {
  Status status;
  std::vector<uint8_t> k8;
  std::vector<float> kscale;
};
struct LatentOut {
  Status status;
  std::vector<bf16> kv;
};

// The initial (poisoned) contents of the outputs, shared by the reference and the GPU run.
struct Poison {
  std::vector<uint8_t> k8;
  std::vector<float> kscale;
  std::vector<bf16> kv;
};

Poison make_poison(Rng& rng, int32_t capacity) {
  const size_t rows = size_t(std::max(capacity, 1));
  return {random_bytes<uint8_t>(rng, rows * kIndexHeadDim), random_bytes<float>(rng, rows),
          random_bytes<bf16>(rng, rows * kQkDim)};
}

IndexerGatherParams indexer_params(const Scenario& s, const int32_t* req_slot, const int32_t* cu_kv,
                                   const int32_t* table, uint8_t* pool, uint8_t* k8,
                                   float* kscale) {
  IndexerGatherParams p;
  p.req_slot = req_slot;
  p.cu_kv = cu_kv;
  p.page_table = s.page_table(table);
  p.pool.data = pool;
  p.pool.num_pages = s.num_pages;
  p.batch_pad = s.batch_pad;
  p.k8 = k8;
  p.kscale = kscale;
  p.capacity = s.capacity;
  return p;
}

LatentGatherParams latent_params(const Scenario& s, const int32_t* req_slot, const int32_t* cu_kv,
                                 const int32_t* table, uint8_t* pool, LatentFormat f, bf16* kv) {
  LatentGatherParams p;
  p.req_slot = req_slot;
  p.cu_kv = cu_kv;
  p.page_table = s.page_table(table);
  p.pool.data = pool;
  p.pool.format = f;
  p.pool.num_pages = s.num_pages;
  p.batch_pad = s.batch_pad;
  p.kv = kv;
  p.capacity = s.capacity;
  return p;
}

std::vector<uint8_t>& latent_pool(Scenario& s, LatentFormat f) {
  return f == LatentFormat::kBf16 ? s.bf16_pool : s.fp8_pool;
}

IndexerOut indexer_ref(Scenario& s, const Poison& poison) {
  IndexerOut out{ok_status(), poison.k8, poison.kscale};
  out.status =
      indexer_gather_ref(indexer_params(s, s.req_slot.data(), s.cu_kv.data(), s.table.data(),
                                        s.indexer_pool.data(), out.k8.data(), out.kscale.data()));
  return out;
}

LatentOut latent_ref(Scenario& s, LatentFormat f, const Poison& poison) {
  LatentOut out{ok_status(), poison.kv};
  out.status = latent_gather_ref(latent_params(s, s.req_slot.data(), s.cu_kv.data(), s.table.data(),
                                               latent_pool(s, f).data(), f, out.kv.data()));
  return out;
}

// The scenario's inputs on the device.
struct DeviceInputs {
  DeviceBuffer<int32_t> req_slot, cu_kv, table;
  DeviceBuffer<uint8_t> indexer_pool, bf16_pool, fp8_pool;
  explicit DeviceInputs(const Scenario& s)
      : req_slot(dev(s.req_slot, 1)),
        cu_kv(dev(s.cu_kv, 1)),
        table(dev(s.table, 1)),
        indexer_pool(dev(s.indexer_pool, 1)),
        bf16_pool(dev(s.bf16_pool, 1)),
        fp8_pool(dev(s.fp8_pool, 1)) {}
  uint8_t* latent_pool(LatentFormat f) const {
    return f == LatentFormat::kBf16 ? bf16_pool.data() : fp8_pool.data();
  }
};

IndexerOut indexer_gpu(const Scenario& s, const DeviceInputs& d, const Poison& poison) {
  DeviceBuffer<uint8_t> k8 = dev(poison.k8, 1);
  DeviceBuffer<float> kscale = dev(poison.kscale, 1);
  Status st =
      indexer_gather_cuda(indexer_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                         d.indexer_pool.data(), k8.data(), kscale.data()));
  return {st, host(k8), host(kscale)};
}

LatentOut latent_gpu(const Scenario& s, const DeviceInputs& d, LatentFormat f,
                     const Poison& poison) {
  DeviceBuffer<bf16> kv = dev(poison.kv, 1);
  Status st = latent_gather_cuda(latent_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                               d.latent_pool(f), f, kv.data()));
  return {st, host(kv)};
}

constexpr LatentFormat kFormats[] = {LatentFormat::kBf16, LatentFormat::kFp8_656};

const char* name(LatentFormat f) { return f == LatentFormat::kBf16 ? "bf16" : "FP8-656"; }

// Both gathers on the GPU equal the references, bit for bit, statuses included.
void expect_all_match(Rng& rng, Scenario& s, const std::string& what) {
  const Poison poison = make_poison(rng, s.capacity);
  const DeviceInputs d(s);
  IndexerOut ref = indexer_ref(s, poison);
  IndexerOut gpu = indexer_gpu(s, d, poison);
  ASSERT_EQ(gpu.status.code(), ref.status.code())
      << what << ": gpu " << gpu.status.to_string() << " / ref " << ref.status.to_string();
  EXPECT_EQ(first_diff_row(gpu.k8, ref.k8, kIndexHeadDim), "") << what << " (indexer codes)";
  EXPECT_EQ(first_diff_row(gpu.kscale, ref.kscale, 1), "") << what << " (indexer scales)";
  for (LatentFormat f : kFormats) {
    LatentOut lref = latent_ref(s, f, poison);
    LatentOut lgpu = latent_gpu(s, d, f, poison);
    ASSERT_EQ(lgpu.status.code(), lref.status.code())
        << what << " " << name(f) << ": gpu " << lgpu.status.to_string() << " / ref "
        << lref.status.to_string();
    EXPECT_EQ(first_diff_row(lgpu.kv, lref.kv, kQkDim), "") << what << " (" << name(f) << ")";
  }
}

std::vector<int32_t> random_lengths(Rng& rng, int32_t batch, int32_t max_len) {
  std::vector<int32_t> lens(static_cast<size_t>(batch));
  for (auto& l : lens) {
    const auto kind = rng.randint(0, 5);
    l = kind == 0 ? 0
                  : (kind == 1 ? int32_t(rng.randint(1, 64)) * kPageSize
                               : int32_t(rng.randint(1, max_len)));
    l = std::min(l, max_len);
  }
  return lens;
}

// Random batches (empty and padded requests, shuffled and shared pages), small to V3.2-like.
TEST(GatherCuda, RandomBatchesBitExact) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  struct Shape {
    int32_t batch, pad, max_len;
  };
  for (Shape sh : {Shape{1, 0, 1}, Shape{3, 1, 200}, Shape{8, 3, 1000}, Shape{16, 16, 3000},
                   Shape{4, 0, 8192}, Shape{32, 0, 700}}) {
    std::vector<int32_t> lens = random_lengths(rng, sh.batch, sh.max_len);
    const int32_t width = (sh.max_len + kPageSize - 1) / kPageSize + 1;
    Scenario s = make_scenario(rng, lens, sh.pad, width, 37);
    expect_all_match(rng, s, "batch " + std::to_string(sh.batch));
  }
}

// One long prompt (32K keys) next to short requests, as in an EXTEND batch.
TEST(GatherCuda, LongPromptWithShortRequests) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Scenario s = make_scenario(rng, {5, 32768, 0, 63, 64, 65}, 2, 32768 / kPageSize, 0);
  expect_all_match(rng, s, "long prompt");
}

// A request of exactly W P keys, lengths 1 and P, capacity exactly S.
TEST(GatherCuda, EdgeLengths) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Scenario s = make_scenario(rng, {1, 4 * kPageSize, kPageSize, 2}, 0, 4, 0);
  expect_all_match(rng, s, "edge lengths");
}

// B_pad = 0 is a no-op; S = 0 (every request empty, B_pad a multiple of 32) writes nothing.
TEST(GatherCuda, EmptyBatches) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Scenario s = make_scenario(rng, std::vector<int32_t>(32, 0), 32, 4, 5);
  expect_all_match(rng, s, "all empty");
  s.capacity = 0;
  expect_all_match(rng, s, "all empty, capacity 0");
  const DeviceInputs d(s);
  IndexerGatherParams ip = indexer_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                          d.indexer_pool.data(), nullptr, nullptr);
  ip.batch_pad = 0;
  EXPECT_TRUE(indexer_gather_cuda(ip).ok());
  LatentGatherParams lp = latent_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                        d.bf16_pool.data(), LatentFormat::kBf16, nullptr);
  lp.batch_pad = 0;
  EXPECT_TRUE(latent_gather_cuda(lp).ok());
}

Scenario base_for_errors(Rng& rng) { return make_scenario(rng, {70, 0, 130, 64}, 2, 4, 10); }

// Checked mode: every data rule of the references is OutOfRange from the device error word (S >
// capacity: ResourceExhausted), as the references say; the word is cleared for the next call.
TEST(GatherCuda, CheckedModeErrors) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  Rng rng(testing::test_seed());
  struct Mutation {
    const char* what;
    void (*apply)(Scenario&);
    StatusCode code;
  };
  const Mutation mutations[] = {
      {"cu_kv[0] = 1", [](Scenario& s) { s.cu_kv[0] = 1; }, StatusCode::kOutOfRange},
      {"decreasing cu_kv", [](Scenario& s) { s.cu_kv[2] = 60; }, StatusCode::kOutOfRange},
      {"length > W P",
       [](Scenario& s) {
         for (size_t b = 3; b < s.cu_kv.size(); ++b) s.cu_kv[b] += 200;  // request 2: 330 > 256
         s.capacity += 200;
       },
       StatusCode::kOutOfRange},
      {"req_slot past R_slots", [](Scenario& s) { s.req_slot[2] = s.num_rows; },
       StatusCode::kOutOfRange},
      {"negative req_slot", [](Scenario& s) { s.req_slot[0] = -1; }, StatusCode::kOutOfRange},
      {"page id 0 in use", [](Scenario& s) { s.table[size_t(s.req_slot[2]) * 4 + 2] = 0; },
       StatusCode::kOutOfRange},
      {"page id past the pool",
       [](Scenario& s) { s.table[size_t(s.req_slot[0]) * 4 + 1] = s.num_pages; },
       StatusCode::kOutOfRange},
      {"negative page id", [](Scenario& s) { s.table[size_t(s.req_slot[3]) * 4] = -3; },
       StatusCode::kOutOfRange},
      {"S > capacity", [](Scenario& s) { s.capacity = s.total() - 1; },
       StatusCode::kResourceExhausted},
  };
  for (const Mutation& m : mutations) {
    Scenario s = base_for_errors(rng);
    m.apply(s);
    const Poison poison = make_poison(rng, s.capacity);
    const DeviceInputs d(s);
    EXPECT_EQ(indexer_ref(s, poison).status.code(), m.code) << m.what;
    Status st = indexer_gpu(s, d, poison).status;
    EXPECT_EQ(st.code(), m.code) << m.what << ": " << st.to_string();
    EXPECT_NE(st.message().find("gather"), std::string::npos) << st.to_string();
    for (LatentFormat f : kFormats) {
      EXPECT_EQ(latent_ref(s, f, poison).status.code(), m.code) << m.what;
      st = latent_gpu(s, d, f, poison).status;
      EXPECT_EQ(st.code(), m.code) << m.what << " " << name(f) << ": " << st.to_string();
    }
  }
  // Unused entries may hold anything: a page id past the request's pages, req_slot of an empty
  // request.
  Scenario s = base_for_errors(rng);
  s.table[size_t(s.req_slot[0]) * 4 + 3] = -99;
  s.req_slot[1] = 12345;
  expect_all_match(rng, s, "garbage in unused entries");
}

// Unchecked mode neutralises exactly as the references: a bad req_slot reads row 0, positions past
// W P and page ids outside [0, num_pages) read page 0; rows below cu_kv[0] are not written.
TEST(GatherCuda, UncheckedNeutralisationMatchesReference) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  struct Mutation {
    const char* what;
    void (*apply)(Scenario&);
  };
  const Mutation mutations[] = {
      {"req_slot past R_slots", [](Scenario& s) { s.req_slot[2] = s.num_rows + 5; }},
      {"negative req_slot", [](Scenario& s) { s.req_slot[0] = INT32_MIN; }},
      {"page ids out of range",
       [](Scenario& s) {
         s.table[size_t(s.req_slot[0]) * 4 + 1] = s.num_pages;
         s.table[size_t(s.req_slot[2]) * 4] = -3;
         s.table[size_t(s.req_slot[2]) * 4 + 1] = INT32_MAX;
       }},
      {"page id 0 (legal when unchecked: zeros)",
       [](Scenario& s) { s.table[size_t(s.req_slot[3]) * 4] = 0; }},
      {"length > W P",
       [](Scenario& s) {
         for (size_t b = 3; b < s.cu_kv.size(); ++b) s.cu_kv[b] += 300;
         s.capacity += 300;
       }},
      {"cu_kv[0] > 0", [](Scenario& s) { s.cu_kv[0] = 50; }},
      {"negative cu_kv[0]", [](Scenario& s) { s.cu_kv[0] = -40; }},
  };
  for (const Mutation& m : mutations) {
    Scenario s = base_for_errors(rng);
    m.apply(s);
    expect_all_match(rng, s, m.what);
  }
  Status word = cuda::take_device_error("test");
  EXPECT_TRUE(word.ok()) << "unchecked neutralisation must not report: " << word.to_string();
}

// Unchecked, S > capacity: the launch returns at once (no sync), writes nothing, and the error
// word carries ResourceExhausted for the step's end.
TEST(GatherCuda, UncheckedCapacityReportsThroughErrorWord) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Scenario s = base_for_errors(rng);
  s.capacity = s.total() - 1;
  const Poison poison = make_poison(rng, s.capacity);
  const DeviceInputs d(s);
  IndexerOut gpu = indexer_gpu(s, d, poison);
  EXPECT_TRUE(gpu.status.ok()) << gpu.status.to_string();
  Status word = cuda::take_device_error("step");
  EXPECT_EQ(word.code(), StatusCode::kResourceExhausted) << word.to_string();
  EXPECT_TRUE(same_bytes(gpu.k8, poison.k8) && same_bytes(gpu.kscale, poison.kscale));
  for (LatentFormat f : kFormats) {
    LatentOut lgpu = latent_gpu(s, d, f, poison);
    word = cuda::take_device_error("step");
    EXPECT_EQ(word.code(), StatusCode::kResourceExhausted) << name(f) << ": " << word.to_string();
    EXPECT_TRUE(same_bytes(lgpu.kv, poison.kv)) << name(f);
  }
}

// Unchecked, decreasing cu_kv (outside the contract): no fault, nothing past S, deterministic.
TEST(GatherCuda, UncheckedDecreasingCuKvStaysInBounds) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  Rng rng(testing::test_seed());
  Scenario s = base_for_errors(rng);
  s.cu_kv[2] = 10;  // request 1 "ends" before it starts; request 2 overlaps request 0
  s.cu_kv[1] = 150;
  const Poison poison = make_poison(rng, s.capacity);
  const DeviceInputs d(s);
  IndexerOut a = indexer_gpu(s, d, poison), b = indexer_gpu(s, d, poison);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_TRUE(same_bytes(a.k8, b.k8) && same_bytes(a.kscale, b.kscale));
  const size_t total = size_t(s.total());
  EXPECT_EQ(
      std::memcmp(a.k8.data() + total * kIndexHeadDim, poison.k8.data() + total * kIndexHeadDim,
                  (poison.k8.size() - total * kIndexHeadDim)),
      0);
  for (LatentFormat f : kFormats) {
    LatentOut la = latent_gpu(s, d, f, poison), lb = latent_gpu(s, d, f, poison);
    ASSERT_TRUE(la.status.ok() && lb.status.ok());
    EXPECT_TRUE(same_bytes(la.kv, lb.kv)) << name(f);
    EXPECT_EQ(std::memcmp(la.kv.data() + total * kQkDim, poison.kv.data() + total * kQkDim,
                          (poison.kv.size() - total * kQkDim) * sizeof(bf16)),
              0)
        << name(f);
  }
  Status word = cuda::take_device_error("test");
  EXPECT_TRUE(word.ok()) << word.to_string();
}

TEST(GatherCuda, Deterministic) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Scenario s = make_scenario(rng, random_lengths(rng, 12, 2000), 4, 32, 3);
  const Poison poison = make_poison(rng, s.capacity);
  const DeviceInputs d(s);
  IndexerOut a = indexer_gpu(s, d, poison), b = indexer_gpu(s, d, poison);
  EXPECT_TRUE(same_bytes(a.k8, b.k8) && same_bytes(a.kscale, b.kscale));
  for (LatentFormat f : kFormats) {
    EXPECT_TRUE(same_bytes(latent_gpu(s, d, f, poison).kv, latent_gpu(s, d, f, poison).kv))
        << name(f);
  }
}

// Host checks are the references' (InvalidArgument), plus 16-byte alignment.
TEST(GatherCuda, HostRejects) {
  DSA_SKIP_WITHOUT_GPU();
  Rng rng(testing::test_seed());
  Scenario s = base_for_errors(rng);
  const Poison poison = make_poison(rng, s.capacity);
  const DeviceInputs d(s);
  DeviceBuffer<uint8_t> k8 = dev(poison.k8, 1);
  DeviceBuffer<float> kscale = dev(poison.kscale, 1);
  DeviceBuffer<bf16> kv = dev(poison.kv, 1);
  IndexerGatherParams ip = indexer_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                          d.indexer_pool.data(), k8.data(), kscale.data());
  testing::expect_rejects(
      ip, indexer_gather_cuda,
      {{"page_table.num_pages", [&](auto& q) { q.page_table.num_pages = s.num_pages + 1; },
        StatusCode::kInvalidArgument},
       {"pool.page_stride_bytes", [](auto& q) { q.pool.page_stride_bytes = 8192; },
        StatusCode::kInvalidArgument},
       {"k8 alignment", [&](auto& q) { q.k8 = k8.data() + 8; }, StatusCode::kInvalidArgument}});
  EXPECT_TRUE(indexer_gather_cuda(ip).ok());
  LatentGatherParams lp = latent_params(s, d.req_slot.data(), d.cu_kv.data(), d.table.data(),
                                        d.fp8_pool.data(), LatentFormat::kFp8_656, kv.data());
  testing::expect_rejects(
      lp, latent_gather_cuda,
      {{"pool.format", [](auto& q) { q.pool.format = static_cast<LatentFormat>(3); },
        StatusCode::kInvalidArgument},
       {"page_table.width", [](auto& q) { q.page_table.width = 0; }, StatusCode::kInvalidArgument},
       {"kv alignment", [&](auto& q) { q.kv = kv.data() + 1; }, StatusCode::kInvalidArgument}});
  EXPECT_TRUE(latent_gather_cuda(lp).ok());
}

// The `dsa check` entry (an independent per-token lookup) run on the GPU gathers through adapters
// that move the host buffers to the device and back.
struct SourceOnDevice {
  DeviceBuffer<int32_t> req_slot, cu_kv, table;
  SourceOnDevice(const int32_t* req_slot_host, const int32_t* cu_kv_host, const PageTable& t,
                 int32_t batch_pad)
      : req_slot(or_die(testing::to_device(req_slot_host, size_t(batch_pad), 1))),
        cu_kv(or_die(testing::to_device(cu_kv_host, size_t(batch_pad) + 1, 1))),
        table(or_die(testing::to_device(t.data, size_t(t.num_rows) * size_t(t.width), 1))) {}
};

Status indexer_gpu_on_host_buffers(const IndexerGatherParams& p) {
  SourceOnDevice src(p.req_slot, p.cu_kv, p.page_table, p.batch_pad);
  const size_t pool_bytes = size_t(p.pool.num_pages) * size_t(p.pool.page_stride_bytes);
  DSA_ASSIGN_OR_RETURN(auto pool, testing::to_device(p.pool.data, pool_bytes, 1));
  const size_t rows = size_t(p.capacity);
  DSA_ASSIGN_OR_RETURN(auto k8, testing::to_device(p.k8, rows * kIndexHeadDim, 1));
  DSA_ASSIGN_OR_RETURN(auto kscale, testing::to_device(p.kscale, rows, 1));
  IndexerGatherParams q = p;
  q.req_slot = src.req_slot.data();
  q.cu_kv = src.cu_kv.data();
  q.page_table.data = src.table.data();
  q.pool.data = pool.data();
  q.k8 = k8.data();
  q.kscale = kscale.data();
  DSA_RETURN_IF_ERROR(indexer_gather_cuda(q));
  DSA_RETURN_IF_ERROR(testing::copy_to_host(k8, p.k8, rows * kIndexHeadDim));
  return testing::copy_to_host(kscale, p.kscale, rows);
}

Status latent_gpu_on_host_buffers(const LatentGatherParams& p) {
  SourceOnDevice src(p.req_slot, p.cu_kv, p.page_table, p.batch_pad);
  const size_t pool_bytes =
      size_t(p.pool.num_pages) * kPageSize * size_t(latent_bytes_per_token(p.pool.format));
  DSA_ASSIGN_OR_RETURN(auto pool, testing::to_device(p.pool.data, pool_bytes, 1));
  const size_t values = size_t(p.capacity) * kQkDim;
  DSA_ASSIGN_OR_RETURN(auto kv, testing::to_device(p.kv, values, 1));
  LatentGatherParams q = p;
  q.req_slot = src.req_slot.data();
  q.cu_kv = src.cu_kv.data();
  q.page_table.data = src.table.data();
  q.pool.data = pool.data();
  q.kv = kv.data();
  DSA_RETURN_IF_ERROR(latent_gather_cuda(q));
  return testing::copy_to_host(kv, p.kv, values);
}

TEST(GatherCuda, CheckEntryPasses) {
  DSA_SKIP_WITHOUT_GPU();
  for (auto [batch, ctx] : {std::pair{1, 1}, std::pair{5, 700}, std::pair{16, 3000}}) {
    Status st = check_gather(indexer_gpu_on_host_buffers, latent_gpu_on_host_buffers, batch, ctx,
                             testing::test_seed() + uint64_t(batch));
    EXPECT_TRUE(st.ok()) << batch << ": " << st.to_string();
  }
}

}  // namespace
}  // namespace dsa::kernels
