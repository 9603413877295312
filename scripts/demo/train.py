"""Train the demo model on the CPU: the trunk (transformers' Qwen3_5MoeForCausalLM), then the MTP head on the
frozen trunk; evaluate; save a standard HF folder with `mtp.*` added.

    train.py DATA_DIR OUT_HF_DIR [--trunk-steps N] [--mtp-steps N] [--bench]

DATA_DIR comes from data.py. Seeded; 2 torch threads. Writes OUT_HF_DIR/{config.json, model.safetensors,
tokenizer files, generation_config.json} and OUT_HF_DIR/../metrics.json.
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

SEED = 20261201
SEQ = 256
BATCH = 8


def fast_unit_lower_solve():
    """transformers' GDN torch fallback solves (I + N) X = B per 64-token chunk with torch.linalg.solve_triangular
    (unit lower triangular), which is slow on the CPU. (I + N)^-1 = (I - N)(I + N^2)(I + N^4)...(I + N^32) for the
    strictly lower (nilpotent) 64x64 N: the same function in a dozen batched matmuls (differences ~1e-6)."""
    orig = torch.linalg.solve_triangular

    def solve(A, B, *, upper, left=True, unitriangular=False, out=None):
        n = A.shape[-1]
        if upper or not left or not unitriangular or out is not None or n > 64 or A.shape[-2] != n:
            return orig(A, B, upper=upper, left=left, unitriangular=unitriangular, out=out)
        X = -A.tril(-1)
        inv = torch.eye(n, dtype=A.dtype, device=A.device) + X
        P = X
        k = 2
        while k < n:
            P = P @ P
            inv = inv + inv @ P
            k *= 2
        return inv @ B

    torch.linalg.solve_triangular = solve


def windows(arr, n, gen):
    starts = torch.randint(0, len(arr) - SEQ - 1, (n,), generator=gen).numpy()
    return torch.from_numpy(np.stack([arr[s:s + SEQ] for s in starts]).astype(np.int64))


def heldout_windows(arr):
    n = len(arr) // SEQ
    return torch.from_numpy(arr[: n * SEQ].reshape(n, SEQ).astype(np.int64))


def lr_at(step, progress, peak, warmup):
    """Linear warmup over `warmup` steps, then cosine to 10% of peak as `progress` (0..1) goes to 1. progress is
    max(step / max_steps, elapsed / time_budget), so the schedule completes within the time budget on a slow or
    shared machine (the step count then depends on the machine; metrics.json records it)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def make_optimizer(params, lr):
    decay = [p for p in params if p.ndim >= 2]
    other = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


@torch.no_grad()
def eval_trunk(model, held):
    """Mean NLL (nats/token) over windows of SEQ tokens, each predicting tokens 1..SEQ-1 of the window."""
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(held), BATCH):
        x = held[i:i + BATCH]
        logits = model(input_ids=x).logits
        tot += F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum").item()
        n += x[:, 1:].numel()
    model.train()
    return tot / n


def bigram_nll(train, held_windows, V):
    """Interpolated bigram (add-0.5 unigram); lambda picked on the held-out set itself (favours the baseline)."""
    uni = np.bincount(train, minlength=V).astype(np.float64) + 0.5
    uni /= uni.sum()
    pair = train[:-1].astype(np.int64) * V + train[1:]
    keys, counts = np.unique(pair, return_counts=True)
    ctx = np.bincount(train[:-1], minlength=V).astype(np.float64)
    h = held_windows.numpy()
    prev, nxt = h[:, :-1].reshape(-1), h[:, 1:].reshape(-1)
    q = prev * V + nxt
    idx = np.searchsorted(keys, q)
    idx = np.minimum(idx, len(keys) - 1)
    c = np.where(keys[idx] == q, counts[idx], 0).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        pb = np.where(ctx[prev] > 0, c / np.maximum(ctx[prev], 1), 0.0)
    best = None
    for lam in (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95):
        nll = -np.mean(np.log(lam * pb + (1 - lam) * uni[nxt]))
        if best is None or nll < best[0]:
            best = (float(nll), lam)
    return best


