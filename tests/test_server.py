"""tests/test_server.py - bin/mor-server end to end, on loopback ports with
the bundled model (models/brown-mor.gguf): the OpenAI endpoints, streaming,
outputs equal to bin/mor-run's, bad input of every kind, disconnects,
limits, chat templates, curl and the official OpenAI Node client (npm
package openai, installed into build/npm), a bounded load test (200
requests at 32 concurrent, each equal to the same request served alone) in
depthwise and sequence modes, and a drain on SIGTERM."""
import concurrent.futures
import http.client
import json
import math
import os
import re
import shutil
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testlib as t  # noqa: E402
import serverlib as sl  # noqa: E402



def note(s):
    print("# " + s)
    sys.stdout.flush()


def completion(srv, body, conn=None):
    status, _, data = srv.request("POST", "/v1/completions", body, conn=conn)
    return status, json.loads(data)


# ---- the basics -------------------------------------------------------------

def test_basics(srv):
    st, h = srv.json("GET", "/health")
    t.check(st == 200 and h["status"] == "ok" and h["slots_idle"] == 4, "GET /health: ok, 4 idle slots")
    st, m = srv.json("GET", "/v1/models")
    t.check(st == 200 and m["object"] == "list" and m["data"][0]["id"] == "brown-mor" and
            m["data"][0]["meta"]["n_ctx_train"] == 256 and m["data"][0]["meta"]["chat_template"] is None,
            "GET /v1/models: the model brown-mor, its context, no chat template")
    st, one = srv.json("GET", "/v1/models/brown-mor")
    t.check(st == 200 and one["id"] == "brown-mor", "GET /v1/models/brown-mor")
    st, e = srv.json("GET", "/v1/models/gpt-4")
    t.check(st == 404 and e["error"]["code"] == "model_not_found", "GET /v1/models/gpt-4: 404 model_not_found")
    st, e = srv.json("GET", "/nowhere")
    t.check(st == 404 and e["error"]["type"] == "not_found_error", "an unknown path: 404 with an OpenAI error body")
    st, h, data = srv.request("DELETE", "/v1/completions")
    t.check(st == 405 and "allow" in h and json.loads(data)["error"]["message"], "DELETE /v1/completions: 405, Allow")
    st, h, data = srv.request("GET", "/metrics")
    text = data.decode()
    t.check(st == 200 and h["content-type"].startswith("text/plain") and
            all(("mor_" + k) in text for k in ("requests_total", "tokens_generated_total", "queue_length",
                                               "slots_busy", "mean_depth", "tokens_per_second")),
            "GET /metrics: Prometheus text with requests, tokens, queue length, slots busy, mean depth, tokens/s")


# ---- the same outputs as mor-run -------------------------------------------------

CASES = [("The jury said that", 24, 7), ("In the morning", 32, 1), ("He", 16, 12345)]


def test_mor_run(srv):
    for prompt, n, seed in CASES:
        ids, shown, flags = sl.mor_run(prompt, n, seed)
        st, r = completion(srv, {"prompt": prompt, "max_tokens": n, "seed": seed, "temperature": 0.8,
                                 "top_k": 40, "top_p": 0.95, "min_p": 0.05})
        ch = r["choices"][0]
        got = ch["mor"]["token_ids"]
        t.check(st == 200 and got == ids,
                "'%s' seed %d: the tokens equal `mor-run %s --print-ids`" % (prompt, seed, " ".join(flags[2:])))
        # mor-run --show-depth and the server give each token the depth of
        # the step that produced it: the same numbers in the same places
        want = prompt.encode()
        st2, events = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": n, "seed": seed, "stream": True})
        pieces = [e["choices"][0]["text"] for e in events[:-2]]
        deps = [e["choices"][0]["mor"]["depths"][0] for e in events[:-2]]
        for k, p in enumerate(pieces):
            want += p.encode() + b"[%d]" % deps[k]
        t.check(st2 == 200 and shown.rstrip(b"\n") == want and ch["text"] == "".join(pieces) and
                deps == ch["mor"]["depths"],
                "'%s' seed %d: text and depths equal `mor-run ... --show-depth`" % (prompt, seed))
    # the defaults are mor.h's sampler defaults; a seed fixes the output
    a = completion(srv, {"prompt": CASES[0][0], "max_tokens": 24, "seed": 7})[1]["choices"][0]["mor"]["token_ids"]
    t.check(a == sl.mor_run(CASES[0][0], 24, 7)[0], "without sampling fields: mor.h's defaults (= the flags above)")
    # greedy, and the prompt as token ids
    ids = subprocess.run([sl.RUN, "-m", sl.MODEL, "--tokenize-file", "/dev/stdin"], input=b"The jury said that",
                         capture_output=True).stdout.split()
    ids = [int(x) for x in ids]
    g1 = completion(srv, {"prompt": "The jury said that", "max_tokens": 12, "temperature": 0})[1]["choices"][0]
    g2 = completion(srv, {"prompt": ids, "max_tokens": 12, "temperature": 0})[1]["choices"][0]
    rg = subprocess.run([sl.RUN, "-m", sl.MODEL, "--ids", ",".join(map(str, ids)), "-n", "12", "--greedy",
                         "--routing", "threshold", "--print-ids", "-q"], capture_output=True).stdout.split()
    t.check(g1["mor"]["token_ids"] == g2["mor"]["token_ids"] == [int(x) for x in rg] and g1["text"] == g2["text"],
            "greedy: the prompt as text or as token ids gives `mor-run --ids ... -n 12 --greedy --routing threshold`")


def test_fast_bf16(tmp):
    """mor-server --fast-bf16 serving the bundled model in BF16 gives the tokens of `mor-run --fast-bf16` (a
    context with MOR_CTX_FAST_BF16). Where that flag picks the avx512-bf16 kernels a server that ignored it would
    give the default kernels' other tokens (test_serve checks that they differ); elsewhere both are the default's."""
    bf = os.path.join(tmp, "bf16.gguf")
    q = subprocess.run([os.path.join(t.OUT, "bin", "mor-quantize"), sl.MODEL, bf, "bf16"], capture_output=True)
    if q.returncode != 0:   # setup: only its failure counts
        t.check(False, "mor-quantize bf16 of the bundled model: %s" % q.stderr.decode()[-160:])
        return
    srv = sl.Server(["--fast-bf16", "-q"], model=bf)
    try:
        bad = []
        for prompt, n, seed in CASES:
            ids = sl.mor_run(prompt, n, seed, ["--fast-bf16"], model=bf)[0]
            st, r = completion(srv, {"prompt": prompt, "max_tokens": n, "seed": seed, "temperature": 0.8,
                                     "top_k": 40, "top_p": 0.95, "min_p": 0.05})
            if st != 200 or r["choices"][0]["mor"]["token_ids"] != ids:
                bad.append(prompt)
        t.check(not bad, "mor-server --fast-bf16 on BF16 weights: the tokens of `mor-run --fast-bf16` for %d prompts "
                "(differ: %s)" % (len(CASES), bad or "none"))
    finally:
        srv.stop()


# ---- streaming, stop strings -------------------------------------------------------

