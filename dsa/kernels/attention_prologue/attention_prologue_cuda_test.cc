// GPU tests of attention_prologue_cuda (SPEC.md §8.4, §8.5 steps 2-3): bit-identical to
// rmsnorm_cuda, rmsnorm_cuda, rope_cuda, layernorm_cuda, rope_cuda and hadamard_cuda run one by
// one on a copy (V3.2's and the tiny model's q_lora, both index RoPE styles, the fused-projection
// layout and three strided buffers), within the constituents' 1 bf16 ulp of the CPU reference,
// the fallback layouts (odd strides, shifted pointers, widths the fused kernel does not take), a
// position outside the table (checked: OutOfRange; unchecked: rows left unrotated), T = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "dsa/core/checked_mode.h"
#include "dsa/cuda/device_buffer.h"
#include "dsa/cuda/stream.h"
#include "dsa/kernels/attention_prologue/attention_prologue.h"
#include "dsa/kernels/attention_prologue/attention_prologue_check.h"
#include "dsa/kernels/common/bf16_round.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/layernorm/layernorm.h"
#include "dsa/kernels/rmsnorm/rmsnorm.h"
#include "dsa/kernels/rope/rope.h"
#include "dsa/testing/device_copy.h"
#include "dsa/testing/first_difference.h"
#include "dsa/testing/gpu_skip.h"
#include "dsa/testing/host_buffers.h"
#include "dsa/testing/poison.h"
#include "dsa/testing/random.h"
#include "dsa/testing/reject_table.h"

namespace dsa::kernels {
namespace {

using cuda::DeviceBuffer;
using testing::dev;
using testing::first_bit_difference;
using testing::host;

constexpr size_t kTail = 40;  // poisoned elements past cq's and k's rows

// Where the three inputs sit in one host image (and its device copy): the fused-projection layout
// (one [T, ld] block of [qa | k_raw | latent]) or three regions of their own strides; every input
// pointer `shift` elements further, and the bf16 norm weights `w_shift` elements into their
// buffers (odd shifts: not 16-byte aligned).
struct Layout {
  std::string name;
  bool fused = true;
  int64_t qa_pad = 0, k_raw_pad = 0, latent_pad = 0;  // separate: stride = width + pad
  int64_t shift = 0;
  int64_t w_shift = 0;
};

struct Case {
  AttentionPrologueInputs in;
  RopeStyle style = RopeStyle::kNonInterleaved;
  Layout layout;
  int64_t qa_ld = 0, k_raw_ld = 0, latent_ld = 0;
  int64_t qa_at = 0, k_raw_at = 0, latent_at = 0;  // offsets into img
  std::vector<bf16> img;                           // the inputs, gaps random
  std::vector<bf16> q_w, kv_w;                     // w_shift elements, then the weight

  Case(int32_t tokens, int32_t q_lora, RopeStyle s, Layout l, uint64_t seed)
      : style(s), layout(std::move(l)) {
    in = testing::or_die(attention_prologue_inputs(tokens, q_lora, seed));
    testing::Rng rng(seed + 1);
    const int64_t T = tokens, sh = layout.shift;
    if (layout.fused) {
      qa_ld = k_raw_ld = latent_ld = in.ld;
      img = rng.bf16_vector(size_t(sh + T * in.ld), 3.f);
      std::memcpy(img.data() + sh, in.rows.data(), in.rows.size() * sizeof(bf16));
      qa_at = sh + in.qa_col(), k_raw_at = sh + in.k_raw_col(), latent_at = sh + in.latent_col();
    } else {
      qa_ld = q_lora + layout.qa_pad, k_raw_ld = kIndexHeadDim + layout.k_raw_pad;
      latent_ld = kQkDim + layout.latent_pad;
      // The latent starts on a 16-byte boundary (8 elements past sh), so only the layout's own
      // pads decide whether the norms can take their vectors.
      qa_at = sh, k_raw_at = qa_at + T * qa_ld;
      latent_at = sh + (k_raw_at + T * k_raw_ld - sh + 7) / 8 * 8;
      img = rng.bf16_vector(size_t(latent_at + T * latent_ld), 3.f);
      for (int64_t t = 0; t < T; ++t) {
        const bf16* row = &in.rows[size_t(t * in.ld)];
        std::memcpy(&img[qa_at + t * qa_ld], row + in.qa_col(), size_t(q_lora) * sizeof(bf16));
        std::memcpy(&img[k_raw_at + t * k_raw_ld], row + in.k_raw_col(),
                    kIndexHeadDim * sizeof(bf16));
        std::memcpy(&img[latent_at + t * latent_ld], row + in.latent_col(), kQkDim * sizeof(bf16));
      }
    }
    q_w = rng.bf16_vector(size_t(layout.w_shift), 1.f);
    q_w.insert(q_w.end(), in.q_a_norm_w.begin(), in.q_a_norm_w.end());
    kv_w = rng.bf16_vector(size_t(layout.w_shift), 1.f);
    kv_w.insert(kv_w.end(), in.kv_a_norm_w.begin(), in.kv_a_norm_w.end());
  }

