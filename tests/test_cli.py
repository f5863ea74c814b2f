"""test_cli.py - the command-line contract of every tool (src/tools/common/cli.h).

- Every numeric flag of every tool is parsed strictly: a value that is not a
  whole decimal number in range, a flag without its value, an unknown flag or
  two flags that contradict each other exit 2 with one line on stderr naming
  the flag, and nothing runs.
- No tool overwrites one of its inputs, however the output path is spelled.
- mor-run: --threads gives the same tokens; the statistics go to stderr, each
  on a line of its own (never glued to the text); -q hides only them;
  --no-cache statistics count the generated tokens; the routing used is
  named, and generation with an expert-choice model defaults to its causal
  THRESHOLD mode (meaningful per-token depths); a huge -n does not overflow.
- mor-run generates past the context by shifting it (llama.cpp's rule),
  with a note naming --no-context-shift and --max-pos; a prompt longer than
  the context keeps its start and its end (refused under
  --no-context-shift and for dumps).
- mor-bench --help lists --serve; mor-bench-serve --help works.
- mor-convert draws its progress (tensors written, SVDs done) on a terminal
  only.
- mor-train prints an ETA and reports no held-out loss without --val.
- The README's `make demo` comment is the command the Makefile runs.
"""
import math
import json
import os
import re
import shutil
import subprocess
import tempfile

import testlib as t

BIN = os.path.join(t.OUT, "bin")
FIX = os.path.join(t.OUT, "build", "fixtures")
BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")
EXPERT = os.path.join(FIX, "expert_mc3_fix_perturbed.st.gguf")


def tool(name):
    return os.path.join(BIN, name)


def run(args, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, **kw)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def refused(args, flag, what):
    """args must exit 2 with one stderr line naming flag, and print nothing on stdout."""
    rc, out, err = run(args)
    lines = err.strip().split("\n")
    t.check(rc == 2 and len(lines) == 1 and flag in lines[0] and out == "",
            "%s: exit 2, one line naming %s (rc %d: %s)" % (what, flag, rc, err.strip()[:160]))


def mor_run_flags():
    base = [tool("mor-run"), "-m", BROWN, "-p", "The jury"]
    cases = [
        (["-n", "abc"], "-n"), (["-n", "-1"], "-n"), (["-n", "2147483648"], "-n"), (["-n", "12x"], "-n"),
        (["-n", " 5"], "-n"), (["-n", ""], "-n"), (["-n", "0x10"], "-n"),
        (["--temp", "abc"], "--temp"), (["--temp", "-1"], "--temp"), (["--temp", "nan"], "--temp"),
        (["--temp", "inf"], "--temp"), (["--seed", "abc"], "--seed"), (["--seed", "-1"], "--seed"),
        (["--seed", "18446744073709551616"], "--seed"), (["--ctx", "-1"], "--ctx"), (["--ctx", "0"], "--ctx"),
        (["--top-k", str(2 ** 40)], "--top-k"), (["--top-p", "0"], "--top-p"), (["--top-p", "1.5"], "--top-p"),
        (["--min-p", "2"], "--min-p"), (["--repeat-penalty", "0"], "--repeat-penalty"),
        (["--repeat-last-n", "-3"], "--repeat-last-n"), (["--max-depth", "x"], "--max-depth"),
        (["--threshold", "0.5,abc"], "--threshold"), (["--threshold", "0.5,,0.5"], "--threshold"),
        (["--routing", "forced:x"], "forced"), (["--routing", "forced:0"], "forced"),
        (["--routing", "sideways"], "--routing"), (["--kv", "both"], "--kv"), (["--kv-type", "q4_0"], "--kv-type"),
        (["--threads", "0"], "-"), (["-t", "x"], "-t"), (["--max-pos", "0"], "--max-pos"),
        (["--ids", "1,2"], "--ids"), (["--show-depth", "--print-ids"], "--show-depth"),
        (["--greedy", "--temp", "0.5"], "--greedy"), (["--frobnicate"], "--frobnicate"), (["-n"], "-n"),
    ]
    for extra, flag in cases:
        refused(base + extra, flag, "mor-run " + " ".join(extra))
    refused([tool("mor-run"), "-m", BROWN, "--ids", "1,x,3"], "--ids", "mor-run --ids 1,x,3")
    refused([tool("mor-run"), "-m", BROWN, "--ids", "1,4096"], "--ids", "mor-run --ids with an id past the vocabulary")
    refused([tool("mor-run"), "-m", BROWN, "--ids", "1,,2"], "--ids", "mor-run --ids 1,,2")
    refused([tool("mor-run"), "-m", BROWN, "--ids", "1", "--threshold", "0.5,0.5,0.5,0.5"], "--threshold",
            "mor-run --threshold with more values than recursions")
    refused([tool("mor-run"), "-m", BROWN, "--tokenize-file", BROWN, "-p", "x"], "--tokenize-file",
            "mor-run --tokenize-file with -p")