def test_stream(srv):
    body = {"prompt": "The jury said that", "max_tokens": 20, "seed": 3}
    whole = completion(srv, body)[1]
    st, ev = srv.stream("/v1/completions", dict(body, stream=True, stream_options={"include_usage": True}))
    ok = st == 200 and ev[-1] == "[DONE]"
    toks = [e for e in ev[:-1] if e["choices"]]
    usage = [e for e in ev[:-1] if not e["choices"]]
    text = "".join(e["choices"][0]["text"] for e in toks)
    ids = sum((e["choices"][0].get("mor", {}).get("token_ids", []) for e in toks), [])
    t.check(ok and text == whole["choices"][0]["text"] and ids == whole["choices"][0]["mor"]["token_ids"],
            "stream: the events' text and tokens are the whole response's")
    t.check(ok and all(e["object"] == "text_completion" and e["id"] == toks[0]["id"] for e in toks) and
            toks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"] and
            all(e["choices"][0]["finish_reason"] is None for e in toks[:-1]),
            "stream: one id, finish_reason only in the last event")
    # (prompt_tokens_details.cached_tokens: what prompt reuse gave each, test_prompt_reuse)
    plain = lambda u: {k: v for k, v in u.items() if k != "prompt_tokens_details"}  # noqa: E731
    t.check(len(usage) == 1 and plain(usage[0]["usage"]) == plain(whole["usage"]) and
            "cached_tokens" in usage[0]["usage"]["prompt_tokens_details"], "stream_options.include_usage: a usage chunk")
    # stop strings: the text ends before the first one; never streamed
    full = completion(srv, {"prompt": "The jury said that", "max_tokens": 40, "seed": 5})[1]["choices"][0]
    ftext = full["text"]
    words = [w for w in ftext.split(" ") if len(w) >= 3]
    if words:
        stop = words[len(words) // 2][:3]
        cut = ftext.find(stop)
        r = completion(srv, {"prompt": "The jury said that", "max_tokens": 40, "seed": 5, "stop": [stop, "zzzz"]})[1]
        c = r["choices"][0]
        t.check(c["text"] == ftext[:cut] and c["finish_reason"] == "stop" and
                c["mor"]["token_ids"] == full["mor"]["token_ids"][:len(c["mor"]["token_ids"])],
                "stop %r: the text ends before it, finish_reason stop, generation ends there" % stop)
        st, ev = srv.stream("/v1/completions", {"prompt": "The jury said that", "max_tokens": 40, "seed": 5,
                                                "stop": stop, "stream": True})
        s = "".join(e["choices"][0]["text"] for e in ev[:-1])
        t.check(s == ftext[:cut] and stop not in s, "stop %r streamed: no event shows it" % stop)
    # a stop string across token boundaries: the text of tokens 2-4
    toks = full["mor"]["token_ids"]
    st, pieces = srv.stream("/v1/completions", {"prompt": "The jury said that", "max_tokens": 40, "seed": 5,
                                                "stream": True})
    pt = [e["choices"][0]["text"] for e in pieces[:-2]]
    span = "".join(pt[2:5])
    if len(span) >= 2 and all(pt[2:5]):
        r = completion(srv, {"prompt": "The jury said that", "max_tokens": 40, "seed": 5, "stop": span})[1]["choices"][0]
        t.check(r["text"] == ftext[:ftext.find(span)] and len(r["mor"]["token_ids"]) == 5,
                "a stop string spanning three tokens %r: found, generation stopped at its last token" % span)
    # max_tokens and the end-of-text token end a request as OpenAI says
    r = completion(srv, {"prompt": "The jury said that", "max_tokens": 3, "seed": 5})[1]
    t.check(r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 3 and
            r["usage"]["prompt_tokens"] == 5 and r["usage"]["total_tokens"] == 8, "max_tokens 3: finish_reason length, usage")


# ---- logprobs ----------------------------------------------------------------------

def step_logprobs(prompt, n, seed, tmp, extra=()):
    """mor-run's tokens for prompt, and the log-softmax (float64, computed
    here) of the logits each was sampled from (mor-run --dump-step-logits):
    the oracle of the server's logprobs."""
    ids, _, flags = sl.mor_run(prompt, n, seed, extra)
    path = os.path.join(tmp, "steps.f32")
    subprocess.run([sl.RUN] + flags + ["--dump-step-logits", path], capture_output=True, check=True)
    with open(path, "rb") as f:
        data = f.read()
    n_vocab = len(data) // 4 // len(ids)
    rows = []
    for i in range(len(ids)):
        row = struct.unpack_from("<%df" % n_vocab, data, 4 * n_vocab * i)
        mx = max(row)
        lse = mx + math.log(sum(math.exp(v - mx) for v in row))
        rows.append([v - lse for v in row])
    return ids, rows


def near(a, b):
    """A float32 log-probability (as served) and its float64 oracle."""
    return abs(a - b) <= 1e-6 + 2e-7 * abs(b)


def top_of(row, k):
    return sorted(range(len(row)), key=lambda i: (-row[i], i))[:k]


def strip_ids(body):
    """A response's bytes without what differs between two requests (the
    values of id and created)."""
    body = re.sub(rb'"id":"[^"]*"', b'"id":""', body, count=1)
    return re.sub(rb'"created":[0-9]+', b'"created":0', body, count=1)


def test_logprobs(srv, tmp):
    prompt, n, seed = "The jury said that", 16, 7
    ids, rows = step_logprobs(prompt, n, seed, tmp)
    body = {"prompt": prompt, "max_tokens": n, "seed": seed, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
            "min_p": 0.05}
    st, r = completion(srv, dict(body, logprobs=5))
    ch = r["choices"][0]
    lp = ch["logprobs"]
    t.check(st == 200 and ch["mor"]["token_ids"] == ids and sorted(lp) == ["text_offset", "token_logprobs", "tokens",
                                                                           "top_logprobs"] and
            len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == len(ids),
            "completions logprobs 5: OpenAI's object, one entry per token; the tokens are mor-run's")
    t.check(all(near(v, rows[i][ids[i]]) for i, v in enumerate(lp["token_logprobs"])),
            "completions: each token_logprob is the log-softmax of the logits it was sampled from (mor-run "
            "--dump-step-logits, float64 here)")
    # top_logprobs: the 5 most likely, and the sampled token's (up to 6 keys), most likely first
    ok_top = ok_sampled = True
    for i, d in enumerate(lp["top_logprobs"]):
        vals = list(d.values())
        want = [rows[i][x] for x in top_of(rows[i], 5)]
        ok_top &= vals[:5] == sorted(vals[:5], reverse=True) and all(near(a, b) for a, b in zip(vals[:5], want)) and \
            len(d) in (5, 6)
        ok_sampled &= lp["tokens"][i] in d and d[lp["tokens"][i]] == lp["token_logprobs"][i]
    t.check(ok_top, "completions: top_logprobs holds the 5 most likely tokens' log-probabilities, in order")
    t.check(ok_sampled, "completions: the sampled token is in its top_logprobs with its token_logprob")
    off = [len("".join(lp["tokens"][:i])) for i in range(len(ids))]
    t.check("".join(lp["tokens"]) == ch["text"] and lp["text_offset"] == off,
            "completions: the tokens make the text; text_offset is where each starts in it")
    # greedy: the sampled token is the most likely
    gids, grows = step_logprobs(prompt, 12, 1, tmp, ["--temp", "0"])
    st, g = completion(srv, {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 3})
    gl = g["choices"][0]["logprobs"]
    t.check(st == 200 and g["choices"][0]["mor"]["token_ids"] == gids and
            all(next(iter(d)) == tok and d[tok] == v for d, tok, v in zip(gl["top_logprobs"], gl["tokens"], gl["token_logprobs"])) and
            all(near(v, max(grows[i])) for i, v in enumerate(gl["token_logprobs"])),
            "greedy: each token is the first of its top_logprobs, its logprob the largest")
    # streamed: each chunk carries its token's logprobs, together those of the whole
    st, ev = srv.stream("/v1/completions", dict(body, logprobs=5, stream=True))
    chunks = [e["choices"][0] for e in ev[:-1]]
    joined = {k: sum((c["logprobs"][k] for c in chunks if c["logprobs"]), []) for k in lp}
    t.check(st == 200 and all(c["logprobs"] and len(c["logprobs"]["tokens"]) == 1 for c in chunks[:-1]) and
            chunks[-1]["logprobs"] is None and joined == lp,
            "completions streamed: one token's logprobs per chunk, together the same as not streamed")
    # logprobs 0: the sampled token's alone; 20: twenty more
    st0, z = completion(srv, dict(body, logprobs=0))
    zl = z["choices"][0]["logprobs"]
    st20, m = completion(srv, dict(body, logprobs=20))
    ml = m["choices"][0]["logprobs"]
    t.check(st0 == 200 and zl["token_logprobs"] == lp["token_logprobs"] and
            all(d == {tok: v} for d, tok, v in zip(zl["top_logprobs"], zl["tokens"], zl["token_logprobs"])) and
            st20 == 200 and all(len(d) in (20, 21) for d in ml["top_logprobs"]) and ml["token_logprobs"] == lp["token_logprobs"],
            "completions logprobs 0: the sampled token's only; logprobs 20: 20 (+ the sampled one)")
    # without logprobs, a request is answered as before, bit for bit
    st1, _, plain = srv.request("POST", "/v1/completions", body)
    st2, _, plain2 = srv.request("POST", "/v1/completions", dict(body, logprobs=None))
    st3, _, plain3 = srv.request("POST", "/v1/completions", dict(body, logprobs=False))
    p = json.loads(plain)
    t.check(st1 == st2 == st3 == 200 and p["choices"][0]["logprobs"] is None and
            strip_ids(plain) == strip_ids(plain2) == strip_ids(plain3) and b'"logprobs":null,' in plain and
            p["choices"][0]["mor"] == ch["mor"] and p["choices"][0]["text"] == ch["text"],
            "without logprobs (absent, null, false): \"logprobs\":null, the same bytes; asking for them changes no token")


# ---- bad input ---------------------------------------------------------------------

BAD = [
    ('{"prompt": "x", "temperature": 3}', 400, "temperature"),
    ('{"prompt": "x", "temperature": "hot"}', 400, "temperature"),
    ('{"prompt": "x", "top_p": 0}', 400, "top_p"),
    ('{"prompt": "x", "top_k": -1}', 400, "top_k"),
    ('{"prompt": "x", "min_p": 1.5}', 400, "min_p"),
    ('{"prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
    ('{"prompt": "x", "max_tokens": 2.5}', 400, "max_tokens"),
    ('{"prompt": "x", "max_tokens": 1e300}', 400, "max_tokens"),
    ('{"prompt": "x", "seed": -7}', 400, "seed"),
    ('{"prompt": "x", "stop": 5}', 400, "stop"),
    ('{"prompt": "x", "stop": [""]}', 400, "stop"),
    ('{"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}', 400, "stop"),
    ('{"prompt": "x", "stream": "yes"}', 400, "stream"),
    ('{"prompt": "x", "unknown_field": 1}', 400, "unknown_field"),
    ('{"prompt": "x", "n": 9}', 400, "n"),
    ('{"prompt": "x", "n": 0}', 400, "n"),
    ('{"prompt": "x", "n": "2"}', 400, "n"),
    ('{"prompt": "x", "echo": true}', 400, "echo"),
    ('{"prompt": "x", "logprobs": -1}', 400, "logprobs"),
    ('{"prompt": "x", "logprobs": 21}', 400, "logprobs"),
    ('{"prompt": "x", "logprobs": 2.5}', 400, "logprobs"),
    ('{"prompt": "x", "logprobs": "5"}', 400, "logprobs"),
    ('{"prompt": "x", "logprobs": true}', 400, "logprobs"),
    ('{"prompt": "x", "top_logprobs": 2}', 400, "top_logprobs"),
    ('{"prompt": "x", "frequency_penalty": "high"}', 400, "frequency_penalty"),
    ('{"prompt": "x", "presence_penalty": 1e31}', 400, "presence_penalty"),
    ('{"prompt": "x", "mirostat": 3}', 400, "mirostat"),
    ('{"prompt": "x", "min_keep": -1}', 400, "min_keep"),
    ('{"prompt": "x", "dry_allowed_length": 1.5}', 400, "dry_allowed_length"),
    ('{"prompt": "x", "dry_penalty_last_n": -2}', 400, "dry_penalty_last_n"),
    ('{"prompt": "x", "dry_sequence_breakers": []}', 400, "dry_sequence_breakers"),
    ('{"prompt": "x", "dry_sequence_breakers": [3]}', 400, "dry_sequence_breakers"),
    ('{"prompt": "x", "samplers": ["top_k", "infill"]}', 400, "samplers"),
    ('{"prompt": "x", "samplers": ["top_k", "hot"]}', 400, "samplers"),
    ('{"prompt": "x", "samplers": "kq"}', 400, "samplers"),
    ('{"prompt": "x", "samplers": 4}', 400, "samplers"),
    ('{"prompt": "x", "samplers": []}', 400, "samplers"),
    ('{"prompt": "x", "logit_bias": {"5": "x"}}', 400, "logit_bias"),
    ('{"prompt": "x", "logit_bias": {"5": true}}', 400, "logit_bias"),
    ('{"prompt": "x", "logit_bias": {"4096": 1}}', 400, "logit_bias"),
    ('{"prompt": "x", "logit_bias": [[1]]}', 400, "logit_bias"),
    ('{"prompt": "x", "logit_bias": [[-1, 2]]}', 400, "logit_bias"),
    ('{"prompt": "x", "logit_bias": 3}', 400, "logit_bias"),
    ('{"prompt": "x", "n_probs": 21}', 400, "n_probs"),
    ('{"prompt": "x", "n_probs": 2, "logprobs": 2}', 400, "n_probs"),
    ('{"prompt": "x", "ignore_eos": 1}', 400, "ignore_eos"),
    ('{"prompt": "x", "cache_prompt": "no"}', 400, "cache_prompt"),
    ('{"prompt": "x", "id_slot": -2}', 400, "id_slot"),
    ('{"prompt": "x", "response_format": {"type": "xml"}}', 400, "response_format"),
    ('{"prompt": "x", "response_format": {"type": "json_schema"}}', 400, "response_format"),
    ('{"prompt": "x", "grammar": 3}', 400, "grammar"),
    ('{"prompt": "x", "grammar": "root ::= (\\"a\\""}', 400, "grammar"),
    ('{"prompt": "x", "grammar": "root ::= root \\"a\\" | \\"b\\""}', 400, "grammar"),
    ('{"prompt": "x", "grammar": "root ::= \\"a\\"", "response_format": {"type": "json_object"}}', 400, "response_format"),
    ('{"prompt": "x", "json_schema": "string"}', 400, "json_schema"),
    ('{"prompt": "x", "tools": []}', 400, "tools"),
    ('{"prompt": "x", "prompt": "y"}', 400, "prompt"),
    ('{"prompt": 5}', 400, "prompt"),
    ('{"prompt": []}', 400, "prompt"),
    ('{"prompt": [1, -2]}', 400, "prompt"),
    ('{"prompt": [1, 4096]}', 400, "prompt"),
    ('{"prompt": ["a", "b"]}', 400, "prompt"),
    ('{"prompt": ""}', 400, "prompt"),
    ('{"max_tokens": 4}', 400, "prompt"),
    ('{"prompt": "x", "max_tokens": 256}', 400, "prompt"),
    ('{"prompt": "x", "stream_options": {"include_usage": true}}', 400, "stream_options"),
    ('{"prompt": "x" "y"}', 400, None),
    ('{"prompt": "x",}', 400, None),
    ('[1, 2]', 400, None),
    ('', 400, None),
    ('{"prompt": "\\ud800"}', 400, None),
    ('{"prompt": "x"} trailing', 400, None),
    ('[' * 300 + ']' * 300, 400, None),
]


def test_errors(srv):
    for body, status, param in BAD:
        st, h, data = srv.request("POST", "/v1/completions", body)
        try:
            e = json.loads(data)["error"]
            shape = isinstance(e["message"], str) and e["message"] and "type" in e and "code" in e
        except (ValueError, KeyError, TypeError):
            e, shape = {}, False
        t.check(st == status and shape and e.get("param") == param,
                "%s -> %d, an OpenAI error body naming %s" % (body[:60], status, param))
    long_prompt = " ".join(["word"] * 400)
    st, e = completion(srv, {"prompt": long_prompt, "max_tokens": 4})
    t.check(st == 400 and e["error"]["code"] == "context_length_exceeded" and "256" in e["error"]["message"],
            "a prompt longer than the context: 400 context_length_exceeded, the context named")
    st, e = srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})
    t.check(st == 400 and e["error"]["code"] == "chat_not_supported" and "chat template" in e["error"]["message"],
            "chat with a model without a chat template: a clear 400")
    hi = [{"role": "user", "content": "Hi"}]
    for body, param, says in [({"messages": hi, "logprobs": 1}, "logprobs", "boolean"),
                              ({"messages": hi, "logprobs": True, "top_logprobs": 21}, "top_logprobs", "[0, 20]"),
                              ({"messages": hi, "logprobs": True, "top_logprobs": -1}, "top_logprobs", "[0, 20]"),
                              ({"messages": hi, "logprobs": True, "top_logprobs": "3"}, "top_logprobs", "integer"),
                              ({"messages": hi, "logprobs": True, "top_logprobs": 1.5}, "top_logprobs", "integer"),
                              ({"messages": hi, "top_logprobs": 2}, "top_logprobs", '"logprobs": true'),
                              ({"messages": hi, "logprobs": False, "top_logprobs": 2}, "top_logprobs", '"logprobs": true')]:
        st, e = srv.json("POST", "/v1/chat/completions", body)
        t.check(st == 400 and e["error"]["param"] == param and says in e["error"]["message"],
                "chat %s -> 400 naming %s: %s" % (json.dumps({k: v for k, v in body.items() if k != "messages"}), param,
                                                  e["error"]["message"]))
    for body, what in [({"messages": []}, "empty messages"), ({"messages": [{"role": "tool", "content": "x"}]}, "role tool"),
                       ({"messages": [{"role": "user"}]}, "no content"), ({"messages": "hi"}, "not an array"),
                       ({"messages": [{"role": "user", "content": "x"}], "prompt": "y"}, "a completions field")]:
        st, e = srv.json("POST", "/v1/chat/completions", body)
        t.check(st == 400 and e["error"]["param"] in ("messages", "prompt"), "chat: %s -> 400" % what)

    # malformed HTTP
    raw = [
        (b"GARBAGE\r\n\r\n", b"400", "a request line without a target"),
        (b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", b"505", "HTTP/2.0"),
        (b"GET /health HTTP/1.1\r\n\r\n", b"400", "HTTP/1.1 without Host"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n", b"400", "a space in a header name"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", b"400", "obsolete line folding"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", b"400",
         "two different Content-Lengths"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         b"400", "Content-Length with chunked"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", b"501", "gzip transfer coding"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n\r\n", b"411", "a POST without a length"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", b"400", "a bad chunk size"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 20000 + b"\r\n\r\n", b"431", "a 20 kB header"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", b"400", "a control character in a header"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999\r\n\r\n", b"413", "a 100 MB body"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\nExpect: magic\r\n\r\n", b"417", "an unknown Expect"),
    ]
    for data, code, what in raw:
        out = srv.raw(data)
        ok = out.startswith(b"HTTP/1.1 " + code) and b'"error"' in out
        t.check(ok, "%s -> %s with an error body" % (what, code.decode()))
    # a body larger than --max-body (64 KiB here), chunked or not
    big = json.dumps({"prompt": "x" * 70000}).encode()
    out = srv.raw(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
    t.check(out.startswith(b"HTTP/1.1 413"), "a 70 kB body past --max-body 65536: 413")
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 4096]), big[i:i + 4096]) for i in range(0, len(big), 4096))
    out = srv.raw(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    t.check(out.startswith(b"HTTP/1.1 413"), "the same body chunked: 413")
    st, r = completion(srv, {"prompt": "The jury", "max_tokens": 4, "seed": 2, "response_format": {"type": "text"}})
    st2, r2 = completion(srv, {"prompt": "The jury", "max_tokens": 4, "seed": 2})
    t.check(st == 200 and r["choices"][0]["text"] == r2["choices"][0]["text"],
            "completions: response_format {type: text} is accepted (as llama.cpp's) and changes nothing")
    st, h = srv.json("GET", "/health")
    t.check(st == 200 and srv.proc.poll() is None, "after all of that the server is alive and serving")


def test_timeouts():
    """The read timeout, on a server of its own with --timeout 2 (the other
    tests' server keeps the default 30 s, so that no client of theirs is cut
    for being slow on a loaded machine)."""
    srv = sl.Server(["--timeout", "2", "-q"])
    # a read timeout on a half-sent head is a 408; the client waits far longer
    out = srv.raw(b"GET /health HTTP/1.1\r\nHost: a\r\n", timeout=60)
    t.check(out.startswith(b"HTTP/1.1 408"), "a head never finished: 408 after --timeout")
    # random bytes: an error or nothing, never a crash
    import random
    rnd = random.Random(18)
    for k in range(40):
        junk = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 600)))
        srv.raw(junk + b"\r\n\r\n", timeout=3)
    st, h = srv.json("GET", "/health")
    t.check(st == 200 and srv.proc.poll() is None, "after random bytes the server is alive and serving")
    # the test hook is refused unless the server was started with it
    st, e = completion(srv, {"prompt": "x", "max_tokens": 2, "test_hold": True})
    t.check(st == 400 and e["error"]["param"] == "test_hold" and "--test-hooks" in e["error"]["message"],
            "\"test_hold\" without mor-server --test-hooks: 400 naming it")
    t.check(srv.stop() == 0, "the --timeout 2 server stopped cleanly")


def test_http(srv):
    # chunked request body with an extension and a trailer, Expect: 100-continue
    body = json.dumps({"prompt": "The jury said that", "max_tokens": 5, "seed": 1}).encode()
    want = completion(srv, json.loads(body))[1]["choices"][0]["mor"]["token_ids"]
    chunked = b"7;x=y\r\n" + body[:7] + b"\r\n" + b"%x\r\n" % (len(body) - 7) + body[7:] + b"\r\n0\r\nT: 1\r\n\r\n"
    s = socket.create_connection((srv.host, srv.port), timeout=30 * sl.SLOW)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
    first = s.recv(100)
    s.sendall(chunked)
    out = b""
    while b"\r\n\r\n" not in out or len(out.split(b"\r\n\r\n", 1)[1]) < int(out.split(b"Content-Length: ")[1].split(b"\r\n")[0]):
        out += s.recv(65536)
    s.close()
    resp = json.loads(out.split(b"\r\n\r\n", 1)[1])
    t.check(first.startswith(b"HTTP/1.1 100 Continue") and resp["choices"][0]["mor"]["token_ids"] == want,
            "Expect: 100-continue, then a chunked body with an extension and a trailer")
    # two requests pipelined in one write, on one connection, then HTTP/1.0
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    out = srv.raw(req + b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    t.check(out.count(b"HTTP/1.1 200 OK") == 2 and out.rstrip().endswith(b'"queued":0}'),
            "two pipelined requests: two answers, in order")
    out = srv.raw(b"GET /health HTTP/1.0\r\n\r\n")
    t.check(out.startswith(b"HTTP/1.1 200") and b"Connection: close" in out, "HTTP/1.0: answered, then closed")
    # keep-alive: several requests on one connection
    c = srv.conn()
    ok = all(srv.request("GET", "/health", conn=c)[0] == 200 for _ in range(5))
    st, h, data = srv.request("POST", "/v1/completions", body, conn=c)
    c.close()
    t.check(ok and st == 200 and h.get("connection") == "keep-alive", "keep-alive: 6 requests on one connection")
    # an API key
    k = sl.Server(["--api-key", "sekret", "-q"])
    st1, _ = k.json("GET", "/v1/models")
    st2, _ = k.json("GET", "/v1/models", headers={"Authorization": "Bearer sekret"})
    st3, h3 = k.json("GET", "/health")
    st4, _ = k.json("GET", "/metrics", headers={"Authorization": "Bearer wrong"})
    st5, _ = k.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, "seed": 1})
    k.stop()
    t.check(st1 == 401 and st2 == 200, "--api-key: 401 without it, 200 with Authorization: Bearer")
    t.check(st3 == 200 and h3["status"] == "ok" and st4 == 401 and st5 == 401,
            "--api-key: GET /health answers without the key (as llama.cpp's); /metrics and completions do not")


# ---- prompt reuse ----------------------------------------------------------------------

def cached_total(srv):
    data = srv.request("GET", "/metrics")[2].decode()
    m = re.search(r"^mor_prompt_tokens_cached_total (\d+)$", data, re.M)
    return int(m.group(1)) if m else -1