  std::string name() const {
    return layout.name + " T=" + std::to_string(in.tokens) +
           " q_lora=" + std::to_string(in.q_lora) +
           (style == RopeStyle::kInterleaved ? " interleaved" : " non-interleaved");
  }
};

// One run's device buffers, fresh copies of the case's host images (cq and k poisoned).
struct Run {
  DeviceBuffer<bf16> img, cq, k, q_w, kv_w;
  DeviceBuffer<float> k_w, k_b, cos, sin;
  DeviceBuffer<int32_t> pos;

  explicit Run(const Case& c)
      : img(dev(c.img)),
        cq(testing::poisoned<bf16>(size_t(c.in.tokens) * c.in.q_lora + kTail)),
        k(testing::poisoned<bf16>(size_t(c.in.tokens) * kIndexHeadDim + kTail)),
        q_w(dev(c.q_w)),
        kv_w(dev(c.kv_w)),
        k_w(dev(c.in.k_norm_w)),
        k_b(dev(c.in.k_norm_b)),
        cos(dev(c.in.cos)),
        sin(dev(c.in.sin)),
        pos(dev(c.in.positions)) {}

  AttentionPrologueParams params(const Case& c) {
    AttentionPrologueParams p;
    p.num_tokens = c.in.tokens;
    p.qa = img.data() + c.qa_at;
    p.qa_ld = c.qa_ld;
    p.q_a_norm_w = q_w.data() + c.layout.w_shift;
    p.cq = cq.data();
    p.q_lora = c.in.q_lora;
    p.latent = img.data() + c.latent_at;
    p.latent_ld = c.latent_ld;
    p.kv_a_norm_w = kv_w.data() + c.layout.w_shift;
    p.k_raw = img.data() + c.k_raw_at;
    p.k_raw_ld = c.k_raw_ld;
    p.k_norm_w = k_w.data();
    p.k_norm_b = k_b.data();
    p.k = k.data();
    p.index_rope_style = c.style;
    p.positions = pos.data();
    p.cos = cos.data();
    p.sin = sin.data();
    p.num_positions = c.in.num_positions;
    return p;
  }
};

// The six CUDA ops one by one (run_prologue_separately: their params written out independently).
Status separate_cuda(const AttentionPrologueParams& p) {
  return run_prologue_separately(p, {rmsnorm_cuda, rope_cuda, layernorm_cuda, hadamard_cuda});
}

struct Outputs {
  Status status;
  std::vector<bf16> img, cq, k;
};

Status sync_stream() {
  DSA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cuda::current_stream()));
  return ok_status();
}

// Runs `op` on fresh device copies of the case; its Status and every buffer back on the host.
Outputs run(const Case& c, Status (*op)(const AttentionPrologueParams&)) {
  Run r(c);
  Outputs o;
  o.status = op(r.params(c));
  testing::or_die(sync_stream());
  o.img = host(r.img);
  o.cq = host(r.cq);
  o.k = host(r.k);
  return o;
}

