"""test_nanbeige.py - llama.cpp's looped Llama (architecture `nanbeige`,
Nanbeige4.2) converted by bin/mor-convert into a recursive model and run.

The files are tests/data/families/nanbeige-<name>.lcpp.gguf, which llama.cpp's
own gguf-py wrote (tests/peer/make_nanbeige.py) from family_ref's llama model
(GQA, 2 layers) in the variants of family_ref.NANBEIGE: num_loops 1, 2 and 3,
skip_loop_final_norm on and off, output tied and untied; beside each,
llama.cpp's logits of the fixed ids and its greedy continuation of their
first five (tests/peer/run.sh, llama.cpp 84f71294). Checked:
  - a plain conversion stores the 2 physical layers once, byte for byte, as
    the shared block of N_r = num_loops recursions (cycle sharing), with
    mor.recursion.loop_norm exactly when llama.cpp norms between loops;
  - bin/mor-run's logits are those of a float64 oracle of the looped model
    (family_ref.Ref with num_loops: llama.cpp's src/models/nanbeige.cpp as a
    Hugging Face forward) within 1e-4 and llama.cpp's within 1e-3, and
    greedy decoding through the per-recursion KV caches gives the oracle's
    and llama.cpp's ids; the loop norm, the tied output and each loop move
    the logits far more than that;
  - self-speculation drafting with 1 or 2 of 3 loops prints llama.cpp's
    greedy ids;
  - FORCED depth k (--routing forced:k) gives the logits of the same weights
    looped k times (the oracle's; llama.cpp's of the file with k loops;
    bitwise the converted 1-loop file's);
  - the converter and the loader refuse what does not fit (--init on a looped
    model, another recursion count; a loop norm without 2 recursions or in
    a format version 1 file); a converted file converts again unchanged;
  - the Hugging Face checkpoint of each variant (NanbeigeForCausalLM, the
    same weights in model.safetensors, config.json's num_loops,
    skip_loop_final_norm, tie_word_embeddings) converts to the same bytes as
    its llama.cpp file, so to the same logits bit for bit, the float64
    oracle's within 1e-4; num_loops absent, null or 0 is one loop and an
    absent skip_loop_final_norm false (llama.cpp's conversion/nanbeige.py),
    num_loops on a LlamaForCausalLM is not read; bad values are refused.
"""
import os
import subprocess
import tempfile

import family_ref as F
import gguf_py
import testlib as t

RUN = os.path.join(t.OUT, "bin", "mor-run")
DATA = os.path.join(t.ROOT, "tests", "data", "families")
TOL, PEER_TOL = 1e-4, 1e-3
PROMPT, N_GEN = F.IDS[:5], 7


def src(name):
    return os.path.join(DATA, "nanbeige-%s.lcpp.gguf" % name)


convert = t.mor_convert

def run_logits(gguf, tmp, extra=()):
    return t.mor_logits(gguf, F.IDS, tmp, extra)