def test_prompt_reuse(srv):
    system = "The jury said that the city of Atlanta was run well. " * 4
    q1 = {"prompt": system + "It was a", "max_tokens": 6, "seed": 11}
    q2 = {"prompt": system + "In the morning he", "max_tokens": 6, "seed": 12}
    n_sys = len(srv.json("POST", "/tokenize", {"content": system})[1]["tokens"])
    before = cached_total(srv)
    st1, r1 = completion(srv, q1)
    st2, r2 = completion(srv, q2)
    st3, r3 = completion(srv, q2)   # (q2 took q1's slot, and kept the shared start only)
    c = [r["usage"]["prompt_tokens_details"]["cached_tokens"] if s == 200 else -1
         for s, r in ((st1, r1), (st2, r2), (st3, r3))]
    t.check(n_sys - 1 <= c[1] < r2["usage"]["prompt_tokens"],
            "prompt reuse: a prompt sharing a %d-token start with a finished request decodes only the rest "
            "(usage.prompt_tokens_details.cached_tokens %d of %d)" % (n_sys, c[1], r2["usage"]["prompt_tokens"]))
    t.check(c[2] == r2["usage"]["prompt_tokens"] - 1 and r3["choices"] == r2["choices"],
            "prompt reuse: the same prompt again reuses all but its last token and gives the same response")
    t.check(cached_total(srv) - before == sum(c), "/metrics: mor_prompt_tokens_cached_total counts them (%d)" % sum(c))
    fresh = sl.Server(["--no-prompt-reuse", "-q"])
    f = [completion(fresh, q) for q in (q1, q2, q2)]
    fresh.stop()
    t.check([x[1]["choices"] for x in f] == [r1["choices"], r2["choices"], r3["choices"]] and
            all(x[1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 for x in f),
            "prompt reuse: the responses of a --no-prompt-reuse server, bit for bit (which reuses nothing)")


# ---- self-speculative decoding ------------------------------------------------------------

def spec_totals(srv):
    data = srv.request("GET", "/metrics")[2].decode()
    return tuple(int(m.group(1)) if m else -1 for m in
                 (re.search(r"^mor_speculative_%s_total (\d+)$" % k, data, re.M) for k in ("drafted", "accepted")))


def test_speculation(srv):
    """A request's "speculate" (and a server's --speculate default) gives the
    response of plain decoding, text, token ids and depths, streamed or
    whole, sampled, greedy or under a grammar; /metrics counts the drafts."""
    bodies = [{"prompt": "The jury said that", "max_tokens": 40, "seed": 3, "temperature": 0},
              {"prompt": "In the morning", "max_tokens": 40, "seed": 7, "temperature": 0.8},
              {"prompt": "The answer is", "max_tokens": 30, "seed": 5, "temperature": 1.0,
               "response_format": {"type": "json_object"}}]
    plain = [completion(srv, b) for b in bodies]
    before = spec_totals(srv)
    same = True
    for n, d in ((1, 1), (4, 1), (3, 2)):
        for b, (st0, r0) in zip(bodies, plain):
            st, r = completion(srv, dict(b, speculate=n, speculate_depth=d))
            same &= st == st0 == 200 and r["choices"] == r0["choices"]
    t.check(same, "speculation: the responses of plain decoding (text, token ids, depths), N 1/4/3, depth 1/1/2, "
            "greedy, sampled, JSON mode")
    after = spec_totals(srv)
    drafted, accepted = after[0] - before[0], after[1] - before[1]
    t.check(drafted > 0 and 0 < accepted <= drafted,
            "/metrics: mor_speculative_drafted_total and _accepted_total count them (%d drafted, %d accepted)"
            % (drafted, accepted))
    # streamed: the same text and ids; a stop string cuts inside a step's run of tokens
    st, ev = srv.stream("/v1/completions", dict(bodies[1], speculate=4, stream=True))
    toks = [e for e in ev[:-1] if e["choices"]] if st == 200 else []
    ids = sum((e["choices"][0].get("mor", {}).get("token_ids", []) for e in toks), [])
    t.check(st == 200 and "".join(e["choices"][0]["text"] for e in toks) == plain[1][1]["choices"][0]["text"] and
            ids == plain[1][1]["choices"][0]["mor"]["token_ids"], "speculation: a stream gives the same text and ids")
    words = [w for w in plain[0][1]["choices"][0]["text"].split(" ") if len(w) >= 3]
    if words:
        stop = dict(bodies[0], stop=[words[len(words) // 2]])
        r0, r1 = completion(srv, stop), completion(srv, dict(stop, speculate=4))
        t.check(r0[0] == r1[0] == 200 and r0[1]["choices"] == r1[1]["choices"] and
                r0[1]["choices"][0]["finish_reason"] == "stop",
                "speculation: a stop string ends the response where plain decoding's ends (%r)" % stop["stop"][0])
    st, e = completion(srv, dict(bodies[0], speculate=100000))
    t.check(st == 400 and e["error"]["param"] == "speculate", "speculate past the range: 400 naming it")
    st, e = completion(srv, dict(bodies[0], speculate=2, speculate_depth=9))
    t.check(st == 400 and e["error"]["param"] == "speculate_depth", "speculate_depth past the model's recursions: 400")
    st, e = completion(srv, dict(bodies[0], speculate="2"))
    t.check(st == 400 and e["error"]["param"] == "speculate", "speculate not an integer: 400")
    # a server-wide default, which a request's "speculate": 0 turns off
    dflt = sl.Server(["--speculate", "3", "-q"])
    got = [completion(dflt, b) for b in bodies]
    off = completion(dflt, dict(bodies[1], speculate=0))
    d = spec_totals(dflt)
    dflt.stop()
    t.check([g[1]["choices"] for g in got] == [p[1]["choices"] for p in plain] and off[1]["choices"] == plain[1][1]["choices"]
            and d[0] > 0, "mor-server --speculate 3: the same responses (%d drafted, %d accepted)" % d)
    bad = subprocess.run([sl.BIN, "-m", sl.MODEL, "--speculate", "2", "--speculate-depth", "9"],
                         capture_output=True, text=True, timeout=60)
    t.check(bad.returncode != 0 and "speculate" in bad.stderr, "mor-server --speculate-depth past the model's "
            "recursions: exits non-zero, naming it")


# ---- n > 1 ------------------------------------------------------------------------------

def test_n_choices(srv):
    body = {"prompt": "The jury said that", "max_tokens": 8, "seed": 21, "temperature": 0.9}
    st, r = completion(srv, dict(body, n=3))
    alone = [completion(srv, dict(body, seed=21 + i))[1]["choices"][0] for i in range(3)]
    ch = r["choices"] if st == 200 else []
    t.check(st == 200 and [c["index"] for c in ch] == [0, 1, 2] and
            [(c["text"], c["mor"]["token_ids"], c["finish_reason"]) for c in ch] ==
            [(a["text"], a["mor"]["token_ids"], a["finish_reason"]) for a in alone],
            "n 3: three choices, choice i the request alone with seed + i")
    t.check(st == 200 and r["usage"]["prompt_tokens"] == 5 and
            r["usage"]["completion_tokens"] == sum(len(c["mor"]["token_ids"]) for c in ch) and
            r["usage"]["total_tokens"] == 5 + r["usage"]["completion_tokens"],
            "n 3: usage counts the prompt once and every choice's tokens")
    st, ev = srv.stream("/v1/completions", dict(body, n=3, stream=True, stream_options={"include_usage": True}))
    ok = st == 200 and ev[-1] == "[DONE]"
    text = {}
    finish = {}
    for e in ev[:-1]:
        for c in e["choices"]:
            text[c["index"]] = text.get(c["index"], "") + c["text"]
            if c["finish_reason"]:
                finish[c["index"]] = c["finish_reason"]
    usage = [e for e in ev[:-1] if not e["choices"]]
    t.check(ok and [text.get(i) for i in range(3)] == [c["text"] for c in ch] and
            [finish.get(i) for i in range(3)] == [c["finish_reason"] for c in ch] and
            len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == r["usage"]["completion_tokens"],
            "n 3 streamed: each index's events make its choice; one usage chunk")
    chat_st, _ = srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2})
    t.check(chat_st == 400, "n 2 in chat on a model without a chat template: still the template's 400")


# ---- constrained output ------------------------------------------------------------

RECORD = ('root ::= " {" pair ("," pair){0,2} "}"\n'
          'pair ::= "\\"" [a-z]{1,8} "\\": " ("true" | "false" | [0-9]{1,4})\n')
RECORD_RE = r' \{"[a-z]{1,8}": (true|false|[0-9]{1,4})(,"[a-z]{1,8}": (true|false|[0-9]{1,4})){0,2}\}'


REC_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "n": {"type": "integer"}},
              "required": ["name", "n"], "additionalProperties": False}


def rec_valid(v):
    return (isinstance(v, dict) and set(v) == {"name", "n"} and isinstance(v["name"], str) and len(v["name"]) <= 10
            and isinstance(v["n"], int) and not isinstance(v["n"], bool))


def test_grammar(srv):
    import re
    good = 0
    outs = []
    for seed in range(6):
        st, r = completion(srv, {"prompt": "The record:", "max_tokens": 120, "seed": seed, "grammar": RECORD})
        c = r["choices"][0] if st == 200 else {}
        ok = st == 200 and c["finish_reason"] == "stop" and re.fullmatch(RECORD_RE, c["text"]) is not None
        good += ok
        outs.append(c)
        if not ok:
            note("seed %d: %s" % (seed, json.dumps(r)[:300]))
    t.check(good == 6, "grammar: %d of 6 seeded completions are whole strings of the grammar, finish stop" % good)
    # what mor-run --grammar gives for the same request
    p = subprocess.run([os.path.join(os.path.dirname(sl.BIN), "mor-run"), "-m", sl.MODEL, "-p", "The record:",
                        "-n", "120", "--seed", "3", "--grammar", RECORD, "-q", "--temp", "0.8"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    t.check(p.returncode == 0 and p.stdout.decode().rstrip("\n") == "The record:" + outs[3].get("text", "?"),
            "grammar: the server's completion is mor-run --grammar's output")
    st, ev = srv.stream("/v1/completions", {"prompt": "The record:", "max_tokens": 120, "seed": 3, "grammar": RECORD,
                                            "stream": True})
    text = "".join(e["choices"][0]["text"] for e in ev[:-1])
    t.check(st == 200 and text == outs[3].get("text") and ev[-2]["choices"][0]["finish_reason"] == "stop",
            "grammar streamed: the same text, finish stop")
    st, r = completion(srv, {"prompt": "The record:", "max_tokens": 120, "seed": 3, "grammar": RECORD, "n": 2})
    t.check(st == 200 and [c["text"] for c in r["choices"]] == [outs[3].get("text"), outs[4].get("text")],
            "grammar with n 2: choice i is the request alone with seed + i")
    st, r = completion(srv, {"prompt": "The record:", "max_tokens": 8, "seed": 3, "grammar": ""})
    st2, r2 = completion(srv, {"prompt": "The record:", "max_tokens": 8, "seed": 3})
    t.check(st == st2 == 200 and r["choices"][0]["text"] == r2["choices"][0]["text"], "grammar \"\": no constraint")
    # any JSON object: a finished one parses, a cut one starts as an object
    parsed = 0
    for seed in range(4):
        st, r = completion(srv, {"prompt": "Data:", "max_tokens": 60, "seed": seed, "temperature": 0.7,
                                 "response_format": {"type": "json_object"}})
        c = r["choices"][0] if st == 200 else {"text": "", "finish_reason": None}
        if c["finish_reason"] == "stop":
            try:
                parsed += isinstance(json.loads(c["text"]), dict)
            except ValueError:
                note("not JSON: %r" % c["text"])
        else:
            parsed += c["finish_reason"] == "length" and c["text"].startswith("{")
    t.check(parsed == 4, "response_format json_object: every finished output is a JSON object, cut ones start as one")
    # a JSON Schema: every output parses and validates (many seeds), three ways of asking give the same
    good = 0
    for seed in range(8):
        st, r = completion(srv, {"prompt": "Record:", "max_tokens": 120, "seed": seed, "json_schema": REC_SCHEMA})
        c = r["choices"][0] if st == 200 else {}
        try:
            good += c.get("finish_reason") == "stop" and rec_valid(json.loads(c["text"]))
        except (ValueError, KeyError):
            note("seed %d: %s" % (seed, json.dumps(r)[:300]))
    t.check(good == 8, "json_schema: %d of 8 seeded outputs parse and validate against the schema" % good)
    st, a = completion(srv, {"prompt": "Record:", "max_tokens": 120, "seed": 5, "json_schema": REC_SCHEMA})
    st2, b = completion(srv, {"prompt": "Record:", "max_tokens": 120, "seed": 5, "response_format": {
        "type": "json_schema", "json_schema": {"name": "rec", "schema": REC_SCHEMA, "strict": True}}})
    st3, c = completion(srv, {"prompt": "Record:", "max_tokens": 120, "seed": 5,
                              "response_format": {"type": "json_object", "schema": REC_SCHEMA}})
    t.check(st == st2 == st3 == 200 and a["choices"][0]["text"] == b["choices"][0]["text"] == c["choices"][0]["text"],
            "json_schema, response_format json_schema and json_object with a schema: the same output")
    st, e = completion(srv, {"prompt": "x", "json_schema": {"type": "number", "multipleOf": 3}})
    t.check(st == 400 and e["error"]["param"] == "json_schema" and "#/multipleOf" in e["error"]["message"],
            "json_schema with an unsupported keyword: 400 naming where (%s)" % e.get("error", {}).get("message"))
    pat = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                                            "n": {"type": "integer", "minimum": 10, "maximum": 20}},
           "required": ["code", "n"], "additionalProperties": False}
    outs = [completion(srv, {"prompt": "Record:", "max_tokens": 60, "seed": s, "json_schema": pat}) for s in range(4)]
    ok = 0
    for st, r in outs:
        try:
            v = json.loads(r["choices"][0]["text"])
            ok += st == 200 and re.match(r"^[A-Z]{2}-\d{3}$", v["code"]) is not None and 10 <= v["n"] <= 20
        except (ValueError, KeyError, TypeError):
            pass
    t.check(ok == 4, "json_schema pattern and integer bounds: %d of 4 seeded outputs match them" % ok)
    if t.need_tool("curl", "curl", "the curl json_schema check"):
        url = "http://%s:%d/v1/completions" % (srv.host, srv.port)
        r = subprocess.run(["curl", "-sS", url, "-d", json.dumps({"prompt": "Record:", "max_tokens": 120, "seed": 5,
                                                                   "json_schema": REC_SCHEMA})], capture_output=True)
        t.check(r.returncode == 0 and json.loads(r.stdout)["choices"][0]["text"] == a["choices"][0]["text"],
                "curl: a json_schema completion")


# ---- llama.cpp's own endpoints ---------------------------------------------------------

def test_llama_endpoints(srv):
    text = "The jury said that \u00e9t\u00e9"
    ids = subprocess.run([sl.RUN, "-m", sl.MODEL, "--tokenize-file", "/dev/stdin"], input=text.encode(),
                         capture_output=True).stdout.split()
    ids = [int(x) for x in ids]
    st, r = srv.json("POST", "/tokenize", {"content": text})
    t.check(st == 200 and r["tokens"] == ids, "POST /tokenize: the ids of `mor-run --tokenize-file` (%s)" % ids[:6])
    st, p = srv.json("POST", "/tokenize", {"content": text, "with_pieces": True, "add_special": True})
    whole = b"".join(x["piece"].encode() if isinstance(x["piece"], str) else bytes(x["piece"]) for x in p["tokens"])
    t.check(st == 200 and [x["id"] for x in p["tokens"]] == ids and whole == text.encode() and
            any(isinstance(x["piece"], list) for x in p["tokens"]),
            "POST /tokenize with_pieces: id and piece each (bytes where a piece is not whole UTF-8); they make the text")
    st, d = srv.json("POST", "/detokenize", {"tokens": ids})
    t.check(st == 200 and d["content"] == text, "POST /detokenize: the text back")
    for path, body, param in [("/tokenize", {}, "content"), ("/tokenize", {"content": 5}, "content"),
                              ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
                              ("/tokenize", {"content": "x", "frobnicate": 1}, "frobnicate"),
                              ("/detokenize", {"tokens": [1, 4096]}, "tokens"),
                              ("/detokenize", {"tokens": "1 2"}, "tokens")]:
        st, e = srv.json("POST", path, body)
        t.check(st == 400 and e["error"]["param"] == param, "POST %s %s: 400 naming %s" % (path, json.dumps(body), param))
    st, _, _ = srv.request("GET", "/tokenize")
    t.check(st == 405, "GET /tokenize: 405")
    st, pr = srv.json("GET", "/props")
    t.check(st == 200 and pr["total_slots"] == 4 and pr["default_generation_settings"]["n_ctx"] == 256 and
            pr["chat_template"] is None and pr["model_alias"] == "brown-mor" and
            abs(pr["default_generation_settings"]["params"]["temperature"] - 0.8) < 1e-6,
            "GET /props: slots, context, model, chat template, the sampling defaults")
    if t.need_tool("curl", "curl", "curl /tokenize"):
        r = subprocess.run(["curl", "-sS", "http://%s:%d/tokenize" % (srv.host, srv.port), "-d",
                            json.dumps({"content": text})], capture_output=True)
        t.check(r.returncode == 0 and json.loads(r.stdout)["tokens"] == ids, "curl -d ... /tokenize")


# ---- llama.cpp's sampling set ----------------------------------------------------------

