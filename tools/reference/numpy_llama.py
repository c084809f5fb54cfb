#!/usr/bin/env python3
"""numpy_llama.py — a second, independent reference for cinder's forward pass.

A plain numpy forward pass over the weights of a GGUF file (read with the `gguf` package,
quantized tensors dequantized by gguf.quants) for the llama, qwen2, qwen3 and gemma3
architectures, and a checker that replays a golden file (tests/golden/<name>.json, made
by make_golden.py from llama.cpp) and reports how far its logits are from llama.cpp's.

Two modes:
  f32   the model's math in float32 with float64 dot products: what the model means.
  ggml  the same, plus the roundings llama.cpp's CPU backend does on the way: K, V and Q
        rounded to f16 (F16 KV cache; ggml converts the f32 operand of a matmul against
        f16 to f16), softmax probabilities rounded to f16 before P·V, activations rounded
        to the 8-bit block format a quantized weight is dotted with (Q8_0 / Q8_1 / Q8_K),
        or to f16 against an F16 weight, GELU through ggml's f16 table, and rope angles
        accumulated in float as ggml does.
f32 mode against a golden shows what an engine computing in f32 can expect; ggml mode
reproduces llama.cpp to f32 rounding until summation-order differences flip one of those
roundings (see README.md for the measured floors).

Dev-only (not run by `make test`); needs numpy and gguf (pip).

  python3 tools/reference/numpy_llama.py tests/golden/stories260k.json [--model PATH] [--mode f32|ggml]
  python3 tools/reference/numpy_llama.py --vs-dump DUMP.npz --model PATH --tokens 1,403,407
      (DUMP.npz from dump_tensors.py: per layer, max |difference| of each intermediate)
"""

import argparse
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ROPE_NORM, ROPE_NEOX = 0, 2

Q8_0_ACT = {QT.Q4_0, QT.Q5_0, QT.Q8_0}
Q8_1_ACT = {QT.Q4_1, QT.Q5_1}  # Q8_1: Q8_0's rounding plus s = f16(d * sum q) per block
Q8_K_ACT = {QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K}


