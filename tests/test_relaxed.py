"""test_relaxed.py - Relaxed Recursive Transformer conversion, end to end.

Synthetic vanilla Llama checkpoints are converted by bin/mor-convert into
recursive models and run by bin/mor-run; tests/mor_ref.py (plain Python,
float64) is the oracle:
  - every sharing strategy x initialisation (Stepwise, Average, Lower,
    Upper, with the official linspace layer selection when the layers do
    not divide) gives the logits of the tied model built here from the
    official definitions (model/sharing_strategy/llama.py, mor-spec 9.2);
  - full-rank LoRA (with --keep-norms) reproduces the original model;
  - relaxed PEFT checkpoints in the official key grammar (base_layer,
    lora_A, lora_B; mor_cfg.yaml relaxation.lora) give mor_ref's logits
    (W = base + alpha/r * B A) and those of the folded weights converted as
    a plain model;
  - misuse is refused with a message.
Logits must agree within 1e-4.

Also a measuring tool (docs/RELAXED.md), not run by the suite:
    python3 tests/test_relaxed.py --heldout MODEL.gguf VAL.txt [T] [TOKENS]
prints the held-out cross-entropy of MODEL (which must embed its tokenizer)
on the first TOKENS tokens (default 32768) of VAL.txt in windows of T
(default 128), tokenized and windowed as bin/mor-train evaluates (documents
split at blank lines, each ending with <|endoftext|>), computed by bin/mor-run.
"""
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

import mor_ref
import testlib as t

RUN = os.path.join(t.OUT, "bin", "mor-run")
TOL = 1e-4
D, H, HKV, HD, F, V = 32, 4, 2, 8, 64, 97
PROJ = {"self_attn.q_proj": (H * HD, D), "self_attn.k_proj": (HKV * HD, D), "self_attn.v_proj": (HKV * HD, D),
        "self_attn.o_proj": (D, H * HD), "mlp.gate_proj": (F, D), "mlp.up_proj": (F, D), "mlp.down_proj": (D, F)}
NORMS = ("input_layernorm", "post_attention_layernorm")


def mat(rng, r, c, scale):
    return ([r, c], [rng.gauss(0, scale) for _ in range(r * c)])


def layer(rng):
    w = {p + ".weight": mat(rng, r, c, 0.25) for p, (r, c) in PROJ.items()}
    for n in NORMS:
        w[n + ".weight"] = ([D], [1.0 + rng.gauss(0, 0.1) for _ in range(D)])
    return w


def config(L, vocab=V):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": F,
            "num_attention_heads": H, "num_key_value_heads": HKV, "head_dim": HD, "num_hidden_layers": L,
            "vocab_size": vocab, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": True, "hidden_act": "silu"}


def write(d, top, layers, extra=None):
    """A checkpoint directory: top-level tensors, one dict per layer (the
    vocabulary size is the embedding's)."""
    os.makedirs(d, exist_ok=True)
    w = dict(top)
    for i, ly in enumerate(layers):
        for k, v in ly.items():
            w["model.layers.%d.%s" % (i, k)] = v
    w.update(extra or {})
    mor_ref.write_safetensors(os.path.join(d, "model.safetensors"), w)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(len(layers), top["model.embed_tokens.weight"][0][0]), f)
    return d


convert = t.mor_convert

def logits(gguf, ids, tmp):
    return t.mor_logits(gguf, ids, tmp)[0]

def ref_logits(d, ids, mor=None):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    m = mor_ref.Model(os.path.join(d, "model.safetensors"), cfg, dict(type="none", **(mor or {})))
    out, _ = m.forward(ids)
    return [x for r in out for x in r]


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else float("inf")

# ------------------------------------------------ the official tying, from its definitions

def lin_round(a, b, n):
    """[round(x) for x in np.linspace(a, b, n)]: numpy's i * step + a, the last exactly b;
    Python's round (half to even)."""
    if n == 1:
        return [round(a)]
    step = (b - a) / (n - 1)
    return [round(b if i == n - 1 else i * step + a) for i in range(n)]