def other_tools_flags(tmp):
    cases = [
        ([tool("mor-bench"), "-r", "abc"], "-r"), ([tool("mor-bench"), "-p", "-5"], "-p"),
        ([tool("mor-bench"), "-t", "1,x"], "-t"), ([tool("mor-bench"), "-w", "f33"], "-w"),
        ([tool("mor-bench"), "-s", "135m,7b"], "-s"), ([tool("mor-bench"), "--kernels", "sse9"], "--kernels"),
        ([tool("mor-bench"), "--serve", "--gen", "x"], "--gen"),
        ([tool("mor-bench"), "--stream", "-w", "q3"], "-w"), ([tool("mor-bench"), "--stream", "--cols", "40"], "--cols"),
        ([tool("mor-bench-serve"), "--reps", "0"], "--reps"), ([tool("mor-bench-serve"), "--conc", "8,,2"], "--conc"),
        ([tool("mor-bench-serve"), "--ways", "a,z"], "--ways"), ([tool("mor-bench-serve"), "--thr", "nan"], "--thr"),
        ([tool("mor-bench-serve"), "--type", "q2"], "--type"), ([tool("mor-bench-serve"), "--threads"], "--threads"),
        ([tool("mor-convert"), "x", "-o", os.path.join(tmp, "o.gguf"), "--num-recursion", "2x"], "--num-recursion"),
        ([tool("mor-convert"), "x", "-o", os.path.join(tmp, "o.gguf"), "--threads", "-1"], "--threads"),
        ([tool("mor-convert"), "x", "-o", os.path.join(tmp, "o.gguf"), "--lora-rank", "q=x"], "--lora-rank"),
        ([tool("mor-convert"), "x", "-o", os.path.join(tmp, "o.gguf"), "--outtype", "f8"], "--outtype"),
        ([tool("mor-quantize"), BROWN, os.path.join(tmp, "q.gguf"), "q8_0", "--drift", "abc"], "--drift"),
        ([tool("mor-quantize"), BROWN, os.path.join(tmp, "q.gguf"), "q3"], "TYPE"),
        ([tool("mor-tok-train"), "-i", "x", "-o", "y", "--vocab", "1e3"], "--vocab"),
        ([tool("mor-tok-train"), "-i", "x", "-o", "y", "--vocab", "100"], "--vocab"),
        ([tool("mor-depth-svg"), "-m", BROWN, "-p", "x", "-o", "y", "--width", "wide"], "--width"),
        ([tool("mor-depth-svg"), "-m", BROWN, "-p", "x", "-o", "y", "--routing", "token"], "--routing"),
        ([tool("mor-depth-svg"), "-m", BROWN, "-p", "x", "-f", "z", "-o", "y"], "-f"),
    ]
    train = [tool("mor-train"), "--data", "d", "--vocab", "v", "-o", "o"]
    for flag, bad in (("--steps", "abc"), ("--lr", "0"), ("--lr", "fast"), ("--seed", "x"), ("--batch", "-4"),
                      ("--capacity", "1,0.5,x"), ("--capacity", "1,1.5"), ("--router", "expertt"),
                      ("--token-func", "relu"), ("--schedule", "linear"), ("--threads", "1.5"),
                      ("--flops-budget", "lots"), ("--eval-tokens", "0")):
        cases.append((train + [flag, bad], flag))
    for args, flag in cases:
        refused(args, flag, "%s %s" % (os.path.basename(args[0]), " ".join(args[1:])[-60:]))


def overwrites(tmp):
    """Outputs that resolve to an input are refused and the input is unchanged."""
    src = os.path.join(t.ROOT, "tests", "data", "fixtures", "expert_mc3_fix_perturbed")
    d = os.path.join(tmp, "ckpt")
    shutil.copytree(src, d)
    st = os.path.join(d, "hf_safetensors", "model.safetensors")
    with open(st, "rb") as f:
        before = f.read()
    os.symlink(st, os.path.join(tmp, "link.gguf"))
    spellings = [st, os.path.join(d, "hf_safetensors", ".", "model.safetensors"),
                 os.path.join(d, "hf_bin", "..", "hf_safetensors", "model.safetensors"), os.path.join(tmp, "link.gguf"),
                 os.path.join(d, "hf_safetensors", "config.json"), os.path.join(d, "mor_cfg.yaml")]
    for out in spellings:
        rc, _, err = run([tool("mor-convert"), os.path.join(d, "hf_safetensors"), "-o", out])
        t.check(rc != 0 and "refusing to overwrite" in err,
                "mor-convert -o %s (an input) is refused (rc %d: %s)" % (os.path.relpath(out, tmp), rc, err.strip()[:120]))
    with open(st, "rb") as f:
        t.check(f.read() == before, "mor-convert: the checkpoint is unchanged")
    left = sorted(x for x in os.listdir(os.path.join(d, "hf_safetensors")) if ".tmp" in x or ".part" in x)
    t.check(not left, "mor-convert: no temporary file is left behind (%s)" % left)
    out = os.path.join(d, "hf_safetensors", "model.gguf")
    rc, _, err = run([tool("mor-convert"), os.path.join(d, "hf_safetensors"), "-o", out])
    t.check(rc == 0 and os.path.exists(out), "mor-convert may write a new file beside its input (%s)" % err.strip()[:100])
    rc, _, err = run([tool("mor-convert"), out, "-o", out, "--num-recursion", "2", "--sharing", "cycle", "--init",
                      "average"])
    t.check(rc != 0 and "refusing" in err, "mor-convert MODEL.gguf -o MODEL.gguf is refused (%s)" % err.strip()[:100])

    model = os.path.join(tmp, "m.gguf")
    shutil.copy(BROWN, model)
    with open(model, "rb") as f:
        mbytes = f.read()
    txt = os.path.join(tmp, "t.txt")
    with open(txt, "w") as f:
        f.write("The jury said that the city was large.\n\nIt rained.\n" * 20)
    cases = [
        ("mor-quantize IN IN", [tool("mor-quantize"), model, model, "q8_0"]),
        ("mor-quantize IN ./IN", [tool("mor-quantize"), model, os.path.join(tmp, ".", "m.gguf"), "q8_0"]),
        ("mor-run --dump-logits MODEL", [tool("mor-run"), "-m", model, "--ids", "1,2", "--dump-logits", model]),
        ("mor-run --dump-routing MODEL", [tool("mor-run"), "-m", model, "--ids", "1,2", "--dump-routing", model]),
        ("mor-run --dump-step-logits MODEL", [tool("mor-run"), "-m", model, "--ids", "1,2", "-n", "2",
                                              "--dump-step-logits", model]),
        ("mor-depth-svg -o MODEL", [tool("mor-depth-svg"), "-m", model, "-p", "x", "-o", model]),
        ("mor-depth-svg -o TEXT", [tool("mor-depth-svg"), "-m", model, "-f", txt, "-o", txt]),
        ("mor-tok-train -o TEXT", [tool("mor-tok-train"), "-i", txt, "-o", txt, "-q"]),
        ("mor-train -o DATA", [tool("mor-train"), "--data", txt, "--vocab", model, "-o", txt, "-q"]),
        ("mor-train -o VOCAB", [tool("mor-train"), "--data", txt, "--vocab", model, "-o", model, "-q"]),
        ("mor-train --export-f16 DATA", [tool("mor-train"), "--data", txt, "--vocab", model, "-o",
                                         os.path.join(tmp, "new.gguf"), "--export-f16", txt, "-q"]),
    ]
    with open(txt, "rb") as f:
        tbytes = f.read()
    for what, args in cases:
        rc, _, err = run(args)
        t.check(rc == 2 and "refusing to overwrite" in err, "%s is refused (rc %d: %s)" % (what, rc, err.strip()[:120]))
    with open(model, "rb") as f:
        same = f.read() == mbytes
    with open(txt, "rb") as f:
        same = same and f.read() == tbytes
    t.check(same, "the inputs are unchanged")
    rc, _, err = run([tool("mor-quantize"), model, os.path.join(tmp, "q.gguf"), "q8_0"])
    t.check(rc == 0 and not [x for x in os.listdir(tmp) if ".tmp." in x],
            "mor-quantize writes its output through a temporary file it renames (%s)" % err.strip()[:100])
    # a k-quant: the embedding in q6_k, the matrices whose rows are not whole blocks of 256 in their fallback type
    rc, out, err = run([tool("mor-quantize"), BROWN, os.path.join(tmp, "q4k.gguf"), "q4_k", "--drift", "64"])
    t.check(rc == 0 and "q4_k, embedding q6_k" in out and "not whole blocks" in out and "drift over" in out,
            "mor-quantize q4_k: written, loaded and compared (%s)" % (out + err).strip().replace("\n", "; ")[:200])


