"""test_families.py - the model families beyond MoR-Llama: Gemma, Gemma 2,
GPT-NeoX (Pythia) and TinyLlama-shaped Llama, converted and run.

For each family, a random test model (tests/family_ref.py, make_model) is
  - written here as a Hugging Face checkpoint (config.json, model.safetensors,
    in the family's own key names) and converted by bin/mor-convert;
  - read as the llama.cpp GGUF file tests/data/families/<family>.lcpp.gguf,
    which llama.cpp's own gguf-py wrote from the same weights (tests/peer/),
    and converted by bin/mor-convert;
and bin/mor-run's logits for fixed token ids must be, from both inputs,
  - within 1e-4 of family_ref.py's float64 forward from the HF modelling code;
  - within 1e-3 of llama.cpp's logits (kept in tests/data/families/, made by
    tests/peer/run.sh): llama.cpp computes GELU from an F16 table; the oracle
    computing GELU the same way ("ggml_gelu") must be within 2e-5 of
    llama.cpp, i.e. the table is the whole difference, and the lines say how
    large it is;
  - the same bits from the two inputs.
Each feature matters: the oracle with it computed wrongly (family_ref's
`off`) differs from the right logits by more than 100 times the tolerance.
llama.cpp's k-quant files (Q2_K .. Q6_K, llama-quantize of the llama model at
family_ref.K256, kept in tests/data/families/ with llama.cpp's logits) convert
with their blocks kept and give llama.cpp's logits within 1e-4.
Decoding one token at a time through the KV cache (sliding window, partial
rotary) gives the oracle's logits at every step, also across context shifts
(1-layer models); results do not depend on the thread count. Relaxed recursive conversion of each family: full-rank
LoRA with --keep-norms reproduces the original within 1e-4 (cycle and
middle-cycle; Gemma 2 then ties a local with a global layer), also from a
libmor GGUF of the family, and rank r leaves exactly the SVD tail as each
projection's weight error (tied layer pairs S + D, S - D with D of a known
spectrum). Unknown architectures and features are refused by name, by the
converter and by the loader.
"""
import math
import os
import random
import struct
import subprocess
import tempfile

import family_ref as F
import gguf_py
import testlib as t

RUN = os.path.join(t.OUT, "bin", "mor-run")
DATA = os.path.join(t.ROOT, "tests", "data", "families")
TOL, PEER_TOL, KQ_TOL = 1e-4, 1e-3, 1e-4
# the features of each family, as family_ref can switch them off
FEATURES = {
    "llama": ["rope_layout"],
    "gemma": ["embed_scale", "norm_offset", "rope_layout"],
    "gemma2": ["embed_scale", "norm_offset", "post_norms", "attn_softcap", "final_softcap", "window", "rope_layout"],
    "gptneox": ["partial_rotary", "rope_layout", "qkv_layout", "parallel_residual", "layer_norm_bias"],
}


convert = t.mor_convert

run_logits = t.mor_logits

def flat(rows):
    return [x for r in rows for x in r]


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else float("inf")


def peer_logits(fam):
    with open(os.path.join(DATA, fam + ".lcpp.logits")) as f:
        return [float(x) for line in f if not line.startswith("#") for x in line.split()]

# ------------------------------------------------------------ vanilla models