def official_tie(layers, sharing, nr, init):
    L0 = len(layers)
    mid = 1 if sharing.startswith("middle") else 0
    K = (L0 - 2 * mid) // nr
    if K * nr != L0 - 2 * mid:   # sharing_strategy(): keep the layers at linspace positions
        idx = lin_round(mid, L0 - 1 - mid, K * nr)
        layers = ([layers[0]] if mid else []) + [layers[i] for i in idx] + ([layers[-1]] if mid else [])
    L = len(layers)
    new = [dict(ly) for ly in layers]
    cyc = sharing in ("cycle", "middle_cycle")
    for i in range(K):
        tar = [mid + (i + r * K if cyc else i * nr + r) for r in range(nr)]
        if init == "stepwise":
            src = lin_round(mid, L - 1 - mid, K)[i]
        elif init == "lower":
            src = mid + i
        elif init == "upper":
            src = L - mid - K + i
        for key in layers[0]:
            if init == "average":
                vals = [layers[tt][key][1] for tt in tar]
                w = (layers[tar[0]][key][0], [sum(v) / nr for v in zip(*vals)])
            else:
                w = layers[src][key]
            for tt in tar:
                new[tt][key] = w
    return new


def f32(vals):
    return list(struct.unpack("<%df" % len(vals), struct.pack("<%df" % len(vals), *vals)))

# ------------------------------------------------ cases

def check_ties(tmp, rng):
    cases = [("cycle", 2, "average", 6), ("middle_cycle", 2, "stepwise", 6), ("sequence", 3, "lower", 6),
             ("middle_sequence", 2, "upper", 6), ("cycle", 3, "stepwise", 8), ("middle_cycle", 2, "average", 9),
             ("sequence", 2, "upper", 7)]
    for n, (sharing, nr, init, L) in enumerate(cases):
        top = {"model.embed_tokens.weight": mat(rng, V, D, 1.0), "model.norm.weight": ([D], [1.0] * D)}
        layers = [layer(rng) for _ in range(L)]
        d = write(os.path.join(tmp, "tie%d" % n), top, layers)
        out = os.path.join(tmp, "tie%d.gguf" % n)
        ok, msg = convert(d, out, ["--num-recursion", str(nr), "--sharing", sharing, "--init", init])
        name = "%s x%d, %s, %d layers" % (sharing, nr, init, L)
        if not t.check(ok, "%s: converts (%s)" % (name, msg[-160:])):
            continue
        tied = official_tie(layers, sharing, nr, init)
        # the averages are stored as float32, as the converter rounds them
        tied = [{k: (v[0], f32(v[1])) for k, v in ly.items()} for ly in tied]
        e = write(os.path.join(tmp, "tie%d_ref" % n), top, tied)
        ids = [rng.randrange(V) for _ in range(10)]
        diff = maxdiff(logits(out, ids, tmp), ref_logits(e, ids))
        t.check(diff <= TOL and "N_r=%d" % nr in msg,
                "%s: logits of the officially tied model (%.2g); %s" % (name, diff, msg.split("(", 1)[-1][:70]))


