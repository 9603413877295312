"""Convert the trained HF folder to GGUF (MTP kept) and check it: gguf-py metadata/tensors, transformers'
greedy chat replies, llama.cpp's (the oracle harness) greedy replies on the GGUF.

    check.py HF_DIR OUT_GGUF [--outtype q8_0] [--json samples.json]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

ORACLE_DIR = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache" / "rill-oracle"))
PROMPTS = [
    ([{"role": "user", "content": "What does os.path.join do?"}], True),
    ([{"role": "user", "content": "What is the capital of France?"}], True),
    ([{"role": "user", "content": "What is 12 + 7?"}], True),
    ([{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Write a Python function that reverses a string."}], True),
    ([{"role": "user", "content": "Hello! Who are you?"}], False),
    ([{"role": "user", "content": "Explain json.dumps in Python."}], False),
]


def convert(hf, out, outtype):
    cmd = [sys.executable, str(common.REPO / "scripts" / "fixtures" / "convert.py"), str(hf), "--outtype", outtype,
           "--outfile", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-3000:])


def check_gguf(path, n_layer, vocab):
    sys.path.insert(0, str(ORACLE_DIR / "llama.cpp" / "gguf-py"))
    import gguf
    rd = gguf.GGUFReader(str(path))
    kv = {f.name: f for f in rd.fields.values()}

    def val(k):
        f = kv[k]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(f.parts[f.data[0]]).decode()
        if f.types and f.types[0] == gguf.GGUFValueType.ARRAY:
            return [f.parts[i].tolist()[0] if hasattr(f.parts[i], "tolist") else f.parts[i] for i in f.data]
        return f.parts[f.data[0]].tolist()[0]

    names = [t.name for t in rd.tensors]
    nextn = sorted(n for n in names if n.startswith(f"blk.{n_layer}."))
    info = {
        "arch": val("general.architecture"),
        "block_count": val("qwen35moe.block_count"),
        "nextn_predict_layers": val("qwen35moe.nextn_predict_layers"),
        "n_tensors": len(names),
        "mtp_tensors": nextn,
        "eos_token_id": val("tokenizer.ggml.eos_token_id"),
        "n_vocab_tokens": len(kv["tokenizer.ggml.tokens"].data),
        "has_chat_template": "tokenizer.chat_template" in kv,
        "pre": val("tokenizer.ggml.pre"),
        "types": sorted({t.tensor_type.name for t in rd.tensors}),
    }
    assert info["arch"] == "qwen35moe", info
    assert info["nextn_predict_layers"] == 1 and info["block_count"] == n_layer + 1, info
    for t in ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight",
              "attn_q.weight", "ffn_gate_exps.weight", "ffn_down_shexp.weight"):
        assert f"blk.{n_layer}.{t}" in names, t
    assert info["has_chat_template"] and info["n_vocab_tokens"] == vocab, info
    return info


def hf_greedy(model, tok, ids, max_new, eos):
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(x, max_new_tokens=max_new, do_sample=False, eos_token_id=eos, pad_token_id=eos)
    return out[0, len(ids):].tolist()


def llama_greedy(gguf_path, ids, n_gen):
    prefix = "/tmp/rill_demo_oracle"
    cmd = [str(ORACLE_DIR / "llama_oracle"), str(gguf_path), prefix, str(n_gen), "2"] + [str(i) for i in ids]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    lines = dict(l.split(" ", 1) for l in r.stdout.strip().splitlines() if " " in l)
    return [int(t) for t in lines["GEN"].split()]


def upto(toks, eos):
    return toks[: toks.index(eos) + 1] if eos in toks else toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf")
    ap.add_argument("gguf")
    ap.add_argument("--outtype", default="q8_0")
    ap.add_argument("--json", default=None)
    ap.add_argument("--max-new", type=int, default=120)
    a = ap.parse_args()
    torch.set_num_threads(2)
    hf, gg = Path(a.hf), Path(a.gguf)
    gg.parent.mkdir(parents=True, exist_ok=True)
    convert(hf, gg, a.outtype)
    cfg = json.loads((hf / "config.json").read_text())
    info = check_gguf(gg, cfg["num_hidden_layers"], cfg["vocab_size"])
    info["size_bytes"] = gg.stat().st_size
    print(json.dumps({k: v for k, v in info.items()}, indent=1))

    from transformers import Qwen3_5MoeForCausalLM
    model, li = Qwen3_5MoeForCausalLM.from_pretrained(str(hf), dtype=torch.float32, output_loading_info=True)
    model.eval()
    print("HF load info:", {k: (v if not isinstance(v, (list, set)) else sorted(v)[:4]) for k, v in li.items()})
    tok = common.load_tokenizer(hf)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    samples = []
    for msgs, think in PROMPTS:
        prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        h = upto(hf_greedy(model, tok, ids, a.max_new, eos), eos)
        l = upto(llama_greedy(gg, ids, a.max_new), eos)
        s = dict(prompt=prompt, enable_thinking=think, hf_reply=tok.decode(h), llama_reply=tok.decode(l),
                 hf_ends_im_end=bool(h and h[-1] == eos), llama_ends_im_end=bool(l and l[-1] == eos),
                 same_tokens=h == l, n_tokens=len(h))
        samples.append(s)
        print("=" * 70)
        print(prompt + s["hf_reply"])
        print(f"-- HF ends with <|im_end|>: {s['hf_ends_im_end']}; llama.cpp ends with it: {s['llama_ends_im_end']}; "
              f"same tokens: {s['same_tokens']}")
        if not s["same_tokens"]:
            print("-- llama.cpp:", s["llama_reply"])
    if a.json:
        Path(a.json).write_text(json.dumps(dict(gguf=info, samples=samples), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