# request fields and the mor-run flags that mean the same
SAMPLING_CASES = [
    ({"presence_penalty": 0.6, "frequency_penalty": 0.3, "repeat_penalty": 1.1},
     ["--presence-penalty", "0.6", "--frequency-penalty", "0.3", "--repeat-penalty", "1.1"]),
    ({"typical_p": 0.8, "min_keep": 3}, ["--typical", "0.8", "--min-keep", "3"]),
    ({"mirostat": 2, "mirostat_tau": 4, "mirostat_eta": 0.2}, ["--mirostat", "2", "--mirostat-ent", "4", "--mirostat-lr", "0.2"]),
    ({"mirostat": 1}, ["--mirostat", "1"]),
    ({"dry_multiplier": 0.8, "dry_base": 1.5, "dry_allowed_length": 1, "dry_penalty_last_n": 200},
     ["--dry-multiplier", "0.8", "--dry-base", "1.5", "--dry-allowed-length", "1", "--dry-penalty-last-n", "200"]),
    ({"dry_multiplier": 2, "dry_allowed_length": 1, "dry_sequence_breakers": ["e", " the"]},
     ["--dry-multiplier", "2", "--dry-allowed-length", "1", "--dry-sequence-breaker", "e", "--dry-sequence-breaker", " the"]),
    ({"xtc_probability": 0.5, "xtc_threshold": 0.05}, ["--xtc-probability", "0.5", "--xtc-threshold", "0.05"]),
    ({"top_n_sigma": 1.0}, ["--top-nsigma", "1.0"]),
    ({"dynatemp_range": 0.4, "dynatemp_exponent": 2}, ["--dynatemp-range", "0.4", "--dynatemp-exp", "2"]),
    ({"samplers": ["top_k", "typ_p", "top_p", "min_p", "temperature"], "typical_p": 0.9},
     ["--samplers", "top_k;typ_p;top_p;min_p;temperature", "--typical", "0.9"]),
    ({"samplers": "kypmt", "typical_p": 0.9}, ["--sampling-seq", "kypmt", "--typical", "0.9"]),
    ({"logit_bias": {"46": 3.0, "359": False}}, ["--logit-bias", "46+3", "--logit-bias", "359-inf"]),
]


def test_sampling(srv):
    prompt, n, seed = "The jury said that", 24, 5
    base = {"prompt": prompt, "max_tokens": n, "seed": seed, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
            "min_p": 0.05}
    plain = completion(srv, base)[1]["choices"][0]["mor"]["token_ids"]
    differ = 0
    for fields, flags in SAMPLING_CASES:
        ids = sl.mor_run(prompt, n, seed, flags)[0]
        st, r = completion(srv, dict(base, **fields))
        got = r["choices"][0]["mor"]["token_ids"] if st == 200 else r
        t.check(st == 200 and got == ids, "%s: the tokens of `mor-run %s`" % (json.dumps(fields), " ".join(flags)))
        differ += got != plain
    t.check(differ >= len(SAMPLING_CASES) - 2, "%d of %d of them differ from the request without them" %
            (differ, len(SAMPLING_CASES)))

    # logit_bias: bans (false or -inf bias... as false), both shapes, texts
    g = {"prompt": prompt, "max_tokens": 12, "temperature": 0}
    first = completion(srv, g)[1]["choices"][0]["mor"]["token_ids"]
    a = completion(srv, dict(g, logit_bias={str(first[0]): False}))[1]["choices"][0]["mor"]["token_ids"]
    b = completion(srv, dict(g, logit_bias=[[first[0], False]]))[1]["choices"][0]["mor"]["token_ids"]
    c = completion(srv, dict(g, logit_bias=[[first[0], -1e9]]))[1]["choices"][0]["mor"]["token_ids"]
    t.check(a[0] != first[0] and a == b == c and first[0] not in a,
            "logit_bias: the greedy token %d banned as {id: false}, [[id, false]], [[id, -1e9]]: never drawn" % first[0])
    st, tk = srv.json("POST", "/tokenize", {"content": " the"})
    the = tk["tokens"]
    long_g = {"prompt": "It was the end of the day and the", "max_tokens": 40, "temperature": 0}
    free_ = completion(srv, long_g)[1]["choices"][0]["mor"]["token_ids"]
    banned = completion(srv, dict(long_g, logit_bias={" the": False}))[1]["choices"][0]["mor"]["token_ids"]
    arr = completion(srv, dict(long_g, logit_bias=[[" the", False]]))[1]["choices"][0]["mor"]["token_ids"]
    t.check(len(the) == 1 and the[0] in free_ and the[0] not in banned and banned == arr,
            "logit_bias: a text key (\" the\" = %s) is tokenized and banned, as llama.cpp; the array form too" % the)

    # ignore_eos: the end-of-text token (4095 here) forced by a bias ends the
    # request; with ignore_eos it is banned and generation goes on
    st, r = completion(srv, dict(g, logit_bias={"4095": 60}))
    t.check(st == 200 and r["choices"][0]["finish_reason"] == "stop" and r["choices"][0]["mor"]["token_ids"] == [4095],
            "the end-of-text token pushed up by a bias ends the request")
    st, r = completion(srv, dict(g, logit_bias={"4095": 60}, ignore_eos=True))
    ids = r["choices"][0]["mor"]["token_ids"]
    t.check(st == 200 and r["choices"][0]["finish_reason"] == "length" and len(ids) == 12 and 4095 not in ids,
            "ignore_eos: the end-of-text token is banned, 12 tokens")

    # n_probs: logprobs' count; return_tokens; cache_prompt, n_keep, id_slot change nothing
    st1, r1 = completion(srv, dict(base, max_tokens=6, logprobs=3))
    st2, r2 = completion(srv, dict(base, max_tokens=6, n_probs=3))
    t.check(st1 == st2 == 200 and r1["choices"][0]["logprobs"] == r2["choices"][0]["logprobs"] and
            len(r2["choices"][0]["logprobs"]["top_logprobs"][0]) == 3, "n_probs 3: the logprobs of \"logprobs\": 3")
    st, r = completion(srv, dict(base, return_tokens=True, cache_prompt=False, n_keep=4, id_slot=2))
    ch = r["choices"][0]
    t.check(st == 200 and ch["tokens"] == ch["mor"]["token_ids"] == plain,
            "return_tokens: the choice's \"tokens\"; cache_prompt false, n_keep, id_slot: the same tokens")
    st, events = srv.stream("/v1/completions", dict(base, max_tokens=5, return_tokens=True, stream=True))
    toks = [x for e in events[:-1] for x in e["choices"][0].get("tokens", [])] if st == 200 else None
    t.check(st == 200 and toks == plain[:5], "return_tokens streamed: each event's tokens")
    st, r = completion(srv, dict(base, repeat_last_n=-1, dry_multiplier=0.5, dry_penalty_last_n=-1))
    t.check(st == 200, "repeat_last_n and dry_penalty_last_n -1 (the context, as llama.cpp had it) are accepted")
    st, pr = srv.json("GET", "/props")
    p = pr["default_generation_settings"]["params"]
    t.check(p["mirostat"] == 0 and p["dry_sequence_breakers"] == ["\n", ":", "\"", "*"] and
            p["samplers"][:4] == ["penalties", "dry", "top_n_sigma", "temperature"] and p["typical_p"] == 1,
            "GET /props: the sampling set's defaults and the default order")


# ---- disconnects and limits ----------------------------------------------------------

def wait_for(cond, secs=120):
    """Poll until cond() holds: True, or False after secs (a bound that only
    a broken server reaches; every caller checks the result)."""
    end = time.time() + secs * sl.SLOW
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def open_stream(srv, body):
    """A streaming request on a raw socket, after its first token event."""
    s = socket.create_connection((srv.host, srv.port), timeout=30 * sl.SLOW)
    b = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    got = b""
    while b"data: {" not in got:
        got += s.recv(4096)
    return s, got


# A request that stays in flight until its client goes away, at any speed
# and load: seeded (its first token is not the end of text), and held after
# that first token by mor-server's test hook (--test-hooks: the engine steps
# nothing while it is held), never timed with a sleep.
HELD = {"prompt": "The jury said that", "max_tokens": 240, "seed": 3, "test_hold": True}