def mor_run_output(tmp):
    base = [tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "24", "--seed", "3"]
    rc1, out1, err1 = run(base + ["-t", "1", "--print-ids"])
    rc2, out2, err2 = run(base + ["--threads", "2", "--print-ids"])
    t.check(rc1 == 0 and rc2 == 0 and out1 == out2 and len(out1.split()) == 24,
            "mor-run --threads 1 and --threads 2 generate the same tokens (%s)" % out1.strip()[:60])
    rc, out, err = run(base + ["--show-depth"])
    t.check(rc == 0 and out.startswith("The jury said that") and "prompt:" not in out and "depth:" not in out,
            "mor-run: stdout has only the prompt and the generated text")
    lines = err.split("\n")
    t.check(err.startswith("prompt: ") and any(x.startswith("depth: mean") for x in lines) and err.endswith("\n"),
            "mor-run: the statistics are on stderr, each line on its own (%s)" % err.strip()[:80])
    depths = [int(x) for x in re.findall(r"\[(\d)\]", out)]
    t.check(len(depths) == 24 and set(depths) != {3},
            "mor-run: default routing of an expert-choice model gives per-token depths, not all 3 (%s)" % depths)
    t.check(any(x.startswith("routing: threshold") for x in lines) and "causal" in err,
            "mor-run: the statistics name the routing used (THRESHOLD, chosen for generation)")
    rcq, outq, errq = run(base + ["--show-depth", "-q"])
    t.check(rcq == 0 and outq == out and errq == "", "mor-run -q: the same text, no statistics (%r)" % errq[:80])
    rc, out, err = run(base + ["--routing", "topk", "--show-depth"])
    # (a token's depth is its input's: the first one's, the last prompt token's, ranked among the prompt)
    t.check(rc == 0 and set(int(x) for x in re.findall(r"\[(\d)\]", out)[1:]) == {3} and "routing: topk" in err,
            "mor-run --routing topk: every token decoded alone runs all 3 recursions, and it says so")
    rc, out, err = run(base + ["-n", "7", "--no-cache"])
    m = re.search(r"depth: mean [0-9.]+ over (\d+) generated tokens; histogram((?: \d+:\d+)+)", err)
    hist = sum(int(x.split(":")[1]) for x in m.group(2).split()) if m else -1
    t.check(rc == 0 and m and m.group(1) == "7" and hist == 7 and "generated: 7 tokens" in err,
            "mor-run --no-cache: the statistics count the 7 generated tokens (%s)" % (m.group(0) if m else err[:200]))
    # the prompt from a file or standard input, bytes as they are
    path = os.path.join(tmp, "prompt.txt")
    with open(path, "wb") as f:
        f.write(b"The jury said that")
    rc0, want, _ = run(base + ["--print-ids", "-q"])
    rc1, out1, _ = run([tool("mor-run"), "-m", BROWN, "-f", path, "-n", "24", "--seed", "3", "--print-ids", "-q"])
    p = subprocess.run([tool("mor-run"), "-m", BROWN, "-f", "-", "-n", "24", "--seed", "3", "--print-ids", "-q"],
                       input=b"The jury said that", capture_output=True, timeout=300)
    t.check(rc0 == 0 and rc1 == 0 and p.returncode == 0 and out1 == want and p.stdout.decode() == want,
            "mor-run -f FILE and -f - (standard input): the tokens of -p with the same text")
    refused([tool("mor-run"), "-m", BROWN, "-p", "-"], "-f -", "mor-run -p - is ambiguous: refused, naming -f -")
    refused([tool("mor-run"), "-m", BROWN, "-p", "x", "-f", path], "-f", "mor-run -p and -f together: refused")
    # the end-of-text token ends a text prompt's generation: counted and
    # listed by --print-ids (as the server's token_ids), its text not printed
    eos_run = [tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "240", "--seed", "136",
               "--routing", "threshold"]
    rc, out, err = run(eos_run)
    rci, ids, _ = run(eos_run + ["--print-ids", "-q"])
    ids = ids.split()
    t.check(rc == 0 and rci == 0 and 0 < len(ids) < 240 and ids[-1] == "4095" and "<|endoftext|>" not in out and
            "generated: %d tokens" % len(ids) in err and "stopped at the end-of-text token" in err,
            "mor-run: a generation that ends at the end-of-text token says so and does not print its text (%r)"
            % out[-40:])
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "0"])
    t.check(rc == 0 and out == "" and err.startswith("prompt: "),
            "mor-run -n 0: no text, and the statistics start a line of their own")
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "--ids", "1,2,3", "-n", "2147483647", "--max-pos", "16",
                        "--no-context-shift", "--print-ids"])
    t.check(rc == 0 and len(out.split()) == 13 and "--no-context-shift" in err and "--max-pos" in err,
            "mor-run -n 2147483647 (no overflow) stops at a 16-position context under --no-context-shift, naming "
            "the flags (%s)" % err.strip().split("\n")[0][:160])


