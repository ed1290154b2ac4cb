#include "dsa/kernels/indexer_query/indexer_query_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dsa/core/fp8_quant.h"
#include "dsa/kernels/common/paged_cache.h"
#include "dsa/kernels/hadamard/hadamard.h"
#include "dsa/kernels/indexer_write/indexer_q_quant.h"
#include "dsa/testing/random.h"

namespace dsa::kernels {

namespace {

// The fused projection's row around the indexer heads: q_b's columns before them (a tiny q_b
// width), some after; both hold large random sentinels, which would move an amax if read.
constexpr int32_t kBefore = 3 * 64;
constexpr int32_t kAfter = 64;
constexpr int32_t kTablePositions = 4096;

const char* style_name(RopeStyle s) {
  return s == RopeStyle::kInterleaved ? "interleaved" : "non-interleaved";
}

// The step of the e4m3 grid scaled by 2^e in the binade of magnitude m >= 0 (subnormal below
// 2^-6; 448's binade is the last), as a double.
double e4m3_step(int32_t e, double m) {
  const double y = std::ldexp(m, -e);
  int32_t b = y < 0x1p-6 ? -6 : std::ilogb(y);
  b = std::min(b, 8);
  return std::ldexp(1.0, b - 3 + e);
}

// The bf16 step above |v| (the larger of the two around it).
double bf16_step_above(bf16 v) {
  const bf16 mag{static_cast<uint16_t>(v.bits & 0x7FFFu)};
  const bf16 next{static_cast<uint16_t>(mag.bits + 1)};
  return double(bf16_to_float(next)) - double(bf16_to_float(mag));
}

struct Reference {
  std::vector<bf16> r;  // [T * H, 128]: the Hadamard output, before the quantisation
  std::vector<uint8_t> q8;
  std::vector<float> w;
};

// The separate CPU references on a dense copy of the heads, as the unfused model ran them.
Status reference(const IndexerQueryParams& p, const std::vector<float>& w0, Reference* out) {
  const int64_t blocks = int64_t{p.num_tokens} * p.num_heads;
  out->r.resize(size_t(blocks) * kIndexHeadDim);
  out->q8.assign(out->r.size(), 0);
  out->w = w0;
  IndexerQueryParams q = p;
  q.q8 = out->q8.data();
  q.w = out->w.data();
  // The quantisation reads r after the Hadamard and leaves it: the dense buffer is r.
  return run_query_separately(q, out->r.data(),
                              {copy_rows_host, rope_ref, hadamard_ref, indexer_q_quant_ref});
}

// One block (token t, head h): the weight exact for the scale it implies, that scale the
// reference's or where one bf16 ulp of the amax takes it, every dequantised value within what one
// bf16 ulp of the Hadamard output allows.
Status compare_block(const IndexerQueryParams& p, const Reference& ref,
                     const std::vector<float>& w0, int64_t b) {
  const int32_t t = static_cast<int32_t>(b / p.num_heads),
                h = static_cast<int32_t>(b % p.num_heads);
  const char* style = style_name(p.style);
  const bf16* r = &ref.r[size_t(b) * kIndexHeadDim];
  float amax = 0.f;
  for (int32_t k = 0; k < kIndexHeadDim; ++k) amax = std::max(amax, std::fabs(bf16_to_float(r[k])));
  const uint16_t amax_bits = float_to_bf16(amax).bits;  // exact: amax is a bf16 value
  const int32_t e_ref = pow2_scale_exponent(amax);
  const int32_t e_lo = pow2_scale_exponent(
      bf16_to_float(bf16{static_cast<uint16_t>(amax_bits == 0 ? 0 : amax_bits - 1)}));
  const int32_t e_hi =
      pow2_scale_exponent(bf16_to_float(bf16{static_cast<uint16_t>(amax_bits + 1)}));

  const float wf = w0[size_t(b)] * p.fold;  // as indexer_q_quant_ref: (w * fold) * 2^e
  const float got_w = p.w[b];
  const bool normal = std::isfinite(got_w) && got_w != 0.f;  // then e is a small integer
  const int32_t e = normal ? std::ilogb(got_w) - std::ilogb(wf) : 0;
  if (!(normal && got_w == std::ldexp(wf, e))) {
    return internal_error(fmt::format(
        "indexer_query ({}): token {} head {}: w = {}: not w * fold * 2^e (w {}, fold {}; "
        "reference {})",
        style, t, h, got_w, w0[size_t(b)], p.fold, ref.w[size_t(b)]));
  }
  if (e < e_lo || e > e_hi) {
    return internal_error(fmt::format(
        "indexer_query ({}): token {} head {}: scale 2^{} (w = {}), expected 2^{} (2^{}..2^{} "
        "within 1 bf16 ulp of the amax {})",
        style, t, h, e, got_w, e_ref, e_lo, e_hi, amax));
  }
  for (int32_t k = 0; k < kIndexHeadDim; ++k) {
    const size_t i = size_t(b) * kIndexHeadDim + size_t(k);
    const uint8_t code = p.q8[i];
    const double got = std::ldexp(double(e4m3_to_float(e4m3{code})), e);
    const double want = std::ldexp(double(e4m3_to_float(e4m3{ref.q8[i]})), e_ref);
    const double rv = bf16_to_float(r[k]), ulp = bf16_step_above(r[k]);
    // Rounding to nearest moves a value by at most half the step of the binade it starts in:
    // the reference's from |r|, the op's from its own Hadamard output, at most |r| + ulp.
    const double tol =
        ulp + 0.5 * (e4m3_step(e, std::fabs(rv) + ulp) + e4m3_step(e_ref, std::fabs(rv)));
    if (!(std::fabs(got - want) <= tol)) {  // NaN codes fail here
      return internal_error(fmt::format(
          "indexer_query ({}): token {} head {} value {}: code {:#04x} * 2^{} = {}, reference "
          "{:#04x} * 2^{} = {} (Hadamard output {}, tolerance {})",
          style, t, h, k, code, e, got, ref.q8[i], e_ref, want, rv, tol));
    }
  }
  return ok_status();
}

}  // namespace

Status copy_rows_host(bf16* dense, const bf16* rows, int64_t ld, int64_t width, int32_t count) {
  for (int32_t t = 0; t < count; ++t) {
    std::memcpy(dense + int64_t{t} * width, rows + int64_t{t} * ld, size_t(width) * sizeof(bf16));
  }
  return ok_status();
}

Status run_query_separately(const IndexerQueryParams& p, bf16* dense,
                            const QueryConstituents& ops) {
  const int64_t row = int64_t{p.num_heads} * kIndexHeadDim;
  DSA_RETURN_IF_ERROR(ops.copy_rows(dense, p.q, p.q_token_stride, row, p.num_tokens));
  RopeParams rp;
  rp.x = dense;
  rp.positions = p.positions;
  rp.cos = p.cos;
  rp.sin = p.sin;
  rp.num_tokens = p.num_tokens;
  rp.num_heads = p.num_heads;
  rp.token_stride = row;
  rp.head_stride = kIndexHeadDim;
  rp.num_positions = p.num_positions;
  rp.style = p.style;
  DSA_RETURN_IF_ERROR(ops.rope(rp));
  const int64_t blocks = int64_t{p.num_tokens} * p.num_heads;
  DSA_RETURN_IF_ERROR(ops.hadamard({dense, dense, static_cast<int32_t>(blocks)}));
  return ops.quant({dense, p.q8, p.w, blocks, p.fold});
}

Status check_indexer_query(IndexerQueryFn op, int32_t tokens, int32_t heads, uint64_t seed) {
  if (tokens < 1 || heads < 1) {
    return invalid_argument(fmt::format(
        "check_indexer_query: tokens = {}, heads = {}: both must be >= 1", tokens, heads));
  }
  testing::Rng rng(seed);
  const int64_t row = int64_t{heads} * kIndexHeadDim;
  const int64_t ld = kBefore + row + kAfter;
  const int64_t blocks = int64_t{tokens} * heads;

  std::vector<float> cos(size_t(kTablePositions) * kRopePairs), sin(cos.size());
  DSA_RETURN_IF_ERROR(rope_table_ref({RopeConfig{}, kTablePositions, cos.data(), sin.data()}));

  // The projection's rows: sentinels around the heads, each head at its own scale, one all zero.
  std::vector<bf16> buf(size_t(tokens) * size_t(ld));
  for (int32_t t = 0; t < tokens; ++t) {
    bf16* x = &buf[size_t(t) * size_t(ld)];
    for (int64_t j = 0; j < kBefore; ++j) x[j] = float_to_bf16(rng.normal() * 4096.f);
    for (int64_t j = kBefore + row; j < ld; ++j) x[j] = float_to_bf16(rng.normal() * 4096.f);
    for (int32_t h = 0; h < heads; ++h) {
      const bool zero = int64_t{t} * heads + h == blocks / 2;
      const float scale = zero ? 0.f : std::ldexp(1.f, int(rng.randint(-8, 8)));
      for (int32_t k = 0; k < kIndexHeadDim; ++k)
        x[kBefore + int64_t{h} * kIndexHeadDim + k] = float_to_bf16(rng.normal() * scale);
    }
  }
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  for (auto& v : pos) v = int32_t(rng.randint(0, kTablePositions - 1));
  pos[0] = 0;
  if (tokens > 1) pos[size_t(tokens) - 1] = kTablePositions - 1;  // both ends of the table
  std::vector<float> w0(static_cast<size_t>(blocks));
  for (auto& v : w0) {
    do v = rng.normal();
    while (std::fabs(v) < 0x1p-8f);  // a weight whose exponent shows the scale's
  }
  const float fold = static_cast<float>(1.0 / std::sqrt(double(heads) * kIndexHeadDim));
  const std::vector<bf16> buf0 = buf;

  for (RopeStyle style : {RopeStyle::kNonInterleaved, RopeStyle::kInterleaved}) {
    std::vector<uint8_t> q8(size_t(blocks) * kIndexHeadDim, 0xEE);
    std::vector<float> w = w0;
    IndexerQueryParams p;
    p.q = buf.data() + kBefore;
    p.q_token_stride = ld;
    p.q8 = q8.data();
    p.w = w.data();
    p.num_tokens = tokens;
    p.num_heads = heads;
    p.fold = fold;
    p.style = style;
    p.positions = pos.data();
    p.cos = cos.data();
    p.sin = sin.data();
    p.num_positions = kTablePositions;
    DSA_RETURN_IF_ERROR(op(p));
    if (std::memcmp(buf.data(), buf0.data(), buf.size() * sizeof(bf16)) != 0) {
      return internal_error(fmt::format("indexer_query ({}): q was written", style_name(style)));
    }
    Reference ref;
    DSA_RETURN_IF_ERROR(reference(p, w0, &ref));
    for (int64_t b = 0; b < blocks; ++b) DSA_RETURN_IF_ERROR(compare_block(p, ref, w0, b));
  }
  return ok_status();
}

}  // namespace dsa::kernels
