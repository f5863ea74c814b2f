"""test_bench.py - what mor-bench --model prints and refuses, never how fast (no check reads a time).

- --depth D: rows of pp and tg for both variants ("unfolded", "folded"), each ending in a column D
  (ctx depth) under a note that D tokens are in the cache; the anchor kit's row pattern
  (sbs_parse.py's ROW, copied here) still reads them. Two reps at a depth that fills the training
  context exactly: the prefix stays and each test's tokens are removed after it (a token left over
  would make the next test's positions fail: exit 1).
- A depth that leaves no room for the tests within the training context is refused (exit 1, a
  message naming that context, no table); a negative one is a usage error (exit 2).
- Without --depth the table is as before: no note, no extra column.
- --kv-type f32, f16, q8_0 each run; another type is a usage error.
- A model without LoRA deltas is loaded once (the load line after the table says so), a relaxed
  model with deltas twice (unfolded and folded).
- mor-bench --serve on its 135M-shaped models (Q8_0, written once to $OUT/build/bench and reused): a relaxed
  MoR (--lora 4) and the dense model of its depth (way d), concurrency 1 and 2: a row per concurrency, every
  MoR way the same outputs, d every token, the weights read per token counted for each way (at concurrency 1
  depth-wise batching reads what sequence batching does, a step per recursion; lockstep more); --nr 4 makes
  1 + 4 x 7 + 1 layers with three thresholds; bad --shape, --nr, --type, --lora, --depth, --ways are usage
  errors (exit 2, nothing on stdout).
"""
import os
import random
import re
import subprocess
import tempfile

import testlib as t

