// CUDA-graph replay of the uniform forwards (SPEC.md §5, §9 rows 4, 5, 11) on the tiny model.
// Three models in lockstep — CPU, CUDA eager and CUDA with graphs, same options, same bucket
// padding, their page managers driven by the same calls — run the same random compositions:
// requests entering and leaving, lengths crossing page boundaries and K, padded requests (n up
// to 7), idle batches, random accept positions. Every graph forward must replay (not fall back),
// equal the eager forward bit for bit (hidden states and logits), allocate nothing, finish under a
// watchdog, and agree with the CPU reference within tolerance on the real rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dsa/model/dsa_model.h"
#include "dsa/runtime/backend_control.h"
#include "dsa/runtime/buffer.h"
#include "dsa/runtime/metadata_builder.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/random.h"
#include "dsa/testing/watchdog.h"
#include "tests/e2e/model_compare.h"

namespace dsa::e2e {
namespace {

using runtime::ForwardMode;
using runtime::ModelKind;

constexpr int32_t kMaxRequests = 8;
constexpr double kWatchdogSeconds = 30;
// CUDA vs CPU on real rows. The exact check is graph vs eager; against the CPU the two backends'
// class-T roundings are legal, and on random tokens they flip discrete choices now and then (an MoE
// expert whose router score ties within a rounding, an indexer key at the K-th logit), after which
// that row's output legitimately differs by O(1) — and the caches the two backends write drift
// apart over hundreds of forwards. So a row is "close" when every value is within the op-level
// bound 0.1 + 1%·|cpu| (as in tiny_model_cuda_test), most rows must be close, and the mean |Δ|
// over the close rows must stay small (a systematic error the per-row bound would let through).
// The mean over every row has only a loose bound (kMaxMeanAbsAllRows): one long-lived request
// whose expert flipped early carries its drift through every later forward, and at few real rows
// that alone moved it past 0.02 (seed 3416855923667463010: 0.0256, 93% of rows close, the same on
// the tree before 2026-12-06). Every CUDA value must be finite.
constexpr double kAtol = 0.1, kRtol = 0.01;
constexpr double kMinCloseRows = 0.90, kMaxMeanAbs = 0.02;
// Over every row (the flipped ones included) only gross damage fails: 5x the close rows' bound.
constexpr double kMaxMeanAbsAllRows = 0.1;

int32_t iterations(int32_t fallback) {
  const char* e = std::getenv("DSA_GRAPH_FUZZ_ITERS");
  return e ? std::max(1, std::atoi(e)) : fallback;
}

struct Trio {
  std::unique_ptr<model::DsaModel> cpu, eager, graph;
  std::vector<model::DsaModel*> all() { return {cpu.get(), eager.get(), graph.get()}; }
};

Trio load_trio(int32_t d) {
  LoadOptions o{.d = d, .max_requests = kMaxRequests, .max_context = 512, .buckets = true};
  Trio t;
  t.cpu = load_tiny(kernels::cpu_ops(), o);
  t.eager = load_tiny(*cuda_table(), o);
  o.graphs = true;
  t.graph = load_tiny(*cuda_table(), o);
  return t;
}

struct Live {
  int32_t slot, cached;
};

struct Stats {
  int64_t forwards = 0, replays = 0, idle = 0, padded_rows = 0, real_rows = 0;
  double max_abs = 0, sum_abs = 0, sum_abs_close = 0;
  int64_t compared = 0, compared_close = 0, rows = 0, close_rows = 0, non_finite = 0;
};

// `rows` rows of `width` values: counts the rows within the op-level bound.
void compare_to_cpu(const std::vector<float>& want, const std::vector<float>& got, size_t rows,
                    size_t width, Stats& st) {
  for (size_t r = 0; r < rows; ++r) {
    bool close = true;
    double row_abs = 0;
    for (size_t i = r * width; i < (r + 1) * width; ++i) {
      const double e = std::fabs(double(got[i]) - double(want[i]));
      if (!std::isfinite(double(got[i])) || !std::isfinite(e)) ++st.non_finite;
      st.max_abs = std::max(st.max_abs, e);
      row_abs += e;
      close = close && e <= kAtol + kRtol * std::fabs(double(want[i]));
    }
    st.sum_abs += row_abs;
    st.compared += int64_t(width);
    if (close) {
      st.sum_abs_close += row_abs;
      st.compared_close += int64_t(width);
    }
    st.close_rows += close;
    ++st.rows;
  }
}

// One random composition through all three models.
void run_composition(Trio& t, testing::Rng& rng, std::vector<Live>& live, int32_t d,
                     int64_t forward_id, Stats& st) {
  const int32_t V = int32_t(t.cpu->config().vocab_size);
  const int32_t D = int32_t(t.cpu->config().hidden_size);
  const int32_t n_step = d + 1;
  // Requests leave and enter.
  if (!live.empty() && rng.randint(0, 9) == 0) {
    const size_t i = size_t(rng.randint(0, int64_t(live.size()) - 1));
    for (model::DsaModel* m : t.all()) ASSERT_TRUE(m->pages().close_request(live[i].slot).ok());
    live.erase(live.begin() + long(i));
  }
  while (int32_t(live.size()) < kMaxRequests && rng.randint(0, 5) == 0) {
    // Start lengths around page boundaries (63/64/65, ...) and K = 128.
    const int32_t base = int32_t(rng.randint(0, 5)) * 64;
    const int32_t cached = std::max(0, base + int32_t(rng.randint(-2, 2)));
    int32_t slot = -1;
    for (model::DsaModel* m : t.all()) {
      auto s = m->pages().open_request();
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      if (slot >= 0) ASSERT_EQ(*s, slot) << "page managers out of lockstep";
      slot = *s;
    }
    live.push_back({slot, cached});
  }
  // The forward: target verify / decode, MTP draft-extend / decode, or an idle batch.
  ModelKind kind = ModelKind::kTarget;
  ForwardMode mode = d == 0 ? ForwardMode::kDecode : ForwardMode::kTargetVerify;
  if (d > 0) {
    const int64_t pick = rng.randint(0, 2);
    if (pick == 1) kind = ModelKind::kMtp, mode = ForwardMode::kDraftExtend;
    if (pick == 2 && d > 1) kind = ModelKind::kMtp, mode = ForwardMode::kDecode;
  }
  const int32_t n = mode == ForwardMode::kDecode ? 1 : n_step;
  std::vector<size_t> chosen;
  for (size_t i = 0; i < live.size(); ++i) {
    if (rng.randint(0, 3) != 0) chosen.push_back(i);
  }
  std::shuffle(chosen.begin(), chosen.end(), rng.engine());
  const bool idle = chosen.empty();
  runtime::ForwardBatch b;
  b.model = kind;
  b.mode = idle ? ForwardMode::kIdle : mode;
  b.idle_rows_per_request = n;
  b.forward_id = forward_id;
  for (size_t i : chosen) {
    const Live& r = live[i];
    for (model::DsaModel* m : t.all()) ASSERT_TRUE(m->pages().reserve(r.slot, r.cached + n).ok());
    const int32_t sample_first =
        mode == ForwardMode::kDraftExtend ? int32_t(rng.randint(0, n - 1)) : 0;
    b.requests.push_back({r.slot, r.cached, n, sample_first, -1});
  }
  b.batch_pad = t.graph->batch_pad_for(std::max<int32_t>(1, int32_t(chosen.size())));
  // A uniform forward: B_pad requests of n rows, the real ones first (each model builds the
  // metadata from its own page table; the three are in lockstep).
  const int32_t real_rows = int32_t(chosen.size()) * n, rows = b.batch_pad * n;
  std::vector<int32_t> tokens(size_t(rows), 0);
  for (int32_t r = 0; r < real_rows; ++r) tokens[size_t(r)] = int32_t(rng.randint(0, V - 1));
  std::vector<bf16> hidden;
  if (kind == ModelKind::kMtp) hidden = rng.bf16_vector(size_t(rows) * D);

  model::ForwardOutput out[3];
  Status s;
  auto run = [&](model::DsaModel& m, model::ForwardOutput* o) {
    return m.forward(b, tokens, hidden, o);
  };
  const int64_t replays = t.graph->timing().replays;
  const uint64_t allocs = runtime::device_allocation_count(kernels::Backend::kCuda);
  testing::within_seconds(kWatchdogSeconds, [&] {
    s = run(*t.graph, &out[2]);
    ASSERT_TRUE(s.ok()) << s.to_string();
  });
  EXPECT_EQ(runtime::device_allocation_count(kernels::Backend::kCuda), allocs)
      << "a replay allocated device memory";
  EXPECT_EQ(t.graph->timing().replays, replays + 1) << "the forward did not replay its graph";
  testing::within_seconds(kWatchdogSeconds, [&] {
    s = run(*t.eager, &out[1]);
    ASSERT_TRUE(s.ok()) << s.to_string();
  });
  s = run(*t.cpu, &out[0]);
  ASSERT_TRUE(s.ok()) << s.to_string();

  const runtime::MetadataHeader& header = out[0].header;
  ASSERT_EQ(header.rows, real_rows);
  ASSERT_EQ(header.rows_pad, rows);
  EXPECT_EQ(out[2].header, header);
  const std::string what =
      std::string(runtime::model_name(kind)) + " " + std::string(runtime::mode_name(b.mode)) +
      " B " + std::to_string(chosen.size()) + " B_pad " + std::to_string(header.batch_pad) +
      " forward " + std::to_string(forward_id);
  // Graph replay == eager, bit for bit.
  ASSERT_EQ(out[2].hidden.size(), out[1].hidden.size());
  ASSERT_EQ(out[2].logits.size(), out[1].logits.size());
  EXPECT_EQ(std::memcmp(out[2].hidden.data(), out[1].hidden.data(), out[1].hidden.size() * 2), 0)
      << what << ": hidden states differ between replay and eager";
  EXPECT_EQ(std::memcmp(out[2].logits.data(), out[1].logits.data(), out[1].logits.size() * 4), 0)
      << what << ": logits differ between replay and eager";
  // CPU reference on the real rows (samples of real requests come first).
  const int32_t real_samples = idle                                 ? 0
                               : mode == ForwardMode::kTargetVerify ? int32_t(chosen.size()) * n
                                                                    : int32_t(chosen.size());
  compare_to_cpu(out[0].logits, out[2].logits, size_t(real_samples), size_t(V), st);
  std::vector<float> hc, hg;
  for (int32_t i = 0; i < header.rows * D; ++i) {
    hc.push_back(bf16_to_float(out[0].hidden[size_t(i)]));
    hg.push_back(bf16_to_float(out[2].hidden[size_t(i)]));
  }
  compare_to_cpu(hc, hg, size_t(header.rows), size_t(D), st);

  // Accept a random number of rows: the committed length moves by 0..n.
  for (size_t i : chosen) live[i].cached += int32_t(rng.randint(0, n));
  for (Live& r : live) {
    if (r.cached + 2 * n_step + 8 > 512) r.cached = int32_t(rng.randint(0, 200));
  }
  ++st.forwards;
  st.replays += 1;
  st.idle += idle;
  st.real_rows += header.rows;
  st.padded_rows += rows - header.rows;
}

void fuzz(int32_t d, int32_t iters) {
  Trio t = load_trio(d);
  ASSERT_TRUE(t.cpu && t.eager && t.graph);
  const runtime::GraphStats& gs = t.graph->graph_stats();
  std::printf("d = %d: %d graphs (%zu nodes) captured in %.2f s\n", d, gs.graphs, gs.nodes,
              gs.capture_s);
  const uint64_t seed = testing::test_seed();
  testing::Rng rng(seed + uint64_t(d));
  std::vector<Live> live;
  Stats st;
  for (int32_t it = 0; it < iters && !::testing::Test::HasFatalFailure(); ++it) {
    // Allocation churn between replays (SPEC.md §9 row 5): freed and new buffers never alias
    // anything a graph holds.
    if (it % 50 == 25) {
      std::vector<runtime::Buffer<uint8_t>> churn;
      for (int32_t k = 0; k < 16; ++k) {
        auto buf = runtime::Buffer<uint8_t>::alloc(kernels::Backend::kCuda,
                                                   size_t(rng.randint(1, 8)) << 20);
        ASSERT_TRUE(buf.ok());
        churn.push_back(std::move(*buf));
      }
    }
    run_composition(t, rng, live, d, it, st);
  }
  const double mean_abs = st.compared ? st.sum_abs / double(st.compared) : 0.0;
  const double mean_abs_close =
      st.compared_close ? st.sum_abs_close / double(st.compared_close) : 0.0;
  const double close = st.rows ? double(st.close_rows) / double(st.rows) : 1.0;
  std::printf(
      "d = %d: %lld forwards replayed (%lld idle), %lld real rows, %lld padded rows; graph == "
      "eager bit for bit; vs cpu: %.2f%% of %lld output rows within 0.1 + 1%%, max |d| %.4f, "
      "mean |d| %.6f over %lld values (%.6f over the close rows)\n",
      d, (long long)st.forwards, (long long)st.idle, (long long)st.real_rows,
      (long long)st.padded_rows, 100.0 * close, (long long)st.rows, st.max_abs, mean_abs,
      (long long)st.compared, mean_abs_close);
  EXPECT_GE(close, kMinCloseRows);
  EXPECT_LE(mean_abs_close, kMaxMeanAbs);
  EXPECT_LE(mean_abs, kMaxMeanAbsAllRows);
  EXPECT_EQ(st.non_finite, 0) << "non-finite CUDA outputs (or differences)";
}

TEST(GraphReplay, SpeculativeFormsEqualEagerAndCpu) {
  DSA_SKIP_WITHOUT_GPU();
  fuzz(6, iterations(800));  // n = 7: verify, draft-extend, MTP decode
}

TEST(GraphReplay, DecodeEqualsEagerAndCpu) {
  DSA_SKIP_WITHOUT_GPU();
  fuzz(0, iterations(250));
}

// SPEC.md §9 row 4: a failed metadata update aborts the step; nothing replays.
TEST(GraphReplay, FailedUpdateAbortsTheStep) {
  DSA_SKIP_WITHOUT_GPU();
  auto m =
      load_tiny(*cuda_table(),
                {.d = 0, .max_requests = 4, .max_context = 512, .buckets = true, .graphs = true});
  ASSERT_TRUE(m);
  auto slot = m->pages().open_request();
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(m->pages().reserve(*slot, 10).ok());
  runtime::ForwardBatch b;
  b.mode = ForwardMode::kDecode;
  b.batch_pad = 2;
  b.requests.push_back({*slot, 9, 1, 0, -1});
  model::ForwardOutput out;
  Status s = m->forward(b, {}, {}, &out);  // no token id for the request's row
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  b.requests[0].cached_len = 100;  // a position whose page was never reserved: the build fails
  const std::vector<int32_t> one = {5};
  s = m->forward(b, one, {}, &out);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_EQ(m->timing().replays, 0);
  b.requests[0].cached_len = 9;
  s = m->forward(b, one, {}, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m->timing().replays, 1);
}

// SPEC.md §5, §9 rows 5 and 11: the allocator is locked while capturing; a body that allocates,
// or synchronises, fails the capture with a Status instead of baking anything in.
TEST(GraphReplay, AllocationOrSyncDuringCaptureIsAnError) {
  DSA_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(runtime::use_forward_stream(kernels::Backend::kCuda).ok());
  auto g = runtime::capture_forward_graph(kernels::Backend::kCuda, [] {
    return runtime::Buffer<float>::alloc(kernels::Backend::kCuda, 1024).status();
  });
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << g.status().to_string();
  EXPECT_NE(g.status().message().find("during CUDA graph capture"), std::string::npos)
      << g.status().to_string();
  auto g2 = runtime::capture_forward_graph(
      kernels::Backend::kCuda, [] { return runtime::memory_ops(kernels::Backend::kCuda).sync(); });
  EXPECT_FALSE(g2.ok());
  // The stream is usable afterwards.
  auto buf = runtime::Buffer<float>::alloc(kernels::Backend::kCuda, 16);
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  EXPECT_TRUE(runtime::memory_ops(kernels::Backend::kCuda).sync().ok());
}

}  // namespace
}  // namespace dsa::e2e
