"""Model configuration: the HF config.json keys of SPEC 8.1 (tiny column) and the tensor list of 8.2."""
import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"


@dataclass
class DSAConfig:
    vocab_size: int = 6144
    hidden_size: int = 256
    intermediate_size: int = 768
    moe_intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_nextn_predict_layers: int = 1
    first_k_dense_replace: int = 1
    moe_layer_freq: int = 1
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    q_lora_rank: int = 128
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 64
    qk_rope_head_dim: int = 64
    v_head_dim: int = 64
    n_routed_experts: int = 4
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    n_group: int = 2
    topk_group: int = 1
    topk_method: str = "noaux_tc"
    scoring_func: str = "sigmoid"
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    index_n_heads: int = 16
    index_head_dim: int = 128
    index_topk: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Dict = field(default_factory=lambda: {
        "type": "yarn", "rope_type": "yarn", "factor": 40.0,
        "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0})
    max_position_embeddings: int = 163840
    tie_word_embeddings: bool = False
    hidden_act: str = "silu"
    attention_bias: bool = False
    attention_dropout: float = 0.0
    initializer_range: float = 0.02
    bos_token_id: int = 0
    eos_token_id: int = 1
    torch_dtype: str = "bfloat16"
    architectures: List[str] = field(default_factory=lambda: ["DeepseekV32ForCausalLM"])
    model_type: str = "deepseek_v32"

    # ---- derived quantities -------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def yarn_mscale(self) -> float:
        """0.1*mscale_all_dim*ln(factor) + 1 (SPEC 8.3)."""
        rs = self.rope_scaling
        return 0.1 * rs.get("mscale_all_dim", 1.0) * math.log(rs["factor"]) + 1.0

    @property
    def sm_scale(self) -> float:
        """MLA softmax scale: qk_head_dim^-1/2 * mscale^2 (tiny: 0.1656269)."""
        return self.qk_head_dim ** -0.5 * self.yarn_mscale ** 2

    def is_moe_layer(self, i: int) -> bool:
        return i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0

    # ---- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> Dict:
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, ensure_ascii=False)
            f.write("\n")

    @classmethod
    def from_dict(cls, d: Dict) -> "DSAConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def load(cls, path: str) -> "DSAConfig":
        with open(path) as f:
            return cls.from_dict(json.load(f))


def expected_tensors(cfg: DSAConfig) -> List[Tuple[str, Tuple[int, ...], str]]:
    """(name, shape, dtype) of every tensor of the shipped checkpoint (SPEC 8.2), MTP copies included."""
    D, V = cfg.hidden_size, cfg.vocab_size
    H, nope, rope, vd = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    Hi, Di = cfg.index_n_heads, cfg.index_head_dim
    out = [("model.embed_tokens.weight", (V, D), "bf16"), ("lm_head.weight", (V, D), "bf16"),
           ("model.norm.weight", (D,), "bf16")]

    def mlp(p, inter):
        return [(p + "gate_proj.weight", (inter, D), "bf16"), (p + "up_proj.weight", (inter, D), "bf16"),
                (p + "down_proj.weight", (D, inter), "bf16")]

    for i in range(cfg.num_hidden_layers + cfg.num_nextn_predict_layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (D,), "bf16"), (p + "post_attention_layernorm.weight", (D,), "bf16"),
                (p + "self_attn.q_a_proj.weight", (cfg.q_lora_rank, D), "bf16"),
                (p + "self_attn.q_a_layernorm.weight", (cfg.q_lora_rank,), "bf16"),
                (p + "self_attn.q_b_proj.weight", (H * (nope + rope), cfg.q_lora_rank), "bf16"),
                (p + "self_attn.kv_a_proj_with_mqa.weight", (cfg.kv_lora_rank + rope, D), "bf16"),
                (p + "self_attn.kv_a_layernorm.weight", (cfg.kv_lora_rank,), "bf16"),
                (p + "self_attn.kv_b_proj.weight", (H * (nope + vd), cfg.kv_lora_rank), "bf16"),
                (p + "self_attn.o_proj.weight", (D, H * vd), "bf16"),
                (p + "self_attn.indexer.wq_b.weight", (Hi * Di, cfg.q_lora_rank), "bf16"),
                (p + "self_attn.indexer.wk.weight", (Di, D), "bf16"),
                (p + "self_attn.indexer.k_norm.weight", (Di,), "bf16"),
                (p + "self_attn.indexer.k_norm.bias", (Di,), "bf16"),
                (p + "self_attn.indexer.weights_proj.weight", (Hi, D), "bf16")]
        if cfg.is_moe_layer(i):
            E = cfg.n_routed_experts
            out += [(p + "mlp.gate.weight", (E, D), "bf16"), (p + "mlp.gate.e_score_correction_bias", (E,), "fp32")]
            for e in range(E):
                out += mlp(p + f"mlp.experts.{e}.", cfg.moe_intermediate_size)
            out += mlp(p + "mlp.shared_experts.", cfg.moe_intermediate_size * cfg.n_shared_experts)
        else:
            out += mlp(p + "mlp.", cfg.intermediate_size)
        if i >= cfg.num_hidden_layers:
            out += [(p + "enorm.weight", (D,), "bf16"), (p + "hnorm.weight", (D,), "bf16"),
                    (p + "eh_proj.weight", (D, 2 * D), "bf16"),
                    (p + "shared_head.norm.weight", (D,), "bf16"),
                    (p + "shared_head.head.weight", (V, D), "bf16"),
                    (p + "embed_tokens.weight", (V, D), "bf16")]
    return out


def param_count(cfg: DSAConfig) -> int:
    return sum(math.prod(s) for _, s, _ in expected_tensors(cfg))


TINY_PARAMS = 19_251_088  # SPEC 8.7
