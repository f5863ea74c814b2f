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


def main():
    if not t.check(os.path.exists(BENCH) and os.path.exists(BROWN), "bin/mor-bench and the bundled model exist"):
        t.finish()
    depth_rows()
    depth_refused()
    kv_types()
    with tempfile.TemporaryDirectory() as tmp:
        relaxed_loads(tmp)
    t.finish()


if __name__ == "__main__":
    main()