// The fused op against the six separate CUDA ops on the same inputs: every buffer the same bits
// (the input gaps, qa, k_raw and the poisoned tails included). `fuses`: whether the launcher must
// take its one fused launch for this layout (else its fallback), so a dispatch that stopped fusing
// cannot pass as bit-identical.
void expect_bit_identical_to_separate_ops(const Case& c, bool fuses) {
  {
    Run r(c);
    EXPECT_EQ(attention_prologue_cuda_fuses(r.params(c)), fuses) << c.name();
  }
  const Outputs fused = run(c, attention_prologue_cuda);
  const Outputs sep = run(c, separate_cuda);
  ASSERT_TRUE(fused.status.ok()) << c.name() << ": " << fused.status.to_string();
  ASSERT_TRUE(sep.status.ok()) << c.name() << ": " << sep.status.to_string();
  EXPECT_EQ(first_bit_difference(fused.cq, sep.cq), "") << c.name() << ": cq";
  EXPECT_EQ(first_bit_difference(fused.k, sep.k), "") << c.name() << ": k";
  EXPECT_EQ(first_bit_difference(fused.img, sep.img), "") << c.name() << ": inputs / latent";
  // Not vacuous: the rows were written (the poison is a NaN) and the latent changed.
  const size_t T = size_t(c.in.tokens);
  EXPECT_FALSE(testing::is_poison(fused.cq[T * c.in.q_lora - 1])) << c.name();
  EXPECT_FALSE(testing::is_poison(fused.k[T * kIndexHeadDim - 1])) << c.name();
  EXPECT_TRUE(testing::is_poison(fused.k[T * kIndexHeadDim])) << c.name();
  EXPECT_NE(first_bit_difference(fused.img, c.img), "") << c.name();
}

const Layout kFused{"fused layout"};
// Strides that keep every row 16-byte aligned: the fused kernel's path too.
const Layout kSeparateAligned{"separate buffers", false, 8, 24, 64};

TEST(AttentionPrologueCuda, BitIdenticalToSeparateOps) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  uint64_t n = 0;
  for (int32_t T : {1, 4, 33, 257}) {
    for (int32_t q_lora : {1536, 128}) {
      for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
        expect_bit_identical_to_separate_ops(Case(T, q_lora, style, kFused, seed + n++), true);
      }
    }
  }
  // Three buffers of their own strides; q_lora at the fused kernel's widest (2048: 256 threads)
  // and at a thread count that is not a power of two (520: 65 vectors, 96 threads).
  for (int32_t q_lora : {1536, 2048, 520}) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
      expect_bit_identical_to_separate_ops(Case(33, q_lora, style, kSeparateAligned, seed + n++),
                                           true);
      expect_bit_identical_to_separate_ops(Case(5, q_lora, style, kFused, seed + n++), true);
    }
  }
}

// The fused op and the CPU reference: each value within the constituents' 1 bf16 ulp (rmsnorm_cuda
// rounds its fp32 norm, hadamard_cuda its fp32 sums; layernorm and rope are in practice exact).
TEST(AttentionPrologueCuda, WithinOneUlpOfTheCpuReference) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    const Case c(257, 1536, style, kFused, seed + (style == RopeStyle::kInterleaved));
    const Outputs got = run(c, attention_prologue_cuda);
    ASSERT_TRUE(got.status.ok()) << got.status.to_string();
    std::vector<bf16> img = c.img;
    std::vector<bf16> cq(got.cq.size(), testing::poison_value<bf16>());
    std::vector<bf16> k(got.k.size(), testing::poison_value<bf16>());
    AttentionPrologueParams p;
    p.num_tokens = c.in.tokens;
    p.qa = img.data() + c.qa_at;
    p.qa_ld = c.qa_ld;
    p.q_a_norm_w = c.in.q_a_norm_w.data();
    p.cq = cq.data();
    p.q_lora = c.in.q_lora;
    p.latent = img.data() + c.latent_at;
    p.latent_ld = c.latent_ld;
    p.kv_a_norm_w = c.in.kv_a_norm_w.data();
    p.k_raw = img.data() + c.k_raw_at;
    p.k_raw_ld = c.k_raw_ld;
    p.k_norm_w = c.in.k_norm_w.data();
    p.k_norm_b = c.in.k_norm_b.data();
    p.k = k.data();
    p.index_rope_style = style;
    p.positions = c.in.positions.data();
    p.cos = c.in.cos.data();
    p.sin = c.in.sin.data();
    p.num_positions = c.in.num_positions;
    ASSERT_TRUE(attention_prologue_ref(p).ok());
    for (auto [what, g, w] :
         {std::tuple{"cq", &got.cq, &cq}, {"k", &got.k, &k}, {"inputs / latent", &got.img, &img}}) {
      int64_t bad = 0, differ = 0;
      for (size_t i = 0; i < g->size(); ++i) {
        const bf16 a = (*g)[i], b = (*w)[i];
        differ += a.bits != b.bits;
        const bool ok = testing::is_poison(b) ? a.bits == b.bits : bf16_ulp_distance(a, b) <= 1;
        if (!ok && bad++ < 5)
          ADD_FAILURE() << c.name() << " " << what << "[" << i << "] = " << bf16_to_float(a)
                        << ", reference " << bf16_to_float(b);
      }
      EXPECT_EQ(bad, 0) << c.name() << " " << what;
      std::printf("note: %s %s: %lld of %zu values 1 ulp from the CPU reference\n",
                  c.name().c_str(), what, static_cast<long long>(differ), g->size());
    }
  }
}