class Model:
    """Hyperparameters and dequantized weights of one GGUF file."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.kv = {}
        for k, f in r.fields.items():
            if k.startswith("tokenizer.ggml.") and k.split(".")[-1] in ("tokens", "scores", "token_type", "merges"):
                continue
            try:
                self.kv[k] = f.contents()
            except Exception:
                pass
        a = self.arch = self.kv["general.architecture"]
        if a not in ("llama", "qwen2", "qwen3", "gemma3"):
            raise SystemExit("numpy_llama: architecture %s not handled" % a)
        g = lambda k, d=None: self.kv.get(a + "." + k, d)
        self.n_embd = int(g("embedding_length"))
        self.n_layer = int(g("block_count"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.head_dim = int(g("attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(g("rope.dimension_count", self.head_dim))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(g("rope.freq_base", 10000.0))
        self.rope_type = ROPE_NORM if a == "llama" else ROPE_NEOX
        self.n_swa = int(g("attention.sliding_window", 0)) if a == "gemma3" else 0
        self.w, self.wtype, self.wmin = {}, {}, {}
        for t in r.tensors:
            self.w[t.name] = np.ascontiguousarray(
                gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
            self.wtype[t.name] = t.tensor_type
            if t.tensor_type in Q8_1_ACT:  # keep each block's min m (f16 after d)
                bs = 20 if t.tensor_type == QT.Q4_1 else 24
                raw = np.asarray(t.data, dtype=np.uint8).reshape(-1, bs)
                self.wmin[t.name] = raw[:, 2:4].copy().view(np.float16).astype(np.float32).reshape(
                    self.w[t.name].shape[0], -1)
        self.out_name = "output.weight" if "output.weight" in self.w else "token_embd.weight"
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def layer_swa(self, il):
        # gemma3: five sliding-window layers, then one global (llama.cpp's pattern of 6)
        return self.arch == "gemma3" and self.n_swa > 0 and il % 6 < 5

    def layer_rope_base(self, il):
        return 10000.0 if self.layer_swa(il) else self.rope_base


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def fake_q8(x, block, k_style, with_sums=False):
    """Rounds each row of x to the 8-bit block format ggml dots quantized weights with.
    with_sums: also returns per block d16 * sum(q) and the f16 s of Q8_1, shapes (T, nb)."""
    shp = x.shape
    xb = x.reshape(-1, block).astype(np.float32)
    if k_style:  # Q8_K: scale from the signed value of largest magnitude, d in f32
        idx = np.argmax(np.abs(xb), axis=1)
        mx = xb[np.arange(xb.shape[0]), idx]
        iscale = np.where(mx != 0, np.float32(-127.0) / np.where(mx != 0, mx, 1), 0).astype(np.float32)
        q = np.minimum(np.rint(iscale[:, None] * xb), 127)
        d = np.where(iscale != 0, np.float32(1.0) / np.where(iscale != 0, iscale, 1), 0).astype(np.float32)
    else:        # Q8_0 / Q8_1: d = amax / 127 stored as f16
        amax = np.max(np.abs(xb), axis=1)
        d32 = (amax / np.float32(127.0)).astype(np.float32)
        idv = np.where(amax != 0, np.float32(127.0) / np.where(amax != 0, amax, 1), 0).astype(np.float32)
        q = np.rint(xb * idv[:, None])
        d = f16(d32)
    xq = (q * d[:, None]).astype(np.float32).reshape(shp)
    if not with_sums:
        return xq
    sq = q.sum(axis=1)
    nb = shp[-1] // block
    return xq, (d * sq).reshape(-1, nb), f16(d32 * sq).reshape(-1, nb)


def matmul(m, x, name, mode):
    """x (T, n_in) @ W^T -> (T, n_out); W stored (n_out, n_in) as in GGUF."""
    W = m.w[name]
    if mode == "ggml":
        t = m.wtype[name]
        if t == QT.F16:
            x = f16(x)
        elif t in Q8_0_ACT:
            x = fake_q8(x, 32, False)
        elif t in Q8_1_ACT:  # the min term uses Q8_1's f16 block sum s, not sum(x_q)
            x, dsum, s = fake_q8(x, 32, False, with_sums=True)
            out = x.astype(np.float64) @ W.T.astype(np.float64)
            out += (s - dsum).astype(np.float64) @ m.wmin[name].T.astype(np.float64)
            return out.astype(np.float32)
        elif t in Q8_K_ACT:
            x = fake_q8(x, 256, True)
    return (x.astype(np.float64) @ W.T.astype(np.float64)).astype(np.float32)


def rmsnorm(x, w, eps):
    x64 = x.astype(np.float64)
    ms = np.mean(x64 * x64, axis=-1, keepdims=True)
    scale = (1.0 / np.sqrt(ms + eps)).astype(np.float32)
    return (x * scale).astype(np.float32) * w


def rope(x, pos, n_rot, base, rope_type, mode):
    """x (T, H, D), rotated in place of a copy. NORM pairs (2i, 2i+1); NEOX pairs (i, i+n_rot/2)."""
    half = n_rot // 2
    if mode == "ggml":  # ggml: theta_i = pos * theta_scale^i, accumulated in float
        ts = np.float32(np.power(np.float32(base), np.float32(-2.0) / np.float32(n_rot)))
        theta = np.empty((len(pos), half), dtype=np.float32)
        cur = np.asarray(pos, dtype=np.float32)
        for i in range(half):
            theta[:, i] = cur
            cur = (cur * ts).astype(np.float32)
        theta = theta.astype(np.float64)
    else:
        inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
        theta = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c = np.cos(theta).astype(np.float32)[:, None, :]
    s = np.sin(theta).astype(np.float32)[:, None, :]
    y = x.copy()
    if rope_type == ROPE_NORM:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        y[..., 0:n_rot:2] = a * c - b * s
        y[..., 1:n_rot:2] = a * s + b * c
    else:
        a, b = x[..., :half], x[..., half:n_rot]
        y[..., :half] = a * c - b * s
        y[..., half:n_rot] = a * s + b * c
    return y


GELU_C = np.float32(0.79788456080286535587989211986876)


def gelu(x, mode):
    def g(v):
        v = v.astype(np.float32)
        inner = (GELU_C * v * (np.float32(1.0) + np.float32(0.044715) * v * v)).astype(np.float32)
        t = np.tanh(inner.astype(np.float64)).astype(np.float32)  # tanhf, correctly rounded
        return (np.float32(0.5) * v * (np.float32(1.0) + t)).astype(np.float32)
    if mode != "ggml":
        return g(x)
    # ggml: input rounded to f16, looked up in an f16 table; clamped outside (-10, 10)
    y = f16(g(f16(x)))
    y = np.where(x <= -10.0, np.float32(0.0), y)
    return np.where(x >= 10.0, x, y).astype(np.float32)


def attention(q, k, v, pos, scale, n_swa, mode):
    """q (T, H, D), k/v (T, Hkv, D) -> (T, H*D). Causal; optional sliding window."""
    T, H, D = q.shape
    Hkv = k.shape[1]
    if mode == "ggml":
        q, k, v = f16(q), f16(k), f16(v)
    out = np.empty((T, H, D), dtype=np.float32)
    p = np.asarray(pos)
    mask = p[None, :] <= p[:, None]
    if n_swa > 0:
        mask &= (p[:, None] - p[None, :]) < n_swa
    for h in range(H):
        hk = h // (H // Hkv)
        s = (q[:, h, :].astype(np.float64) @ k[:, hk, :].T.astype(np.float64)).astype(np.float32)
        s = (s * np.float32(scale)).astype(np.float64)
        s = np.where(mask, s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        e = np.exp(s)
        pr = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        if mode == "ggml":
            pr = f16(pr)
        out[:, h, :] = (pr.astype(np.float64) @ v[:, hk, :].astype(np.float64)).astype(np.float32)
    return out.reshape(T, H * D)


def forward(m, tokens, mode="f32", trace=None):
    """Logits (T, n_vocab) for every position of tokens (positions 0..T-1). With a dict as
    trace, also records intermediate tensors under llama.cpp's graph names (l_out-3, ...)
    for comparing against a llama.cpp eval-callback dump."""
    rec = (lambda k, v: trace.__setitem__(k, np.array(v, dtype=np.float32))) if trace is not None \
        else (lambda k, v: None)
    T = len(tokens)
    pos = np.arange(T)
    x = m.w["token_embd.weight"][np.asarray(tokens)].astype(np.float32)
    if m.arch == "gemma3":
        x = x * np.float32(np.sqrt(np.float32(m.n_embd)))
    H, Hkv, D = m.n_head, m.n_head_kv, m.head_dim
    for il in range(m.n_layer):
        p = "blk.%d." % il
        h = rmsnorm(x, m.w[p + "attn_norm.weight"], m.eps)
        rec("attn_norm-%d" % il, h)
        q = matmul(m, h, p + "attn_q.weight", mode)
        k = matmul(m, h, p + "attn_k.weight", mode)
        v = matmul(m, h, p + "attn_v.weight", mode)
        if p + "attn_q.bias" in m.w:
            q = q + m.w[p + "attn_q.bias"]
            k = k + m.w[p + "attn_k.bias"]
            v = v + m.w[p + "attn_v.bias"]
        q, k, v = q.reshape(T, H, D), k.reshape(T, Hkv, D), v.reshape(T, Hkv, D)
        if p + "attn_q_norm.weight" in m.w:
            q = rmsnorm(q, m.w[p + "attn_q_norm.weight"], m.eps)
            k = rmsnorm(k, m.w[p + "attn_k_norm.weight"], m.eps)
        base = m.layer_rope_base(il)
        q = rope(q, pos, m.n_rot, base, m.rope_type, mode)
        k = rope(k, pos, m.n_rot, base, m.rope_type, mode)
        if m.arch == "gemma3":
            q = (q * np.float32(1.0 / np.sqrt(np.float32(D)))).astype(np.float32)
            scale = 1.0
        else:
            scale = 1.0 / np.sqrt(np.float32(D))
        a = attention(q, k, v, pos, scale, m.n_swa if m.layer_swa(il) else 0, mode)
        rec("kqv_out-%d" % il, a)
        a = matmul(m, a, p + "attn_output.weight", mode)
        if m.arch == "gemma3":
            a = rmsnorm(a, m.w[p + "post_attention_norm.weight"], m.eps)
        x = x + a
        rec("ffn_inp-%d" % il, x)
        h = rmsnorm(x, m.w[p + "ffn_norm.weight"], m.eps)
        gt = matmul(m, h, p + "ffn_gate.weight", mode)
        up = matmul(m, h, p + "ffn_up.weight", mode)
        if m.arch == "gemma3":
            act = gelu(gt, mode) * up
        else:
            act = (gt / (np.float32(1.0) + np.exp(-gt))).astype(np.float32) * up
        f = matmul(m, act.astype(np.float32), p + "ffn_down.weight", mode)
        if m.arch == "gemma3":
            f = rmsnorm(f, m.w[p + "post_ffw_norm.weight"], m.eps)
        rec("ffn_out-%d" % il, f)
        x = x + f
        rec("l_out-%d" % il, x)
    x = rmsnorm(x, m.w["output_norm.weight"], m.eps)
    rec("result_norm", x)
    return matmul(m, x, m.out_name, mode)


def compare(m, golden, mode):
    """Replays each case (prompt + greedy tokens in one causal pass); returns a summary."""
    worst = 0.0
    worst_at = None
    diffs = []
    n_top1 = n_pos = 0
    n_greedy_same = 0
    min_margin = float("inf")
    for ci, case in enumerate(golden["cases"]):
        toks = case["tokens"] + case["greedy"][:-1]
        logits = forward(m, toks, mode)
        n_p = len(case["tokens"])
        tops = case["prompt_top"] + case["greedy_top"][1:]
        for j, top in enumerate(tops):
            row = logits[j]
            for tid, lg in top:
                d = abs(float(row[tid]) - lg)
                diffs.append(d)
                if d > worst:
                    worst, worst_at = d, (ci, j, tid, lg, float(row[tid]))
            n_pos += 1
            n_top1 += int(np.argmax(row) == top[0][0])
            min_margin = min(min_margin, top[0][1] - top[1][1])
        # does numpy's own greedy follow the golden's?
        same = 0
        for i, tok in enumerate(case["greedy"]):
            if int(np.argmax(logits[n_p - 1 + i])) != tok:
                break
            same += 1
        n_greedy_same += same
        print("  case %d: %d prompt tokens, numpy greedy matches %d/%d" %
              (ci, n_p, same, len(case["greedy"])), file=sys.stderr)
    return {"mode": mode, "max_abs_diff_top20": round(worst, 6),
            "mean_abs_diff_top20": round(float(np.mean(diffs)), 6),
            "p99_abs_diff_top20": round(float(np.percentile(diffs, 99)), 6),
            "worst (case, position, id, golden, numpy)": worst_at,
            "top1_agree": "%d/%d" % (n_top1, n_pos),
            "greedy_prefix_total": n_greedy_same, "min_golden_top1_margin": min_margin}


def vs_dump(m, dump_path, tokens, mode):
    """Prints, per layer, max |llama.cpp - numpy| of the intermediates both have."""
    dump = np.load(dump_path)
    trace = {}
    logits = forward(m, tokens, mode, trace)
    trace["result_output"] = logits
    names = ["attn_norm", "kqv_out", "ffn_inp", "l_out"]
    for il in range(m.n_layer):
        cols = []
        for n in names:
            k = "%s-%d" % (n, il)
            if k in dump.files and k in trace:
                a = dump[k].reshape(trace[k].shape)
                cols.append("%s %.2e (max %.1e)" % (n, np.abs(a - trace[k]).max(), np.abs(a).max()))
        print("layer %2d: %s" % (il, " | ".join(cols)))
    for k in ("result_norm", "result_output"):
        if k in dump.files:
            a = dump[k].reshape(-1, trace[k].shape[-1])
            b = trace[k][-a.shape[0]:]  # llama_batch_get_one: logits of the last row only
            print("%s: %.2e (max %.1e)" % (k, np.abs(a - b).max(), np.abs(a).max()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("golden", nargs="?")
    ap.add_argument("--vs-dump", help="an .npz from dump_tensors.py (needs --model, --tokens)")
    ap.add_argument("--tokens", help="comma-separated token ids the dump was made with")
    ap.add_argument("--model", help="GGUF path (default: found by the golden's model name "
                    "in $CINDER_TESTDATA/models, $CINDER_MODELS, build/tiny)")
    ap.add_argument("--mode", choices=["f32", "ggml", "both"], default="both")
    args = ap.parse_args()
    if args.vs_dump:
        if not args.model or not args.tokens:
            raise SystemExit("--vs-dump needs --model and --tokens")
        m = Model(args.model)
        for mode in (["f32", "ggml"] if args.mode == "both" else [args.mode]):
            print("[%s]" % mode)
            vs_dump(m, args.vs_dump, [int(t) for t in args.tokens.split(",")], mode)
        return
    if not args.golden:
        raise SystemExit("give a golden file (or --vs-dump)")
    golden = json.load(open(args.golden))
    path = args.model
    if path is None:
        for d in (os.path.join(os.environ.get("CINDER_TESTDATA", "../shared/testdata"), "models"),
                  os.environ.get("CINDER_MODELS", os.path.expanduser("~/.cache/cinder/models")),
                  "build/tiny"):
            if os.path.exists(os.path.join(d, golden["model"])):
                path = os.path.join(d, golden["model"])
                break
    if path is None:
        raise SystemExit("model %s not found; give --model" % golden["model"])
    m = Model(path)
    for mode in (["f32", "ggml"] if args.mode == "both" else [args.mode]):
        print("%s [%s]" % (args.golden, mode), file=sys.stderr)
        print(json.dumps(compare(m, golden, mode)))


if __name__ == "__main__":
    main()