def sampling_flags():
    """llama.cpp's sampling flags of mor-run (mor-server's test_sampling
    checks that each gives the tokens of the request field of the same
    name)."""
    base = [tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "24", "--seed", "3", "--print-ids", "-q"]
    for extra, flag in [(["--mirostat", "3"], "--mirostat"), (["--typical", "x"], "--typical"),
                        (["--presence-penalty", "nan"], "--presence-penalty"), (["--min-keep", "-1"], "--min-keep"),
                        (["--dry-allowed-length", "-1"], "--dry-allowed-length"),
                        (["--dry-penalty-last-n", "-2"], "--dry-penalty-last-n"),
                        (["--samplers", "top_k;hot"], "--samplers"), (["--samplers", "top_k;infill"], "--samplers"),
                        (["--sampling-seq", "kq"], "--sampling-seq"), (["--samplers", ""], "--samplers"), (["--logit-bias", "abc"], "--logit-bias"),
                        (["--logit-bias", "5"], "--logit-bias"), (["--logit-bias", "5+inf"], "--logit-bias"),
                        (["-l", "5*2"], "-l"), (["--logit-bias", "4096+1"], "--logit-bias")]:
        refused(base + extra, flag, "mor-run " + " ".join(extra))
    rc, plain, _ = run(base)
    default_order = "penalties;dry;top_n_sigma;temperature;top_k;typ_p;top_p;min_p;xtc"
    rc1, out1, _ = run(base + ["--samplers", default_order])
    rc2, out2, _ = run(base + ["--sampling-seq", "edstkypmx"])
    t.check(rc == rc1 == rc2 == 0 and plain == out1 == out2,
            "mor-run --samplers with the default order (and --sampling-seq edstkypmx): the default's tokens")
    rc1, out1, _ = run(base + ["--samplers", "top_k;top_p;min_p;temperature"])
    rc2, out2, _ = run(base + ["--sampling-seq", "kpmt"])
    t.check(rc1 == rc2 == 0 and out1 == out2 and out1 != plain,
            "mor-run --samplers top_k;top_p;min_p;temperature (llama.cpp's order, temperature last) = --sampling-seq "
            "kpmt, and other tokens")
    every = ["--presence-penalty", "0.5", "--frequency-penalty", "0.2", "--typical", "0.9", "--min-keep", "2",
             "--top-nsigma", "2", "--xtc-probability", "0.4", "--xtc-threshold", "0.05", "--dynatemp-range", "0.3",
             "--dynatemp-exp", "1.5", "--dry-multiplier", "0.8", "--dry-base", "1.6", "--dry-allowed-length", "1",
             "--dry-penalty-last-n", "-1", "--dry-sequence-breaker", "e", "--dry-sequence-breaker", ":",
             "--logit-bias", "46+2", "-l", "359-inf"]
    rc1, out1, err1 = run(base + every)
    rc2, out2, _ = run(base + every)
    t.check(rc1 == rc2 == 0 and out1 == out2 and out1 != plain and "359" not in out1.split(),
            "mor-run with every llama.cpp sampling flag: seeded (the same tokens twice), another output, the "
            "banned token never (%s)" % (out1.strip()[:60] or err1.strip()[:200]))
    for mode in ("1", "2"):
        rc1, out1, _ = run(base + ["--mirostat", mode, "--mirostat-ent", "4", "--mirostat-lr", "0.2"])
        t.check(rc1 == 0 and len(out1.split()) == 24 and out1 != plain, "mor-run --mirostat %s: 24 other tokens" % mode)
    rc1, out1, _ = run(base + ["--dry-multiplier", "0.8", "--dry-sequence-breaker", "none"])
    t.check(rc1 == 0 and len(out1.split()) == 24, "mor-run --dry-sequence-breaker none: DRY without breakers")
    greedy = [tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "6", "--greedy", "--print-ids", "-q"]
    rc, g, _ = run(greedy)
    first = g.split()[0] if g.split() else "?"
    rc1, gb, _ = run(greedy + ["--logit-bias", first + "-inf"])
    t.check(rc == rc1 == 0 and gb.split()[0] != first and first not in gb.split(),
            "mor-run --greedy --logit-bias %s-inf: the greedy token banned" % first)
    # --ignore-eos: the seed that ends at the end-of-text token (mor_run_output) runs to -n
    eos_run = [tool("mor-run"), "-m", BROWN, "-p", "The jury said that", "-n", "240", "--seed", "136",
               "--routing", "threshold", "--print-ids", "-q"]
    rc, ids, _ = run(eos_run)
    rc1, ids1, _ = run(eos_run + ["--ignore-eos"])
    t.check(rc == rc1 == 0 and ids.split()[-1] == "4095" and len(ids1.split()) == 240 and "4095" not in ids1.split(),
            "mor-run --ignore-eos: the end-of-text token banned, all 240 tokens")
    rc, out, _ = run([tool("mor-run"), "--help"])
    t.check(rc == 0 and all(f in out for f in ("--presence-penalty", "--frequency-penalty", "--typical", "--mirostat-lr",
                                               "--mirostat-ent", "--dry-multiplier", "--xtc-probability",
                                               "--xtc-threshold", "--top-nsigma", "--dynatemp-range", "--dynatemp-exp",
                                               "--samplers", "--logit-bias", "--ignore-eos")),
            "mor-run --help lists llama.cpp's sampling flags")