def test_disconnect(srv):
    before = srv.metric('mor_requests_total{finish_reason="cancelled"}')
    s, _ = open_stream(srv, dict(HELD, stream=True))
    gen = srv.metric("mor_tokens_generated_total")
    busy = srv.metric("mor_slots_busy")
    held = srv.metric("mor_tokens_generated_total") == gen
    s.close()
    freed = wait_for(lambda: srv.metric('mor_requests_total{finish_reason="cancelled"}') == before + 1 and
                     srv.metric("mor_slots_busy") == 0)
    t.check(held, "--test-hooks: while a request is held the engine generates nothing")
    t.check(busy == 1 and freed, "a streaming client that disconnects: its request is cancelled, its slot freed")
    # the same for a request that is not streamed (the socket is watched while it runs)
    b = json.dumps(HELD).encode()
    s = socket.create_connection((srv.host, srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
    running = wait_for(lambda: srv.metric("mor_slots_busy") == 1)
    s.close()
    freed = wait_for(lambda: srv.metric('mor_requests_total{finish_reason="cancelled"}') == before + 2 and
                     srv.metric("mor_slots_busy") == 0)
    t.check(running and freed, "a waiting client that disconnects: cancelled too")
    st, r = completion(srv, {"prompt": "The jury said that", "max_tokens": 5, "seed": 1})
    t.check(st == 200 and r["usage"]["completion_tokens"] == 5, "and the server goes on serving")


def test_limits():
    srv = sl.Server(["--slots", "1", "--max-queue", "1", "-q", "--test-hooks"])
    a, _ = open_stream(srv, dict(HELD, stream=True))
    res = {}

    def queued():
        res["b"] = completion(srv, {"prompt": "The jury", "max_tokens": 3, "seed": 1})
    th = threading.Thread(target=queued)
    th.start()
    waiting = wait_for(lambda: srv.metric("mor_queue_length") == 1)
    st, e = completion(srv, {"prompt": "x", "max_tokens": 3})
    t.check(waiting and st == 503 and e["error"]["code"] == "server_busy",
            "--slots 1 --max-queue 1: a third request while one runs and one waits gets 503 server_busy")
    a.close()
    th.join(60 * sl.SLOW)
    t.check(res.get("b", (0,))[0] == 200, "the waiting request runs once the slot is free")
    srv.stop()
    srv.stop()
    test_connection_limits()


def closed_by_server(s):
    """The server closed s: EOF (or a reset) within a bound only a server
    that never closes reaches."""
    s.settimeout(60 * sl.SLOW)
    try:
        while True:
            b = s.recv(4096)
            if not b:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def drip(srv, head, pieces, every=0.25):
    """Send head, then one piece every `every` s until the server answers or
    closes (at most 30 s of pieces): (what came back, seconds it took)."""
    s = socket.create_connection((srv.host, srv.port), timeout=60 * sl.SLOW)
    s.sendall(head)
    t0 = time.time()
    out = b""
    for k in range(int(30 / every)):
        r, _, _ = select.select([s], [], [], every)
        if r:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                b = b""
            out += b
            if not b or b"\r\n\r\n" in out:
                break
        try:
            s.sendall(pieces(k))
        except OSError:
            break
    s.close()
    return out, time.time() - t0


def test_connection_limits():
    """Slow or idle clients cannot lock others out (each bounded, on
    loopback): a head or body has --timeout in all, not per read; at
    --max-conns-per-client (one address) or --max-conns (all) the oldest
    connection there without a whole request is closed for a new one (408
    if it had begun one); 503 only when every such connection holds a
    request in progress (held by the test hook), and GET /health is answered
    even then."""
    srv = sl.Server(["--timeout", "2", "-q"])
    out, secs = drip(srv, b"GET /health HTTP/1.1\r\nHost: a\r\n", lambda k: b"X-Drip-%d: 1\r\n" % k)
    t.check(out.startswith(b"HTTP/1.1 408") and secs < 30,
            "a head sent one line every 0.25 s: 408 once --timeout 2 has passed for the whole head (%.1f s)" % secs)
    out, secs = drip(srv, b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n{",
                     lambda k: b" ")
    t.check(out.startswith(b"HTTP/1.1 408") and secs < 30,
            "a body sent one byte every 0.25 s: 408 once --timeout 2 has passed for the whole body (%.1f s)" % secs)
    srv.stop()

    srv = sl.Server(["--max-conns", "3", "--max-conns-per-client", "0", "-q"])
    idle = [socket.create_connection((srv.host, srv.port)) for _ in range(3)]
    # one thread accepts, in the order the connections came: the three are
    # registered before the fourth is looked at, however late the server runs
    st, h = srv.json("GET", "/health")
    first_closed = closed_by_server(idle[0])
    t.check(st == 200 and first_closed,
            "--max-conns 3 held by 3 idle connections: a 4th is served, the oldest idle one closed for it")
    for s in idle:
        s.close()
    srv.stop()

    srv = sl.Server(["--max-conns", "8", "--max-conns-per-client", "2", "-q"])
    idle = socket.create_connection((srv.host, srv.port))
    slow = socket.create_connection((srv.host, srv.port))
    slow.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n")   # a head begun, never finished
    # the accept thread takes connections in order: both are registered before the third
    third = socket.create_connection((srv.host, srv.port), timeout=60 * sl.SLOW)
    third.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")   # answered, then kept alive
    out = b""
    while b"\r\n\r\n" not in out:
        out += third.recv(65536)
    t.check(out.startswith(b"HTTP/1.1 200") and closed_by_server(idle),
            "--max-conns-per-client 2 held by an idle and a slow connection: a third from the same address is "
            "served, the oldest (idle) one closed for it")
    # now the slow one is the oldest of the two without a request in hand
    out = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    late = b""
    slow.settimeout(60 * sl.SLOW)
    try:
        while True:
            b = slow.recv(65536)
            if not b:
                break
            late += b
    except OSError:
        pass
    t.check(out.startswith(b"HTTP/1.1 200") and late.startswith(b"HTTP/1.1 408") and
            b"--max-conns-per-client" in late,
            "... and a fourth too, the slow one closed with 408 naming --max-conns-per-client (%r)" % late[-200:])
    for s in (idle, slow, third):
        s.close()
    srv.stop()

    srv = sl.Server(["--max-conns", "8", "--max-conns-per-client", "2", "--slots", "4", "-q", "--test-hooks"])
    busy = [open_stream(srv, dict(HELD, stream=True, seed=3 + k))[0] for k in range(2)]
    out = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")
    health = srv.raw(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
    try:
        other = socket.create_connection((srv.host, srv.port), timeout=60 * sl.SLOW, source_address=("127.0.0.2", 0))
        other.sendall(b"GET /v1/models HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        got = b""
        while True:
            b = other.recv(65536)
            if not b:
                break
            got += b
        other.close()
    except OSError as e:
        got = repr(e).encode()
    for s in busy:
        s.close()
    t.check(out.startswith(b"HTTP/1.1 503") and b"--max-conns-per-client" in out,
            "--max-conns-per-client 2, both with a request in progress: a third from 127.0.0.1 gets 503 naming it")
    t.check(health.startswith(b"HTTP/1.1 200") and b'"slots_processing":2' in health,
            "... while its GET /health is answered all the same (%r)" % health[-80:])
    t.check(got.startswith(b"HTTP/1.1 200"), "... and a client from 127.0.0.2 is served (%r)" % got[:40])
    srv.stop()

    srv = sl.Server(["--max-conns", "3", "--max-conns-per-client", "0", "--slots", "4", "-q", "--test-hooks"])
    busy = [open_stream(srv, dict(HELD, stream=True, seed=3 + k))[0] for k in range(3)]
    out = srv.raw(b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n")
    health = srv.raw(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
    t.check(out.startswith(b"HTTP/1.1 503") and b"server_busy" in out and b"in progress" in out,
            "--max-conns 3, each with a request in progress: a 4th connection gets 503 server_busy")
    t.check(health.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in health,
            "... but GET /health on it is answered: a busy server is alive")
    busy[0].close()
    back = wait_for(lambda: srv.request("GET", "/v1/models")[0] == 200)
    for s in busy[1:]:
        s.close()
    t.check(back, "and once one closes a new connection is served again")
    srv.stop()


# ---- chat ---------------------------------------------------------------------

gguf_layout = t.gguf_layout


gguf_with_key = t.gguf_with_key


def gguf_poison_row(src, dst, tensor, row):
    """A copy of an F16 GGUF file with one row of a matrix NaN."""
    data = bytearray(open(src, "rb").read())
    _, _, start, _, tensors = gguf_layout(data)
    dims, tt, off = tensors[tensor]
    assert tt == 1, "F16 expected"
    for i in range(dims[0]):
        struct.pack_into("<H", data, start + off + (row * dims[0] + i) * 2, 0x7E00)
    with open(dst, "wb") as f:
        f.write(data)


def test_nonfinite(tmp):
    """Logits that cannot be sampled end their own request with a 500 (the
    library names it), not the others in the same steps."""
    bad = os.path.join(tmp, "nan.gguf")
    plain = os.path.join(t.ROOT, "tests", "fuzz", "models", "plain_f16.gguf")
    # a token the clean request never meets (prompt and greedy output), for the poisoned row
    clean = subprocess.run([sl.RUN, "-m", plain, "--ids", "1,2,3", "-n", "40", "--greedy", "--routing", "default",
                            "--print-ids", "-q"], capture_output=True).stdout.split()
    x = min(set(range(64)) - {1, 2, 3} - {int(v) for v in clean})
    gguf_poison_row(plain, bad, "token_embd.weight", x)
    # mor-server checks every weight at load by default: a broken file does not start
    p = subprocess.run([sl.BIN, "-m", bad, "--host", "127.0.0.1", "--port", "0", "-q"], capture_output=True, timeout=60)
    t.check(p.returncode == 1 and b"token_embd.weight" in p.stderr,
            "a NaN weight is refused at load, naming the tensor (%r)" % p.stderr[-120:])
    srv = sl.Server(["--slots", "4", "-q", "--no-check-tensors"], model=bad)
    st, e = completion(srv, {"prompt": "text", "max_tokens": 2})
    t.check(st == 400 and "token ids" in e["error"]["message"], "a model without a tokenizer: a text prompt is a 400")
    a, first = open_stream(srv, {"prompt": [1, 2, 3], "max_tokens": 40, "temperature": 0, "stream": True})
    st, e = completion(srv, {"prompt": [1, x, 3], "max_tokens": 5})
    rest = first
    while not rest.endswith(b"0\r\n\r\n"):
        b = a.recv(65536)
        if not b:
            break
        rest += b
    a.close()
    n_tok = rest.count(b'"token_ids"')
    t.check(st == 500 and "not finite" in e["error"]["message"] and e["error"]["type"] == "server_error",
            "a request whose logits are NaN (a NaN embedding row): 500 naming the cause")
    t.check(b'"finish_reason":"length"' in rest and n_tok == 40 and b'"error"' not in rest,
            "the request running beside it is not touched: all 40 tokens, finish_reason length")
    st, r = completion(srv, {"prompt": [1, 2, 3], "max_tokens": 40, "temperature": 0})
    t.check(st == 200 and r["choices"][0]["mor"]["token_ids"] == [int(v) for v in clean],
            "and the server goes on (the clean request's tokens are mor-run's)")
    srv.stop()


CHATML_JINJA = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Tell me about the jury."}]


def token_bytes_ok(x):
    """A chat logprobs entry's token and bytes agree: its UTF-8, or OpenAI's
    "bytes:\\xNN..." when the bytes are not whole UTF-8."""
    if x["token"].startswith("bytes:"):
        try:
            bytes(x["bytes"]).decode()
            return False
        except UnicodeDecodeError:
            return x["token"] == "bytes:" + "".join("\\x%02x" % b for b in x["bytes"])
    return x["bytes"] == list(x["token"].encode())


def test_chat_logprobs(srv, c, chatml):
    """Chat's logprobs: those of the completion of its chatml prompt (checked
    against mor-run in test_logprobs), in chat's shape."""
    body = {"messages": MESSAGES, "max_tokens": 20, "seed": 4}
    st, r = srv.json("POST", "/v1/chat/completions", dict(body, logprobs=True, top_logprobs=3))
    st2, p = completion(srv, {"prompt": chatml, "max_tokens": 20, "seed": 4, "stop": "<|im_end|>", "logprobs": 3})
    ch, pl = r["choices"][0], p["choices"][0]["logprobs"]
    content = ch["logprobs"]["content"]
    t.check(st == 200 and ch["message"] == c["choices"][0]["message"] and ch["mor"] == c["choices"][0]["mor"] and
            sorted(ch["logprobs"]) == ["content", "refusal"] and len(content) == len(ch["mor"]["token_ids"]) and
            all(sorted(e) == ["bytes", "logprob", "token", "top_logprobs"] and len(e["top_logprobs"]) == 3 and
                all(sorted(x) == ["bytes", "logprob", "token"] for x in e["top_logprobs"]) for e in content),
            "chat logprobs true, top_logprobs 3: OpenAI's content entries, one per token, the same message")
    t.check([e["token"] for e in content] == pl["tokens"] and [e["logprob"] for e in content] == pl["token_logprobs"] and
            all([x["logprob"] for x in e["top_logprobs"]] == list(d.values())[:3] and
                [x["token"] for x in e["top_logprobs"]] == list(d)[:3] for e, d in zip(content, pl["top_logprobs"])),
            "chat: the values of the completion of its chatml prompt")
    t.check(all([x["logprob"] for x in e["top_logprobs"]] == sorted((x["logprob"] for x in e["top_logprobs"]), reverse=True)
                and e["top_logprobs"][0]["logprob"] >= e["logprob"] for e in content) and
            all(token_bytes_ok(x) for e in content for x in [e] + e["top_logprobs"]) and
            "".join(e["token"] for e in content).startswith(ch["message"]["content"]),
            "chat: top_logprobs sorted, the first at least the token's; bytes are the token's UTF-8 (or, for a piece of "
            "a character, \"bytes:\\xNN\" tokens)")
    d = npm_openai()
    if d:
        env = dict(os.environ, NODE_PATH=os.path.join(d, "node_modules"), MOR_CHAT_LOGPROBS="1",
                   MOR_MESSAGES=json.dumps(MESSAGES), MOR_URL="http://%s:%d/v1" % (srv.host, srv.port))
        nr = subprocess.run(["node", os.path.join(t.ROOT, "tests", "openai_client.js")], capture_output=True, env=env,
                            timeout=120 * sl.SLOW)
        try:
            out = json.loads(nr.stdout)
        except ValueError:
            out = {"error": nr.stderr.decode(errors="replace")[-400:]}
        t.check(out.get("content") == content and out.get("streamed") == content,
                "openai (Node): chat logprobs, whole and streamed, parsed as served %s" % out.get("error", ""))
    st, ev = srv.stream("/v1/chat/completions", dict(body, logprobs=True, top_logprobs=3, stream=True))
    streamed = sum((e["choices"][0]["logprobs"]["content"] for e in ev[:-1] if e["choices"][0]["logprobs"]), [])
    t.check(st == 200 and streamed == content and ev[-2]["choices"][0]["logprobs"] is None,
            "chat streamed: each chunk its token's entry, together the same as not streamed")
    st, r0 = srv.json("POST", "/v1/chat/completions", dict(body, logprobs=True))
    t.check(st == 200 and [e["logprob"] for e in r0["choices"][0]["logprobs"]["content"]] == [e["logprob"] for e in content]
            and all(e["top_logprobs"] == [] for e in r0["choices"][0]["logprobs"]["content"]),
            "chat logprobs true without top_logprobs: the tokens' logprobs, top_logprobs []")
    st, _, plain = srv.request("POST", "/v1/chat/completions", body)
    st2, _, plain2 = srv.request("POST", "/v1/chat/completions", dict(body, logprobs=False, top_logprobs=0))
    t.check(st == st2 == 200 and strip_ids(plain) == strip_ids(plain2) and json.loads(plain)["choices"][0]["logprobs"] is None,
            "chat without logprobs, or logprobs false (top_logprobs 0): logprobs null, the same bytes")


def test_chat(tmp):
    chatml = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in MESSAGES) + "<|im_start|>assistant\n"
    in_file = os.path.join(tmp, "chatml.gguf")
    gguf_with_key(sl.MODEL, in_file, "tokenizer.chat_template", CHATML_JINJA)
    for how, args, model, fmt in [("--chat-template chatml", ["--chat-template", "chatml"], sl.MODEL, "chatml"),
                                  ("a chatml template in the file", [], in_file, "jinja"),
                                  ("... with --no-jinja", ["--no-jinja"], in_file, "chatml")]:
        srv = sl.Server(args + ["-q"], model=model)
        st, m = srv.json("GET", "/v1/models")
        t.check(st == 200 and m["data"][0]["meta"]["chat_template"] == fmt, "%s: /v1/models says %s" % (how, fmt))
        st, a = srv.json("POST", "/apply-template", {"messages": MESSAGES})
        t.check(st == 200 and a["prompt"] == chatml, "%s: POST /apply-template gives the chatml prompt" % how)
        st, c = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 20, "seed": 4})
        st2, p = completion(srv, {"prompt": chatml, "max_tokens": 20, "seed": 4, "stop": "<|im_end|>"})
        t.check(st == 200 and c["object"] == "chat.completion" and c["choices"][0]["message"]["role"] == "assistant" and
                c["choices"][0]["message"]["content"] == p["choices"][0]["text"] and
                c["choices"][0]["mor"]["token_ids"] == p["choices"][0]["mor"]["token_ids"],
                "%s: a chat equals the completion of its chatml prompt" % how)
        if model == sl.MODEL:
            neutral = {"tools": [], "tool_choice": "none", "parallel_tool_calls": False,
                       "response_format": {"type": "text"}}
            st3, c3 = srv.json("POST", "/v1/chat/completions", dict(neutral, messages=MESSAGES, max_tokens=20, seed=4))
            st4, e4 = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES, "tools": [{"type": "function"}]})
            st5, e5 = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES, "tools": WEATHER_TOOLS})
            t.check(st3 == 200 and c3["choices"][0]["message"]["content"] == c["choices"][0]["message"]["content"] and
                    st4 == 400 and e4["error"]["param"] == "tools" and st5 == 400 and e5["error"]["param"] == "tools" and
                    "Jinja" in e5["error"]["message"],
                    "chat: tools [], tool_choice none, response_format text are accepted and change nothing; "
                    "a malformed tool is a 400 naming tools, and so are tools with a built-in format (a Jinja template "
                    "is needed: %s)" % e5["error"]["message"][:60])
        if model == sl.MODEL:
            test_chat_logprobs(srv, c, chatml)
        st, ev = srv.stream("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 20, "seed": 4, "stream": True})
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-1])
        t.check(st == 200 and ev[0]["object"] == "chat.completion.chunk" and ev[0]["choices"][0]["delta"]["role"] == "assistant"
                and text == c["choices"][0]["message"]["content"] and ev[-2]["choices"][0]["delta"] == {} and
                ev[-2]["choices"][0]["finish_reason"] in ("stop", "length"), "%s: streamed chat deltas" % how)
        srv.stop()
    test_chat_jinja(tmp)
    test_tools(tmp)


WEATHER_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"]}}},
    {"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
                                           "required": ["zone"]}}}]


def weather_valid(name, args):
    """args (a JSON string) valid under the WEATHER_TOOLS schema of name."""
    try:
        a = json.loads(args)
    except ValueError:
        return False
    if name == "get_weather":
        return (isinstance(a, dict) and set(a) == {"city", "days"} and isinstance(a["city"], str) and
                len(a["city"]) <= 12 and type(a["days"]) is int and 1 <= a["days"] <= 7)
    return name == "get_time" and a in ({"zone": "UTC"}, {"zone": "CET"})


# Small templates in each tool-call format (the real ones overflow this
# model's 256-token context once tools are rendered): the markers pick the parser.
TOOL_TEMPLATES = {
    "hermes": "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}{% for c in m.tool_calls %}"
              "<tool_call>\n{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n"
              "</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
              "{% if tools %}{{ tools | length }} tools{% endif %}<|im_start|>assistant\n",
    "llama3": "{# <|python_tag|> #}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
              "{{ m.content }}<|eot_id|>{% endfor %}<|start_header_id|>assistant<|end_header_id|>\n\n",
    "mistral": "{# [TOOL_CALLS] #}{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}",
    "generic": "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:",
}


def tool_stream_calls(ev):
    """The calls of a streamed reply, assembled as OpenAI's clients do:
    (content, [(id, name, arguments)], finish_reason)."""
    calls, content, finish = {}, "", None
    for e in ev[:-1]:
        for ch in e.get("choices", []):
            d = ch["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls", []):
                c = calls.setdefault(tc["index"], ["", "", ""])
                c[0] += tc.get("id", "")
                c[1] += tc.get("function", {}).get("name", "")
                c[2] += tc.get("function", {}).get("arguments", "")
            finish = ch["finish_reason"] or finish
    return content, [tuple(calls[k]) for k in sorted(calls)], finish