// The check entry on the CUDA op, through host buffers (the layout it builds is the fused one).
Status attention_prologue_cuda_on_host_buffers(const AttentionPrologueParams& hp) {
  DSA_RETURN_IF_ERROR(validate(hp));
  using P = AttentionPrologueParams;
  const size_t T = size_t(hp.num_tokens);
  const auto span = [&](int64_t ld, int64_t width) { return (T - 1) * size_t(ld) + size_t(width); };
  const size_t tn = size_t(hp.num_positions) * kRopePairs;
  return testing::run_on_host_buffers(
      hp, attention_prologue_cuda, testing::In<&P::qa>{span(hp.qa_ld, hp.q_lora)},
      testing::In<&P::q_a_norm_w>{size_t(hp.q_lora)}, testing::Out<&P::cq>{T * hp.q_lora},
      testing::InOut<&P::latent>{span(hp.latent_ld, kQkDim)},
      testing::In<&P::kv_a_norm_w>{size_t(kLatentDim)},
      testing::In<&P::k_raw>{span(hp.k_raw_ld, kIndexHeadDim)},
      testing::In<&P::k_norm_w>{size_t(kIndexHeadDim)},
      testing::In<&P::k_norm_b>{size_t(kIndexHeadDim)}, testing::Out<&P::k>{T * kIndexHeadDim},
      testing::In<&P::positions>{T}, testing::In<&P::cos>{tn}, testing::In<&P::sin>{tn});
}

TEST(AttentionPrologueCuda, CheckPasses) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  for (auto [T, q_lora] : {std::pair{33, 1536}, {4, 128}, {7, 100}}) {
    Status s = check_attention_prologue(attention_prologue_cuda_on_host_buffers, T, q_lora, seed);
    EXPECT_TRUE(s.ok()) << "T=" << T << " q_lora=" << q_lora << ": " << s.to_string();
  }
}

// Layouts the fused kernel does not take run the six launches: the same bits as those, by
// construction (an unaligned vector load in the fused kernel would instead fault). An odd k_raw_ld
// stays fused (the LayerNorm reads scalars), and must match all the same.
TEST(AttentionPrologueCuda, FallbackLayoutsMatchSeparateOps) {
  DSA_SKIP_WITHOUT_GPU();
  const uint64_t seed = testing::test_seed();
  // The k_raw stride is free (the layernorm reads scalars): that layout still fuses.
  const Layout layouts[] = {{"qa_ld odd", false, 1, 0, 0},
                            {"latent_ld odd", false, 0, 0, 3},
                            {"k_raw_ld odd (the fused kernel takes it)", false, 0, 5, 0},
                            {"inputs shifted by one element", true, 0, 0, 0, 1},
                            {"norm weights shifted by one element", true, 0, 0, 0, 0, 1}};
  uint64_t n = 0;
  for (const Layout& l : layouts) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved})
      expect_bit_identical_to_separate_ops(Case(33, 1536, style, l, seed + n++),
                                           l.name == "k_raw_ld odd (the fused kernel takes it)");
  }
  // Widths: q_lora not a multiple of 8 (the scalar norm), and 4096 (two vectors a thread).
  for (int32_t q_lora : {100, 4096})
    expect_bit_identical_to_separate_ops(
        Case(9, q_lora, RopeStyle::kNonInterleaved, kFused, seed + n++), false);
}