def context_shift():
    """Generation past the training context (256 positions for the bundled model)."""
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", "In the morning", "-n", "500", "--routing", "threshold",
                        "--seed", "1"])
    words = out.split()
    t.check(rc == 0 and len(words) > 150 and "shifting it" in err and "maximum context" not in err
            and "max_pos" not in err,
            "mor-run -n 500 on the bundled model goes past its 256-position context (%d words; %s)"
            % (len(words), err.strip().split("\n")[0][:160]))
    t.check("--no-context-shift" in err and "--max-pos" in err,
            "the context-shift note names --no-context-shift and --max-pos")
    m = re.search(r"shifted (\d+) times", err)
    t.check(m and int(m.group(1)) >= 2 and "generated: 500 tokens" in err,
            "the statistics count 500 generated tokens and the shifts (%s)" % (m.group(0) if m else "no shift line"))
    for extra in ([], ["--no-cache"], ["--kv-type", "q8_0"], ["--kv", "shared"], ["--keep", "4"]):
        rc, out, err = run([tool("mor-run"), "-m", BROWN, "--ids", "45,99,308", "-n", "300", "--print-ids", "-q",
                            "--seed", "2"] + extra)
        ids = out.split()
        t.check(rc == 0 and len(ids) == 300 and all(0 <= int(x) < 4096 for x in ids),
                "mor-run --ids -n 300 %s: 300 tokens past the context (%s)" % (" ".join(extra), err.strip()[:120]))
    long_prompt = "The jury said that the city was large and the people were many and the day was long"
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", long_prompt, "-n", "30", "--max-pos", "12", "--keep",
                        "2", "--print-ids"])
    t.check(rc == 0 and len(out.split()) == 30 and "kept its first 2" in err and "--no-context-shift" in err,
            "a prompt longer than the context keeps its start and its end, with a note (%s)"
            % err.strip().split("\n")[0][:160])
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", long_prompt, "-n", "3", "--max-pos", "12",
                        "--no-context-shift"])
    t.check(rc == 1 and out == "" and "--no-context-shift" in err and "--max-pos" in err,
            "under --no-context-shift a prompt longer than the context is refused, naming the flags (%s)" % err.strip())
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", long_prompt, "--max-pos", "12", "--dump-logits",
                        "/dev/null"])
    t.check(rc == 1 and "--max-pos" in err, "a dump of a prompt longer than the context is refused (%s)" % err.strip())
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "-p", long_prompt, "-n", "3", "--max-pos", "12", "--keep", "-1"])
    t.check(rc == 2 and "--keep" in err, "--keep that leaves nothing to drop is refused (%s)" % err.strip())
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "-p", "x", "-n", "3", "--ctx", "1024"])
    t.check(rc == 0 and "--max-pos" in err, "--ctx past the training context says which flag allows positions past it")


def speculation(tmp):
    """mor-run --speculate prints what plain decoding prints: text, depths, ids, step logits, statistics."""
    cases = [
        (["-p", "The jury said that", "-n", "120", "--greedy", "--show-depth"], "greedy with depths"),
        (["-p", "The jury said that", "-n", "120", "--seed", "5", "--show-depth"], "sampled with depths"),
        (["-p", "In the morning", "-n", "400", "--seed", "1"], "past the context: shifts at the same tokens"),
        (["--ids", "45,99,308", "-n", "300", "--print-ids", "-q", "--seed", "2", "--kv-type", "q8_0"],
         "--ids past the end-of-text token, Q8_0 cache"),
        (["-p", "Data:", "-n", "60", "--seed", "4", "--json-schema",
          '{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}'], "a JSON schema, sampled"),
        (["-p", "The jury", "-n", "40", "--seed", "3", "--routing", "forced:2"], "FORCED 2"),
        (["-p", "The jury", "-n", "40", "--seed", "3", "--max-depth", "2", "--kv", "shared"], "max depth 2, shared KV"),
    ]
    for extra, what in cases:
        base = [tool("mor-run"), "-m", BROWN] + extra
        rc0, out0, err0 = run(base)
        for spec in (["--speculate", "3"], ["--speculate", "6", "--speculate-depth", "2"]):
            rc1, out1, err1 = run(base + spec)
            gen0 = re.search(r"generated: (\d+) tokens", err0)
            gen1 = re.search(r"generated: (\d+) tokens", err1)
            quiet = "-q" in extra   # (no statistics)
            t.check(rc0 == 0 and rc1 == 0 and out0 == out1 and
                    (quiet or (gen0 and gen1 and gen0.group(1) == gen1.group(1) and "speculation:" in err1)),
                    "mor-run %s %s: the same output as without it (%s)" % (what, " ".join(spec),
                                                                           err1.strip().split("\n")[-1][:100]))
    a, b = os.path.join(tmp, "plain.f32"), os.path.join(tmp, "spec.f32")
    args = [tool("mor-run"), "-m", BROWN, "-p", "The jury said", "-n", "30", "--seed", "7", "-q"]
    rc0, _, _ = run(args + ["--dump-step-logits", a])
    rc1, _, _ = run(args + ["--dump-step-logits", b, "--speculate", "4"])
    t.check(rc0 == 0 and rc1 == 0 and open(a, "rb").read() == open(b, "rb").read(),
            "mor-run --dump-step-logits: byte-identical with --speculate 4")
    base = [tool("mor-run"), "-m", BROWN, "-p", "The jury", "-n", "4"]
    refused(base + ["--speculate", "0"], "--speculate", "mor-run --speculate 0")
    refused(base + ["--speculate", "2", "--no-cache"], "--speculate", "mor-run --speculate with --no-cache")
    refused(base + ["--speculate-depth", "2"], "--speculate-depth", "mor-run --speculate-depth alone")


# ggml type numbers (docs/FORMAT.md)
F16, Q4_0, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 1, 2, 6, 7, 8, 10, 11, 12, 13, 14


