"""Shared pieces of the demo model: dimensions, the cut-down Qwen3.5 tokenizer, the MTP head.

The trunk is transformers' own `Qwen3_5MoeForCausalLM` (so the saved folder is a standard HF checkpoint);
the MTP head is built from transformers' decoder layer + RMSNorms, with the names of the real release
(`mtp.*`, see shared/research/wave2.md §A.1), because transformers drops `mtp.*` on load and save.
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts" / "fixtures"))
TOKENIZER_SRC = Path("/work/shared/oracle/tokenizer_qwen35")  # the real Qwen3.5 tokenizer (oracle README)

VOCAB = 16384  # model vocabulary: the first VOCAB - 33 BPE ranks + the 33 special tokens of the real tokenizer

DIMS = dict(
    hidden_size=256, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64, shared_expert_intermediate_size=256,
    rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=8192, attention_bias=False,
    attention_dropout=0.0, initializer_range=0.02, router_aux_loss_coef=0.001,
    # head_dim 64 x partial 0.25 = rotary 16 -> 8 frequency pairs -> interleaved mrope sections 3/3/2
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                         mrope_section=[3, 3, 2], mrope_interleaved=True),
)


# ---------------------------------------------------------------------------------------------------------
# tokenizer: first N ranks of the real BPE (with the merges among them) + every special token, after them
# ---------------------------------------------------------------------------------------------------------
def real_added_tokens(src=TOKENIZER_SRC):
    tj = json.loads((src / "tokenizer.json").read_text())
    return sorted(tj["added_tokens"], key=lambda a: a["id"])


def write_tokenizer(out, n_vocab=VOCAB, src=TOKENIZER_SRC):
    """tokenizer.json / tokenizer_config.json / chat_template.jinja for a vocabulary of n_vocab ids.
    Returns the id map {special token: id}."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tj = json.loads((src / "tokenizer.json").read_text())
    specials = real_added_tokens(src)
    n_reg = n_vocab - len(specials)
    vocab = {s: i for s, i in tj["model"]["vocab"].items() if i < n_reg}
    assert len(vocab) == n_reg and all(i in vocab.values() for i in range(256))
    # a merge is kept when both parts and the result are kept (the result has a higher rank than its parts,
    # so this is exactly the BPE of the truncated rank table)
    merges = [m for m in tj["model"]["merges"] if (m[0] + m[1]) in vocab and m[0] in vocab and m[1] in vocab]
    tj["model"]["vocab"] = vocab
    tj["model"]["merges"] = merges
    added = []
    for k, a in enumerate(specials):
        b = dict(a)
        b["id"] = n_reg + k
        added.append(b)
    tj["added_tokens"] = added
    (out / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    tc = json.loads((src / "tokenizer_config.json").read_text())
    tc["added_tokens_decoder"] = {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")} for a in added}
    tc["eos_token"] = "<|im_end|>"
    tc["pad_token"] = "<|endoftext|>"
    tc["model_max_length"] = DIMS["max_position_embeddings"]
    tc.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(tc, indent=2) + "\n")
    shutil.copy(src / "chat_template.jinja", out / "chat_template.jinja")
    return {a["content"]: a["id"] for a in added}


def load_tokenizer(d):
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=str(Path(d) / "tokenizer.json"))
    tok.chat_template = (Path(d) / "chat_template.jinja").read_text()
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    return tok


# ---------------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------------
def build_config(ids, n_vocab=VOCAB, **over):
    import transformers
    c = dict(DIMS, **over)
    L = c["num_hidden_layers"]
    c["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(L)]
    c.update(vocab_size=n_vocab, tie_word_embeddings=False, use_cache=True,
             eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], bos_token_id=None)
    cfg = transformers.Qwen3_5MoeTextConfig(**c)
    cfg.architectures = ["Qwen3_5MoeForCausalLM"]
    cfg.dtype = "float32"
    return cfg


# ---------------------------------------------------------------------------------------------------------
# MTP head (wave2.md §A.4): z = fc(concat(enorm(emb(x_p)), hnorm(h_{p-1}))) -> one full-attention MoE decoder
# layer at position p -> norm -> the trunk's lm_head; predicts x_{p+1}. h is the trunk's post-final-norm
# hidden state; h_{-1} = 0.
# ---------------------------------------------------------------------------------------------------------
class MtpHead(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as M
        H = cfg.hidden_size
        attn_idx = cfg.layer_types.index("full_attention")
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.pre_fc_norm_embedding = M.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = M.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        self.layers = nn.ModuleList([M.Qwen3_5MoeDecoderLayer(cfg, attn_idx)])
        self.norm = M.Qwen3_5MoeRMSNorm(H, eps=cfg.rms_norm_eps)
        assert self.layers[0].block_type == "full_attention"

    def forward(self, trunk, input_ids, h_post_norm):
        """input_ids [B,T]; h_post_norm [B,T,H] = trunk hidden after model.norm at the same positions.
        Returns MTP logits [B,T,V]; row p predicts input_ids[p+1] (i.e. token t+2 from the trunk's hidden t=p-1)."""
        from transformers.masking_utils import create_causal_mask
        lm = trunk.model
        emb = lm.embed_tokens(input_ids)
        h_prev = torch.cat([torch.zeros_like(h_post_norm[:, :1]), h_post_norm[:, :-1]], dim=1)
        z = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(h_prev)], dim=-1))
        B, T = input_ids.shape
        pos = torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)
        pos3 = pos.unsqueeze(0).expand(3, B, T)
        rope = lm.rotary_emb(z, pos3)
        mask = create_causal_mask(config=lm.config, inputs_embeds=z, attention_mask=None,
                                  cache=None, position_ids=pos)
        z = self.layers[0](z, position_embeddings=rope, attention_mask=mask, position_ids=pos)
        return trunk.lm_head(self.norm(z))

    def hf_state_dict(self):
        return {f"mtp.{k}": v.detach().contiguous() for k, v in self.state_dict().items()}
