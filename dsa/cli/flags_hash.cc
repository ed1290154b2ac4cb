#include "dsa/cli/flags_hash.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dsa::cli {

std::string engine_flags_text(const EngineArgs& a, const EngineSetup& s) {
  const model::ModelOptions& o = s.model;
  std::string t;
  const auto add = [&t](std::string_view name, const auto& value) {
    t += fmt::format("{}={}\n", name, value);
  };
  // Enums as their integers: the ranks run the same dsa build (the launcher execs its own binary;
  // other nodes must run the same one), so the numbering agrees.
  add("model", a.model_dir);
  add("random_weights", o.random_weights);
  add("random_seed", o.random_seed);
  add("backend", int(s.backend));
  add("num_draft_tokens", s.num_draft_tokens);
  add("simulate_accept_length", s.simulate_accept_length);
  add("accept_on", int(s.accept_on));
  add("checked", s.checked);
  add("max_context", o.max_context);
  add("max_requests", o.max_requests);
  add("max_extend_rows", o.max_extend_rows);
  add("prefill_chunk", s.prefill_chunk);
  add("mem_fraction_static", o.mem_fraction_static);
  add("latent_format", int(o.latent_format));
  add("mtp_chain_hidden", int(o.mtp_chain_hidden));
  add("buckets", fmt::format("{}", fmt::join(o.buckets, ",")));
  add("cuda_graphs", o.cuda_graphs);
  add("dp_size", s.dp_size);
  add("ep_size", s.ep_size);
  add("nnodes", s.dist.nnodes);
  return t;
}

uint64_t fnv1a_64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // the FNV offset basis
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;  // the FNV prime
  }
  return h;
}

uint64_t engine_flags_hash(const EngineArgs& a, const EngineSetup& s) {
  return fnv1a_64(engine_flags_text(a, s));
}

}  // namespace dsa::cli
