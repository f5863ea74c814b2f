"""test_ouro.py - Ouro (ByteDance Seed's LoopLM, OuroForCausalLM) converted by
bin/mor-convert from a Hugging Face checkpoint into a recursive model and run.

The checkpoint is family_ref's random "ouro" model, written here: GQA, 2
layers looped total_ut_steps = 3 times, sandwich norms, untied output, the
early-exit gate. Checked:
  - the 2 layers are stored once as the shared block of N_r = 3 recursions
    (cycle sharing), with the loop norm and the post-sub-layer norms, and the
    exit gate kept as exit_gate.weight / exit_gate.bias, F32, bit for bit;
  - bin/mor-run's logits are those of a float64 reference of vLLM's forward
    (family_ref.Ref.forward_ouro) within 1e-4 at full depth, and with every
    token stopped after loop K (--routing forced:K) those of the model
    looped K times; each loop and each sandwich norm moves the logits far
    more than that;
  - the reference's per-loop exit probabilities of the gate are
    probabilities that move from loop to loop (the learned exit's input);
  - --exit learned:Q (Ouro's Q-exit): each token's depth is the first loop
    where the CDF of the reference's exit distribution reaches Q, its logits
    the reference's at that depth (under recursion-wise KV); Q out of [0, 1]
    and a model without the gate are refused; depth-wise serving with the
    learned exit gives each request its own decode loop's tokens and depths;
    mor-bench --exit reports the depths the rule gives (1 at q 0, all at q 1);
    mor-server --exit learned:Q generates mor-run --exit's tokens and depths;
    per-request thresholds (mor_server_set_exit, the request field
    exit_threshold) in one batch give each request its own loop's tokens;
  - total_ut_steps absent is 4 loops (vLLM's default); bad values, a gate
    without its bias, and --init are refused; a converted file converts
    again to the same bytes; mor-quantize keeps the gate F32.
"""
import json
import os
import struct
import subprocess
import tempfile

import family_ref as F
import gguf_py
import testlib as t

t.reexec_under_asan()
t.use_bindings()
import mor  # noqa: E402

RUN = os.path.join(t.OUT, "bin", "mor-run")
QUANT = os.path.join(t.OUT, "bin", "mor-quantize")
TOL = 1e-4
DROP = object()


convert = t.mor_convert

def run_logits(gguf, tmp, extra=()):
    return t.mor_logits(gguf, F.IDS, tmp, extra)[0]

def flat(rows_):
    return [x for r in rows_ for x in r]


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else float("inf")


def hf_dir(tmp, drop_w=(), **over):
    cfg, w = F.make_model("ouro")
    for k, v in over.items():
        cfg.pop(k) if v is DROP else cfg.update({k: v})
    for k in drop_w:
        del w[k]
    return F.write_model(tempfile.mkdtemp(dir=tmp), cfg, w)


def check_layout(d, conv):
    c = gguf_py.read(conv)
    blk = [x for x in c.tensors if x.name.startswith("blk.")]
    t.check(len(blk) == 11 * 2, "the 2 layers are stored once (%d block tensors)" % len(blk))
    plan = (c.get("mor.recursion.count"), c.get("mor.recursion.base_depth"), c.get("mor.recursion.sharing"),
            bool(c.get("mor.recursion.loop_norm")), bool(c.get("mor.norm.post")))
    t.check(plan == (3, 2, "cycle", True, True), "total_ut_steps 3 is N_r over the cycle-shared block of 2, loop "
            "norm and post norms on (%s)" % (plan,))
    _, w = F.make_model("ouro")
    gw, gb = c.tensor("exit_gate.weight"), c.tensor("exit_gate.bias")
    t.check(gw is not None and gb is not None and gw.type == 0 and gb.type == 0 and gw.floats() == w[
        "model.early_exit_gate.weight"][1] and gb.floats() == w["model.early_exit_gate.bias"][1],
        "the exit gate kept as exit_gate.weight [d, 1] and exit_gate.bias [1], F32, bit for bit")