def check_full_rank(tmp, rng):
    top = {"model.embed_tokens.weight": mat(rng, V, D, 1.0), "model.norm.weight": ([D], [1.0] * D)}
    layers = [layer(rng) for _ in range(6)]
    d = write(os.path.join(tmp, "full"), top, layers)
    ids = [rng.randrange(V) for _ in range(12)]
    want = ref_logits(d, ids)
    for init, sharing in (("average", "cycle"), ("stepwise", "middle_cycle")):
        out = os.path.join(tmp, "full_%s.gguf" % init)
        ok, msg = convert(d, out, ["--num-recursion", "2", "--sharing", sharing, "--init", init, "--lora-rank", "64",
                                   "--keep-norms"])
        if t.check(ok, "full rank, %s, %s: converts (%s)" % (init, sharing, msg[-160:])):
            diff = maxdiff(logits(out, ids, tmp), want)
            t.check(diff <= TOL, "full rank, %s, %s: the recursive model reproduces the original (%.2g)" %
                    (init, sharing, diff))
    # without the LoRA the tied model is another model; with rank 4 it is closer
    errs = []
    for flags in (["--init", "average"], ["--init", "average", "--lora-rank", "4"]):
        out = os.path.join(tmp, "part.gguf")
        ok, _ = convert(d, out, ["--num-recursion", "2", "--sharing", "cycle", "--keep-norms"] + flags)
        errs.append(maxdiff(logits(out, ids, tmp), want) if ok else float("inf"))
    t.check(errs[0] > 10 * TOL and errs[1] < errs[0],
            "rank 4 is between tying (logit error %.3g) and the original (%.3g)" % (errs[0], errs[1]))


