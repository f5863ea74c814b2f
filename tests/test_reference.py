"""test_reference.py - converter + runtime against an independent reference.

tests/mor_ref.py is a plain-Python forward written from the spec. First it is
checked against the official fixtures (so it can be trusted); then it is the
oracle for configurations no official fixture covers: synthetic checkpoints in
the official key grammar are written here, converted with bin/mor-convert
(MoR settings given as command-line flags) and run with bin/mor-run; logits
must agree within 1e-4 and per-token depths exactly. Some cases also generate
greedily in the four ways of mor-run (cached and --no-cache, each with the
defaults and with --kv dense): tokens equal and the logits of every step
(--dump-step-logits) within 1e-4 of the oracle's; for the KV-sharing ones the
oracle's dense and shared numbers must differ by more than 1e-2, and without
KV sharing --kv dense must give bitwise the defaults'. KV sharing below a
first capacity of 1 and recursive baselines with their own lm_head are cases
too.
"""
import json
import os
import random
import struct
import subprocess
import tempfile

import mor_ref
import testlib as t
from test_fixtures import npy, f32, maxdiff

FIX = os.path.join(t.ROOT, "tests", "data", "fixtures")
CONVERT = os.path.join(t.OUT, "bin", "mor-convert")
RUN = os.path.join(t.OUT, "bin", "mor-run")
TOL = 1e-4
OUTPUT_NAME = struct.pack("<Q", 13) + b"output.weight"   # the GGUF tensor name, length-prefixed


def fixture_settings(mc):
    sub = mc["expert"] if mc["mor_type"] == "expert" else mc["token"]
    return dict(type=mc["mor_type"], sharing=mc["sharing"], num_recursion=mc["num_recursion"],
                capacity=mc["capacity"], router_type=mc["router_type"], router_func=sub["router_func"],
                alpha=sub["alpha"], temp=mc["temp"], gating=sub["gating"], kv_sharing=mc["kv_sharing"]["enable"])