def check_logits(d, conv, tmp):
    ref = F.Ref(d)
    full = run_logits(conv, tmp)
    dd = maxdiff(full, flat(ref.forward_ouro(F.IDS)[0]))
    t.check(dd <= TOL, "full depth: the float64 reference's logits (%.2g)" % dd)
    for k in (1, 2):
        a = run_logits(conv, tmp, ["--routing", "forced:%d" % k])
        dk = maxdiff(a, flat(ref.forward_ouro(F.IDS, k)[0]))
        far = maxdiff(a, full)
        t.check(dk <= TOL and far > 100 * TOL, "--routing forced:%d: the reference's logits of %d loops (%.2g), "
                "%.3g from full depth" % (k, k, dk, far))
    # the sandwich norms matter: the same model with their weights all 1 is far off
    ones = F.Ref(d)
    ones.t = {k: ((v[0], [1.0] * len(v[1])) if "layernorm_2" in k else v) for k, v in ones.t.items()}
    t.check(maxdiff(full, flat(ones.forward_ouro(F.IDS)[0])) > 100 * TOL,
            "the trained sandwich-norm weights move the logits far more than the tolerance")


def check_gates(d):
    _, gates = F.Ref(d).forward_ouro(F.IDS)
    ok = len(gates) == 3 and all(len(g) == len(F.IDS) and all(0 < p < 1 for p in g) for g in gates)
    moved = max(abs(a - b) for a, b in zip(gates[0], gates[1]))
    t.check(ok and moved > 1e-3, "the gate's exit probability per loop and token, moving between loops (%.3g)" % moved)