// Checked: a position outside [0, T_rope) is OutOfRange naming the token and the position (on the
// fused path and the fallback), and the error word is left clear for the next call.
TEST(AttentionPrologueCuda, CheckedPositionOutsideTheTableIsOutOfRange) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode checked(true);
  const uint64_t seed = testing::test_seed();
  for (const Layout& l : {kFused, Layout{"qa_ld odd", false, 1}}) {
    for (int32_t bad : {-1, 4096 + 6, INT32_MIN}) {
      Case c(6, 1536, RopeStyle::kNonInterleaved, l, seed);
      c.in.positions[4] = bad;
      const Outputs o = run(c, attention_prologue_cuda);
      EXPECT_EQ(o.status.code(), StatusCode::kOutOfRange) << l.name << ": " << o.status.to_string();
      EXPECT_NE(o.status.message().find("index 4 (value " + std::to_string(bad) + ")"),
                std::string::npos)
          << l.name << ": " << o.status.to_string();
      c.in.positions[4] = 3;
      const Outputs again = run(c, attention_prologue_cuda);
      EXPECT_TRUE(again.status.ok()) << l.name << ": " << again.status.to_string();
    }
  }
}

// Unchecked: the token's latent k_pe and key are left unrotated (the key still normed and
// rotated by the Hadamard), exactly as the separate ops leave them; the other tokens are roped.
TEST(AttentionPrologueCuda, UncheckedPositionOutsideTheTableLeavesRowsUnrotated) {
  DSA_SKIP_WITHOUT_GPU();
  ScopedCheckedMode unchecked(false);
  const uint64_t seed = testing::test_seed();
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNonInterleaved}) {
    for (int32_t bad : {-3, 4096 + 5, INT32_MAX}) {
      Case c(5, 1536, style, kFused, seed);
      c.in.positions[1] = 7;
      c.in.positions[2] = bad;
      expect_bit_identical_to_separate_ops(c, true);
      const Outputs o = run(c, attention_prologue_cuda);
      ASSERT_TRUE(o.status.ok()) << o.status.to_string();
      const size_t pe2 = size_t(c.latent_at + 2 * c.latent_ld + kLatentDim);
      const size_t pe1 = pe2 - size_t(c.latent_ld);
      EXPECT_EQ(
          first_bit_difference(std::vector<bf16>(o.img.begin() + pe2, o.img.begin() + pe2 + 64),
                               std::vector<bf16>(c.img.begin() + pe2, c.img.begin() + pe2 + 64)),
          "")
          << "token 2's k_pe must stay as it was";
      EXPECT_NE(
          first_bit_difference(std::vector<bf16>(o.img.begin() + pe1, o.img.begin() + pe1 + 64),
                               std::vector<bf16>(c.img.begin() + pe1, c.img.begin() + pe1 + 64)),
          "")
          << "token 1's k_pe is roped";
    }
  }
}

TEST(AttentionPrologueCuda, ZeroTokensAndHostChecks) {
  DSA_SKIP_WITHOUT_GPU();
  AttentionPrologueParams p;
  p.q_lora = 1536;
  p.qa_ld = 2240;
  p.latent_ld = 2240;
  p.k_raw_ld = 2240;
  testing::expect_rejects(p, attention_prologue_cuda,
                          {{"no tokens, no pointers", [](auto&) {}, StatusCode::kOk},
                           {"latent_ld", [](auto& q) { q.latent_ld = 512; },
                            StatusCode::kInvalidArgument, "latent_ld = 512"},
                           {"pointers with tokens", [](auto& q) { q.num_tokens = 1; },
                            StatusCode::kInvalidArgument, "num_positions = 0"}});
}

}  // namespace
}  // namespace dsa::kernels