def check_oracle_on_fixtures():
    for v in ("expert_mc3_fix_perturbed", "expert_mc3_perturbed", "token_mc3_perturbed",
              "expert_mc3_kvshare_fix_perturbed", "expert_cycle2_alpha1_perturbed"):
        d = os.path.join(FIX, v)
        with open(os.path.join(d, "hf_safetensors", "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(d, "mor_config.json")) as f:
            mc = json.load(f)
        with open(os.path.join(d, "reference.json")) as f:
            ref = json.load(f)
        m = mor_ref.Model(os.path.join(d, "hf_safetensors", "model.safetensors"), cfg, fixture_settings(mc))
        logits, depth = m.forward(ref["input_ids"])
        _, want = npy(os.path.join(d, "logits.npy"))
        diff = maxdiff([x for r in logits for x in r], want)
        t.check(diff <= TOL and depth == ref["forward"]["routing"]["depth"],
                "oracle reproduces the official %s (logits %.2g, depths equal)" % (v, diff))


# ------------------------------------------------------------ synthetic models

D, H, HKV, HD, F, V = 32, 4, 2, 8, 64, 97


def rand_mat(rng, r, c, scale):
    return ([r, c], [rng.gauss(0, scale) for _ in range(r * c)])


def decoder_layer(rng):
    w = {}
    for name, (r, c) in (("self_attn.q_proj", (H * HD, D)), ("self_attn.k_proj", (HKV * HD, D)),
                         ("self_attn.v_proj", (HKV * HD, D)), ("self_attn.o_proj", (D, H * HD)),
                         ("mlp.gate_proj", (F, D)), ("mlp.up_proj", (F, D)), ("mlp.down_proj", (D, F))):
        w[name + ".weight"] = rand_mat(rng, r, c, 0.25)
    for name in ("input_layernorm", "post_attention_layernorm"):
        w[name + ".weight"] = ([D], [1.0 + rng.gauss(0, 0.1) for _ in range(D)])
    return w


def put(dst, prefix, layer):
    for k, v in layer.items():
        dst[prefix + k] = v


def make_checkpoint(case, rng):
    """Weights in the official key grammar for one synthetic case."""
    typ, nr, K, P = case["type"], case.get("num_recursion", 1), case["K"], case.get("P", 0)
    w = {"model.embed_tokens.weight": rand_mat(rng, V, D, 1.0),
         "model.norm.weight": ([D], [1.0 + rng.gauss(0, 0.1) for _ in range(D)])}
    shared = [decoder_layer(rng) for _ in range(K)]
    # untied_attn: each recursion r >= 1 has attention projections of its own (the
    # older official code's MoR layers), the MLP and norms stay shared
    blocks = [[shared[j] if r == 0 or not case.get("untied_attn") else
               dict(shared[j], **{k: v for k, v in decoder_layer(rng).items() if k.startswith("self_attn.")})
               for j in range(K)] for r in range(nr)]
    if typ == "none":
        L = case["L"]
        for l, j in enumerate(case["map"]):   # unrolled layer -> shared slot (duplicated keys)
            put(w, "model.layers.%d." % l, shared[j] if j >= 0 else decoder_layer(rng))
    else:
        if P:
            put(w, "model.layers.0.", decoder_layer(rng))
        if typ == "expert":
            for r in range(nr):
                for j in range(K):
                    put(w, "model.layers.%d.block.%d." % (P + r, j), blocks[r][j])
                pfx = "model.layers.%d.mor_router.router." % (P + r)
                if case.get("router_type") == "mlp":
                    w[pfx + "0.weight"] = rand_mat(rng, 2 * D, D, 0.3)
                    w[pfx + "2.weight"] = rand_mat(rng, 1, 2 * D, 0.3)
                else:
                    w[pfx + "weight"] = rand_mat(rng, 1, D, 0.5)
            last = P + nr
        else:
            for r in range(nr):
                for j in range(K):
                    put(w, "model.layers.%d.block_list.%d.%d." % (P, r, j), blocks[r][j])
            w["model.layers.%d.mor_router.router.weight" % P] = rand_mat(rng, nr, D, case.get("router_scale", 0.5))
            if case.get("bias"):   # small: it shifts, but does not decide, the choice
                w["model.layers.%d.router_bias" % P] = ([nr], [rng.gauss(0, 0.02) for _ in range(nr)])
            last = P + 1
        if P:
            put(w, "model.layers.%d." % last, decoder_layer(rng))
    # "head": "own" (a matrix of its own, whatever the config says), "equal"
    # (saved, equal to the embedding) or "absent"; default by "tied"
    head = case.get("head", "equal" if case.get("tied", True) else "own")
    if head == "own":
        w["lm_head.weight"] = rand_mat(rng, V, D, 0.3)
    elif head == "equal":
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    return w


CASES = [
    dict(name="expert middle-cycle, MLP routers", type="expert", num_recursion=3, K=2, P=1, router_type="mlp",
         router_func="sigmoid", alpha=0.1, generate=True, flags=["--router-type", "mlp", "--router-func", "sigmoid", "--alpha", "0.1"]),
    dict(name="expert cycle, tanh, additive, temp 2, bf16", type="expert", num_recursion=2, K=2, P=0,
         router_func="tanh", alpha=0.5, temp=2.0, gating="additive", capacity=[1.0, 0.5], dtype="BF16",
         flags=["--router-func", "tanh", "--alpha", "0.5", "--temp", "2", "--gating", "additive", "--capacity", "1.0,0.5"]),
    dict(name="expert middle-cycle, raw-logit router (func none)", type="expert", num_recursion=2, K=1, P=1,
         router_func="none", alpha=1.0, flags=["--router-func", "none", "--alpha", "1"]),
    dict(name="token-choice, sigmoid, loss-free bias, KV sharing", type="token", num_recursion=3, K=2, P=1,
         router_func="sigmoid", alpha=0.1, bias=True, kv_sharing=True, router_scale=2.0, generate=True,
         flags=["--router-func", "sigmoid", "--alpha", "0.1", "--bias-balancing", "--kv-sharing", "1"]),
    dict(name="token-choice, softmax, fp16", type="token", num_recursion=2, K=2, P=1, router_func="softmax",
         alpha=1.0, dtype="F16", generate=True, flags=["--router-func", "softmax", "--alpha", "1"]),
    dict(name="plain Llama, untied output, fp16", type="none", K=3, L=3, map=[0, 1, 2], tied=False, dtype="F16",
         plain=True, flags=[]),
    dict(name="recursive, sequence sharing, no router", type="none", num_recursion=2, K=2, L=4, map=[0, 0, 1, 1],
         sharing="sequence", flags=["--sharing", "sequence"]),
    dict(name="recursive, middle-cycle, no router", type="none", num_recursion=2, K=2, L=6, map=[-1, 0, 1, 0, 1, -1],
         sharing="middle_cycle", flags=["--sharing", "middle_cycle"]),
    # KV sharing below a first capacity of 1: recursion 0 still caches every token's K/V
    dict(name="expert middle-cycle, KV sharing, first capacity 0.75", type="expert", num_recursion=3, K=2, P=1,
         capacity=[0.75, 0.5, 0.25], kv_sharing=True, unlike="shared_r0_selected",
         flags=["--router-func", "sigmoid", "--alpha", "0.1", "--kv-sharing", "1", "--capacity", "0.75,0.5,0.25"]),
    # KV sharing without the official sharing cache (use_cache=False, HF generate()): --kv dense;
    # attention untied per recursion, so the shared and the dense forwards differ widely
    dict(name="expert middle-cycle, KV sharing, attention untied per recursion", type="expert", num_recursion=3,
         K=2, P=1, kv_sharing=True, untied_attn=True, generate=True, seed=2000,   # (tokens that vary)
         flags=["--router-func", "sigmoid", "--alpha", "0.1", "--kv-sharing", "1"]),
    dict(name="token-choice, softmax, KV sharing, attention untied per recursion", type="token", num_recursion=3,
         K=2, P=1, router_func="softmax", alpha=1.0, kv_sharing=True, untied_attn=True, router_scale=2.0,
         generate=True, flags=["--router-func", "softmax", "--alpha", "1", "--kv-sharing", "1"]),
    # the official RecursiveLlamaForCausalLM never ties its lm_head, though config.json says so
    dict(name="recursive baseline, middle-cycle, tie_word_embeddings but its own lm_head", type="none",
         num_recursion=3, K=1, L=5, map=[-1, 0, 0, 0, -1], sharing="middle_cycle", head="own", expect_head="untied",
         flags=["--sharing", "middle_cycle"]),
    dict(name="recursive baseline, middle-cycle, saved lm_head equal to the embedding", type="none",
         num_recursion=3, K=1, L=5, map=[-1, 0, 0, 0, -1], sharing="middle_cycle", head="equal", expect_head="tied",
         flags=["--sharing", "middle_cycle"]),
]


N_GEN = 6


def check_generation(case, gguf, model, ids, mode, tmp):
    """Greedy generation in the four ways of mor-run against the oracle, tokens
    and the logits each token was picked from (--dump-step-logits): cached and
    --no-cache with the defaults (the trained semantics), and with --kv dense
    (for a KV-sharing model, the official no-cache loop and HF generate();
    without KV sharing, bitwise the defaults)."""
    name, shared = case["name"], case.get("kv_sharing", False)
    S = os.path.join(tmp, "S.f32")
    got = {}
    for kv in ("default", "dense"):
        for cached in (True, False):
            flags = mode + ([] if cached else ["--no-cache"]) + ([] if kv == "default" else ["--kv", "dense"])
            p = subprocess.run([RUN, "-q", "-m", gguf, "--ids", ",".join(map(str, ids)), "-n", str(N_GEN), "--greedy",
                                "--print-ids", "--dump-step-logits", S] + flags, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            what = "%s: greedy %s" % (name, " ".join(flags[len(mode):]) or "cached")
            if not t.check(p.returncode == 0, "%s runs (%s)" % (what, p.stderr.strip()[:200])):
                continue
            toks, steps = [int(x) for x in p.stdout.split()], f32(S)
            got[kv, cached] = steps
            if kv == "dense" and not shared:   # no KV sharing: one official path, the defaults'
                base = got.get(("default", cached))
                t.check(base is not None and steps.tobytes() == base.tobytes(),
                        "%s: bitwise the defaults' step logits (no KV sharing)" % what)
                continue
            want_toks, want_steps, margins = model.greedy(ids, N_GEN, kv="dense" if kv == "dense" else None,
                                                          cached=cached)
            ds = maxdiff(steps, [x for r in want_steps for x in r])
            t.check(toks == want_toks and ds <= TOL, "%s: tokens %s equal the oracle's, step logits max abs diff "
                    "%.2g (smallest argmax margin %.3g)" % (what, toks, ds, min(margins)))
            got["oracle", kv, cached] = [x for r in want_steps for x in r]
    if shared:   # the test must tell the modes apart: the oracle's dense and shared logits differ
        for cached in (True, False):
            a, b = got.get(("oracle", "dense", cached)), got.get(("oracle", "default", cached))
            dd = maxdiff(a, b) if a and b else 0
            t.check(dd > 1e-2, "%s: %s: the oracle's dense and shared step logits differ by %.3g (> 1e-2)" %
                    (name, "cached" if cached else "--no-cache", dd))


def run_case(case, tmp, seed):
    rng = random.Random(seed)
    d = os.path.join(tmp, "case%d" % seed, "ckpt")
    os.makedirs(d)
    typ, nr, K, P = case["type"], case.get("num_recursion", 1), case["K"], case.get("P", 0)
    L = case.get("L") or (2 * P + nr * K)
    cfg = {"architectures": ["LlamaForCausalLM" if case.get("plain") else "MoRLlamaForCausalLM"],
           "model_type": "llama", "hidden_size": D, "intermediate_size": F, "num_attention_heads": H,
           "num_key_value_heads": HKV, "head_dim": HD, "num_hidden_layers": L, "vocab_size": V,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": case.get("tied", True), "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    w = make_checkpoint(case, rng)
    dtype = case.get("dtype", "F32")
    mor_ref.write_safetensors(os.path.join(d, "model.safetensors"), w, dtype)
    flags = list(case["flags"])
    if not case.get("plain"):
        flags = ["--mor-type", typ, "--num-recursion", str(nr)] + \
                (["--sharing", "middle_cycle" if P else "cycle"] if typ != "none" else []) + flags
    out = os.path.join(tmp, "case%d.gguf" % seed)
    p = subprocess.run([CONVERT, d, "-o", out] + flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not t.check(p.returncode == 0, "%s: converts (%s)" % (case["name"], p.stderr.strip()[:300])):
        return
    if case.get("expect_head"):
        with open(out, "rb") as f:
            has_output = OUTPUT_NAME in f.read()
        noted = "note: lm_head.weight differs" in p.stderr
        if case["expect_head"] == "untied":
            t.check(has_output and noted, "%s: stored as its own output matrix, with a note" % case["name"])
            tied = os.path.join(tmp, "case%d.tied.gguf" % seed)
            q = subprocess.run([CONVERT, d, "-o", tied, "--tie-lm-head"] + flags, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            with open(tied, "rb") as f:
                t.check(q.returncode == 0 and OUTPUT_NAME not in f.read() and "note:" not in q.stderr,
                        "%s: --tie-lm-head ties it, as transformers would" % case["name"])
        else:
            t.check(not has_output and not noted, "%s: stored tied (no output.weight)" % case["name"])
    mor = dict(type=typ, sharing=case.get("sharing", "middle_cycle" if P else "cycle"), num_recursion=nr,
               capacity=case.get("capacity", [(nr - r) / nr for r in range(nr)]), router_type=case.get("router_type", "linear"),
               router_func=case.get("router_func", "sigmoid"), alpha=case.get("alpha", 0.1), temp=case.get("temp", 1.0),
               gating=case.get("gating", "weighted"), kv_sharing=case.get("kv_sharing", False))
    model = mor_ref.Model(os.path.join(d, "model.safetensors"), cfg, mor)
    ids = [rng.randrange(V) for _ in range(12)]
    want, depth = model.forward(ids)
    L_, R = os.path.join(tmp, "L.f32"), os.path.join(tmp, "R.json")
    mode = ["--routing", "topk"] if typ == "expert" else []
    p = subprocess.run([RUN, "-q", "-m", out, "--ids", ",".join(map(str, ids)), "--dump-logits", L_,
                        "--dump-routing", R] + mode, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if not t.check(p.returncode == 0, "%s: runs (%s)" % (case["name"], p.stderr.strip()[:300])):
        return
    diff = maxdiff(f32(L_), [x for r in want for x in r])
    t.check(diff <= TOL, "%s: logits match the reference (max abs diff %.2g)" % (case["name"], diff))
    if typ != "none":
        with open(R) as f:
            got = json.load(f)["depth"]
        t.check(got == depth and len(set(depth)) > 1,
                "%s: depths %s equal the reference and vary" % (case["name"], got))
    if case.get("generate"):
        check_generation(case, out, model, ids, mode, tmp)
    if case.get("unlike"):   # the rule tested must matter: another reading gives other logits
        other, _ = model.forward(ids, kv=case["unlike"])
        d2 = maxdiff([x for r in other for x in r], [x for r in want for x in r])
        t.check(d2 > 1e-2, "%s: differs from the %s reading by %.3g (> 1e-2)" % (case["name"], case["unlike"], d2))
    if case.get("bias"):   # the bias must matter: without it some token chooses differently
        bias_key = "model.layers.%d.router_bias" % P
        shape, vals = model.t[bias_key]
        model.t[bias_key] = (shape, [0.0] * len(vals))
        _, unbiased = model.forward(ids)
        t.check(unbiased != depth, "%s: the bias changes %d of %d choices" %
                (case["name"], sum(a != b for a, b in zip(unbiased, depth)), len(depth)))


def main():
    check_oracle_on_fixtures()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            run_case(case, tmp, case.get("seed", 1000 + i))
    t.finish()


if __name__ == "__main__":
    main()