BENCH = os.path.join(t.OUT, "bin", "mor-bench")
BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")   # training context 256
# sbs_parse.py (the anchor kit's side_by_side.sh): model, variant, size, threads, test, median tok/s
KIT_ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(unfolded|folded)\s*\|\s*[\d.]+\s*\|\s*\d+\s*\|\s*(pp|tg)\d+\s*\|\s*([\d.]+)\s*\[")
LOAD = re.compile(r"^# load: (\S+): (1 load, [\d.]+ s \(no LoRA deltas|2 loads, unfolded [\d.]+ s, folded [\d.]+ s$)")


def bench(model, *extra):
    p = subprocess.run([BENCH, "--model", model, "-t", "1", "-p", "8", "-n", "8", "-r", "2", "--no-probe"] + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    """{(variant, test): the row's cells} of the results table."""
    got = {}
    for line in out.splitlines():
        m = KIT_ROW.match(line)
        if m:
            got[(m.group(2), m.group(3))] = [c.strip() for c in line.strip().strip("|").split("|")]
    return got


def loads(out):
    return [m.group(2) for m in map(LOAD.match, out.splitlines()) if m]


def depth_rows():
    for depth in (16, 248):   # 248: with 8 test tokens the whole training context of 256
        rc, out, err = bench(BROWN, "--depth", str(depth))
        r = rows(out)
        t.check(rc == 0 and len(r) == 4, "mor-bench --depth %d: pp and tg rows of both variants, as the kit reads them "
                "(rc %d: %s)" % (depth, rc, err.strip()[-160:]))
        t.check(all(len(c) == 10 and c[-1] == str(depth) for c in r.values()),
                "--depth %d: every row ends in the depth column (%s)" % (depth, [c[-1] for c in r.values()]))
        t.check(("| ctx depth |" in out and "# --depth %d: %d tokens in the KV cache before each test" % (depth, depth)
                 in out), "--depth %d: the header's column and note say the depth" % depth)
    rc, out, err = bench(BROWN)
    r = rows(out)
    t.check(rc == 0 and len(r) == 4 and all(len(c) == 9 for c in r.values()) and "ctx depth" not in out
            and "--depth" not in out, "without --depth: the table as before (rc %d: %s)" % (rc, err.strip()[-160:]))
    ld = loads(out)
    t.check(len(ld) == 1 and ld[0].startswith("1 load,"),
            "a model without LoRA deltas is loaded once, both variants on it (%s)" % ld)


def depth_refused():
    rc, out, err = bench(BROWN, "--depth", "249")
    t.check(rc == 1 and "training context of 256" in err and "| model" not in out,
            "--depth 249 with -p 8 -n 8 past the training context of 256: refused, no table (rc %d: %s)"
            % (rc, err.strip()[-200:]))
    rc, out, err = bench(BROWN, "--depth", "-1")
    t.check(rc == 2 and "--depth" in err and out == "", "--depth -1: usage error (rc %d: %s)" % (rc, err.strip()))
    rc, out, err = bench(BROWN, "--depth", "x")
    t.check(rc == 2 and "--depth" in err and out == "", "--depth x: usage error (rc %d)" % rc)


def kv_types():
    """--kv-type: each cache type runs at a depth (the cache holds its prefix in that type); an unknown
    one is a usage error naming the choices."""
    for kt in ("f32", "f16", "q8_0"):
        rc, out, err = bench(BROWN, "--depth", "32", "--kv-type", kt)
        t.check(rc == 0 and len(rows(out)) == 4, "--kv-type %s --depth 32: both variants' rows (rc %d: %s)"
                % (kt, rc, err.strip()[-160:]))
    rc, out, err = bench(BROWN, "--kv-type", "q4_0")
    t.check(rc == 2 and "f32|f16|q8_0" in err and out == "", "--kv-type q4_0: usage error (rc %d: %s)" % (rc, err.strip()))


def relaxed_loads(tmp):
    """A relaxed model (LoRA deltas) is still loaded twice: unfolded and folded differ."""
    import test_relaxed as tr
    rng = random.Random(7)
    top = {"model.embed_tokens.weight": tr.mat(rng, tr.V, tr.D, 1.0), "model.norm.weight": ([tr.D], [1.0] * tr.D)}
    d = tr.write(os.path.join(tmp, "relaxed"), top, [tr.layer(rng) for _ in range(4)])
    model = os.path.join(tmp, "relaxed.gguf")
    ok, msg = t.mor_convert(d, model, ["--num-recursion", "2", "--sharing", "cycle", "--init", "average",
                                       "--lora-rank", "4", "--keep-norms"])
    if not t.check(ok, "a relaxed model with LoRA deltas converts (%s)" % msg[-160:]):
        return
    rc, out, err = bench(model, "--depth", "16")
    t.check(rc == 0 and len(rows(out)) == 4 and [x[:8] for x in loads(out)] == ["2 loads,"],
            "mor-bench --depth 16 on a relaxed model: both variants, loaded twice (rc %d: %s %s)"
            % (rc, loads(out), err.strip()[-160:]))


SERVE = ["--serve", "--conc", "1,2", "--gen", "4", "--requests", "1", "--reps", "1", "--type", "q8_0"]


def serve(*extra):
    p = subprocess.run([BENCH] + SERVE + ["--dir", os.path.join(t.OUT, "build", "bench")] + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def serve_rows(out):
    """The table's rows: lists of cells, the first the concurrency."""
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in out.splitlines()
            if re.match(r"^\|\s*\d+\s*\|", ln)]


def serve_ways():
    """Ways a, b, b2, c, d on a relaxed MoR (--lora 4): the table's cells, the MB column of every way."""
    rc, out, err = serve("--ways", "a,b,b2,c,d", "--lora", "4")
    r = serve_rows(out)
    if not t.check(rc == 0 and [x[0] for x in r] == ["1", "2"] and all(len(x) == 13 for x in r),
                   "mor-bench --serve --lora 4 --ways a,b,b2,c,d --conc 1,2: a row per concurrency with (d)'s "
                   "columns (rc %d: %s)" % (rc, (out + err).strip()[-300:])):
        return
    t.check("LoRA rank 4" in out and "LoRA deltas" in out and "(d) dense model: 29 layers" in out,
            "--serve --lora 4: the header names the rank, the model line the deltas and the dense model")
    head = [ln for ln in out.splitlines() if ln.startswith("| concurrent")][0]
    t.check("(d) dense seq. tok/s" in head and "(c)/(d)" in head and "(a) / (b) / (b') / (c) / (d)" in head,
            "--serve: (d)'s columns and the MB column's ways in the header")
    mb = [[float(v) for v in x[10].split("/")] for x in r]
    t.check(all(len(v) == 5 and min(v) > 0 for v in mb), "--serve: weights read per token counted for every way (%s)" % mb)
    t.check(mb[0][3] == mb[0][2] and mb[0][1] > mb[0][2],
            "--serve at concurrency 1: (c) reads what (b') does, lockstep (b) more (%s)" % mb[0])
    t.check(all(x[-1] == "yes" and float(x[5]) > 0 for x in r),
            "--serve: every MoR way the same outputs, (d) every token (%s)" % [(x[5], x[-1]) for x in r])


def serve_nr4():
    rc, out, err = serve("--ways", "b2,c", "--nr", "4")
    r = serve_rows(out)
    t.check(rc == 0 and len(r) == 2 and all(x[-1] == "yes" and len(x) == 11 for x in r)
            and "1 + 4 x 7 + 1 = 30 layers" in out and re.search(r"THRESHOLD [\d.-]+ / [\d.-]+ / [\d.-]+ \(", out),
            "mor-bench --serve --nr 4: 1 + 4 x 7 + 1 layers, three thresholds, same outputs (rc %d: %s)"
            % (rc, (out + err).strip()[-300:]))


def serve_refused():
    for args, flag in ((["--shape", "7b"], "--shape"), (["--nr", "5"], "--nr"), (["--type", "q4_0"], "--type"),
                       (["--lora", "-1"], "--lora"), (["--depth", "3.5"], "--depth"), (["--ways", "a,e"], "--ways"),
                       (["--conc", "0"], "--conc")):
        rc, out, err = serve(*args)
        t.check(rc == 2 and out == "" and flag in err, "mor-bench --serve %s: usage error (rc %d: %s)"
                % (" ".join(args), rc, err.strip()[-160:]))
    p = subprocess.run([BENCH, "--serve", "--help"], stdout=subprocess.PIPE, text=True, timeout=60)
    t.check(p.returncode == 0 and all(f in p.stdout for f in ("--shape", "tl1b", "--nr", "--lora", "q4_k_m", " d (")),
            "mor-bench --serve --help: --shape (tl1b), --nr, --lora, q4_k_m, way d")


def main():
    if not t.check(os.path.exists(BENCH) and os.path.exists(BROWN), "bin/mor-bench and the bundled model exist"):
        t.finish()
    depth_rows()
    depth_refused()
    kv_types()
    with tempfile.TemporaryDirectory() as tmp:
        relaxed_loads(tmp)
    serve_refused()
    serve_ways()
    serve_nr4()
    t.finish()


if __name__ == "__main__":
    main()