def test_tools(tmp):
    """OpenAI's function calling: tools and tool messages rendered by real
    tool-use templates as jinja2 does; tool_choice required / a named
    function forces a call by a grammar (each format); the reply parsers on
    fixed texts; tool_choice auto parses, none does not."""
    base = os.path.join(t.ROOT, "tests", "data", "chat_templates")
    for name in ("Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                 "meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"):
        srv = sl.Server(["-q", "--chat-template-file", os.path.join(base, name + ".jinja")])
        ok, got = True, {}
        for conv in ("tools", "parallel_tools", "tool_args_string"):
            with open(os.path.join(base, "conversations", conv, "messages.json")) as f:
                msgs = json.load(f)
            with open(os.path.join(base, "conversations", conv, "tools.json")) as f:
                tools = json.load(f)
            st, a = srv.json("POST", "/apply-template", {"messages": msgs, "tools": tools})
            got[conv] = a.get("prompt") if st == 200 else None
            path = os.path.join(base, "expected", "%s.%s.txt" % (name, conv))
            if conv == "tool_args_string":   # arguments as a JSON string: the template gets the object (llama.cpp)
                ok &= got[conv] is not None and got[conv] == got["tools"]
            elif os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    want = f.read()
                # the reference's BOS/EOS texts are <s> and </s>: this model's are none and <|endoftext|>
                ok &= st == 200 and a["prompt"].replace("<|endoftext|>", "</s>") == want.replace("<s>", "", 1)
            else:   # jinja2 raised: so does the server
                ok &= st == 400
        t.check(ok, "%s: /apply-template with tools and tool results renders as jinja2 does (arguments given as "
                "a JSON string reach the template as the object)" % name)
        srv.stop()

    srv = sl.Server(["-q", "--test-hooks"])
    cases = [
        ("hermes", "Let me see.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "Let me see.", [("get_weather", {"city": "Paris"})]),
        ("hermes", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>", "", [("a", {"x": [1, {"y": "}"}]}), ("b", {})]),
        ("hermes", "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}", "", [("a", {"x": 1})]),
        ("hermes", "<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{not json}\n</tool_call>", []),
        ("hermes", "No call here.", "No call here.", []),
        ("llama3", "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}", "", [("get_time", {"zone": "UTC"})]),
        ("llama3", "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "", [("f", {})]),
        ("llama3", "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"a\": 1}}", "",
         [("f", {}), ("g", {"a": 1})]),
        ("llama3", "The {curly} answer.", "The {curly} answer.", []),
        ("mistral", "ok[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}, \"id\": \"abcdefghi\"}, "
         "{\"name\": \"b\", \"arguments\": {}}]", "ok", [("a", {"x": 1}), ("b", {})]),
        ("mistral", "[TOOL_CALLS][{\"name\": \"a\"", "[TOOL_CALLS][{\"name\": \"a\"", []),
        ("generic", "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"q\": \"s\"}}]}", "", [("a", {"q": "s"})]),
        ("generic", "{\"tool_call\": {\"name\": \"a\", \"arguments\": \"{\\\"q\\\": 1}\"}}", "", [("a", {"q": 1})]),
        ("generic", "{\"response\": \"Hi there\"}", "Hi there", []),
        ("generic", "plain text", "plain text", []),
        # found by fuzz_tools: a name with a NUL byte, arguments as a string of another JSON value than an object
        ("hermes", "<tool_call>{\"name\": \"\\u0000x\", \"arguments\": {}}</tool_call>",
         "<tool_call>{\"name\": \"\\u0000x\", \"arguments\": {}}</tool_call>", []),
        ("mistral", "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"5\"}]",
         "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"5\"}]", []),
    ]
    ok, bad = True, None
    for fmt, text, content, calls in cases:
        st, r = srv.json("POST", "/test/tools-parse", {"format": fmt, "text": text})
        good = (st == 200 and r["content"] == content and
                [(c["name"], json.loads(c["arguments"])) for c in r["tool_calls"]] == calls)
        if not good and bad is None:
            bad = (fmt, text, r)
        ok &= good
    t.check(ok, "the tool-call parsers on fixed texts: Hermes/Qwen <tool_call>, Llama 3 JSON (<|python_tag|>), "
            "Mistral [TOOL_CALLS], generic JSON; malformed calls stay content (%s)" % (bad,))
    safe = [("hermes", "Let me see.\n<tool_c", 11), ("hermes", "Let me see.\n<tool_call>\n{\"na", 11),
            ("hermes", "Plain text", 10), ("hermes", "a <b> c <", 7), ("mistral", "ok [TOOL", 2),
            ("llama3", "  {\"name\"", 0), ("llama3", "Hi <|python", 2), ("llama3", "Hi there", 8),
            ("generic", "{\"tool_calls\"", 0), ("generic", "Hello ", 5)]
    got = [srv.json("POST", "/test/tools-parse", {"format": f, "text": x})[1]["stream_safe"] for f, x, _ in safe]
    t.check(got == [n for _, _, n in safe], "streaming with tools: the text that may begin a call (a marker, a "
            "part of one at the end, the space before, a reply that is a JSON object) is held back (%s)" % got)
    srv.stop()

    msgs = [{"role": "user", "content": "What is the weather?"}]
    for fmt, src in sorted(TOOL_TEMPLATES.items()):
        path = os.path.join(tmp, "tools-%s.jinja" % fmt)
        with open(path, "w") as f:
            f.write(src)
        srv = sl.Server(["-q", "--chat-template-file", path])
        ok, why = True, ""
        for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
            for seed in (1, 2, 3):
                body = {"messages": msgs, "tools": WEATHER_TOOLS, "tool_choice": choice, "seed": seed,
                        "max_tokens": 180, "parallel_tool_calls": False}
                st, r = srv.json("POST", "/v1/chat/completions", body)
                stream_st, ev = srv.stream("/v1/chat/completions", dict(body, stream=True))
                if st != 200 or stream_st != 200:
                    ok, why = False, str(r)[:200]
                    continue
                ch = r["choices"][0]
                m = ch["message"]
                tc = m.get("tool_calls") or []
                named = choice != "required"
                good = (ch["finish_reason"] == "tool_calls" and m["content"] is None and len(tc) == 1 and
                        tc[0]["type"] == "function" and re.match(r"^call_[A-Za-z0-9]{24}$", tc[0]["id"]) and
                        isinstance(tc[0]["function"]["arguments"], str) and
                        weather_valid(tc[0]["function"]["name"], tc[0]["function"]["arguments"]) and
                        (not named or tc[0]["function"]["name"] == "get_time"))
                content, scalls, finish = tool_stream_calls(ev)
                good = good and (finish == "tool_calls" and content == "" and len(scalls) == 1 and
                                 scalls[0][1:] == (tc[0]["function"]["name"], tc[0]["function"]["arguments"]) and
                                 scalls[0][0].startswith("call_"))
                if not good and ok:
                    why = "seed %d %s: %s / %s" % (seed, choice, json.dumps(r)[:300], json.dumps(ev)[:300])
                ok &= bool(good)
        t.check(ok, "%s format: tool_choice required and a named function force a well-formed call (arguments "
                "valid under its schema), finish_reason tool_calls, whole and streamed (deltas assembled) %s" % (fmt, why))
        if fmt == "hermes":
            call = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>"
            g = "root ::= \"%s\"" % call.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
            base_body = {"messages": msgs, "tools": WEATHER_TOOLS, "grammar": g, "max_tokens": 150, "seed": 1}
            st, a = srv.json("POST", "/v1/chat/completions", dict(base_body, tool_choice="auto"))
            st2, n = srv.json("POST", "/v1/chat/completions", dict(base_body, tool_choice="none"))
            am = a["choices"][0]["message"] if st == 200 else {}
            g2 = "root ::= \"%s\"" % ("Let me see.\n" + call).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")
            body2 = dict(base_body, grammar=g2, tool_choice="auto")
            st3, a2 = srv.json("POST", "/v1/chat/completions", body2)
            st4, ev = srv.stream("/v1/chat/completions", dict(body2, stream=True))
            content, scalls, finish = tool_stream_calls(ev)
            m2 = a2["choices"][0]["message"]
            first_call = min(i for i, e in enumerate(ev[:-1]) if e["choices"] and e["choices"][0]["delta"].get("tool_calls"))
            t.check(st3 == 200 and st4 == 200 and m2["content"] == "Let me see." and content == "Let me see." and
                    [c[1:] for c in scalls] == [(c["function"]["name"], c["function"]["arguments"]) for c in m2["tool_calls"]]
                    and finish == "tool_calls" and
                    "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:first_call]) == "Let me see.",
                    "tool_choice auto, text before a call: the text as content (streamed as it comes, before the "
                    "call), the call parsed (%s)" % json.dumps(ev)[:300])
            t.check(st == 200 and a["choices"][0]["finish_reason"] == "tool_calls" and am["content"] is None and
                    [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in am["tool_calls"]] ==
                    [("get_time", {"zone": "CET"})] and st2 == 200 and n["choices"][0]["message"]["content"] == call and
                    "tool_calls" not in n["choices"][0]["message"] and n["choices"][0]["finish_reason"] == "stop",
                    "tool_choice auto: a reply in the format is parsed into tool_calls; none: left as content (%s)" %
                    json.dumps(a)[:200])
            # auto with no call begun: the lazy grammar leaves the text free, as none does
            same = []
            for seed in (1, 2, 3, 4):
                body = {"messages": msgs, "tools": WEATHER_TOOLS, "max_tokens": 40, "seed": seed}
                sa, ra = srv.json("POST", "/v1/chat/completions", dict(body, tool_choice="auto"))
                sn, rn = srv.json("POST", "/v1/chat/completions", dict(body, tool_choice="none"))
                same.append(sa == 200 and sn == 200 and "<tool_call>" not in (rn["choices"][0]["message"]["content"] or "")
                            and ra["choices"][0]["message"]["content"] == rn["choices"][0]["message"]["content"])
            t.check(all(same), "tool_choice auto, no call begun: the reply is the free text tool_choice none gives "
                    "(the call's grammar waits for <tool_call>) %s" % same)
            # a tool result sent back: rendered, and the reply follows
            conv = msgs + [{"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
            st, p = srv.json("POST", "/apply-template", {"messages": conv, "tools": WEATHER_TOOLS})
            st2, r = srv.json("POST", "/v1/chat/completions", {"messages": conv, "tools": WEATHER_TOOLS, "max_tokens": 8, "seed": 1})
            t.check(st == 200 and '"arguments": {"zone": "CET"}' in p["prompt"] and "<|im_start|>tool\n12:00" in p["prompt"]
                    and "2 tools" in p["prompt"] and st2 == 200 and r["choices"][0]["message"]["role"] == "assistant",
                    "an assistant's tool_calls (null content) and a tool result are rendered (%s)" % json.dumps(p)[:200])
            st, e = srv.json("POST", "/v1/chat/completions", {"messages": msgs, "tools": WEATHER_TOOLS,
                                                               "tool_choice": {"type": "function", "function": {"name": "nope"}}})
            st2, e2 = srv.json("POST", "/v1/chat/completions", {"messages": msgs, "tool_choice": "required"})
            st3, e3 = srv.json("POST", "/v1/chat/completions", {"messages": msgs, "tools": WEATHER_TOOLS,
                                                                "tool_choice": "required", "json_schema": {}})
            t.check(st == 400 and e["error"]["param"] == "tool_choice" and st2 == 400 and st3 == 400,
                    "tool_choice naming no tool, required without tools, beside json_schema: 400s")
            bad = [({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools"),
                   ({"tools": WEATHER_TOOLS + WEATHER_TOOLS[:1]}, "tools"),
                   ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools"),
                   ({"tools": WEATHER_TOOLS, "tool_choice": "always"}, "tool_choice"),
                   ({"tools": WEATHER_TOOLS, "parallel_tool_calls": 1}, "parallel_tool_calls"),
                   ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages"),
                   ({"messages": [{"role": "user", "content": "x", "tool_call_id": "a"}]}, "messages"),
                   ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}]}, "messages"),
                   ({"messages": [{"role": "user", "content": "x", "refusal": "no"}]}, "messages"),
                   ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "number",
                     "multipleOf": 3}}}], "tool_choice": "required"}, "tools"),
                   # under "auto" too: the grammar waits for a call's marker (lazy), and is made before
                   ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "number",
                     "multipleOf": 3}}}]}, "tools")]
            codes = [(lambda r: (r[0], r[1]["error"]["param"]))(srv.json("POST", "/v1/chat/completions",
                                                                           dict({"messages": msgs}, **b)))
                     for b, _ in bad]
            t.check(codes == [(400, p) for _, p in bad], "malformed tools, tool_choice, tool messages: 400s naming "
                    "the field (%s)" % codes)
            tools_node(srv)
        srv.stop()


def tools_node(srv):
    """The OpenAI Node client end to end: a required call, a streamed call
    assembled by its stream helper, a tool result sent back and the answer."""
    d = npm_openai()
    if not d:
        return
    env = dict(os.environ, NODE_PATH=os.path.join(d, "node_modules"), MOR_TOOLS=json.dumps(WEATHER_TOOLS),
               MOR_URL="http://%s:%d/v1" % (srv.host, srv.port))
    nr = subprocess.run(["node", os.path.join(t.ROOT, "tests", "openai_client.js")], capture_output=True, env=env,
                        timeout=120 * sl.SLOW)
    try:
        out = json.loads(nr.stdout)
    except ValueError:
        t.check(False, "openai (Node): tools: %s" % nr.stderr.decode(errors="replace")[-400:])
        return
    req, sm, ans = out["required"], out["streamed"], out["answer"]
    def one_call(m, name=None):
        tc = m["message"].get("tool_calls") or []
        return (m["finish"] == "tool_calls" and len(tc) == 1 and tc[0]["id"].startswith("call_") and
                (name is None or tc[0]["function"]["name"] == name) and
                weather_valid(tc[0]["function"]["name"], tc[0]["function"]["arguments"]))
    t.check(one_call(req), "openai (Node): tool_choice required: a call the client reads (%s)" % json.dumps(req)[:200])
    t.check(one_call(sm, "get_time"), "openai (Node): a streamed named call, assembled by the client's stream helper "
            "(%s)" % json.dumps(sm)[:200])
    t.check(ans["message"]["role"] == "assistant" and isinstance(ans["message"]["content"], str) and
            ans["finish"] in ("stop", "length"),
            "openai (Node): the tool's result sent back (role tool): the model answers (%s)" % json.dumps(ans)[:200])


def test_chat_jinja(tmp):
    """The model's own template rendered as Jinja (as llama-server's --jinja):
    any format, real templates byte for byte as jinja2 renders them, its
    errors as 400s; --chat-template-file; --no-jinja falls back to families."""
    unknown = os.path.join(tmp, "unknown.gguf")
    gguf_with_key(sl.MODEL, unknown, "tokenizer.chat_template",
                  "{% for m in messages %}[{{ m.role | upper }}] {{ m.content }}\n{% endfor %}"
                  "{% if messages | length > 2 %}{{ raise_exception('one question at a time') }}{% endif %}>>> ")
    srv = sl.Server(["-q"], model=unknown)
    want = "[SYSTEM] You are terse.\n[USER] Tell me about the jury.\n>>> "
    st, a = srv.json("POST", "/apply-template", {"messages": MESSAGES})
    st2, c = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "seed": 4})
    st3, p = completion(srv, {"prompt": want, "max_tokens": 8, "seed": 4})
    t.check(st == 200 and a["prompt"] == want and st2 == 200 and
            c["choices"][0]["mor"]["token_ids"] == p["choices"][0]["mor"]["token_ids"],
            "a template of no known family renders as Jinja: /apply-template and the chat's prompt")
    st, e = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES * 2, "max_tokens": 4})
    t.check(st == 400 and "one question at a time" in e["error"]["message"],
            "raise_exception in the template: a 400 with its message (%s)" % e["error"]["message"][:80])
    st, pr = srv.json("GET", "/props")
    t.check(st == 200 and "raise_exception" in (pr.get("chat_template") or ""), "GET /props: the template's text")
    srv.stop()
    srv = sl.Server(["-q", "--no-jinja"], model=unknown)
    st, e = srv.json("POST", "/v1/chat/completions", {"messages": MESSAGES})
    t.check(st == 400 and "--chat-template" in e["error"]["message"],
            "--no-jinja, a template of an unknown family: chat refused with a 400 naming --chat-template")
    srv.stop()
    base = os.path.join(t.ROOT, "tests", "data", "chat_templates")
    for name in ("Qwen-Qwen2.5-7B-Instruct", "google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct"):
        with open(os.path.join(base, name + ".jinja")) as f:
            src = f.read()
        model = os.path.join(tmp, name + ".gguf")
        gguf_with_key(sl.MODEL, model, "tokenizer.chat_template", src)
        for how, args, mdl in (("in the file", [], model),
                               ("--chat-template-file", ["--chat-template-file", os.path.join(base, name + ".jinja")],
                                sl.MODEL)):
            srv = sl.Server(["-q"] + args, model=mdl)
            ok = True
            for conv in ("system_user", "multi_turn"):
                with open(os.path.join(base, "conversations", conv, "messages.json")) as f:
                    msgs = json.load(f)
                path = os.path.join(base, "expected", "%s.%s.txt" % (name, conv))
                st, a = srv.json("POST", "/apply-template", {"messages": msgs})
                if os.path.exists(path):
                    with open(path, encoding="utf-8") as f:
                        want = f.read()
                    if "<s>" in want:   # the reference's BOS text: this model has none
                        continue
                    ok &= st == 200 and a["prompt"] == want
                else:   # jinja2 raised: so does the server
                    ok &= st == 400
            t.check(ok, "%s (%s): /apply-template renders as jinja2 does" % (name, how))
            srv.stop()
    bad = os.path.join(tmp, "bad.jinja")
    with open(bad, "w") as f:
        f.write("{% for m in messages %}{{ m.content }")
    p = subprocess.run([sl.BIN, "-m", sl.MODEL, "--port", "0", "--chat-template-file", bad],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    t.check(p.returncode != 0 and "line 1" in p.stderr,
            "--chat-template-file with a syntax error: the server does not start, naming the line (%s)" % p.stderr[:120])


# ---- curl and the OpenAI Node client ------------------------------------------------

def test_curl(srv):
    if not t.need_tool("curl", "curl", "the curl checks"):
        return
    url = "http://%s:%d" % (srv.host, srv.port)
    want = completion(srv, {"prompt": "The jury said that", "max_tokens": 8, "seed": 2})[1]["choices"][0]["text"]
    # plain `curl -d` sends application/x-www-form-urlencoded: accepted, the body is JSON anyway
    r = subprocess.run(["curl", "-sS", url + "/v1/completions", "-d",
                        '{"prompt": "The jury said that", "max_tokens": 8, "seed": 2}'], capture_output=True)
    t.check(r.returncode == 0 and json.loads(r.stdout)["choices"][0]["text"] == want, "curl -d: a completion")
    r = subprocess.run(["curl", "-sSN", url + "/v1/completions", "-H", "Content-Type: application/json", "-d",
                        '{"prompt": "The jury said that", "max_tokens": 8, "seed": 2, "stream": true}'], capture_output=True)
    ev = sl.parse_sse(r.stdout.decode())
    t.check(r.returncode == 0 and ev[-1] == "[DONE]" and "".join(e["choices"][0]["text"] for e in ev[:-1]) == want,
            "curl -N: the same completion streamed")
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url + "/v1/completions", "-d",
                        '{"prompt": "x", "top_p": 7}'], capture_output=True)
    t.check(r.stdout == b"400", "curl: a bad value gives 400")
    r = subprocess.run(["curl", "-s", url + "/v1/completions", "-H", "Transfer-Encoding: chunked", "-d",
                        '{"prompt": "The jury said that", "max_tokens": 8, "seed": 2}'], capture_output=True)
    t.check(r.returncode == 0 and json.loads(r.stdout)["choices"][0]["text"] == want, "curl with a chunked body")


def npm_openai():
    """The directory of an installed npm package openai, or None (skipped)."""
    if not t.need_tool("node", "nodejs", "the OpenAI Node client") or not t.need_tool("npm", "npm", "the OpenAI Node client"):
        return None
    d = os.path.join(t.ROOT, "build", "npm")
    if os.path.isfile(os.path.join(d, "node_modules", "openai", "package.json")):
        return d
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["npm", "install", "--prefix", d, "--no-audit", "--no-fund", "--loglevel=error", "openai@4"],
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        t.skip("the OpenAI Node client: npm install openai failed (no npm registry?): %s" %
             r.stderr.decode(errors="replace").strip().splitlines()[-1:])
        return None
    return d


# ---- embeddings --------------------------------------------------------------------------

EMBED_ORACLE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import testlib as t
mor = t.import_mor()
inputs = json.load(open(sys.argv[3]))
with mor.Model(sys.argv[2]) as m, m.context(capture_hidden=True, n_batch=1024) as ctx:
    if m.router_type == mor.ROUTER_TYPE_EXPERT:
        ctx.router.set_mode(mor.ROUTE_THRESHOLD)   # as mor-server routes generation
    print(json.dumps([ctx.embed(ids).tobytes().hex() for ids in inputs]))