def check_family(fam, tmp):
    cfg, w = F.make_model(fam)
    d = F.write_model(os.path.join(tmp, fam), cfg, w)
    hf, gg = os.path.join(tmp, fam + ".hf.gguf"), os.path.join(tmp, fam + ".lcpp.mor.gguf")
    ok1, m1 = convert(d, hf)
    ok2, m2 = convert(os.path.join(DATA, fam + ".lcpp.gguf"), gg)
    if not t.check(ok1 and ok2, "%s: converts from the HF checkpoint and from llama.cpp's GGUF (%s)" %
                   (fam, (m1 if not ok1 else m2)[-200:])):
        return
    want = flat(F.Ref(d).forward(F.IDS))
    peer = peer_logits(fam)
    a, ea = run_logits(hf, F.IDS, tmp)
    b, eb = run_logits(gg, F.IDS, tmp)
    t.check(a is not None and b is not None, "%s: runs (%s)" % (fam, ea or eb))
    da, db = maxdiff(a, want), maxdiff(b, want)
    t.check(da <= TOL and db <= TOL, "%s: logits = the float64 HF oracle's (HF input %.2g, llama.cpp GGUF input %.2g)" %
            (fam, da, db))
    t.check(a == b, "%s: the HF checkpoint and llama.cpp's GGUF of the same weights give the same bits" % fam)
    pa = maxdiff(a, peer)
    gelu = flat(F.Ref(d, ["ggml_gelu"]).forward(F.IDS))
    rest = maxdiff(gelu, peer)
    t.check(pa <= PEER_TOL and rest <= 2e-5,
            "%s: logits within %.0e of llama.cpp's (%.2g); the oracle with llama.cpp's F16-table GELU is %.2g from "
            "llama.cpp, so the GELU table is %s" % (fam, PEER_TOL, pa, rest,
                                                   "all of the difference" if fam != "llama" else "not involved"))
    # the committed GGUF holds make_model's weights (the data and the generator agree)
    g = gguf_py.read(os.path.join(DATA, fam + ".lcpp.gguf"))
    emb = w["gpt_neox.embed_in.weight" if fam == "gptneox" else "model.embed_tokens.weight"][1]
    t.check(g.tensor("token_embd.weight").floats() == emb, "%s: tests/data's llama.cpp GGUF holds family_ref's weights" % fam)
    mg = gguf_py.read(hf)
    t.check((mg.get("mor.format_version"), mg.get("mor.family")) == ((1, None) if fam == "llama" else (3, fam)),
            "%s: the file is format version %s with mor.family %s" % (fam, mg.get("mor.format_version"), mg.get("mor.family")))
    # every feature moves the logits far more than the tolerance
    for feat in FEATURES[fam]:
        dd = maxdiff(flat(F.Ref(d, [feat]).forward(F.IDS)), want)
        t.check(dd > 100 * TOL, "%s: %s matters: the oracle without it is %.3g away" % (fam, feat, dd))
    # threads do not change a bit
    c, _ = run_logits(hf, F.IDS, tmp, ["--threads", "2"])
    t.check(c == a, "%s: 2 threads give the same bits as 1" % fam)
    check_steps(fam, d, hf, tmp)