def run_exit(gguf, tmp, q):
    """(depths, logits) of bin/mor-run with --exit learned:q, or (None, message)."""
    out, rt = os.path.join(tmp, "L.f32"), os.path.join(tmp, "R.json")
    p = subprocess.run([RUN, "-q", "-m", gguf, "--ids", ",".join(map(str, F.IDS)), "--exit", "learned:%r" % q,
                        "--dump-logits", out, "--dump-routing", rt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode:
        return None, p.stderr.strip()
    with open(out, "rb") as f:
        raw = f.read()
    with open(rt) as f:
        return json.load(f)["depth"], list(struct.unpack("<%df" % (len(raw) // 4), raw))


def check_exit(d, conv, tmp):
    """The learned exit (--exit learned:Q): each token's depth is the first
    loop where the reference's CDF of its exit distribution reaches q, and its
    logits are the reference's at that depth. The reference follows libmor's
    recursion-wise KV (a token that stopped leaves nothing in the deeper
    loops, so the tokens after it attend without it there), which the
    whole-prompt decode runs. Each q is checked only where no CDF the rule
    compares lies within 1e-3 of it (0 and 1 are exact by the rule)."""
    ref, mixed = F.Ref(d), set()
    for q in (0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0):
        logits, _, depths, cdfs = ref.forward_ouro(F.IDS, q=q)
        near = min([abs(c - q) for cd in cdfs[:-1] for c in cd if c is not None] or [1])
        if 0 < q < 1 and near < 1e-3:
            continue
        got, lg = run_exit(conv, tmp, q)
        dk = maxdiff(lg, flat(logits)) if got is not None else float("inf")
        t.check(got == depths and dk <= TOL, "--exit learned:%g: depths %s are the rule's on the reference's gates (%s), "
                "logits at each token's depth (%.2g)" % (q, got, depths, dk))
        if 0 < q < 1:
            mixed.add(len(set(depths)))
        if q == 0.0:
            t.check(depths == [1] * len(F.IDS), "q 0: every token stops after loop 1")
        if q == 1.0:
            t.check(depths == [3] * len(F.IDS), "q 1: every token runs every loop")
    t.check(max(mixed or {0}) == 3, "some q gives tokens of all three depths, and the deeper ones attend past "
            "the stopped ones (%s)" % sorted(mixed))
    for q, want in ((1.5, "not in [0, 1]"), (-0.1, "not in [0, 1]")):
        got, msg = run_exit(conv, tmp, q)
        t.check(got is None and want in msg, "--exit learned:%g refused: %s" % (q, msg[-120:]))
    nog = os.path.join(tmp, "nogate.gguf")
    ok, msg = convert(hf_dir(tmp, ("model.early_exit_gate.weight", "model.early_exit_gate.bias")), nog)
    got, msg = run_exit(nog, tmp, 0.5) if ok else (None, msg)
    t.check(ok and got is None and "exit gate" in msg, "a model without the gate refuses the learned exit: %s" %
            msg[-160:])


def check_bench_exit(conv):
    """mor-bench --model F --exit learned:Q measures full depth beside the
    exits, each row with the mean depth it ran: 1 at q 0 and every loop at
    q 1 (exact by the rule), between them at q 0.5."""
    bench = os.path.join(t.OUT, "bin", "mor-bench")
    depth = {}
    for q in (0.0, 0.5, 1.0):
        p = subprocess.run([bench, "--model", conv, "--exit", "learned:%r" % q, "-r", "1", "-p", "8", "-n", "8",
                            "-t", "1", "--no-probe"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in p.stdout.splitlines():
            c = [x.strip() for x in line.split("|")]
            if len(c) > 8 and c[2] in ("unfolded", "exit"):
                depth[(q, c[2], c[5][:2])] = float(c[7])
        t.check(p.returncode == 0 and len([k for k in depth if k[0] == q]) == 4,
                "mor-bench --exit learned:%g: full-depth and exit rows of pp and tg (%s)" % (q, p.stderr.strip()[-120:]))
    full = all(depth.get((q, "unfolded", s)) == 3.0 for q in (0.0, 0.5, 1.0) for s in ("pp", "tg"))
    t.check(full and depth.get((0.0, "exit", "tg")) == 1.0 and depth.get((1.0, "exit", "tg")) == 3.0 and
            1.0 < depth.get((0.5, "exit", "tg"), 0) < 3.0 and depth.get((0.0, "exit", "pp")) == 1.0,
            "mor-bench's depth column: 3 at full depth, 1 at q 0, 3 at q 1, between at q 0.5 (%s)" % sorted(depth.items()))
    p = subprocess.run([bench, "--model", conv, "--exit", "learned"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    t.check(p.returncode == 2 and "--exit needs MODE:T" in p.stderr, "mor-bench --exit learned (no q): usage error "
            "(%s)" % p.stderr.strip()[-100:])


def check_server_cli_exit(conv):
    """mor-server --exit learned:Q: a greedy /completion's tokens and depths
    are mor-run --exit learned:Q's; a server without the flag runs every
    loop; --exit with --mode sequence is refused at start."""
    import serverlib
    ids, n = [1, 5, 9, 3], 6
    base = [RUN, "-q", "-m", conv, "--ids", ",".join(map(str, ids)), "-n", str(n), "--temp", "0", "--exit",
            "learned:0.5"]
    want_ids = [int(x) for x in subprocess.run(base + ["--print-ids"], capture_output=True, text=True).stdout.split()]
    shown = subprocess.run(base + ["--show-depth"], capture_output=True, text=True).stdout
    want_depths = [int(x.split("]")[0]) for x in shown.split("[")[1:]]
    body = {"prompt": ids, "n_predict": n, "temperature": 0}
    got, per = {}, {}

    def mor_of(js):
        return js.get("mor", {}).get("token_ids"), js.get("mor", {}).get("depths")
    for args in (["--exit", "learned:0.5"], []):
        srv = serverlib.Server(args, model=conv)
        try:
            st, js = srv.json("POST", "/completion", body)
            got[bool(args)] = (st,) + mor_of(js)
            for q in (0.3, 1.0, 2.0):   # the request field exit_threshold
                st, js = srv.json("POST", "/completion", dict(body, exit_threshold=q))
                per[(bool(args), q)] = (st,) + (mor_of(js) if st == 200 else (js["error"]["message"],))
        finally:
            srv.stop()
    for q in (0.3, 1.0):
        w = base[:-1] + ["learned:%r" % q]
        wi = [int(x) for x in subprocess.run(w + ["--print-ids"], capture_output=True, text=True).stdout.split()]
        wd = [int(x.split("]")[0]) for x in subprocess.run(w + ["--show-depth"], capture_output=True,
                                                           text=True).stdout.split("[")[1:]]
        t.check(per[(True, q)] == (200, wi, wd), "\"exit_threshold\": %g on mor-server --exit learned:0.5: mor-run "
                "--exit learned:%g's tokens and depths (%s)" % (q, q, per[(True, q)]))
    t.check(per[(True, 2.0)][0] == 400 and "[0, 1]" in per[(True, 2.0)][1] and per[(False, 0.3)][0] == 400 and
            "--exit" in per[(False, 0.3)][1], "exit_threshold out of [0, 1], or without --exit: 400 (%s; %s)" %
            (per[(True, 2.0)], per[(False, 0.3)]))
    t.check(got[True] == (200, want_ids, want_depths) and len(set(want_depths)) > 1,
            "mor-server --exit learned:0.5: /completion's tokens and depths are mor-run --exit's (%s; %s %s)" %
            (got[True], want_ids, want_depths))
    t.check(got[False][0] == 200 and got[False][2] == [3] * n, "without --exit every token runs all 3 loops (%s)" %
            (got[False],))
    p = subprocess.run([serverlib.BIN, "-m", conv, "--port", "0", "--mode", "sequence", "--exit", "learned:0.5"],
                       capture_output=True, text=True, timeout=60)
    t.check(p.returncode != 0 and "DEPTHWISE" in p.stderr, "mor-server --exit with --mode sequence is refused: %s" %
            p.stderr.strip()[-160:])


def check_serve_exit(conv):
    """Depth-wise batching with the learned exit (mor_server_params.exit_mode
    MOR_EXIT_LEARNED): 5 greedy requests on 3 slots give each request the
    tokens and depths of its own decode loop with mor_router_set_exit."""
    q, prompts = 0.9, [[(i * 31 + k * 17 + 3) % 128 for k in range(1 + i % 4)] for i in range(5)]
    with mor.Model(conv) as m:
        ref = []
        for p in prompts:
            with m.context(n_ctx=64) as ctx:
                ctx.router.set_exit(mor.EXIT_LEARNED, q)
                toks = list(ctx.generate(p, max_tokens=6, temperature=0.0, stop_at_eos=False))
                ref.append(([x.id for x in toks], [x.depth for x in toks]))
        with mor.Server(m, mode=mor.SERVE_DEPTHWISE, n_slots=3, n_ctx=256, n_batch=32, exit_mode=mor.EXIT_LEARNED,
                        exit_threshold=q) as srv:
            ids = [srv.submit(p, max_tokens=6, temperature=0) for p in prompts]
            srv.run()
            got = [srv.tokens(rid) for rid in ids]
    # the server reports with a token the depth of the input token that gave
    # it; generate() the depth the token itself ran when decoded: one apart
    same = all(list(a) == r[0] and list(b)[1:] == r[1][:-1] for (a, b), r in zip(got, ref))
    deps = {d for _, ds in ref for d in ds}
    t.check(same and len(deps) > 1, "depth-wise serving with the learned exit (q %g): each request's tokens and "
            "depths are its own decode loop's, depths %s" % (q, sorted(deps)))


def check_serve_mixed_exit(conv):
    """Per-request thresholds (mor_server_set_exit) in one depth-wise batch:
    6 greedy requests with q 0.9 (the server's, by NaN and by default), 0.3,
    0.6 and 1 on 3 slots, the last one the first's prompt again with another
    q (the kept K/V of the first, computed under 0.9, must not be reused):
    each request gets its own decode loop's tokens and depths; a request's
    threshold out of [0, 1] and one on a server without exits are refused."""
    prompts = [[(i * 31 + k * 17 + 3) % 128 for k in range(1 + i % 4)] for i in range(5)]
    prompts.append(prompts[0])
    qs = [None, 0.3, 0.6, float("nan"), 1.0, 0.3]
    with mor.Model(conv) as m:
        ref = []
        for p, q in zip(prompts, qs):
            with m.context(n_ctx=64) as ctx:
                ctx.router.set_exit(mor.EXIT_LEARNED, 0.9 if q is None or q != q else q)
                toks = list(ctx.generate(p, max_tokens=6, temperature=0.0, stop_at_eos=False))
                ref.append(([x.id for x in toks], [x.depth for x in toks]))
        with mor.Server(m, mode=mor.SERVE_DEPTHWISE, n_slots=3, n_ctx=256, n_batch=32, exit_mode=mor.EXIT_LEARNED,
                        exit_threshold=0.9) as srv:
            ids = [srv.submit(p, max_tokens=6, temperature=0, exit_threshold=q) for p, q in zip(prompts, qs)]
            srv.run()
            got = [srv.tokens(rid) for rid in ids]
            refused = []
            for q in (1.5, -0.1):
                try:
                    srv.submit(prompts[0], max_tokens=2, temperature=0, exit_threshold=q)
                except mor.MorError as e:
                    refused.append(str(e))
        with mor.Server(m, mode=mor.SERVE_DEPTHWISE, n_slots=1, n_ctx=64, n_batch=32) as plain:
            try:
                plain.submit(prompts[0], max_tokens=2, temperature=0, exit_threshold=0.5)
            except mor.MorError as e:
                refused.append(str(e))
    same = [list(a) == r[0] and list(b)[1:] == r[1][:-1] for (a, b), r in zip(got, ref)]
    t.check(all(same) and ref[0] != ref[5], "per-request exit thresholds in one depth-wise batch: each request's "
            "tokens and depths are its own decode loop's (%s; the repeated prompt under another q differs)" % same)
    t.check(len(refused) == 3 and "not in [0, 1]" in refused[0] and "no exits" in refused[2],
            "a request's q out of [0, 1], and a threshold on a server without exits, are refused: %s" % refused)


def check_more(d, conv, tmp):
    out = os.path.join(tmp, "again.gguf")
    ok, msg = convert(conv, out)
    with open(conv, "rb") as f, open(out, "rb") as g:
        t.check(ok and f.read() == g.read(), "a converted file converts again to the same bytes (%s)" % msg[-120:])
    ok, msg = convert(hf_dir(tmp, total_ut_steps=DROP), out)
    t.check(ok and gguf_py.read(out).get("mor.recursion.count") == 4, "total_ut_steps absent: 4 loops (%s)" % msg[-80:])
    bad = [(dict(total_ut_steps=0), (), "total_ut_steps is not a positive integer"),
           (dict(total_ut_steps="3"), (), "total_ut_steps is not a positive integer"),
           (dict(total_ut_steps=None), (), "total_ut_steps is not a positive integer"),
           (dict(total_ut_steps=17), (), "17 loops of 2 layers; libmor runs up to 16 recursions"),
           ({}, ("model.early_exit_gate.bias",), "model.early_exit_gate needs both its weight and its bias"),
           ({}, ("model.layers.1.input_layernorm_2.weight",), "attn_post_norm.weight is missing")]
    for over, drop_w, want in bad:
        ok, msg = convert(hf_dir(tmp, drop_w, **over), os.path.join(tmp, "bad.gguf"))
        t.check(not ok and want in msg, "converter refuses %s %s: %s" % (over, drop_w, msg[-160:]))
    ok, msg = convert(d, os.path.join(tmp, "bad.gguf"), ["--num-recursion", "3", "--sharing", "cycle", "--init", "average"])
    t.check(not ok and "looped" in msg, "converter refuses --init on Ouro: %s" % msg[-150:])
    q = os.path.join(tmp, "q8.gguf")
    p = subprocess.run([QUANT, conv, q, "q8_0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    g = gguf_py.read(q) if p.returncode == 0 else None
    a = run_logits(q, tmp) if g else None
    t.check(g is not None and g.tensor("exit_gate.weight").type == 0 and g.tensor("blk.0.attn_q.weight").type != 0 and
            a is not None and len(a) == 8 * 128 and all(abs(x) < 1e6 for x in a),
            "mor-quantize q8_0: the gate stays F32, the layers are quantized, the file runs (%s)" %
            p.stderr.strip()[-120:])


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d, conv = hf_dir(tmp), os.path.join(tmp, "ouro.gguf")
        ok, msg = convert(d, conv)
        if t.check(ok, "OuroForCausalLM converts (%s)" % msg[-200:]):
            check_layout(d, conv)
            check_logits(d, conv, tmp)
            check_gates(d)
            check_exit(d, conv, tmp)
            check_serve_exit(conv)
            check_serve_mixed_exit(conv)
            check_bench_exit(conv)
            check_server_cli_exit(conv)
            check_more(d, conv, tmp)
    t.finish()


if __name__ == "__main__":
    main()