def trunk_hidden(model, x):
    return model.model(input_ids=x).last_hidden_state  # after model.norm


def mtp_loss(mtp, model, x, reduction="mean"):
    with torch.no_grad():
        h = trunk_hidden(model, x)
    logits = mtp(model, x, h)
    return logits, F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction=reduction)


@torch.no_grad()
def eval_mtp(mtp, model, held):
    """Top-1 accuracy of the MTP head at predicting x_{p+1} from (x_p, h_{p-1}), i.e. token t+2 seen from the
    trunk's hidden at t = p-1, for p >= 1 (the zero-hidden first row is excluded); plus its NLL."""
    mtp.eval()
    hit, n, nll = 0, 0, 0.0
    for i in range(0, len(held), BATCH):
        x = held[i:i + BATCH]
        logits, loss = mtp_loss(mtp, model, x, reduction="sum")
        pred = logits[:, 1:-1].argmax(-1)
        hit += (pred == x[:, 2:]).sum().item()
        n += x[:, 2:].numel()
        nll += loss.item()
    mtp.train()
    return hit / n, nll / (held[:, 1:].numel())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=common.DIMS["num_hidden_layers"])
    ap.add_argument("--trunk-steps", type=int, default=3000)
    ap.add_argument("--mtp-steps", type=int, default=3000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--mtp-lr", type=float, default=1e-3)
    ap.add_argument("--trunk-budget-s", type=float, default=2700.0, help="trunk wall-clock budget")
    ap.add_argument("--mtp-budget-s", type=float, default=600.0)
    ap.add_argument("--experts", default="grouped_mm", help="transformers experts implementation")
    ap.add_argument("--bench", action="store_true", help="time a few steps and exit")
    ap.add_argument("--exact-solve", action="store_true", help="keep torch.linalg.solve_triangular in the GDN")
    ap.add_argument("--eval-limit", type=int, default=0, help="at most this many held-out windows (smoke tests)")
    a = ap.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    if not a.exact_solve:
        fast_unit_lower_solve()
    data, out = Path(a.data), Path(a.out)
    stats = json.loads((data / "data_stats.json").read_text())
    ids = stats["special_ids"]
    train = np.load(data / "train.npy")
    held = {"docs": heldout_windows(np.load(data / "heldout_docs.npy")),
            "chat": heldout_windows(np.load(data / "heldout_chat.npy"))}
    if a.eval_limit:
        held = {k: v[: a.eval_limit] for k, v in held.items()}

    from transformers import Qwen3_5MoeForCausalLM
    cfg = common.build_config(ids, num_hidden_layers=a.layers)
    cfg._experts_implementation = a.experts
    model = Qwen3_5MoeForCausalLM(cfg).float()
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"trunk params {n_params / 1e6:.2f} M", flush=True)
    gen = torch.Generator().manual_seed(SEED)
    opt = make_optimizer(list(model.parameters()), a.lr)
    log = []
    t0 = time.time()
    steps = 6 if a.bench else a.trunk_steps
    done = 0
    for step in range(steps):
        progress = max(step / steps, (time.time() - t0) / a.trunk_budget_s)
        if progress >= 1.0:
            print(f"trunk time budget reached after {done} steps", flush=True)
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, progress, a.lr, warmup=min(40, steps // 10 + 1))
        x = windows(train, BATCH, gen)
        o = model(input_ids=x, output_router_logits=True)
        ce = F.cross_entropy(o.logits[:, :-1].reshape(-1, o.logits.shape[-1]), x[:, 1:].reshape(-1))
        loss = ce + cfg.router_aux_loss_coef * o.aux_loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        done = step + 1
        el = time.time() - t0
        if step % 20 == 0 or a.bench:
            print(f"step {step} ce {ce.item():.3f} aux {o.aux_loss.item():.3f} {el:.0f}s ({el / done:.2f} s/step)", flush=True)
            log.append((step, round(ce.item(), 4), round(el, 1)))
            if step % 100 == 0:
                print(f"  lr {opt.param_groups[0]['lr']:.2e} progress {progress:.3f}", flush=True)
    trunk_s = time.time() - t0
    if a.bench:
        return

    res = {"trunk_params": n_params, "trunk_steps": done, "trunk_tokens": done * BATCH * SEQ, "trunk_train_s": round(trunk_s),
           "seq": SEQ, "batch": BATCH, "lr": a.lr, "seed": SEED, "trunk_log": log}
    # ---- evaluation: held-out perplexity vs bigram ----
    for k, hw in held.items():
        nll = eval_trunk(model, hw)
        bnll, lam = bigram_nll(train, hw, cfg.vocab_size)
        res[f"ppl_{k}"] = round(math.exp(nll), 2)
        res[f"bigram_ppl_{k}"] = round(math.exp(bnll), 2)
        res[f"bigram_lambda_{k}"] = lam
        res[f"heldout_tokens_{k}"] = int(hw[:, 1:].numel())
        print(f"held-out {k}: ppl {math.exp(nll):.2f}  bigram {math.exp(bnll):.2f} (lambda {lam})", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out.parent / "trunk.pt")

    # ---- MTP head on the frozen trunk ----
    for p in model.parameters():
        p.requires_grad_(False)
    model.eval()  # no dropout anywhere; eval only changes nothing else
    mtp = common.MtpHead(cfg).float()
    last_attn = max(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    mtp.layers[0].load_state_dict(model.model.layers[last_attn].state_dict())  # init from the last trunk attention layer
    torch.nn.init.normal_(mtp.fc.weight, std=cfg.initializer_range)
    with torch.no_grad():  # start close to "pass the hidden through": fc ~ [0 | I]
        mtp.fc.weight[:, cfg.hidden_size:] += torch.eye(cfg.hidden_size)
    mtp.train()
    mopt = make_optimizer(list(mtp.parameters()), a.mtp_lr)
    t1 = time.time()
    mdone = 0
    for step in range(a.mtp_steps):
        progress = max(step / a.mtp_steps, (time.time() - t1) / a.mtp_budget_s)
        if progress >= 1.0:
            print(f"mtp time budget reached after {mdone} steps", flush=True)
            break
        for g in mopt.param_groups:
            g["lr"] = lr_at(step, progress, a.mtp_lr, warmup=20)
        x = windows(train, BATCH, gen)
        _, loss = mtp_loss(mtp, model, x)
        mopt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        mopt.step()
        mdone = step + 1
        el = time.time() - t1
        if step % 20 == 0:
            print(f"mtp step {step} ce {loss.item():.3f} {el:.0f}s", flush=True)
    res.update(mtp_steps=mdone, mtp_train_s=round(time.time() - t1))
    for k, hw in held.items():
        acc, nll = eval_mtp(mtp, model, hw)
        res[f"mtp_top1_t+2_{k}"] = round(acc, 4)
        res[f"mtp_ppl_{k}"] = round(math.exp(nll), 2)
        print(f"held-out {k}: MTP t+2 top-1 {acc:.4f}, MTP ppl {math.exp(nll):.2f}", flush=True)

    save_hf(model, mtp, cfg, ids, out)
    (out.parent / "metrics.json").write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "trunk_log"}, indent=2))


def save_hf(model, mtp, cfg, ids, out):
    from safetensors.torch import load_file, save_file
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    st = out / "model.safetensors"
    sd = load_file(str(st))
    sd.update(mtp.hf_state_dict())
    save_file(sd, str(st), metadata={"format": "pt"})
    c = json.loads((out / "config.json").read_text())
    c.pop("_experts_implementation", None)
    c["mtp_num_hidden_layers"] = 1
    c["mtp_use_dedicated_embeddings"] = False
    (out / "config.json").write_text(json.dumps(c, indent=2) + "\n")
    gen = {"bos_token_id": None, "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
           "pad_token_id": ids["<|endoftext|>"], "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    common.write_tokenizer(out)


if __name__ == "__main__":
    main()
