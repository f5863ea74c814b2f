#!/usr/bin/env python3
"""scripts/bench-serving.py - serving through mor-server's HTTP API against the
engine driven directly (docs/SERVING.md). Standard library only.

    python3 scripts/bench-serving.py [--models brown,135m-f32,135m-q8_0] [--conc 1,8,32,64]
                                     [--modes depthwise,sequence] [--reps 3] [--gen 32] [--prompt 4]
                                     [--threads 2] [--guard PATH/run_guarded.py] [--out DIR]

For every model, mode and number of concurrent clients it runs, interleaved
and --reps times:
  direct  bin/mor-loadgen --direct: the closed loop of clients on one mor_server
          in-process (the engine as mor-server runs it, without HTTP);
  http    bin/mor-loadgen --server: the same requests through a bin/mor-server
          it starts, one keep-alive connection per client;
  bench   bin/mor-bench --serve (135M models): its depth-wise way (c) or libmor
          sequence way (b'), every request queued at once.
Each measurement runs under the noise guard (shared/anchor/run_guarded.py)
when --guard names it: it waits for a quiet machine, repeats a run that other
work disturbed, and reports the foreign load. The models: the bundled
models/brown-mor.gguf, and mor-bench's SmolLM-135M-shaped MoR (N_r = 3, F32
and Q8_0; mor-bench writes it to build/bench), THRESHOLD routing calibrated
by mor-bench for a mean depth near 2. Prints markdown tables: median tok/s,
the ratio HTTP/direct, median p50 and p99 latency, tokens per CPU second of
the engine (direct: the process; HTTP: the server, its loading and drain
included) with their ratio, the clients' CPU, and whether the outputs were
the same. Run it under `flock /work/bench.lock` on a shared machine.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")


def run(cmd, guard, out_dir, tag):
    """Run cmd (under the guard if given); (stdout, foreign load % or None)."""
    out = os.path.join(out_dir, tag + ".out")
    if guard:
        r = subprocess.run([sys.executable, guard, out, "--"] + cmd, stderr=subprocess.PIPE, text=True)
        m = re.search(r"foreign ([0-9.]+)%", r.stderr)
        foreign = float(m.group(1)) if m else None
        text = open(out).read()
    else:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        text, foreign = r.stdout, None
        with open(out, "w") as f:
            f.write(text)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), text[-2000:]))
    return text, foreign


def loadgen_line(text):
    m = re.search(r"conc (\d+) requests (\d+) tokens (\d+) wall ([0-9.]+) tok/s ([0-9.]+) p50 ([0-9.]+) "
                  r"p99 ([0-9.]+) depth ([0-9.]+) errors (\d+) outputs ([0-9a-f]+) cpu ([0-9.]+) client_cpu ([0-9.]+)", text)
    if not m:
        sys.exit("no result line in: " + text[-500:])
    return {"tps": float(m.group(5)), "p50": float(m.group(6)), "p99": float(m.group(7)),
            "depth": float(m.group(8)), "errors": int(m.group(9)), "hash": m.group(10), "tokens": int(m.group(3)),
            "tpc": int(m.group(3)) / max(1e-9, float(m.group(11))), "client_cpu": float(m.group(12))}


def bench_row(text, col):
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 6 and cells[1].isdigit():
            return {"tps": float(cells[col]), "depth": float(cells[-3])}
    sys.exit("no mor-bench row in: " + text[-500:])


def calibrate(wtype, args, out_dir):
    """mor-bench's thresholds for the 135M model (and the model file)."""
    text, _ = run([os.path.join(BIN, "mor-bench"), "--serve", "--type", wtype, "--conc", "64", "--requests", "2",
                   "--gen", str(args.gen), "--prompt", str(args.prompt), "--reps", "1", "--ways", "c",
                   "--threads", str(args.threads), "--dir", os.path.join(ROOT, "build", "bench")],
                  None, out_dir, "calibrate-" + wtype)
    m = re.search(r"THRESHOLD ([0-9.]+) / ([0-9.]+)", text)
    return (m.group(1), m.group(2)), os.path.join(ROOT, "build", "bench", "135m-mor3-L29-%s.gguf" % wtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="brown,135m-f32,135m-q8_0")
    ap.add_argument("--conc", default="1,8,32,64")
    ap.add_argument("--modes", default="depthwise,sequence")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--guard", default=None)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench-serving"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("# %s; %s; %d threads, prompt %d tokens, %d generated (greedy), closed loop" %
          (subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                          text=True).stdout.strip(), time.strftime("%Y-%m-%d %H:%M"), args.threads, args.prompt, args.gen))
    for model in args.models.split(","):
        if model == "brown":
            path, thr = os.path.join(ROOT, "models", "brown-mor.gguf"), None
        else:
            thr, path = calibrate(model.split("-", 1)[1], args, args.out)
        print("\n## %s%s\n" % (model, " (THRESHOLD %s / %s, calibrated by mor-bench)" % thr if thr else ""))
        print("| mode | clients | requests | direct tok/s | HTTP tok/s | HTTP / direct | mor-bench --serve tok/s "
              "| p50 direct / HTTP (s) | p99 direct / HTTP (s) | tok per CPU s: direct / server (ratio) | client CPU s "
              "| mean depth | same outputs | foreign load max |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|")
        for mode in args.modes.split(","):
            for conc in [int(c) for c in args.conc.split(",")]:
                per = 8 if conc == 1 else 4 if conc <= 8 else 2
                common = ["--conc", str(conc), "--requests", str(per), "--gen", str(args.gen), "--prompt", str(args.prompt)]
                engine = ["--mode", mode, "--slots", str(conc), "--ctx", str(conc * (args.prompt + args.gen) + 16),
                          "--batch", str(conc * args.prompt + 64), "--threads", str(args.threads)]
                if thr:
                    engine += ["--threshold", "0.5,%s,%s" % thr]
                res = {"direct": [], "http": [], "bench": []}
                foreign = []
                for rep in range(args.reps):
                    ways = ["direct", "http", "bench"] if rep % 2 == 0 else ["bench", "http", "direct"]
                    for way in ways:
                        tag = "%s-%s-%d-%s-%d" % (model, mode, conc, way, rep)
                        if way == "direct":
                            cmd = [os.path.join(BIN, "mor-loadgen"), "--direct", "-m", path] + common + engine
                        elif way == "http":
                            cmd = [os.path.join(BIN, "mor-loadgen"), "--server", " ".join(engine), "-m", path] + common
                        else:
                            if not thr:
                                continue
                            cmd = [os.path.join(BIN, "mor-bench"), "--serve", "--type", model.split("-", 1)[1],
                                   "--conc", str(conc), "--requests", str(per), "--gen", str(args.gen), "--prompt",
                                   str(args.prompt), "--reps", "1", "--threads", str(args.threads),
                                   "--ways", "c" if mode == "depthwise" else "b2", "--thr", "%s,%s" % thr,
                                   "--dir", os.path.join(ROOT, "build", "bench")]
                        text, f = run(cmd, args.guard, args.out, tag)
                        if f is not None:
                            foreign.append(f)
                        res[way].append(loadgen_line(text) if way != "bench" else
                                        bench_row(text, 5 if mode == "depthwise" else 4))
                med = {w: statistics.median([r["tps"] for r in v]) if v else 0 for w, v in res.items()}
                p = {w: (statistics.median([r["p50"] for r in res[w]]), statistics.median([r["p99"] for r in res[w]]))
                     for w in ("direct", "http")}
                same = len({r["hash"] for r in res["direct"] + res["http"]}) == 1 and \
                    all(r["errors"] == 0 for r in res["direct"] + res["http"])
                tpc = {w: statistics.median([r["tpc"] for r in res[w]]) for w in ("direct", "http")}
                print("| %s | %d | %d | %.1f | %.1f | %.3f | %s | %.3f / %.3f | %.3f / %.3f | %.0f / %.0f (%.3f) | %.2f "
                      "| %.3f | %s | %s |" % (
                    mode, conc, conc * per, med["direct"], med["http"], med["http"] / med["direct"],
                    "%.1f" % med["bench"] if med["bench"] else "-", p["direct"][0], p["http"][0], p["direct"][1],
                    p["http"][1], tpc["direct"], tpc["http"], tpc["http"] / tpc["direct"],
                    statistics.median([r["client_cpu"] for r in res["http"]]),
                    res["direct"][0]["depth"], "yes" if same else "NO",
                    "%.1f%%" % max(foreign) if foreign else "-"))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
