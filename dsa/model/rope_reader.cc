#include "dsa/model/rope_reader.h"

#include <algorithm>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "dsa/model/model_limits.h"

namespace dsa::model {

using nlohmann::json;

namespace {

// The RoPE kind: HF writes it as "type" in V3 configs and as "rope_type" in newer ones; some
// write both, which must then agree.
Status read_rope_type(const JsonReader& r, std::initializer_list<std::string_view> allowed,
                      std::string_view why, std::string* type) {
  const char* type_key = r.has("type") ? "type" : "rope_type";
  DSA_RETURN_IF_ERROR(r.get(type_key, type));
  DSA_RETURN_IF_ERROR(r.require(std::find(allowed.begin(), allowed.end(), *type) != allowed.end(),
                                type_key, *type, why));
  if (r.has("type") && r.has("rope_type")) {
    std::string other;
    DSA_RETURN_IF_ERROR(r.get("rope_type", &other));
    DSA_RETURN_IF_ERROR(
        r.require(other == *type, "rope_type", other, "must equal type = \"" + *type + "\""));
  }
  return ok_status();
}

// YaRN's parameters, from rope_scaling or from a "yarn" rope_parameters.
Status read_yarn(const JsonReader& r, RopeScaling* s) {
  DSA_RETURN_IF_ERROR(r.get("factor", &s->factor));
  DSA_RETURN_IF_ERROR(r.require(s->factor >= 1, "factor", s->factor, "must be >= 1"));
  DSA_RETURN_IF_ERROR(r.get_in_range("original_max_position_embeddings", 1, kMaxPositions,
                                     &s->original_max_position_embeddings));
  DSA_RETURN_IF_ERROR(r.get("beta_fast", &s->beta_fast));
  DSA_RETURN_IF_ERROR(r.get("beta_slow", &s->beta_slow));
  DSA_RETURN_IF_ERROR(r.require(s->beta_slow > 0, "beta_slow", s->beta_slow, "must be > 0"));
  // c(beta) falls as beta grows; beta_fast bounds the ramp from below, beta_slow from above.
  DSA_RETURN_IF_ERROR(r.require(s->beta_fast > s->beta_slow, "beta_fast", s->beta_fast,
                                "must be > beta_slow = " + json(s->beta_slow).dump()));
  DSA_RETURN_IF_ERROR(r.get("mscale", &s->mscale));
  DSA_RETURN_IF_ERROR(r.get("mscale_all_dim", &s->mscale_all_dim));
  DSA_RETURN_IF_ERROR(
      r.require(s->mscale_all_dim > 0, "mscale_all_dim", s->mscale_all_dim, "must be > 0"));
  // §8.3 leaves cos/sin unscaled, which is exact only when the two mscales cancel.
  return r.require(s->mscale == s->mscale_all_dim, "mscale", s->mscale,
                   "must equal mscale_all_dim = " + json(s->mscale_all_dim).dump() +
                       " (cos/sin are not rescaled, SPEC §8.3)");
}

Status read_rope_scaling(const JsonReader& parent, RopeScaling* s) {
  DSA_ASSIGN_OR_RETURN(JsonReader r, parent.child("rope_scaling"));
  DSA_RETURN_IF_ERROR(
      read_rope_type(r, {"yarn"}, "unsupported; only \"yarn\" is implemented", &s->type));
  return read_yarn(r, s);
}

// rope_parameters (GLM-5; transformers >= 5 writes every config this way): rope_theta and the
// kind in one object, with YaRN's parameters beside them when the kind is "yarn". "default" is
// plain RoPE: factor 1, so the YaRN formula of §8.3 reduces to theta_i and sm_scale to
// (qk_nope + qk_rope)^-1/2, as in vLLM and SGLang (their mscale applies to yarn only).
Status read_rope_parameters(const JsonReader& parent, ModelConfig* c) {
  DSA_ASSIGN_OR_RETURN(JsonReader r, parent.child("rope_parameters"));
  RopeScaling& s = c->rope_scaling;
  DSA_RETURN_IF_ERROR(read_rope_type(
      r, {"default", "yarn"}, "unsupported; dsa implements \"default\" and \"yarn\"", &s.type));
  DSA_RETURN_IF_ERROR(r.get("rope_theta", &c->rope_theta));
  DSA_RETURN_IF_ERROR(r.require(c->rope_theta > 1, "rope_theta", c->rope_theta, "must be > 1"));
  if (r.has("partial_rotary_factor")) {
    // dsa rotates qk_rope_head_dim = 64 dims, all of the rope part.
    double f = 0;
    DSA_RETURN_IF_ERROR(r.get("partial_rotary_factor", &f));
    DSA_RETURN_IF_ERROR(r.require(f == 1.0, "partial_rotary_factor", f,
                                  "must be 1 (all qk_rope_head_dim dims are rotated)"));
  }
  // A top-level copy (older spellings kept beside the new one) must not say otherwise.
  if (parent.has("rope_theta")) {
    double top = 0;
    DSA_RETURN_IF_ERROR(parent.get("rope_theta", &top));
    DSA_RETURN_IF_ERROR(parent.require(top == c->rope_theta, "rope_theta", top,
                                       "must equal rope_parameters.rope_theta = " +
                                           json(c->rope_theta).dump() + " when both are given"));
  }
  if (parent.has("rope_scaling")) {
    DSA_ASSIGN_OR_RETURN(const json* rs, parent.find("rope_scaling"));
    DSA_RETURN_IF_ERROR(parent.require(rs->is_null(), "rope_scaling", *rs,
                                       "must be absent or null when rope_parameters is given "
                                       "(dsa reads one of them)"));
  }
  if (s.type == "yarn") return read_yarn(r, &s);
  s.factor = 1.0;
  s.original_max_position_embeddings = c->max_position_embeddings;
  s.beta_fast = 32.0;
  s.beta_slow = 1.0;
  s.mscale = 1.0;
  s.mscale_all_dim = 1.0;
  return ok_status();
}

}  // namespace

Status read_rope(const JsonReader& r, ModelConfig* c) {
  if (r.has("rope_parameters")) return read_rope_parameters(r, c);
  DSA_RETURN_IF_ERROR(r.get("rope_theta", &c->rope_theta));
  DSA_RETURN_IF_ERROR(r.require(c->rope_theta > 1, "rope_theta", c->rope_theta, "must be > 1"));
  return read_rope_scaling(r, &c->rope_scaling);
}

}  // namespace dsa::model