"""


def embed_oracle(id_lists):
    """The Python bindings' Context.embed (mean, normalized) of each id list, as float32 bytes."""
    import tempfile
    d = tempfile.mkdtemp(prefix="morembd.")
    try:
        script, inp = os.path.join(d, "oracle.py"), os.path.join(d, "in.json")
        with open(script, "w") as f:
            f.write(EMBED_ORACLE)
        with open(inp, "w") as f:
            json.dump(id_lists, f)
        r = subprocess.run([sys.executable, script, os.path.join(t.ROOT, "tests"), sl.MODEL, inp],
                           capture_output=True, timeout=300 * sl.SLOW)
        if r.returncode:
            return None, r.stderr.decode(errors="replace")[-400:]
        return [bytes.fromhex(h) for h in json.loads(r.stdout)], ""
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_embeddings(srv):
    texts = ["The jury said that", "In the morning he went"]
    ids = [srv.json("POST", "/tokenize", {"content": x, "add_special": True})[1]["tokens"] for x in texts]
    raw = [5, 17, 300, 2]
    want, err = embed_oracle(ids + [raw])
    t.check(want is not None, "embeddings oracle (Python Context.embed) ran %s" % err)
    if want is None:
        return
    st, r = srv.json("POST", "/v1/embeddings", {"input": texts[0], "model": "brown-mor"})
    vec = r["data"][0]["embedding"] if st == 200 else []
    got = struct.pack("<%df" % len(vec), *vec)
    t.check(st == 200 and r["object"] == "list" and r["data"][0]["object"] == "embedding" and
            r["data"][0]["index"] == 0 and r["usage"] == {"prompt_tokens": len(ids[0]), "total_tokens": len(ids[0])},
            "POST /v1/embeddings: OpenAI's shape, usage counts the tokens (%d)" % len(ids[0]))
    t.check(got == want[0], "POST /v1/embeddings: the same bits as the library's mor_embeddings_seq (mean, normalized)")
    t.check(abs(sum(x * x for x in vec) - 1) < 1e-5, "POST /v1/embeddings: unit length")
    st, r = srv.json("POST", "/v1/embeddings", {"input": texts + [raw]})
    got = [struct.pack("<%df" % len(x["embedding"]), *x["embedding"]) for x in r["data"]] if st == 200 else []
    t.check(st == 200 and [x["index"] for x in r["data"]] == [0, 1, 2] and got == want and
            r["usage"]["prompt_tokens"] == sum(map(len, ids)) + len(raw),
            "POST /v1/embeddings: an array of strings and token ids, each in order, each as embedded alone")
    st, r = srv.json("POST", "/v1/embeddings", {"input": [raw], "encoding_format": "base64"})
    import base64
    t.check(st == 200 and base64.b64decode(r["data"][0]["embedding"]) == want[2],
            "POST /v1/embeddings encoding_format base64: little-endian float32, the same bits")
    st, r = srv.json("POST", "/v1/embeddings", {"input": raw})
    t.check(st == 200 and len(r["data"]) == 1 and struct.pack("<%df" % len(r["data"][0]["embedding"]),
                                                              *r["data"][0]["embedding"]) == want[2],
            "POST /v1/embeddings: one array of token ids is one input")
    for body, param in [({}, "input"), ({"input": 5}, "input"), ({"input": []}, "input"), ({"input": [[]]}, "input"),
                        ({"input": [1, 99999]}, "input"), ({"input": [[1], "x", 3]}, "input"),
                        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                        ({"input": "x", "dimensions": 3}, "dimensions"), ({"input": "x", "pooling": "max"}, "pooling"),
                        ({"input": list(range(2, 2 + 600))}, "input")]:
        st, r = srv.json("POST", "/v1/embeddings", body)
        t.check(st == 400 and r["error"]["param"] == param, "POST /v1/embeddings %s: 400 naming %s (%s)" %
                (json.dumps(body)[:40], param, r["error"]["message"][:60] if st == 400 else st))
    st, r = srv.json("POST", "/v1/embeddings", {"input": list(range(2, 2 + 300))})
    t.check(st == 400 and "the context" in r["error"]["message"] and "--batch" not in r["error"]["message"],
            "an input longer than the context (256 < --batch 512): the error names the context, not --batch")
    st, r = srv.json("POST", "/v1/embeddings", {"input": "x", "model": "gpt-4"})
    t.check(st == 200 and r["model"] == "brown-mor", "POST /v1/embeddings naming another model: served (as llama-server)")
    st, _ = srv.json("GET", "/v1/embeddings")
    t.check(st == 405, "GET /v1/embeddings: 405")
    st, r = srv.json("POST", "/v1/embeddings", {"input": texts[0]})
    t.check(st == 200 and struct.pack("<%df" % len(r["data"][0]["embedding"]), *r["data"][0]["embedding"]) == want[0],
            "POST /v1/embeddings after refusals: the same bits (a refused input leaves nothing in its cache)")


def test_node(srv):
    d = npm_openai()
    if not d:
        return
    want = completion(srv, {"prompt": "The jury said that", "max_tokens": 10, "seed": 9})[1]["choices"][0]
    env = dict(os.environ, NODE_PATH=os.path.join(d, "node_modules"), MOR_URL="http://%s:%d/v1" % (srv.host, srv.port))
    r = subprocess.run(["node", os.path.join(t.ROOT, "tests", "openai_client.js")], capture_output=True, env=env,
                       timeout=120 * sl.SLOW)
    try:
        out = json.loads(r.stdout)
    except ValueError:
        t.check(False, "the OpenAI Node client ran: %s" % r.stderr.decode(errors="replace")[-400:])
        return
    t.check(out["models"] == ["brown-mor"], "openai (Node): models.list()")
    t.check(out["text"] == want["text"] and out["finish"] == want["finish_reason"] and
            out["usage"]["completion_tokens"] == 10, "openai (Node): completions.create() as served alone")
    t.check(out["streamed"] == want["text"] and out["stream_tokens"] == want["mor"]["token_ids"],
            "openai (Node): completions.create({stream: true}): the same text, tokens in the extension")
    t.check(out["bad_status"] == 400 and out["bad_param"] == "temperature", "openai (Node): a bad value is a BadRequestError (400)")
    t.check(out["chat_status"] == 400, "openai (Node): chat on a model without a template: 400")
    t.check(out["abort_ok"], "openai (Node): an aborted stream ends without an error on the server")
    st, nr = completion(srv, {"prompt": "The jury said that", "max_tokens": 5, "seed": 9, "n": 2})
    t.check(st == 200 and out["n_texts"] == [[c["index"], c["text"]] for c in nr["choices"]],
            "openai (Node): completions.create({n: 2}): both choices, as served")
    st, e = srv.json("POST", "/v1/embeddings", {"input": ["The jury said that", "In the morning"]})
    want = [struct.pack("<%df" % len(d["embedding"]), *d["embedding"]) for d in e["data"]] if st == 200 else None
    got = [struct.pack("<%df" % len(v), *v) for v in out["embeddings"]]
    t.check(got == want and out["embed_usage"] == e["usage"],
            "openai (Node): embeddings.create() (base64 on the wire): the floats of encoding_format float")
    st, lp = completion(srv, {"prompt": "The jury said that", "max_tokens": 10, "seed": 9, "logprobs": 3})
    t.check(out["logprobs"] == lp["choices"][0]["logprobs"] and out["stream_logprobs"] == out["logprobs"] and
            len(out["logprobs"]["tokens"]) == 10,
            "openai (Node): completions logprobs 3, whole and streamed, parsed as served")
    st, so = completion(srv, {"prompt": "Record:", "max_tokens": 120, "seed": 2, "json_schema": REC_SCHEMA})
    t.check(st == 200 and out["structured"] == [so["choices"][0]["text"], "stop"] and
            rec_valid(json.loads(out["structured"][0])),
            "openai (Node): response_format json_schema: the json_schema output, valid JSON under the schema")


# ---- load -----------------------------------------------------------------------

def load_test(mode):
    srv = sl.Server(["--slots", "32", "--mode", mode, "--threads", "2", "-q"])
    prompts = ["The jury said that", "In the morning", "He", "The city of", "She looked at", "It was a"]
    # 100 different requests, each sent twice among the 200
    distinct = [{"prompt": prompts[i % len(prompts)], "max_tokens": 8 + (i * 7) % 17, "seed": 1000 + i,
                 "temperature": 0.9 if i % 5 else 0} for i in range(100)]
    reqs = [distinct[(i * 37) % 100] for i in range(200)]
    ref = []
    c = srv.conn()
    for r in distinct:
        st, out = completion(srv, r, conn=c)
        ref.append((st, out["choices"][0]["text"], out["choices"][0]["mor"]) if st == 200 else (st,))
    c.close()
    alone = [ref[(i * 37) % 100] for i in range(200)]
    lat = [None] * len(reqs)
    got = [None] * len(reqs)
    local = threading.local()

    def one(i):
        if not hasattr(local, "c"):
            local.c = srv.conn()
        t0 = time.time()
        try:
            st, out = completion(srv, reqs[i], conn=local.c)
        except (OSError, http.client.HTTPException) as e:
            got[i] = ("exception", str(e))
            local.c = srv.conn()
            return
        lat[i] = time.time() - t0
        got[i] = (st, out["choices"][0]["text"], out["choices"][0]["mor"]) if st == 200 else (st,)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        list(ex.map(one, range(len(reqs))))
    wall = time.time() - t0
    errors = sum(1 for g in got if g is None or g[0] != 200)
    same = sum(1 for g, a in zip(got, alone) if g == a)
    tokens = sum(len(g[2]["token_ids"]) for g in got if g and g[0] == 200)
    t.check(errors == 0 and all(a[0] == 200 for a in alone), "load (%s): 200 requests at 32 concurrent, no error" % mode)
    t.check(same == len(reqs), "load (%s): every response equals the same request served alone (%d of %d)" %
            (mode, same, len(reqs)))
    ls = sorted(x for x in lat if x is not None)
    if ls:
        note("load (%s): p50 %.3f s, p99 %.3f s, %.0f tokens/s (%d tokens in %.2f s; a test, not a benchmark)"
               % (mode, ls[len(ls) // 2], ls[min(len(ls) - 1, int(len(ls) * 0.99))], tokens / wall, tokens, wall))
    srv.stop()
    return [g[1:] for g in got if g and g[0] == 200]


# ---- drain -----------------------------------------------------------------------

def refused(srv):
    try:
        socket.create_connection((srv.host, srv.port), timeout=2).close()
        return False
    except OSError:
        return True


def test_drain():
    # the request is held (HELD) until the drain starts: in flight at the
    # signal whatever the speed; seed 3 runs its 250 tokens without an end
    srv = sl.Server(["-q", "--test-hooks", "--drain-timeout", "600"])
    s, rest = open_stream(srv, dict(HELD, max_tokens=250, stream=True))
    # an idle keep-alive connection: served once, so surely accepted
    idle = socket.create_connection((srv.host, srv.port), timeout=60 * sl.SLOW)
    idle.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < int(
            got.split(b"Content-Length: ")[1].split(b"\r\n")[0]):
        got += idle.recv(4096)
    srv.proc.send_signal(signal.SIGTERM)
    no_new = wait_for(lambda: refused(srv))
    while True:
        b = s.recv(65536)
        if not b:
            break
        rest += b
        if rest.endswith(b"0\r\n\r\n"):
            break
    s.close()
    idle_closed = idle.recv(10) == b""
    idle.close()
    rc = srv.stop()
    t.check(no_new, "SIGTERM: no new connections")
    t.check(b"data: [DONE]" in rest and b'"finish_reason":"length"' in rest, "SIGTERM: the running request finishes")
    t.check(idle_closed, "SIGTERM: an idle keep-alive connection is closed")
    t.check(rc == 0 and "stopped" in srv.log_text(), "SIGTERM: exit status 0 once drained")


def test_llama_server_conventions(srv):
    """What llama-server's users rely on: any model name, CORS, its metric
    names (the default server); its option spellings, --reject-unknown-model,
    --cors-origins lists and a preflight without the API key (servers of
    their own)."""
    st, r = srv.json("POST", "/v1/completions", {"prompt": "The jury", "max_tokens": 2, "model": "gpt-3.5-turbo"})
    t.check(st == 200 and r["model"] == "brown-mor", "a request naming gpt-3.5-turbo is served by the one model")
    st, h, _ = srv.request("GET", "/v1/models", headers={"Origin": "https://app.example"})
    t.check(st == 200 and h.get("access-control-allow-origin") == "*", "--cors-origins * (default): Allow-Origin *")
    st, h, data = srv.request("OPTIONS", "/v1/chat/completions",
                              headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                       "Access-Control-Request-Headers": "authorization, content-type"})
    t.check(st == 204 and data == b"" and "POST" in h.get("access-control-allow-methods", "") and
            h.get("access-control-allow-headers") == "authorization, content-type" and
            h.get("access-control-allow-origin") == "*", "OPTIONS preflight: 204, methods, the asked headers")
    st, h, data = srv.request("GET", "/metrics")
    text = data.decode()
    names = ("prompt_tokens_total", "tokens_predicted_total", "n_decode_total", "requests_processing",
             "requests_deferred", "n_busy_slots_per_decode", "predicted_tokens_seconds")
    missing = [n for n in names if "\nllamacpp:%s " % n not in text]
    gen = re.search(r"\nllamacpp:tokens_predicted_total (\S+)", text)
    mine = re.search(r"\nmor_tokens_generated_total (\S+)", text)
    t.check(not missing and gen and mine and float(gen.group(1)) == float(mine.group(1)),
            "/metrics: llama-server's llamacpp:* names beside mor_* (%s missing)" % missing)

    s, _ = open_stream(srv, dict(HELD, stream=True))
    busy = []
    wait_for(lambda: busy.append(srv.json("GET", "/slots")[1]) or any(x["is_processing"] for x in busy[-1]))
    slots = busy[-1]
    st, _ = srv.json("GET", "/slots?fail_on_no_slot=1")
    s.close()
    held = [x for x in slots if x["is_processing"]]
    t.check(len(slots) == 4 and [x["id"] for x in slots] == [0, 1, 2, 3] and len(held) == 1 and
            held[0]["id_task"] >= 0 and held[0]["n_prompt_tokens"] > 0 and held[0]["next_token"]["n_decoded"] >= 1 and
            all(x["id_task"] == -1 for x in slots if not x["is_processing"]) and st == 200,
            "GET /slots: 4 slots, the held request's with its task, prompt and tokens, the rest idle (%s)" % held)

    other = sl.Server(["-np", "2", "-c", "512", "-b", "64", "-a", "court", "--reject-unknown-model",
                       "--api-key", "k3y", "--cors-origins", "https://a.example, http://localhost:3000", "-q"])
    key = {"Authorization": "Bearer k3y"}
    st, h = other.json("GET", "/health")
    st2, p = other.json("GET", "/props", headers=key)
    t.check(st == 200 and h["slots_idle"] == 2 and st2 == 200 and p.get("model_alias") == "court",
            "-np 2 -c 512 -b 64 -a court: llama-server's spellings of --slots, --ctx, --batch, --alias")
    st, r = other.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, "model": "gpt-4"}, headers=key)
    st2, r2 = other.json("POST", "/v1/embeddings", {"input": "x", "model": "gpt-4"}, headers=key)
    t.check(st == 404 and r["error"]["code"] == "model_not_found" and st2 == 404,
            "--reject-unknown-model: another model's name gets 404 model_not_found (completions, embeddings)")
    st, r = other.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1, "model": "court"}, headers=key)
    t.check(st == 200, "... and the alias is served")
    st, h, _ = other.request("OPTIONS", "/v1/completions", headers={"Origin": "http://localhost:3000"})
    t.check(st == 204 and h.get("access-control-allow-origin") == "http://localhost:3000" and
            "origin" in h.get("vary", "").lower(), "--cors-origins list: a listed origin's preflight, without the key")
    st, h, _ = other.request("GET", "/health", headers={"Origin": "https://evil.example"})
    t.check(st == 200 and "access-control-allow-origin" not in h, "... an origin not listed gets no Allow-Origin")
    st, h, _ = other.request("GET", "/v1/models", headers=dict(key, Origin="https://a.example"))
    t.check(st == 200 and h.get("access-control-allow-origin") == "https://a.example", "... a listed one gets its own")
    other.stop()


# ---- llama.cpp's native /completion --------------------------------------------

def native(srv, body, path="/completion"):
    return srv.json("POST", path, body)