def greedy(gguf, extra=()):
    p = subprocess.run([RUN, "-q", "-m", gguf, "--ids", ",".join(map(str, PROMPT)), "-n", str(N_GEN), "--greedy",
                        "--print-ids"] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else None


def peer(name, ext="logits"):
    """llama.cpp's numbers kept beside the file (tests/peer/run.sh)."""
    with open(os.path.join(DATA, "nanbeige-%s.lcpp.%s" % (name, ext))) as f:
        vals = [x for line in f if not line.startswith("#") for x in line.split()]
    return [float(x) for x in vals] if ext == "logits" else [int(x) for x in vals]


def flat(rows_):
    return [x for r in rows_ for x in r]


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else float("inf")


def rows(x):
    nr = x.dims[1] if len(x.dims) > 1 else 1
    n = len(x.data) // nr
    return sorted(x.data[i * n:(i + 1) * n] for i in range(nr))


def check_layout(name, conv):
    """The physical layers stored once, byte for byte (Q and K rows in
    another order: libmor undoes llama.cpp's RoPE permutation), looped."""
    loops, skip, tied = F.NANBEIGE[name]
    g, c = gguf_py.read(src(name)), gguf_py.read(conv)
    K = g.get("nanbeige.block_count")
    blk = [x for x in c.tensors if x.name.startswith("blk.")]
    same = [x.name for x in g.tensors if x.name.startswith("blk.") and c.tensor(x.name) is not None and
            c.tensor(x.name).type == x.type and rows(c.tensor(x.name)) == rows(x)]
    t.check(len(blk) == len(same) == 9 * K, "%s: the %d physical layers are stored once, every tensor the same rows of "
            "bytes as llama.cpp's file (%d of %d)" % (name, K, len(same), len(blk)))
    plan = (c.get("mor.recursion.count"), c.get("mor.recursion.base_depth"), c.get("mor.layer_count"),
            c.get("mor.recursion.sharing"), c.get("mor.layer_map")[1])
    want = (loops, K, loops * K, "cycle" if loops > 1 else "none", list(range(K)) * loops)
    t.check(plan == want, "%s: num_loops %d is N_r with the block of %d layers, cycle-shared (%s)" % (name, loops, K, plan))
    norm = loops > 1 and not skip
    t.check(bool(c.get("mor.recursion.loop_norm")) == norm and c.get("mor.format_version") == (3 if norm else 1),
            "%s: mor.recursion.loop_norm %s (format version %s)" % (name, "set" if norm else "absent",
                                                                      c.get("mor.format_version")))
    t.check((c.tensor("output.weight") is None) == tied, "%s: the output %s" % (name, "tied" if tied else "untied"))


def check_variant(name, tmp):
    loops, skip, tied = F.NANBEIGE[name]
    conv = os.path.join(tmp, name + ".gguf")
    ok, msg = convert(src(name), conv)
    if not t.check(ok, "%s: converts (%s)" % (name, msg[-200:])):
        return None
    check_layout(name, conv)
    a, err = run_logits(conv, tmp)
    # the float64 oracle of the same weights as a Hugging Face checkpoint with num_loops
    cfg, w = F.make_model("llama")
    cfg.update(num_loops=loops, skip_loop_final_norm=skip)
    if tied:
        del w["lm_head.weight"]
    d = F.write_model(os.path.join(tmp, "hf_" + name), cfg, w)
    want = flat(F.Ref(d).forward(F.IDS))
    do = maxdiff(a, want)
    t.check(do <= TOL, "%s: logits = the float64 oracle's of the looped model (%.2g)" % (name, do))
    dp = maxdiff(a, peer(name))
    t.check(dp <= PEER_TOL, "%s (%d loops, loop norm %s, %s output): logits within %.0e of llama.cpp's (%.2g)" %
            (name, loops, "off" if skip or loops == 1 else "on", "tied" if tied else "untied", PEER_TOL, dp))
    ids, want = greedy(conv), peer(name, "greedy")
    t.check(ids == want, "%s: greedy decoding, one token at a time through each recursion's KV cache, gives "
            "llama.cpp's ids %s (%s)" % (name, want, ids))
    if loops > 1 and not skip:
        dn = maxdiff(flat(F.Ref(d, ["loop_norm"]).forward(F.IDS)), want)
        t.check(dn > 100 * TOL, "%s: the loop norm matters: the oracle without it is %.3g away" % (name, dn))
    if name in ("n2", "n3t"):   # greedy decoding: the oracle's argmax over the sequence so far, step by step
        ids, seq, ref = greedy(conv), list(PROMPT), F.Ref(d)
        for _ in range(N_GEN):
            row = ref.forward(seq)[-1]
            seq.append(row.index(max(row)))
        t.check(ids == seq[len(PROMPT):], "%s: greedy decoding, one token at a time through each recursion's KV "
                "cache, gives the oracle's ids %s (%s)" % (name, seq[len(PROMPT):], ids))
    b, _ = run_logits(conv, tmp, ["--threads", "2"])
    t.check(a is not None and a == b, "%s: 2 threads give the same bits as 1" % name)
    return a


def oracle(name, loops=None):
    n_loops, skip, tied = F.NANBEIGE[name]
    cfg, w = F.make_model("llama")
    cfg.update(num_loops=loops or n_loops, skip_loop_final_norm=skip)
    if tied:
        del w["lm_head.weight"]
    return flat(F.Ref(F.write_model(tempfile.mkdtemp(dir=TMP[0]), cfg, w)).forward(F.IDS))


def check_speculation(tmp):
    """Self-speculation with fewer loops as the draft: drafts of 4 tokens
    through the first loop or two, verified through all three, print
    llama.cpp's greedy ids of the 3-loop file."""
    conv, want = os.path.join(tmp, "n3t.gguf"), peer("n3t", "greedy")
    for depth in (1, 2):
        ids = greedy(conv, ["--speculate", "4", "--speculate-depth", str(depth)])
        t.check(ids == want, "n3t --speculate 4 --speculate-depth %d: llama.cpp's greedy ids %s (%s)" % (depth, want, ids))


def check_forced(tmp):
    """A token stopped after recursion k has the logits of the model looped
    k times: the loop norm is applied on the way into a recursion, never on
    the way out."""
    for name, k in (("n2", 1), ("n2s", 1), ("n3t", 2), ("n3t", 1)):
        conv = os.path.join(tmp, name + ".gguf")
        a, err = run_logits(conv, tmp, ["--routing", "forced:%d" % k])
        d = maxdiff(a, oracle(name, k))
        full, _ = run_logits(conv, tmp)
        dd = maxdiff(a, full)
        t.check(d <= TOL and dd > 100 * TOL, "%s --routing forced:%d: the oracle's logits of the model looped %d "
                "times (%.2g), %.3g from full depth" % (name, k, k, d, dd))
    # the same weights with fewer loops in llama.cpp: n3t (3 loops) stopped after 2 is its n2t
    a, _ = run_logits(os.path.join(tmp, "n3t.gguf"), tmp, ["--routing", "forced:2"])
    d = maxdiff(a, peer("n2t"))
    t.check(d <= PEER_TOL, "n3t --routing forced:2: within %.0e of llama.cpp's logits of n2t, the same weights "
            "looped twice (%.2g)" % (PEER_TOL, d))
    a, _ = run_logits(os.path.join(tmp, "n2.gguf"), tmp, ["--routing", "forced:1"])
    b, _ = run_logits(os.path.join(tmp, "n1.gguf"), tmp)
    t.check(a is not None and a == b, "n2 --routing forced:1: the bits of the converted 1-loop file n1")


def check_features():
    """The features the test files switch, each far beyond the tolerance:
    the tied output, a third loop, a second one."""
    for a, b, what in (("n2", "n2t", "the tied output"), ("n2t", "n3t", "a third loop"), ("n1", "n2", "a second loop")):
        d = maxdiff(oracle(a), oracle(b))
        t.check(d > 100 * TOL, "%s matters: the oracle's %s and %s differ by %.3g" % (what, a, b, d))


def check_refusals(tmp):
    ok, msg = convert(src("n2"), os.path.join(tmp, "bad.gguf"), ["--num-recursion", "2", "--sharing", "cycle",
                                                                 "--init", "average"])
    t.check(not ok and "looped" in msg, "converter refuses --init on a looped model: %s" % msg[-150:])
    ok, msg = convert(src("n2"), os.path.join(tmp, "bad.gguf"), ["--num-recursion", "4"])
    t.check(not ok and "looped" in msg, "converter refuses another recursion count: %s" % msg[-150:])
    g = gguf_py.read(src("n2"))
    g.set("nanbeige.num_loops", gguf_py.U32, 0)
    bad = os.path.join(tmp, "zero.gguf")
    gguf_py.write(bad, g)
    ok, msg = convert(bad, os.path.join(tmp, "bad.gguf"))
    t.check(not ok and "num_loops" in msg, "converter refuses num_loops 0: %s" % msg[-150:])
    edits = [
        ("n1", lambda f: (f.set("mor.format_version", gguf_py.U32, 3), f.set("mor.recursion.loop_norm", gguf_py.BOOL, True)),
         "at least 2 recursions", "a loop norm in a model of 1 recursion"),
        ("n2", lambda f: (f.set("mor.format_version", gguf_py.U32, 1), f.drop("mor.family")),
         "'mor.recursion.loop_norm' needs mor.format_version >= 3", "a loop norm in a version-1 file"),
    ]
    for n, (name, edit, want, what) in enumerate(edits):
        f = gguf_py.read(os.path.join(tmp, name + ".gguf"))
        edit(f)
        p = os.path.join(tmp, "edit%d.gguf" % n)
        gguf_py.write(p, f)
        got, err = run_logits(p, tmp)
        t.check(got is None and want in err, "loader refuses %s: %s" % (what, err[-160:]))
    # a converted looped model converts again (a `mor` file as input) to the same logits
    again = os.path.join(tmp, "again.gguf")
    ok, msg = convert(os.path.join(tmp, "n3t.gguf"), again)
    a, _ = run_logits(os.path.join(tmp, "n3t.gguf"), tmp)
    b, _ = run_logits(again, tmp) if ok else (None, msg)
    t.check(ok and a is not None and a == b, "a converted looped model converts again to the same bits (%s)" % msg[-120:])


DROP = object()


def hf_dir(tmp, name, **over):
    """The Hugging Face checkpoint of variant `name`: make_nanbeige.py's
    weights (family_ref's llama model) in HF order, config.json's keys as
    NanbeigeForCausalLM's; `over` replaces keys (DROP: removes one)."""
    loops, skip, tied = F.NANBEIGE[name]
    cfg, w = F.make_model("llama")
    cfg.update(architectures=["NanbeigeForCausalLM"], num_loops=loops, skip_loop_final_norm=skip,
               tie_word_embeddings=tied)
    if tied:
        del w["lm_head.weight"]
    for k, v in over.items():
        cfg.pop(k) if v is DROP else cfg.update({k: v})
    return F.write_model(tempfile.mkdtemp(dir=tmp), cfg, w)


def same_bytes(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def check_hf(tmp):
    """HF checkpoints convert to the llama.cpp files' conversions (check_variant's)."""
    for name in F.NANBEIGE:
        d, out = hf_dir(tmp, name), os.path.join(tmp, "hf_%s.gguf" % name)
        ok, msg = convert(d, out)
        if not t.check(ok, "HF %s: converts (%s)" % (name, msg[-200:])):
            continue
        check_layout(name, out)
        a, _ = run_logits(out, tmp)
        b, _ = run_logits(os.path.join(tmp, name + ".gguf"), tmp)
        do = maxdiff(a, flat(F.Ref(d).forward(F.IDS)))
        t.check(same_bytes(out, os.path.join(tmp, name + ".gguf")) and a is not None and a == b and do <= TOL,
                "HF %s: the same file as from llama.cpp's, the same logits bit for bit, the float64 oracle's "
                "(%.2g)" % (name, do))
    # llama.cpp's converter: num_loops absent, null or 0 -> 1 loop; skip_loop_final_norm absent -> false;
    # a LlamaForCausalLM's num_loops is not read
    same = [(dict(num_loops=DROP), "n1", "num_loops absent is 1 loop"),
            (dict(num_loops=None), "n1", "num_loops null is 1 loop"),
            (dict(num_loops=0), "n1", "num_loops 0 is 1 loop"),
            (dict(architectures=["LlamaForCausalLM"]), "n1", "a LlamaForCausalLM's num_loops 2 is not read"),
            (dict(skip_loop_final_norm=DROP), "n2", "skip_loop_final_norm absent is false")]
    for over, name, what in same:
        out = os.path.join(tmp, "hf_same.gguf")
        ok, msg = convert(hf_dir(tmp, "n2", **over), out)
        t.check(ok and same_bytes(out, os.path.join(tmp, name + ".gguf")), "HF: %s (the file of %s; %s)" %
                (what, name, msg[-120:]))
    bad = [(dict(num_loops=-1), "num_loops is not a non-negative integer"),
           (dict(num_loops=2.5), "num_loops is not a non-negative integer"),
           (dict(num_loops="2"), "num_loops is not a non-negative integer"),
           (dict(num_loops=True), "num_loops is not a non-negative integer"),
           (dict(num_loops=17), "17 loops of 2 layers; libmor runs up to 16 recursions"),
           (dict(skip_loop_final_norm="no"), "'skip_loop_final_norm' is not a boolean"),
           (dict(num_hidden_layers=1), "is not in one of the 1 layers that config.json's num_hidden_layers loops")]
    for over, want in bad:
        ok, msg = convert(hf_dir(tmp, "n2", **over), os.path.join(tmp, "bad.gguf"))
        t.check(not ok and want in msg, "HF: converter refuses %s: %s" % (over, msg[-160:]))
    ok, msg = convert(hf_dir(tmp, "n2"), os.path.join(tmp, "bad.gguf"), ["--num-recursion", "2", "--sharing", "cycle",
                                                                         "--init", "average"])
    t.check(not ok and "looped" in msg, "HF: converter refuses --init on a looped model: %s" % msg[-150:])


TMP = [None]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        TMP[0] = tmp
        for name in F.NANBEIGE:
            check_variant(name, tmp)
        check_features()
        check_forced(tmp)
        check_speculation(tmp)
        check_refusals(tmp)
        check_hf(tmp)
    t.finish()


if __name__ == "__main__":
    main()