def expected_mix(mix, tensors, gqa):
    """llama-quantize's choice per matrix for a k-quant mix without an importance matrix
    (llama_tensor_get_type, restated), then its fallback for rows that are not whole blocks."""
    base = {"q2_k_mix": Q2_K, "q3_k_s": Q3_K, "q3_k_m": Q3_K, "q3_k_l": Q3_K, "q4_k_s": Q4_K, "q4_k_m": Q4_K,
            "q5_k_s": Q5_K, "q5_k_m": Q5_K, "q6_k_mix": Q6_K}[mix]
    more = lambda i, n: i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # noqa: E731
    names = [n for n in tensors if len(tensors[n][0]) == 2 and not n.startswith("rtr")]
    tied = "output.weight" not in tensors
    n_v = sum(n.endswith(".attn_v.weight") for n in names)
    n_d = sum(n.endswith(".ffn_down.weight") for n in names)
    i_v = i_d = 0
    out = {}
    for n in names:
        cols = tensors[n][0][0]
        t = base
        if n == "output.weight" or (tied and n == "token_embd.weight"):
            t = Q8_0 if cols % 256 else Q6_K
        elif n == "token_embd.weight":
            t = base
        elif n.endswith(".attn_v.weight"):
            t = {"q2_k_mix": Q4_K if gqa >= 4 else Q3_K, "q3_k_m": Q5_K if i_v < 2 else Q4_K, "q3_k_l": Q5_K}.get(mix, base)
            if mix in ("q4_k_m", "q5_k_m") and more(i_v, n_v):
                t = Q6_K
            if mix == "q4_k_s" and i_v < 4:
                t = Q5_K
            i_v += 1
        elif n.endswith(".ffn_down.weight"):
            t = {"q2_k_mix": Q3_K, "q3_k_m": Q5_K if i_d < n_d // 16 else Q4_K, "q3_k_l": Q5_K}.get(mix, base)
            if mix in ("q4_k_m", "q5_k_m") and more(i_d, n_d):
                t = Q6_K
            if mix == "q4_k_s" and i_d < n_d // 8:
                t = Q5_K
            i_d += 1
        elif n.endswith(".attn_output.weight"):
            t = {"q2_k_mix": Q3_K, "q3_k_m": Q4_K, "q3_k_l": Q5_K}.get(mix, base)
        blk = 32 if t in (Q4_0, Q5_0, Q5_1, Q8_0) else 256
        if cols % blk:
            t = {Q2_K: Q4_0, Q3_K: Q4_0, Q4_K: Q5_0, Q5_K: Q5_1, Q6_K: Q8_0}.get(t, F16)
        out[n] = t
    return out


def quantize_mixes(tmp):
    """mor-quantize's k-quant mixes choose each matrix's type as llama-quantize does."""
    with open(BROWN, "rb") as f:
        src = t.gguf_layout(f.read())[4]
    for mix in ("q2_k_mix", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k_mix"):
        path = os.path.join(tmp, mix + ".gguf")
        rc, out, err = run([tool("mor-quantize"), BROWN, path, mix])
        if not t.check(rc == 0, "mor-quantize %s: written (%s)" % (mix, (out + err).strip()[:120])):
            continue
        with open(path, "rb") as f:
            got = t.gguf_layout(f.read())[4]
        want = expected_mix(mix, src, 2)   # the bundled model: 4 heads, 2 KV heads
        types = {n: got[n][1] for n in want}
        kept = all(got[n][1] == src[n][1] for n in src if n not in want)
        rc2, _, _ = run([tool("mor-run"), "-m", path, "-p", "The jury", "-n", "4", "-q"])
        t.check(types == want and kept and rc2 == 0,
                "mor-quantize %s: every matrix in llama-quantize's type for it (%s), the rest kept, and it runs"
                % (mix, ", ".join("%s %d" % (n.replace(".weight", ""), v) for n, v in sorted(want.items())
                                  if v != want.get("blk.0.attn_q.weight"))[:150]))


def fast_bf16(tmp):
    """mor-run --fast-bf16: the bundled model in BF16 on bfloat16-rounded activations, logits close to the
    default's (bitwise them on a CPU without the opt-in kernels); an F32 model bitwise unchanged."""
    import struct
    bf = os.path.join(tmp, "bf16.gguf")
    rc, _, err = run([tool("mor-quantize"), BROWN, bf, "bf16"])
    if not t.check(rc == 0, "mor-quantize bf16 of the bundled model (%s)" % err.strip()[:120]):
        return
    ids = "5,17,300,2,44,9,81,1000"

    def logits(model, extra):
        out = os.path.join(tmp, "fast-logits.bin")
        rc, _, err = run([tool("mor-run"), "-m", model, "--ids", ids, "--dump-logits", out] + extra)
        if rc != 0:
            return None, err
        with open(out, "rb") as f:
            raw = f.read()
        return struct.unpack("<%df" % (len(raw) // 4), raw), err

    a, e1 = logits(bf, [])
    b, e2 = logits(bf, ["--fast-bf16"])
    if not t.check(a is not None and b is not None and len(a) == len(b),
                   "mor-run --dump-logits of the BF16 model with and without --fast-bf16 (%s)" % (e1 + e2).strip()[:160]):
        return
    scale = max(abs(v) for v in a)
    diff = max(abs(x - y) for x, y in zip(a, b))
    t.check(diff <= 0.02 * scale, "--fast-bf16 logits within 2%% of the largest logit of the default's (max diff %.3g of %.3g%s)"
            % (diff, scale, ", bitwise: no bfloat16 kernels on this CPU" if diff == 0 else ""))
    c, _ = logits(BROWN, [])
    d, _ = logits(BROWN, ["--fast-bf16"])
    t.check(c is not None and c == d, "--fast-bf16 leaves a model without BF16 weights bitwise as it was")


def embedding_output(tmp):
    """mor-run --embedding: the final norm's outputs of --dump-hidden, pooled and normalized (bitwise)."""
    import struct
    ids = "5,17,300,2,44,9"
    n = len(ids.split(","))
    f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]  # noqa: E731
    hid = os.path.join(tmp, "hidden.bin")
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--routing", "threshold", "--dump-hidden", hid])
    rc2, out, err2 = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--routing", "threshold", "--embedding", "mean"])
    if not t.check(rc == 0 and rc2 == 0, "mor-run --embedding mean and --dump-hidden ran (%s)" % (err + err2).strip()[:200]):
        return
    got = [f32(float(x)) for x in json.loads(out)]
    d = len(got)
    with open(hid, "rb") as f:
        raw = f.read()
    flat = struct.unpack("<%df" % (len(raw) // 4), raw)
    nb = len(flat) // (n * d)
    last = flat[(nb - 1) * n * d:]
    mean = [f32(sum(last[i * d + j] for i in range(n)) / n) for j in range(d)]
    inv = 1 / math.sqrt(sum(v * v for v in mean))
    t.check(got == [f32(v * inv) for v in mean],
            "mor-run --embedding mean: the mean of the final hidden states, unit length, bitwise (%d floats)" % d)
    rc, out, _ = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--routing", "threshold", "--embedding", "last",
                      "--no-normalize"])
    t.check(rc == 0 and [f32(float(x)) for x in json.loads(out)] == list(last[(n - 1) * d:]),
            "mor-run --embedding last --no-normalize: the last row's final hidden state")
    rc, out2, _ = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--embedding", "mean"])
    t.check(rc == 0 and [f32(float(x)) for x in json.loads(out2)] == got,
            "mor-run --embedding routes an expert-choice model with thresholds, as generation and the server do")
    for extra, flag in ((["-n", "3"], "-n"), (["--dump-logits", os.path.join(tmp, "l.bin")], "--dump-*"),
                        (["--no-cache"], "--no-cache")):
        rc, out, err = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--embedding", "mean"] + extra)
        t.check(rc == 2 and out == "" and flag in err, "mor-run --embedding with %s: refused (%s)" % (flag, err.strip()))
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "--ids", ids, "--no-normalize"])
    t.check(rc == 2 and "--embedding" in err, "mor-run --no-normalize without --embedding: refused")


def help_texts():
    rc, out, _ = run([tool("mor-bench"), "--help"])
    t.check(rc == 0 and "--serve" in out and "--stream" in out, "mor-bench --help lists --serve and --stream")
    # a smoke run of the stream benchmark (a program, not a timed test: only that it runs and reports)
    rc, out, err = run([tool("mor-bench"), "--stream", "--mib", "4", "-r", "2", "-w", "f32,bf16,q4_0"])
    rows = [ln for ln in out.splitlines() if ln.startswith("| f32 ") or ln.startswith("| bf16 ") or ln.startswith("| q4_0 ")]
    t.check(rc == 0 and len(rows) == 3 and all(ln.count("|") == 6 for ln in rows),
            "mor-bench --stream --mib 4 -r 2: one row per type (%s)" % (out + err).strip()[-200:])
    for args in ([tool("mor-bench-serve"), "--help"], [tool("mor-bench"), "--serve", "--help"]):
        rc, out, err = run(args)
        t.check(rc == 0 and "--conc" in out and "--ways" in out, "%s: prints its options" % " ".join(
            os.path.basename(a) for a in args))
    rc, out, _ = run([tool("mor-run"), "--help"])
    t.check(rc == 0 and "--threads" in out and "threshold" in out and "--max-pos" in out
            and "--no-context-shift" in out and "--keep" in out,
            "mor-run --help: --threads, the default routing, the context flags")
    t.check(rc == 0 and "--kv recursion|shared|dense" in out and "use_cache=False" in out and "--dump-step-logits" in out,
            "mor-run --help: --kv dense, what --no-cache means, --dump-step-logits")
    for name in ("mor-convert", "mor-quantize", "mor-train", "mor-tok-train", "mor-depth-svg"):
        rc, out, _ = run([tool(name), "--help"])
        t.check(rc == 0 and "usage" in out, "%s --help" % name)


def train(tmp):
    txt = os.path.join(tmp, "train.txt")
    with open(txt, "w") as f:
        for name in ("docs/FORMAT.md", "include/mor.h"):
            with open(os.path.join(t.ROOT, name)) as g:
                f.write(g.read())
    voc = os.path.join(tmp, "v.gguf")
    rc, _, err = run([tool("mor-tok-train"), "-q", "-i", txt, "-o", voc, "--vocab", "300"])
    if not t.check(rc == 0, "mor-tok-train (%s)" % err.strip()[:100]):
        return
    rc, out, err = run([tool("mor-train"), "--data", txt, "--vocab", voc, "-o", os.path.join(tmp, "a.gguf"),
                        "--d", "32", "--ff", "64", "--heads", "2", "--recursions", "2", "--block", "1", "--router",
                        "expert", "--batch", "2", "--seq", "16", "--steps", "4", "--threads", "1", "--save-every", "0"])
    res = [x for x in out.split("\n") if x.startswith("RESULT ")]
    t.check(rc == 0 and res and "heldout" not in res[0] and "steps=4" in res[0],
            "mor-train without --val: no held-out loss in the RESULT line (%s)" % (res[0] if res else out[:100]))
    t.check("ETA " in err and "held-out loss" not in err, "mor-train prints an ETA and no held-out loss without --val")


def on_terminal(args):
    """Run args with stderr on a pseudo-terminal; (exit status, what it drew)."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        drawn += chunk
    p.stdout.read()
    rc = p.wait()
    os.close(master)
    return rc, drawn.decode("utf-8", "replace")


def convert_progress(tmp):
    fix = os.path.join(t.ROOT, "tests", "data", "fixtures", "expert_mc3_fix_perturbed", "hf_safetensors")
    rc, drawn = on_terminal([tool("mor-convert"), fix, "-o", os.path.join(tmp, "p.gguf")])
    t.check(rc == 0 and "writing tensors" in drawn and "100%" in drawn,
            "mor-convert on a terminal shows the tensors written (%r)" % drawn[-80:])
    rc, _, err = run([tool("mor-convert"), fix, "-o", os.path.join(tmp, "p.gguf")])
    t.check(rc == 0 and "writing tensors" not in err and "\r" not in err, "mor-convert into a pipe draws no progress")
    # a vanilla model made recursive and relaxed: the SVDs
    txt = os.path.join(tmp, "train.txt")
    voc = os.path.join(tmp, "v.gguf")
    van = os.path.join(tmp, "vanilla.gguf")
    rc1, _, _ = run([tool("mor-train"), "--data", txt, "--vocab", voc, "-o", van, "--d", "32", "--ff", "64", "--heads",
                     "2", "--layers", "4", "--batch", "2", "--seq", "16", "--steps", "1", "--threads", "1",
                     "--save-every", "0", "-q"])
    rc, drawn = on_terminal([tool("mor-convert"), van, "-o", os.path.join(tmp, "r.gguf"), "--num-recursion", "2",
                             "--sharing", "cycle", "--init", "average", "--lora-rank", "4"])
    t.check(rc1 == 0 and rc == 0 and "SVDs" in drawn and "writing tensors" in drawn,
            "mor-convert on a terminal shows the SVDs done when relaxing a model (%r)" % drawn[-120:])


def readme_demo():
    with open(os.path.join(t.ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(t.ROOT, "Makefile")) as f:
        mk = f.read()
    m = re.search(r"^make demo +# (.*)$", readme, re.M)
    var = dict(re.findall(r"^(DEMO_[A-Z]+) *:= *(.*)$", mk, re.M))
    rec = re.search(r"^demo:.*\n\t(.*)$", mk, re.M)
    cmd = rec.group(1) if rec else ""
    cmd = cmd.replace("$(BINOUT)", "bin").replace('"$(DEMO_PROMPT)"', '"%s"' % var.get("DEMO_PROMPT", ""))
    cmd = cmd.replace("$(DEMO_MODEL)", var.get("DEMO_MODEL", ""))
    t.check(m and m.group(1).strip() == cmd.strip(),
            "README's make demo comment is the command make demo runs (%r vs %r)" % (m.group(1) if m else None, cmd))


def grammar_output(tmp):
    """mor-run --grammar / --grammar-file: every output a string of the grammar
    (for many seeds), the statistics say the grammar ended it, bad grammars
    exit 1 with the library's message, and no grammar changes nothing."""
    import re
    gbnf = ('root ::= " {" pair ("," pair){0,2} "}"\n'
            'pair ::= "\\"" [a-z]{1,8} "\\": " ("true" | "false" | [0-9]{1,4})\n')
    pat = r' \{"[a-z]{1,8}": (true|false|[0-9]{1,4})(,"[a-z]{1,8}": (true|false|[0-9]{1,4})){0,2}\}'
    path = os.path.join(tmp, "rec.gbnf")
    with open(path, "w") as f:
        f.write(gbnf)
    good = 0
    for seed in range(8):
        args = [tool("mor-run"), "-m", BROWN, "-p", "The record:", "-n", "120", "--seed", str(seed)]
        rc, out, err = run(args + (["--grammar-file", path] if seed % 2 else ["--grammar", gbnf]))
        text = out[len("The record:"):].rstrip("\n")
        ok = rc == 0 and re.fullmatch(pat, text) is not None and "the grammar ended the output" in err
        good += ok
        if not ok:
            print("# seed %d: rc %d, %r, %s" % (seed, rc, text, err.strip()[-200:]))
    t.check(good == 8, "mor-run --grammar: %d of 8 seeded outputs are whole strings of the grammar" % good)
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", "x", "-n", "5", "--grammar", 'root ::= "a" (b'])
    t.check(rc == 1 and "line 1" in err and "'(' without its ')'" in err and "MOR_E_INVALID_ARG" in err,
            "a bad grammar: exit 1 with the line and the cause (%s)" % err.strip()[:200])
    rc1, out1, _ = run([tool("mor-run"), "-m", BROWN, "-p", "The jury", "-n", "20", "--seed", "5", "-q"])
    rc2, out2, _ = run([tool("mor-run"), "-m", BROWN, "-p", "The jury", "-n", "20", "--seed", "5", "-q",
                        "--grammar", "root ::= [^\\x00]*"])
    t.check(rc1 == rc2 == 0 and out1 == out2, "a grammar that allows everything changes nothing")
    refused([tool("mor-run"), "-m", BROWN, "-p", "x", "--grammar", "r ::= \"a\"", "--grammar-file", path],
            "--grammar", "mor-run --grammar with --grammar-file")
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "n": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
              "required": ["name", "n"], "additionalProperties": False}
    spath = os.path.join(tmp, "rec.schema.json")
    with open(spath, "w") as f:
        json.dump(schema, f)
    good = 0
    for seed in range(8):
        args = [tool("mor-run"), "-m", BROWN, "-p", "Record:", "-n", "160", "--seed", str(seed), "-q"]
        rc, out, err = run(args + (["--json-schema-file", spath] if seed % 2 else ["--json-schema", json.dumps(schema)]))
        try:
            v = json.loads(out[len("Record:"):])
            ok = (rc == 0 and set(v) <= {"name", "n", "tags"} and {"name", "n"} <= set(v) and len(v["name"]) <= 10
                  and isinstance(v["n"], int) and all(x in ("a", "b") for x in v.get("tags", [])) and
                  len(v.get("tags", [])) <= 3)
        except ValueError:
            ok = False
        good += ok
        if not ok:
            print("# seed %d: rc %d, %r, %s" % (seed, rc, out, err.strip()[-200:]))
    t.check(good == 8, "mor-run --json-schema: %d of 8 seeded outputs parse and validate against the schema" % good)
    rc, out, err = run([tool("mor-run"), "-m", BROWN, "-p", "x", "-n", "5", "--json-schema", '{"multipleOf": 3}'])
    t.check(rc == 1 and "#/multipleOf" in err, "an unsupported schema: exit 1 naming where (%s)" % err.strip()[:200])