def check_steps(fam, d, gguf, tmp):
    """Greedy generation through the KV cache: every step's logits are the
    oracle's forward over the sequence so far."""
    prompt, n = F.IDS[:5], 7
    out = os.path.join(tmp, "steps.f32")
    p = subprocess.run([RUN, "-q", "-m", gguf, "--ids", ",".join(map(str, prompt)), "-n", str(n), "--greedy",
                        "--print-ids", "--dump-step-logits", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not t.check(p.returncode == 0, "%s: generates (%s)" % (fam, p.stderr.strip()[-100:])):
        return
    toks = [int(x) for x in p.stdout.split()]
    with open(out, "rb") as f:
        raw = f.read()
    steps = struct.unpack("<%df" % (len(raw) // 4), raw)
    V = len(steps) // n
    ref = F.Ref(d)
    worst, seq = 0.0, list(prompt)
    for i in range(n):
        row = ref.forward(seq)[-1]
        worst = max(worst, maxdiff(list(steps[i * V:(i + 1) * V]), row))
        seq.append(toks[i])
    t.check(worst <= TOL, "%s: %d tokens decoded one at a time through the KV cache: each step's logits are the "
            "oracle's over the sequence so far (%.2g)" % (fam, n, worst))


def check_shift(tmp):
    """A context shift re-rotates the cached keys (mor_kv_seq_add): on a
    1-layer model, whose keys depend only on token and position, generation
    after a shift is the oracle's over the tokens kept, renumbered from 0
    (only the rotated dims turn: GPT-NeoX's partial rotary)."""
    for fam in ("gptneox", "gemma2"):
        d = F.write_model(os.path.join(tmp, "shift_" + fam), *F.make_model(fam, L=1))
        g = os.path.join(tmp, "shift.gguf")
        ok, msg = convert(d, g)
        prompt, n, ctx = F.IDS[:5], 10, 8
        out = os.path.join(tmp, "steps.f32")
        p = subprocess.run([RUN, "-q", "-m", g, "--ids", ",".join(map(str, prompt)), "-n", str(n), "--greedy",
                            "--print-ids", "--ctx", str(ctx), "--dump-step-logits", out],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if not t.check(ok and p.returncode == 0 and "shifting" in p.stderr, "%s, 1 layer: generates past a full "
                       "context of %d (%s)" % (fam, ctx, (msg if not ok else p.stderr)[-120:])):
            continue
        toks = [int(x) for x in p.stdout.split()]
        with open(out, "rb") as f:
            raw = f.read()
        steps = struct.unpack("<%df" % (len(raw) // 4), raw)
        V = len(steps) // n
        ref, seq, worst = F.Ref(d), list(prompt), 0.0
        for i in range(n):
            worst = max(worst, maxdiff(list(steps[i * V:(i + 1) * V]), ref.forward(seq)[-1]))
            seq.append(toks[i])
            if len(seq) > ctx:   # the shift: the oldest half goes, the rest moves to positions 0..
                seq = seq[ctx // 2:]
        t.check(worst <= TOL, "%s, 1 layer: after context shifts each step's logits are the oracle's over the kept "
                "tokens, renumbered (%.2g)" % (fam, worst))


def check_variants(tmp):
    """Features the peer models keep small or at their defaults, on HF-only variants."""
    # The two GELUs differ by at most 4.7e-4 (at x = -2.7) in any activation:
    # their variants need a large FFN and large logits to move them by 50x the
    # tolerance (and tied layers' final soft-cap off)
    big = dict(ffn_out=1.0, head=20)
    cases = [
        ("gemma", big, ["gelu_tanh"], "a large FFN and logits: the tanh GELU (not erf)"),
        ("gemma2", dict(big, final_logit_softcapping=1000.0), ["gelu_tanh"], "a large FFN and logits: the tanh GELU (not erf)"),
        ("gptneox", big, ["gelu_tanh"], "a large FFN and logits: the exact GELU (not tanh)"),
        ("gemma2", dict(query_pre_attn_scalar=12), ["query_scalar"], "query_pre_attn_scalar 12 (not head_dim 32)"),
        ("gemma2", dict(layer_types=["full_attention", "sliding_attention", "sliding_attention"]), ["window"],
         "layer_types: global, local, local"),
        ("gptneox", dict(use_parallel_residual=False), [], "use_parallel_residual false"),
        ("gptneox", dict(rotary_pct=1.0), ["rope_layout"], "rotary_pct 1"),
    ]
    for n, (fam, over, feats, what) in enumerate(cases):
        cfg, w = F.make_model(fam, **over)
        d = F.write_model(os.path.join(tmp, "var%d" % n), cfg, w)
        out = os.path.join(tmp, "var%d.gguf" % n)
        ok, msg = convert(d, out)
        if not t.check(ok, "%s, %s: converts (%s)" % (fam, what, msg[-150:])):
            continue
        want = flat(F.Ref(d).forward(F.IDS))
        got, _ = run_logits(out, F.IDS, tmp)
        dd = maxdiff(got, want)
        if feats:
            alt = maxdiff(flat(F.Ref(d, feats).forward(F.IDS)), want)
        else:   # the same weights with the family's default
            alt = maxdiff(flat(F.Ref(F.write_model(os.path.join(tmp, "var%d_default" % n), *F.make_model(fam))).forward(F.IDS)),
                          want)
        need = 50 if feats == ["gelu_tanh"] else 100
        t.check(dd <= TOL and alt > need * TOL, "%s, %s: logits = the oracle's (%.2g); computed otherwise %.3g away "
                "(> %d x the tolerance)" % (fam, what, dd, alt, need))

# ------------------------------------------------------------ relaxed conversion


def check_relaxed(tmp):
    for fam in F.FAMILIES:
        cfg, w = F.make_model(fam, L=4)
        d = F.write_model(os.path.join(tmp, "rel_" + fam), cfg, w)
        want = flat(F.Ref(d).forward(F.IDS))
        plain = os.path.join(tmp, "rel_%s_plain.gguf" % fam)
        ok0, _ = convert(d, plain)
        for sharing in ("cycle", "middle_cycle"):
            for src, tag in ((d, "HF checkpoint"), (plain, "libmor GGUF")):
                if sharing == "cycle" and src == plain:
                    continue
                out = os.path.join(tmp, "rel.gguf")
                base = ["--num-recursion", "2", "--sharing", sharing, "--init", "average"]
                ok, msg = convert(src, out, base + ["--lora-rank", "512", "--keep-norms"])
                if not t.check(ok and ok0, "%s, %s, from the %s: full-rank relaxed conversion (%s)" % (fam, sharing, tag, msg[-150:])):
                    continue
                got, _ = run_logits(out, F.IDS, tmp)
                ok2, _ = convert(src, out, base + ["--keep-norms"])
                tied, _ = run_logits(out, F.IDS, tmp) if ok2 else (None, "")
                dd, dt = maxdiff(got, want), maxdiff(tied, want)
                t.check(dd <= TOL and dt > 100 * TOL,
                        "%s, %s, from the %s: full-rank LoRA (--keep-norms) reproduces the original (%.2g; tied "
                        "without LoRA: %.3g)" % (fam, sharing, tag, dd, dt))
        check_tail(fam, tmp)


def orthonormal(rng, n, k):
    """k orthonormal vectors of length n (Gram-Schmidt in float64)."""
    vs = []
    while len(vs) < k:
        v = [rng.gauss(0, 1) for _ in range(n)]
        for u in vs:
            dot = sum(a * b for a, b in zip(v, u))
            v = [a - dot * b for a, b in zip(v, u)]
        nv = math.sqrt(sum(a * a for a in v))
        if nv > 1e-6:
            vs.append([a / nv for a in v])
    return vs


def known_delta(rng, out, inn, scale):
    """D = P diag(sigma) Q^T (row-major out x inn) and sigma."""
    k = min(out, inn)
    P, Q = orthonormal(rng, out, k), orthonormal(rng, inn, k)
    sig = [scale * 0.7 ** i for i in range(k)]
    D = [0.0] * (out * inn)
    for q in range(k):
        p, qq, s = P[q], Q[q], sig[q]
        for o in range(out):
            f = s * p[o]
            row = o * inn
            for c in range(inn):
                D[row + c] += f * qq[c]
    return D, sig


def check_tail(fam, tmp):
    """Layers l and l + 2 (tied by cycle x 2) are S + D and S - D per
    projection: Average tying leaves +-D, whose rank-r truncation leaves the
    SVD tail sqrt(sum_{t >= r} sigma_t^2) as the weight error."""
    R = 3
    rng = random.Random("tail-" + fam)
    cfg, w = F.make_model(fam, L=4)
    d, H = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or d // H
    projs = {}   # libmor role -> (HF name or (qkv, part), out, in)
    if fam == "gptneox":
        for part, role in enumerate(("attn_q", "attn_k", "attn_v")):
            projs[role] = (("attention.query_key_value.weight", part), d, d)
        projs.update({"attn_output": ("attention.dense.weight", d, d), "ffn_up": ("mlp.dense_h_to_4h.weight", cfg["intermediate_size"], d),
                      "ffn_down": ("mlp.dense_4h_to_h.weight", d, cfg["intermediate_size"])})
        pfx = "gpt_neox.layers.%d."
    else:
        Hkv, Fd = cfg["num_key_value_heads"], cfg["intermediate_size"]
        projs = {"attn_q": ("self_attn.q_proj.weight", H * hd, d), "attn_k": ("self_attn.k_proj.weight", Hkv * hd, d),
                 "attn_v": ("self_attn.v_proj.weight", Hkv * hd, d), "attn_output": ("self_attn.o_proj.weight", d, H * hd),
                 "ffn_gate": ("mlp.gate_proj.weight", Fd, d), "ffn_up": ("mlp.up_proj.weight", Fd, d),
                 "ffn_down": ("mlp.down_proj.weight", d, Fd)}
        pfx = "model.layers.%d."
    orig = {}   # (layer, role) -> row-major values
    sigmas = {}
    for j in range(2):
        for role, (name, out, inn) in projs.items():
            D, sig = known_delta(rng, out, inn, 0.5 * (j + 1))
            sigmas[role, j] = sig
            S = [rng.gauss(0, 0.2) for _ in range(out * inn)]
            orig[j, role] = [F._f32(a + b) for a, b in zip(S, D)]
            orig[j + 2, role] = [F._f32(a - b) for a, b in zip(S, D)]
    for l in range(4):   # into the checkpoint (GPT-NeoX: fused, per head [q; k; v])
        for role, (name, out, inn) in projs.items():
            if isinstance(name, tuple):
                key = pfx % l + name[0]
                vals = list(w[key][1])
                for h in range(H):
                    for i in range(hd):
                        dst = (3 * h + name[1]) * hd + i
                        vals[dst * d:(dst + 1) * d] = orig[l, role][(h * hd + i) * d:(h * hd + i + 1) * d]
                w[key] = (w[key][0], vals)
            else:
                w[pfx % l + name] = ([out, inn], orig[l, role])
    src = F.write_model(os.path.join(tmp, "tail_" + fam), cfg, w)
    out = os.path.join(tmp, "tail.gguf")
    ok, msg = convert(src, out, ["--num-recursion", "2", "--sharing", "cycle", "--init", "average", "--lora-rank", str(R),
                                 "--keep-norms"])
    if not t.check(ok, "%s: rank-%d relaxed conversion of S +- D layers (%s)" % (fam, R, msg[-150:])):
        return
    g = gguf_py.read(out)
    worst, n = 0.0, 0
    for l in range(4):
        for role in projs:
            mp = g.get("mor.layer_map." + role) or g.get("mor.layer_map")
            W = g.tensor("blk.%d.%s.weight" % (mp[1][l], role)).floats()
            A = g.tensor("lora.%d.%s.a" % (l, role)).floats()
            B = g.tensor("lora.%d.%s.b" % (l, role)).floats()
            outd, inn = projs[role][1], projs[role][2]
            e2 = 0.0
            for o in range(outd):
                bo = B[o * R:(o + 1) * R]
                for c in range(inn):
                    r = orig[l, role][o * inn + c] - W[o * inn + c] - sum(bo[q] * A[q * inn + c] for q in range(R))
                    e2 += r * r
            tail = math.sqrt(sum(s * s for s in sigmas[role, l % 2][R:]))
            worst = max(worst, abs(math.sqrt(e2) - tail))
            n += 1
    t.check(n == 4 * len(projs) and worst <= 1e-5,
            "%s: ||W_l - (W_shared + B A)||_F = the SVD tail sqrt(sum_{t>=%d} sigma_t^2) for all %d projections "
            "(max abs err %.2g)" % (fam, R, n, worst))

# ------------------------------------------------------------ refusals


def check_refusals(tmp):
    cfg, w = F.make_model("gemma")
    import json
    cases = [
        ({"architectures": ["MistralForCausalLM"]}, "MistralForCausalLM", "an unknown architecture"),
        ({"attention_bias": True}, "attention_bias", "Gemma with attention biases"),
        ({"hidden_activation": "relu"}, "relu", "an unknown activation"),
    ]
    for n, (over, want, what) in enumerate(cases):
        c = dict(cfg)
        c.update(over)
        d = F.write_model(os.path.join(tmp, "bad%d" % n), c, w)
        ok, msg = convert(d, os.path.join(tmp, "bad.gguf"))
        t.check(not ok and want in msg, "converter refuses %s: %s" % (what, msg[-150:]))
    c, wn = F.make_model("gptneox", rotary_pct=0.2)
    d = F.write_model(os.path.join(tmp, "badrot"), c, wn)
    ok, msg = convert(d, os.path.join(tmp, "bad.gguf"))
    t.check(not ok and "rotary" in msg, "converter refuses an odd number of rotary dims: %s" % msg[-150:])
    # a llama.cpp file of an architecture that does not convert
    g = gguf_py.read(os.path.join(DATA, "gemma.lcpp.gguf"))
    g.set("general.architecture", gguf_py.STR, "qwen2")
    bad = os.path.join(tmp, "qwen2.gguf")
    gguf_py.write(bad, g)
    ok, msg = convert(bad, os.path.join(tmp, "bad.gguf"))
    t.check(not ok and "qwen2" in msg, "converter refuses llama.cpp architecture qwen2: %s" % msg[-150:])
    # the loader: a converted Gemma 2 / GPT-NeoX file, altered
    good2, goodn = os.path.join(tmp, "g2.gguf"), os.path.join(tmp, "nx.gguf")
    convert(F.write_model(os.path.join(tmp, "g2"), *F.make_model("gemma2")), good2)
    convert(F.write_model(os.path.join(tmp, "nx"), *F.make_model("gptneox")), goodn)
    edits = [
        (good2, lambda f: f.set("mor.family", gguf_py.STR, "qwen2"), "qwen2", "an unknown family"),
        (good2, lambda f: f.set("mor.ffn.activation", gguf_py.STR, "relu"), "relu", "an unknown activation"),
        (good2, lambda f: f.set("mor.format_version", gguf_py.U32, 2), "format_version >= 3", "a family key in a version-2 file"),
        (good2, lambda f: f.set("mor.format_version", gguf_py.U32, 4), "newer", "a newer format version"),
        (good2, lambda f: f.set("mor.attention.mystery", gguf_py.BOOL, True), "mor.attention.mystery", "an unknown feature key"),
        (good2, lambda f: f.drop("mor.attention.sliding_window_layers"), "sliding_window", "a window without its layers"),
        (good2, lambda f: f.set("mor.attention.logit_softcap", gguf_py.F32, -1.0), "logit_softcap", "a negative soft-cap"),
        (good2, lambda f: setattr(f, "tensors", [x for x in f.tensors if x.name != "blk.1.ffn_post_norm.weight"]),
         "blk.1.ffn_post_norm.weight", "a missing post-FFN norm"),
        (goodn, lambda f: setattr(f, "tensors", [x for x in f.tensors if x.name != "blk.0.attn_q.bias"]),
         "blk.0.attn_q.bias", "a missing bias"),
        (goodn, lambda f: f.set("mor.norm.type", gguf_py.STR, "rms"), "layer_norm_epsilon", "LayerNorm keys on an RMSNorm model"),
        (goodn, lambda f: f.set("mor.rope.dimension_count", gguf_py.U32, 7), "dimension_count", "odd rotary dims"),
        (goodn, lambda f: f.set("mor.ffn.gated", gguf_py.BOOL, True), "ffn_gate", "a gated FFN without gate weights"),
    ]
    for n, (src, edit, want, what) in enumerate(edits):
        f = gguf_py.read(src)
        edit(f)
        p = os.path.join(tmp, "edit%d.gguf" % n)
        gguf_py.write(p, f)
        got, err = run_logits(p, [1, 2], tmp)
        t.check(got is None and want in err, "loader refuses %s: %s" % (what, err[-160:]))
    f = gguf_py.read(goodn)   # the round trip itself loads
    gguf_py.write(os.path.join(tmp, "same.gguf"), f)
    a, _ = run_logits(goodn, F.IDS, tmp)
    b, _ = run_logits(os.path.join(tmp, "same.gguf"), F.IDS, tmp)
    t.check(a is not None and a == b, "(a file read and written back unchanged by the test's GGUF writer loads the same)")


# ------------------------------------------------------------ llama.cpp's k-quants

KQUANTS = ("q2_k", "q3_k_m", "q4_k_m", "q5_k_m", "q6_k")
KQ_NAMES = {10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K"}


def check_kquants(tmp):
    """llama-quantize's files of the llama model at family_ref.K256 (real
    k-quants: every matrix a multiple of 256 wide): mor-convert keeps their
    blocks, and libmor's logits are llama.cpp's (both quantize activations to
    Q8_K, so only float summation order differs), while the quantization moves
    them far more than that from the float64 oracle of the F32 weights."""
    cfg, w = F.make_model("llama", **F.K256)
    d = F.write_model(os.path.join(tmp, "k256"), cfg, w)
    exact = flat(F.Ref(d).forward(F.IDS))
    for q in KQUANTS:
        src = os.path.join(DATA, "llama-k256.%s.lcpp.gguf" % q)
        g = gguf_py.read(src)
        mats = [x for x in g.tensors if len(x.dims) == 2]
        kinds = sorted({KQ_NAMES.get(x.type, "type %d" % x.type) for x in mats})
        t.check(mats and all(x.type in KQ_NAMES for x in mats),
                "%s: llama.cpp's file holds k-quants only in its %d matrices (%s)" % (q, len(mats), ", ".join(kinds)))
        out = os.path.join(tmp, "k256.%s.gguf" % q)
        ok, msg = convert(src, out)
        a, err = run_logits(out, F.IDS, tmp) if ok else (None, msg)
        if not t.check(a is not None, "%s: converts and runs (%s)" % (q, err[-200:])):
            continue
        # the blocks kept: each matrix holds the same rows of bytes (Q and K in
        # another order: libmor undoes llama.cpp's RoPE permutation by rows)
        conv = gguf_py.read(out)
        def rows(x):
            n = len(x.data) // x.dims[1]
            return sorted(x.data[i * n:(i + 1) * n] for i in range(x.dims[1]))
        same = [x.name for x in mats if conv.tensor(x.name) is not None and conv.tensor(x.name).type == x.type and
                rows(conv.tensor(x.name)) == rows(x)]
        t.check(len(same) == len(mats), "%s: mor-convert keeps every matrix's blocks (%d of %d the same rows of bytes)" %
                (q, len(same), len(mats)))
        with open(os.path.join(DATA, "llama-k256.%s.lcpp.logits" % q)) as f:
            peer = [float(x) for line in f if not line.startswith("#") for x in line.split()]
        dp, dq = maxdiff(a, peer), maxdiff(a, exact)
        t.check(dp <= KQ_TOL and dq > 20 * KQ_TOL,
                "%s: logits within %.0e of llama.cpp's (%.2g), while the quantization moves them %.3g from the "
                "F32 weights' oracle" % (q, KQ_TOL, dp, dq))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_kquants(tmp)
        for fam in F.FAMILIES:
            check_family(fam, tmp)
        check_variants(tmp)
        check_shift(tmp)
        check_relaxed(tmp)
        check_refusals(tmp)
    t.finish()


if __name__ == "__main__":
    main()
