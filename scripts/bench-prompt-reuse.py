#!/usr/bin/env python3
"""bench-prompt-reuse.py - time to first token with and without prompt reuse.

Starts two mor-servers on one model, one with --no-prompt-reuse, and sends
each, in turn (A B A B ...), requests that share a long system prompt and
differ in a short question; the time to first token is measured from the
request until the first streamed event. Prints the median of each and
their ratio, with the cached tokens the reusing server reported.

    scripts/bench-prompt-reuse.py [-m models/brown-mor.gguf] [-n 20] [--system-tokens 200]
"""
import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(model, extra):
    p = subprocess.Popen([os.path.join(ROOT, "bin", "mor-server"), "-m", model, "--host", "127.0.0.1", "--port", "0",
                          "-q", "--threads", "1"] + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    port = int(line.rsplit(":", 1)[1].split()[0].strip("/"))
    return p, port


def ttft(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", json.dumps(dict(body, stream=True, stream_options={"include_usage": True})),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    first, cached = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if first is None and ev.get("choices"):
            first = time.perf_counter() - t0
        if ev.get("usage"):
            cached = ev["usage"]["prompt_tokens_details"]["cached_tokens"]
    c.close()
    return first, cached


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", default=os.path.join(ROOT, "models", "brown-mor.gguf"))
    ap.add_argument("-n", type=int, default=20, help="requests to each server")
    ap.add_argument("--system-tokens", type=int, default=200, help="about this many tokens of shared prompt")
    a = ap.parse_args()
    system = ("The jury said that the city of Atlanta was run well, and that the election was conducted "
              "with care. ")
    # the tokenizer of the server tells how long the shared start is
    reuse, pr = start(a.m, [])
    plain, pp = start(a.m, ["--no-prompt-reuse"])
    try:
        c = http.client.HTTPConnection("127.0.0.1", pr)
        text = ""
        while True:
            c.request("POST", "/tokenize", json.dumps({"content": text + system}))
            n = len(json.loads(c.getresponse().read())["tokens"])
            if n > a.system_tokens:
                break
            text += system
        c.request("POST", "/tokenize", json.dumps({"content": text}))
        n_sys = len(json.loads(c.getresponse().read())["tokens"])
        c.close()
        questions = ["Q%d: where did he go" % i for i in range(a.n)]
        t_reuse, t_plain, cached = [], [], []
        ttft(pr, {"prompt": text + "warm up", "max_tokens": 1, "seed": 1})   # the shared start, kept once
        for q in questions:
            body = {"prompt": text + q, "max_tokens": 1, "seed": 1}
            t, k = ttft(pr, body)
            t_reuse.append(t)
            cached.append(k)
            t_plain.append(ttft(pp, body)[0])
        mr, mp = statistics.median(t_reuse), statistics.median(t_plain)
        print("shared prompt: %d tokens; %d requests each, interleaved; cached tokens per request: median %d"
              % (n_sys, a.n, statistics.median(cached)))
        print("time to first token: with reuse %.2f ms, without %.2f ms (medians); ratio %.2fx"
              % (1e3 * mr, 1e3 * mp, mp / mr))
    finally:
        for p in (reuse, plain):
            p.terminate()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