def check_gguf_input(tmp, rng):
    """A libmor GGUF (with a tokenizer) as the input: made recursive at full
    rank it still computes the original; its tokenizer is carried over."""
    vocab = 300   # tests/data/convert/tok_smollm has 268 tokens
    top = {"model.embed_tokens.weight": mat(rng, vocab, D, 1.0), "model.norm.weight": ([D], [1.0] * D)}
    d = write(os.path.join(tmp, "gg"), top, [layer(rng) for _ in range(4)])
    plain, rec = os.path.join(tmp, "gg_plain.gguf"), os.path.join(tmp, "gg_rec.gguf")
    tok = os.path.join(t.ROOT, "tests", "data", "convert", "tok_smollm", "tokenizer.json")
    ok, msg = convert(d, plain, ["--tokenizer", tok])
    ok2, msg2 = convert(plain, rec, ["--num-recursion", "2", "--sharing", "cycle", "--init", "average", "--lora-rank",
                                     "q=64,k=64,v=64,o=64,gate=64,up=64,down=64", "--keep-norms"])
    if not t.check(ok and ok2, "GGUF input: converts (%s)" % (msg2 if ok else msg)[-200:]):
        return
    ids = [rng.randrange(vocab) for _ in range(10)]
    diff = maxdiff(logits(rec, ids, tmp), ref_logits(d, ids))
    t.check(diff <= TOL and "tokenizer" in msg2 and "N_r=2" in msg2,
            "GGUF input: the recursive full-rank model reproduces the original (%.2g) and keeps the tokenizer" % diff)
    p = subprocess.run([RUN, "-q", "-m", rec, "-p", "hello world", "-n", "3", "--greedy", "--print-ids"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t.check(p.returncode == 0, "GGUF input: the converted model tokenizes and generates (%s)" % (p.stderr.strip()[-100:]))


def peft_checkpoint(tmp, name, rng, sharing, nr, targets, ranks, cfg_lora):
    """A relaxed recursive baseline in the official grammar, its mor_cfg.yaml,
    and the same model with W + s B A folded into plain per-layer weights."""
    mid = 1 if sharing.startswith("middle") else 0
    K = 2
    L = K * nr + 2 * mid
    top = {"model.embed_tokens.weight": mat(rng, V, D, 1.0), "model.norm.weight": ([D], [1.0] * D)}
    slots = [layer(rng) for _ in range(K)]
    layers = [layer(rng) if (mid and i in (0, L - 1)) else slots[(i - mid) % K] for i in range(L)]
    relaxed, folded = [], []
    for i, ly in enumerate(layers):
        rl, fl = {}, {}
        for key, w in ly.items():
            proj = key[:-len(".weight")]
            short = proj.rsplit(".", 1)[-1]
            if proj in PROJ and short in targets and not (mid and i in (0, L - 1)):
                out_, in_ = PROJ[proj]
                r = ranks[short]
                A, B = mat(rng, r, in_, 0.3), mat(rng, out_, r, 0.3)
                rl[proj + ".base_layer.weight"] = w
                rl[proj + ".lora_A.default.weight"] = A
                rl[proj + ".lora_B.default.weight"] = B
                s = cfg_lora["alpha_pattern"] if cfg_lora.get("alpha_pattern") else cfg_lora["alpha"] / r
                fw = list(w[1])
                for o in range(out_):
                    for c in range(in_):
                        fw[o * in_ + c] += s * sum(B[1][o * r + q] * A[1][q * in_ + c] for q in range(r))
                fl[key] = (w[0], fw)
            else:
                rl[key] = w
                fl[key] = w
        relaxed.append(rl)
        folded.append(fl)
    d = write(os.path.join(tmp, name), top, relaxed)
    cfg = {"recursive": {"enable": True, "num_recursion": nr, "sharing": sharing},
           "relaxation": {"enable": True, "method": "lora", "lora": cfg_lora}}
    with open(os.path.join(d, "mor_cfg.yaml"), "w") as f:
        json.dump(cfg, f)   # JSON is YAML (the converter reads either)
    fd = write(os.path.join(tmp, name + "_folded"), top, folded)
    return d, fd


def check_peft(tmp, rng):
    variants = [
        ("cycle, alpha_pattern 2 (the official default), q/v/o/gate/down", "cycle", 2,
         ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"], {"q_proj": 4, "v_proj": 4, "o_proj": 5, "gate_proj": 6,
                                                                  "down_proj": 6},
         {"r": 5, "alpha": 10, "alpha_pattern": 2.0, "target_modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
          "rank_pattern": {"self_attn": 4, "ffn": 6}}),
        ("middle-cycle x3, alpha / r (alpha 8, r 4), every projection", "middle_cycle", 3,
         ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
         {p: 4 for p in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")},
         {"r": 4, "alpha": 8, "alpha_pattern": None, "target_modules": ["self_attn", "mlp"]}),
    ]
    for n, (name, sharing, nr, targets, ranks, cfg_lora) in enumerate(variants):
        d, fd = peft_checkpoint(tmp, "peft%d" % n, rng, sharing, nr, targets, ranks, cfg_lora)
        out, fout = os.path.join(tmp, "peft%d.gguf" % n), os.path.join(tmp, "peft%d_folded.gguf" % n)
        ok, msg = convert(d, out, [])
        ok2, msg2 = convert(fd, fout, [])
        if not t.check(ok and ok2 and "LoRA" in msg, "PEFT %s: converts (%s)" % (name, (msg if not ok else msg2)[-200:])):
            continue
        ids = [rng.randrange(V) for _ in range(10)]
        got, fold = logits(out, ids, tmp), logits(fout, ids, tmp)
        scale = cfg_lora["alpha_pattern"] or {p: cfg_lora["alpha"] / r for p, r in ranks.items()}
        want = ref_logits(d, ids, {"lora_scale": scale})
        d1, d2 = maxdiff(got, want), maxdiff(got, fold)
        t.check(d1 <= TOL and d2 <= TOL, "PEFT %s: logits = mor_ref's (%.2g) = the folded weights' (%.2g)" % (name, d1, d2))
        base = ref_logits(d, ids, {"lora_scale": 0.0})
        t.check(maxdiff(got, base) > 100 * TOL, "PEFT %s: the deltas matter (%.3g without them)" % (name, maxdiff(got, base)))
    # the scale comes from the config: without one the conversion is refused, and flags stand in
    d, _ = peft_checkpoint(tmp, "peft_noconf", rng, "cycle", 2, ["q_proj"], {"q_proj": 3}, {"r": 3, "alpha": 6})
    os.remove(os.path.join(d, "mor_cfg.yaml"))
    ok, msg = convert(d, os.path.join(tmp, "x.gguf"), ["--num-recursion", "2", "--sharing", "cycle"])
    t.check(not ok and "scale" in msg, "PEFT without its config is refused: %s" % msg[-150:])
    ok, msg = convert(d, os.path.join(tmp, "x.gguf"), ["--num-recursion", "2", "--sharing", "cycle", "--lora-alpha", "6"])
    t.check(ok, "... and converts with --lora-alpha (%s)" % msg[-120:])
    with open(os.path.join(d, "mor_cfg.yaml"), "w") as f:
        json.dump({"recursive": {"enable": True, "num_recursion": 2, "sharing": "cycle"},
                   "relaxation": {"enable": True, "lora": {"r": 5, "alpha": 6, "target_modules": ["q_proj"]}}}, f)
    ok, msg = convert(d, os.path.join(tmp, "x.gguf"), [])
    t.check(not ok and "rank" in msg, "PEFT whose ranks disagree with relaxation.lora.r is refused: %s" % msg[-150:])


def check_misuse(tmp, rng):
    top = {"model.embed_tokens.weight": mat(rng, V, D, 1.0), "model.norm.weight": ([D], [1.0] * D)}
    d = write(os.path.join(tmp, "mis"), top, [layer(rng) for _ in range(4)])
    out = os.path.join(tmp, "mis.gguf")
    for flags, want, what in (
            (["--num-recursion", "2", "--sharing", "cycle"], "--init", "untied layers without --init"),
            (["--lora-rank", "4"], "--init", "--lora-rank without --init"),
            (["--init", "average"], "num-recursion", "--init without --num-recursion"),
            (["--num-recursion", "2", "--sharing", "cycle", "--init", "average", "--lora-rank", "q=4,x=2"], "projection",
             "an unknown projection in --lora-rank")):
        ok, msg = convert(d, out, flags)
        t.check(not ok and want in msg, "refused: %s (%s)" % (what, msg[-140:]))


def heldout(model, val, T=128, max_tokens=32768):
    """Mean next-token cross-entropy, as mor-train's evaluate() windows it."""
    with open(val, "rb") as f:
        text = f.read()
    parts, i = [], 0
    while i < len(text):   # mor-train's tokenize_file(): a document, its newline, then <|endoftext|>
        end = text.find(b"\n\n", i)
        e = end + 1 if end >= 0 else len(text)
        if e > i:
            parts.append(text[i:e] + b"<|endoftext|>")
        i = e + 1 if end >= 0 else len(text)
        while i < len(text) and text[i:i + 1] == b"\n":
            i += 1
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "val.txt")
        with open(src, "wb") as f:
            f.write(b"".join(parts))
        p = subprocess.run([RUN, "-m", model, "--tokenize-file", src], stdout=subprocess.PIPE, text=True, check=True)
        toks = [int(x) for x in p.stdout.split()]
        windows = (len(toks) - 1) // T
        if windows * T > max_tokens:
            windows = max_tokens // T
        total, n = 0.0, 0
        for w in range(windows):
            ids, tgt = toks[w * T:w * T + T], toks[w * T + 1:w * T + T + 1]
            lg = logits(model, ids, tmp)
            Vm = len(lg) // T
            for r in range(T):
                row = lg[r * Vm:(r + 1) * Vm]
                m = max(row)
                total += m + math.log(sum(math.exp(x - m) for x in row)) - row[tgt[r]]
                n += 1
    return total / n, n


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--heldout":
        args = sys.argv[2:]
        ce, n = heldout(args[0], args[1], *(int(a) for a in args[2:4]))
        print("heldout_loss=%.4f tokens=%d model=%s" % (ce, n, args[0]))
        return
    rng = random.Random(20240611)
    with tempfile.TemporaryDirectory() as tmp:
        check_ties(tmp, rng)
        check_full_rank(tmp, rng)
        check_gguf_input(tmp, rng)
        check_peft(tmp, rng)
        check_misuse(tmp, rng)
    t.finish()


if __name__ == "__main__":
    main()