def chat_turn(tmp):
    """mor-run --chat: the prompt is the model's Jinja chat template rendering
    --system and -p; the same tokens as that rendering given with -f."""
    tmpl = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    model = os.path.join(tmp, "chat.gguf")
    t.gguf_with_key(BROWN, model, "tokenizer.chat_template", tmpl)
    rendered = os.path.join(tmp, "rendered.txt")
    with open(rendered, "w") as f:
        f.write("<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nThe jury<|im_end|>\n<|im_start|>assistant\n")
    args = ["-n", "12", "--seed", "4", "-q", "--print-ids"]
    rc, out, err = run([tool("mor-run"), "-m", model, "--chat", "--system", "Be terse.", "-p", "The jury"] + args)
    rc2, out2, _ = run([tool("mor-run"), "-m", BROWN, "-f", rendered] + args)
    t.check(rc == 0 and rc2 == 0 and out.strip() and out == out2,
            "mor-run --chat --system: the tokens of the template's rendering given with -f (%s)" % err.strip()[:120])
    tfile = os.path.join(tmp, "t.jinja")
    with open(tfile, "w") as f:
        f.write(tmpl)
    rc3, out3, _ = run([tool("mor-run"), "-m", BROWN, "--chat", "--chat-template-file", tfile, "--system", "Be terse.",
                        "-p", "The jury"] + args)
    t.check(rc3 == 0 and out3 == out, "--chat-template-file: the same on a model without a template")
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "--chat", "-p", "x"])
    t.check(rc == 1 and "no chat template" in err, "--chat on a model without a template: exit 1 saying so")
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "--system", "s", "-p", "x"])
    t.check(rc == 2 and "--chat" in err, "--system without --chat: a usage error (exit 2)")
    with open(tfile, "w") as f:
        f.write("{% if %}")
    rc, _, err = run([tool("mor-run"), "-m", BROWN, "--chat", "--chat-template-file", tfile, "-p", "x"])
    t.check(rc == 1 and "line 1" in err, "--chat-template-file with a syntax error: exit 1 naming the line")


def main():
    if not t.check(os.path.exists(tool("mor-run")) and os.path.exists(BROWN), "mor-run and the bundled model exist"):
        t.finish()
    with tempfile.TemporaryDirectory() as tmp:
        mor_run_flags()
        other_tools_flags(tmp)
        overwrites(tmp)
        mor_run_output(tmp)
        sampling_flags()
        context_shift()
        speculation(tmp)
        embedding_output(tmp)
        fast_bf16(tmp)
        grammar_output(tmp)
        chat_turn(tmp)
        quantize_mixes(tmp)
        help_texts()
        train(tmp)
        convert_progress(tmp)
        readme_demo()
    t.finish()


if __name__ == "__main__":
    main()