def test_completion_native(srv):
    """llama.cpp's POST /completion (and /completions): the same tokens as
    /v1/completions for the same seed, in llama.cpp's shape; its stream
    (no [DONE]); n_predict -1 and 0; stop words; n_probs; mixed prompts."""
    prompt, seed = "The jury said that", 7
    _, oai = completion(srv, {"prompt": prompt, "max_tokens": 12, "seed": seed, "logprobs": 2})
    oc = oai["choices"][0]
    st, r = native(srv, {"prompt": prompt, "n_predict": 12, "seed": seed, "return_tokens": True})
    t.check(st == 200 and r["content"] == oc["text"] and r["tokens"] == oc["mor"]["token_ids"] and
            r["stop"] is True and r["stop_type"] == "limit" and r["stopping_word"] == "" and
            r["tokens_predicted"] == 12 and r["tokens_evaluated"] == oai["usage"]["prompt_tokens"] and
            r["truncated"] is False and r["model"] == "brown-mor" and r["prompt"] == prompt and
            r["mor"]["depths"] == oc["mor"]["depths"],
            "POST /completion: /v1/completions' text and tokens for the seed, llama.cpp's fields")
    gs = r["generation_settings"]
    t.check(gs["n_predict"] == 12 and gs["seed"] == seed and abs(gs["temperature"] - 0.8) < 1e-6 and
            gs["top_k"] == 40 and gs["n_ctx"] == 256 and gs["stop"] == [] and "samplers" in gs and
            set(r["timings"]) >= {"cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
                                  "predicted_per_second"} and r["timings"]["predicted_n"] == 12 and
            r["timings"]["prompt_n"] + r["timings"]["cache_n"] == r["tokens_evaluated"] and
            "completion_probabilities" not in r,
            "/completion: generation_settings, timings (prompt_n + cache_n = tokens_evaluated)")
    st, r2 = native(srv, {"prompt": prompt, "n_predict": 12, "seed": seed}, "/completions")
    t.check(st == 200 and r2["content"] == r["content"] and r2["tokens"] == [],
            "POST /completions (llama-server's alias): the same; tokens empty without return_tokens")
    # n_probs: each token's log-probability and the most likely, /v1/completions' numbers
    st, p = native(srv, {"prompt": prompt, "n_predict": 12, "seed": seed, "n_probs": 2})
    cp = p.get("completion_probabilities", [])
    lp = oc["logprobs"]
    t.check(st == 200 and len(cp) == 12 and [x["id"] for x in cp] == oc["mor"]["token_ids"] and
            all(len(x["top_logprobs"]) == 2 and near(x["logprob"], v) for x, v in zip(cp, lp["token_logprobs"])) and
            all(bytes(x["bytes"]).decode(errors="ignore").startswith(x["token"]) for x in cp) and
            p["generation_settings"]["n_probs"] == 2,
            "n_probs 2: completion_probabilities {id, token, bytes, logprob, top_logprobs} per token")
    # stop words: stop_type word, the word named, the text cut before it
    full = native(srv, {"prompt": prompt, "n_predict": 40, "seed": 5})[1]["content"]
    words = [w for w in full.split(" ") if len(w) >= 3]
    if words:
        stop = words[len(words) // 2][:3]
        st, w = native(srv, {"prompt": prompt, "n_predict": 40, "seed": 5, "stop": ["zzzz", stop]})
        t.check(st == 200 and w["stop_type"] == "word" and w["stopping_word"] == stop and
                w["content"] == full[:full.find(stop)] and w["truncated"] is False,
                "stop %r: stop_type word, stopping_word, the content before it" % stop)
    # a grammar's end is the end token's: stop_type eos
    st, e = native(srv, {"prompt": prompt, "n_predict": 40, "seed": 5, "grammar": 'root ::= " yes"'})
    t.check(st == 200 and e["content"] == " yes" and e["stop_type"] == "eos", "a grammar's end: stop_type eos")
    # n_predict -1 (and absent): until the context is full, truncated
    for body in ({"prompt": prompt, "seed": 3}, {"prompt": prompt, "seed": 3, "n_predict": -1}):
        st, f = native(srv, body)
        t.check(st == 200 and f["stop_type"] == "limit" and f["truncated"] is True and
                f["tokens_predicted"] + f["tokens_evaluated"] == 256 and f["generation_settings"]["n_predict"] == -1,
                "%s: generates until the context (256) is full, truncated" % json.dumps(body))
    st, z = native(srv, {"prompt": prompt, "n_predict": 0})
    t.check(st == 200 and z["content"] == "" and z["tokens_predicted"] == 0 and z["stop_type"] == "limit" and
            z["tokens_evaluated"] == 5, "n_predict 0: no tokens")
    # a mixed prompt: ids and texts, as llama.cpp tokenizes it
    ids = srv.json("POST", "/tokenize", {"content": "The jury"})[1]["tokens"]
    rest = srv.json("POST", "/tokenize", {"content": " said that"})[1]["tokens"]
    _, want = completion(srv, {"prompt": ids + rest, "max_tokens": 6, "seed": 2})
    st, m = native(srv, {"prompt": ids + [" said that"], "n_predict": 6, "seed": 2})
    st2, m2 = completion(srv, {"prompt": ids + [" said that"], "max_tokens": 6, "seed": 2})
    t.check(st == 200 and m["content"] == want["choices"][0]["text"] and m["tokens_evaluated"] == len(ids + rest) and
            st2 == 200 and m2["choices"][0]["text"] == m["content"],
            "a mixed prompt [ids..., \" said that\"]: the ids and the text's tokens (both endpoints)")
    # the stream: llama.cpp's events, the whole response's text, the final object last, no [DONE]
    st, ev = srv.stream("/completion", {"prompt": prompt, "n_predict": 12, "seed": seed, "stream": True,
                                        "n_probs": 1})
    parts, last = ev[:-1], ev[-1] if ev else {}
    t.check(st == 200 and "[DONE]" not in ev and last.get("stop") is True and last["content"] == "" and
            all(x["stop"] is False for x in parts) and "".join(x["content"] for x in parts) == r["content"] and
            sum((x["tokens"] for x in parts), []) == r["tokens"] and
            all(len(x["completion_probabilities"]) == len(x["tokens"]) for x in parts) and
            last["tokens_predicted"] == 12 and last["stop_type"] == "limit" and "timings" in last,
            "stream: one event per token {content, tokens, stop: false}, then the final object; no [DONE]")
    st, ev = srv.stream("/completion", {"prompt": prompt, "n_predict": 0, "stream": True})
    t.check(st == 200 and len(ev) == 1 and ev[0]["stop"] is True and ev[0]["tokens_predicted"] == 0,
            "stream with n_predict 0: the final object alone")
    # bad requests: 400 naming the field
    for body, param in [({"prompt": prompt, "n_predict": -2}, "n_predict"),
                        ({"prompt": prompt, "n_predict": 2, "max_tokens": 2}, "max_tokens"),
                        ({"prompt": prompt, "n_predict": "8"}, "n_predict"),
                        ({"prompt": prompt, "n": 2}, "n"),
                        ({"prompt": prompt, "timings_per_token": True}, "timings_per_token"),
                        ({"prompt": [1, {"x": 1}]}, "prompt"),
                        ({"prompt": [1, -5, "a"]}, "prompt"),
                        ({"prompt": [1, 999999, "a"]}, "prompt"),
                        ({"prompt": "x " * 300}, "prompt"),
                        ({"n_predict": 2}, "prompt"),
                        ({"prompt": prompt, "frobnicate": 1}, "frobnicate")]:
        st, e = native(srv, body)
        t.check(st == 400 and e["error"]["param"] == param and e["error"]["message"],
                "/completion %s: 400 naming %s" % (json.dumps(body)[:60], param))
    st, e = completion(srv, {"prompt": prompt, "n_predict": 2})
    t.check(st == 400 and e["error"]["param"] == "n_predict", "/v1/completions keeps OpenAI's fields: n_predict is 400")
    st, _, _ = srv.request("GET", "/completion")
    t.check(st == 405, "GET /completion: 405")


# ---- --context-shift ----------------------------------------------------------------

SHIFT_PROMPT = "The jury said that the city was not going to be able to do anything about it and"
LONG_PROMPT = ("It was a cold morning in the city, and the men of the county had come to the court house to hear "
               "what the jury would say about the election. The mayor said that he did not know what to do, "
               "and the people in the street were not sure either, so they went home to wait for the news.")


def llama_truncate(n, ctx, keep):
    """The length llama.cpp's truncation leaves of an n-token prompt."""
    block = (ctx - keep) // 2
    return n - (n - keep - block) // block * block


def test_context_shift():
    """mor-server --context-shift (llama-server's): requests longer than the context of 64 go on past it, their
    tokens those of `mor-run --ctx 64 --keep N` (mor-run's own context shift), the prompt truncated as llama.cpp
    does, n_keep honoured; without the flag the same requests are refused or end at the context, as before."""
    srv = sl.Server(["--ctx", "64", "--context-shift", "--slots", "2", "-q"])
    try:
        n_long = len(subprocess.run([sl.RUN, "-m", sl.MODEL, "--tokenize-file", "/dev/stdin"], input=LONG_PROMPT.encode(),
                                    capture_output=True, check=True).stdout.split())
        for prompt, n, seed, keep in ((SHIFT_PROMPT, 80, 3, 4), (SHIFT_PROMPT, 90, 5, 0), (LONG_PROMPT, 40, 9, 6)):
            ids = sl.mor_run(prompt, n, seed, ["--ctx", "64", "--keep", str(keep)])[0]
            st, r = completion(srv, {"prompt": prompt, "max_tokens": n, "seed": seed, "n_keep": keep})
            ok = st == 200 and r["choices"][0]["mor"]["token_ids"] == ids and len(ids) == n
            if prompt is LONG_PROMPT:
                ok = ok and r["usage"]["prompt_tokens"] == llama_truncate(n_long, 64, keep) < n_long
            t.check(ok, "--context-shift, a %s prompt, %d tokens in a context of 64, n_keep %d: the tokens of "
                    "`mor-run --ctx 64 --keep %d`%s" % ("%d-token" % n_long if prompt is LONG_PROMPT else "short", n,
                                                        keep, keep, ", the prompt truncated as llama.cpp does"
                                                        if prompt is LONG_PROMPT else ""))
        # n_keep matters: another n_keep, other tokens after the first shift
        a = completion(srv, {"prompt": SHIFT_PROMPT, "max_tokens": 80, "seed": 3, "n_keep": 4})[1]
        b = completion(srv, {"prompt": SHIFT_PROMPT, "max_tokens": 80, "seed": 3, "n_keep": 10})[1]
        ta, tb = a["choices"][0]["mor"]["token_ids"], b["choices"][0]["mor"]["token_ids"]
        t.check(ta[:45] == tb[:45] and ta != tb and
                tb == sl.mor_run(SHIFT_PROMPT, 80, 3, ["--ctx", "64", "--keep", "10"])[0],
                "--context-shift: n_keep 10 gives other tokens than 4 once the context shifts (and mor-run's)")
        # streamed: the same tokens
        st, ev = srv.stream("/v1/completions", {"prompt": SHIFT_PROMPT, "max_tokens": 80, "seed": 3, "n_keep": 4,
                                                "stream": True})
        got = [x for e in ev[:-2] for x in e["choices"][0]["mor"]["token_ids"]]
        t.check(st == 200 and got == ta, "--context-shift: streamed, the same tokens")
        # llama.cpp's /completion: n_predict past the context shifts (truncated), -1 ends at the full context
        ids = sl.mor_run(SHIFT_PROMPT, 70, 2, ["--ctx", "64", "--keep", "-1"])[0]
        st, r = native(srv, {"prompt": SHIFT_PROMPT, "n_predict": 70, "seed": 2, "n_keep": -1, "return_tokens": True})
        t.check(st == 200 and r["tokens"] == ids and r["truncated"] is True and r["stop_type"] == "limit" and
                r["tokens_predicted"] == 70, "/completion n_predict 70, n_keep -1 (the prompt): mor-run --keep -1's "
                "tokens, truncated: true")
        st, r = native(srv, {"prompt": SHIFT_PROMPT, "seed": 2})
        t.check(st == 200 and r["tokens_predicted"] == 64 - r["tokens_evaluated"] and r["truncated"] is True,
                "/completion without n_predict still ends when the context is full (%s tokens)" % r.get("tokens_predicted"))
        st, r = native(srv, {"prompt": LONG_PROMPT, "n_predict": 4, "seed": 2})
        t.check(st == 200 and r["truncated"] is True and r["tokens_evaluated"] == llama_truncate(n_long, 64, 0),
                "/completion: a prompt longer than the context is truncated (truncated: true, tokens_evaluated %s)"
                % r.get("tokens_evaluated"))
        st, r = native(srv, {"prompt": "The jury said that", "n_predict": 4, "seed": 2})
        t.check(st == 200 and r["truncated"] is False, "/completion: a request that fits is not truncated")
        st, e = completion(srv, {"prompt": LONG_PROMPT, "max_tokens": 8, "n_keep": 63})
        t.check(st == 400 and e["error"]["param"] == "n_keep",
                "--context-shift: keeping 63 of a prompt longer than the context of 64: 400 naming n_keep")
        st, r = completion(srv, {"prompt": SHIFT_PROMPT, "max_tokens": 80, "n_keep": -1, "n_discard": 0, "seed": 4})
        t.check(st == 200 and r["choices"][0]["mor"]["token_ids"] ==
                sl.mor_run(SHIFT_PROMPT, 80, 4, ["--ctx", "64", "--keep", "-1"])[0],
                "--context-shift: n_keep -1 with a short prompt keeps it whole (mor-run --keep -1), n_discard 0 accepted")
        st, e = completion(srv, {"prompt": SHIFT_PROMPT, "max_tokens": 80, "n_discard": 10})
        t.check(st == 400 and e["error"]["param"] == "n_discard", "n_discard other than 0 (llama.cpp's default): 400")
    finally:
        srv.stop()
    # three at once, each past the training context of 256 (a --ctx of 768 holds all three): depth-wise
    # batching with other requests' rows in flight while a sequence shifts
    srv = sl.Server(["--ctx", "768", "--context-shift", "--slots", "3", "-q"])
    try:
        jobs = [(SHIFT_PROMPT, 300, 11, 4), (LONG_PROMPT, 280, 12, 0), ("He said", 320, 13, 2)]
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            got = list(ex.map(lambda a: completion(srv, {"prompt": a[0], "max_tokens": a[1], "seed": a[2],
                                                         "n_keep": a[3]}), jobs))
        ok = all(st == 200 and r["choices"][0]["mor"]["token_ids"] ==
                 sl.mor_run(p, n, seed, ["--ctx", "256", "--keep", str(keep)])[0]
                 for (st, r), (p, n, seed, keep) in zip(got, jobs))
        t.check(ok, "--context-shift, 3 requests at once past the context of 256: each the tokens of "
                "`mor-run --ctx 256 --keep N`")
    finally:
        srv.stop()
    srv = sl.Server(["--ctx", "64", "--slots", "2", "-q"])   # without the flag: as before
    try:
        st, e = completion(srv, {"prompt": SHIFT_PROMPT, "max_tokens": 80, "seed": 3, "n_keep": 4})
        t.check(st == 400 and e["error"]["code"] == "context_length_exceeded",
                "without --context-shift: a request longer than the context is 400 context_length_exceeded")
        st, r = native(srv, {"prompt": SHIFT_PROMPT, "n_predict": 80, "seed": 3, "n_keep": 4})
        t.check(st == 200 and r["tokens_predicted"] == 64 - r["tokens_evaluated"] and r["truncated"] is True,
                "without --context-shift: /completion n_predict 80 ends when the context is full, truncated")
        st, e = native(srv, {"prompt": LONG_PROMPT, "n_predict": 4})
        t.check(st == 400, "without --context-shift: a prompt longer than the context is refused")
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------

def main():
    if not os.path.isfile(sl.BIN):
        t.check(False, "bin/mor-server was built")
        t.finish()
    import tempfile
    tmp = tempfile.mkdtemp(prefix="morsrv.")
    try:
        srv = sl.Server(["--slots", "4", "--max-body", "65536", "--test-hooks"])
        for f in (test_basics, test_mor_run, test_stream, test_prompt_reuse, test_speculation, test_n_choices, test_grammar, test_errors, test_http, test_llama_endpoints,
                  test_sampling,
                  test_embeddings, test_llama_server_conventions, test_completion_native,
                  test_disconnect,
                  test_curl, test_node):
            f(srv)
        test_logprobs(srv, tmp)
        t.check(srv.proc.poll() is None, "the server lived through every test")
        rc = srv.stop()
        t.check(rc == 0, "and stopped cleanly (exit status %d)" % rc)
        test_timeouts()
        test_limits()
        test_chat(tmp)
        test_nonfinite(tmp)
        test_fast_bf16(tmp)
        test_context_shift()
        test_drain()
        dw = load_test("depthwise")
        sq = load_test("sequence")
        t.check(dw == sq, "load: depthwise and sequence modes give the same 200 responses")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    t.finish()


if __name__ == "__main__":
    main()
