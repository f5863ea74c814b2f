"""test_python_input.py - the Python binding with long generations and bad input.

- generate() goes past the context by shifting it (KVCache.seq_add), on
  Model.generate and Context.generate; context_shift=False stops instead;
  a prompt longer than the context keeps its start and its end with a
  RuntimeWarning (ValueError under context_shift=False).
- KVCache.seq_add: a move by -D of a sequence decoded at D.. gives the
  logits of the sequence decoded at 0.. (1e-5, F32 cache); refusals raise
  PositionError and change nothing.
- Bad input raises TypeError, ValueError or OverflowError instead of what
  ctypes would silently do (2**40 -> 0, bytes(123) -> 123 zero bytes).
"""
import math
import os
import sys
import warnings

import testlib as t

t.reexec_under_asan()   # under SANITIZE=1 the library is an ASan build
t.use_bindings()
import mor  # noqa: E402

BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")


def raises(exc, f, what):
    try:
        f()
    except exc as e:
        return t.check(True, "%s raises %s (%s)" % (what, exc.__name__, str(e)[:90]))
    except Exception as e:   # noqa: BLE001
        return t.check(False, "%s raises %s, not %s: %s" % (what, exc.__name__, type(e).__name__, e))
    return t.check(False, "%s raises %s (nothing raised)" % (what, exc.__name__))


def generation(m):
    toks = list(m.generate("In the morning", max_tokens=500, seed=1, temperature=0.8))
    t.check(len(toks) == 500 and m.n_ctx_train == 256,
            "Model.generate: 500 tokens past the 256-token context (got %d)" % len(toks))
    t.check(len(set(x.depth for x in toks)) > 1,
            "Model.generate on an expert-choice model: per-token depths vary (causal THRESHOLD by default)")
    toks = list(m.generate([45, 99, 308], max_tokens=300, context_shift=False))
    t.check(len(toks) == 253, "context_shift=False stops at the end of the context (%d tokens)" % len(toks))
    with m.context(n_ctx=64) as ctx:
        a = [x.id for x in ctx.generate([45, 99, 308], max_tokens=150, n_keep=2)]
        t.check(len(a) == 150 and ctx.kv.seq_pos_max(0) < 64,
                "Context.generate with n_ctx=64: 150 tokens, the cache stays within 64 positions (max %d)"
                % ctx.kv.seq_pos_max(0))
        b = [x.id for x in ctx.generate([7, 8], max_tokens=40)]
        t.check(len(b) == 40 and ctx.kv.seq_pos_max(0) < 64,
                "Context.generate again on the full cache: it shifts to make room for the new prompt")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        toks = list(m.generate(list(range(100, 140)), max_tokens=5, max_pos=16, n_keep=3))
    t.check(len(toks) == 5 and any("kept its first 3" in str(x.message) for x in w),
            "a prompt longer than the context: its start and its end, with a RuntimeWarning (%s)"
            % [str(x.message)[:80] for x in w])
    raises(ValueError, lambda: list(m.generate(list(range(100, 140)), max_tokens=5, max_pos=16, context_shift=False)),
           "a prompt longer than the context under context_shift=False")
    raises(ValueError, lambda: list(m.generate([1, 2, 3], max_tokens=5, max_pos=16, n_keep=15)),
           "n_keep leaving nothing to drop")


def seq_add(m):
    D, n = 37, 10
    prompt = [45, 99, 308, 265, 283, 260, 278, 382, 346, 44]
    logits = []
    for start, delta in ((D, -D), (0, 0)):
        with m.context(n_ctx=64) as ctx:
            ctx.router.set_mode(mor.ROUTE_THRESHOLD)
            ctx.decode_tokens(prompt, pos=start)
            if delta:
                ctx.kv.seq_add(0, -1, -1, delta)
            t.check(ctx.kv.seq_pos_max(0) == n - 1, "seq_add: positions end at %d" % ctx.kv.seq_pos_max(0))
            ctx.decode_tokens([7], pos=n)
            logits.append(ctx.logits(0))
    d = max(abs(a - b) for a, b in zip(*logits))
    t.check(d <= 1e-5, "KVCache.seq_add: decoded at %d and moved by %d == decoded at 0 (max |diff| %.2g)" % (D, -D, d))
    with m.context(n_ctx=64) as ctx:
        ctx.decode_tokens(prompt)
        raises(mor.PositionError, lambda: ctx.kv.seq_add(0, 0, -1, -1), "seq_add to a negative position")
        raises(mor.PositionError, lambda: ctx.kv.seq_add(0, 5, -1, -2), "seq_add onto a position that stays")
        raises(mor.OutOfRangeError, lambda: ctx.kv.seq_add(3, 0, -1, 1), "seq_add of an unknown sequence")
        raises(OverflowError, lambda: ctx.kv.seq_add(0, 0, -1, 2 ** 40), "seq_add with a delta of 2**40")
        t.check(ctx.kv.seq_pos_max(0) == n - 1, "the refused moves changed nothing")


def bad_input(m):
    raises(TypeError, lambda: m.tokenize(123), "tokenize(123)")
    raises(TypeError, lambda: m.tokenize(None), "tokenize(None)")
    raises(OverflowError, lambda: m.detokenize([2 ** 40]), "detokenize([2**40])")
    raises(TypeError, lambda: m.detokenize("abc"), "detokenize('abc')")
    raises(TypeError, lambda: m.detokenize([1.5]), "detokenize([1.5])")
    raises(IndexError, lambda: m.detokenize([m.n_vocab]), "detokenize([n_vocab])")
    raises(OverflowError, lambda: m.context(n_ctx=2 ** 40), "Context(n_ctx=2**40)")
    raises(OverflowError, lambda: m.context(n_ctx=-1), "Context(n_ctx=-1)")
    raises(TypeError, lambda: m.context(n_threads="2"), "Context(n_threads='2')")
    raises(OverflowError, lambda: mor.Sampler(top_k=2 ** 40), "Sampler(top_k=2**40)")
    raises(OverflowError, lambda: mor.Sampler(seed=-1), "Sampler(seed=-1)")
    raises(TypeError, lambda: mor.Sampler(temperature="hot"), "Sampler(temperature='hot')")
    raises(ValueError, lambda: mor.Sampler(temperature=float("nan")), "Sampler(temperature=nan)")
    # the ranges of mor-run's flags, for Sampler, generate() and Server.submit
    for kw in ({"temperature": -1}, {"temperature": float("inf")}, {"top_p": 2}, {"top_p": -0.1}, {"min_p": 1.5},
               {"top_k": -1}, {"repeat_penalty": -1.0}, {"repeat_last_n": -1}, {"repeat_last_n": 1 << 21}):
        raises(ValueError, lambda: mor.Sampler(**kw), "Sampler(%s): out of mor-run's range" % kw)
    t.check(mor.Sampler(temperature=0, top_p=1, min_p=0, top_k=0, repeat_penalty=1, repeat_last_n=0) is not None,
            "Sampler: the ends of every range are accepted")
    raises(ValueError, lambda: mor.Sampler().sample([float("nan")] * 10), "Sampler.sample([nan]*10)")
    raises(ValueError, lambda: mor.Sampler().sample([0.0, float("inf"), 1.0]), "Sampler.sample with +inf")
    raises(ValueError, lambda: mor.Sampler().sample([-math.inf] * 4), "Sampler.sample, every logit -inf")
    raises(ValueError, lambda: mor.Sampler().sample([]), "Sampler.sample([])")
    raises(TypeError, lambda: mor.Sampler().sample(["a", "b"]), "Sampler.sample(['a', 'b'])")
    t.check(mor.Sampler(temperature=0).sample([0.0, -math.inf, 3.0, 1.0]) == 2,
            "Sampler.sample: -inf logits (banned tokens) are fine")
    with mor.Batch(4) as b:
        raises(OverflowError, lambda: b.add(2 ** 40, 0), "Batch.add(token=2**40)")
        raises(OverflowError, lambda: b.add(1, 2 ** 31), "Batch.add(pos=2**31)")
        raises(TypeError, lambda: b.add(1, "0"), "Batch.add(pos='0')")
    raises(OverflowError, lambda: mor.Batch(2 ** 40), "Batch(2**40)")
    with m.context() as ctx:
        raises(OverflowError, lambda: ctx.router.set_mode(2 ** 40), "Router.set_mode(2**40)")
        raises(TypeError, lambda: ctx.router.set_threshold(0, "high"), "Router.set_threshold(0, 'high')")
        raises(OverflowError, lambda: ctx.kv.seq_rm(2 ** 33), "KVCache.seq_rm(2**33)")
        raises(OverflowError, lambda: list(ctx.generate([1, 2], max_tokens=2 ** 40)), "generate(max_tokens=2**40)")
        raises(ValueError, lambda: list(ctx.generate([1, 2], max_tokens=-1)), "generate(max_tokens=-1)")
        raises(OverflowError, lambda: list(ctx.generate([1, 2 ** 40])), "generate with a token id of 2**40")
    raises(OverflowError, lambda: mor.Server(m, n_slots=2 ** 40), "Server(n_slots=2**40)")
    with mor.Server(m) as srv:
        raises(OverflowError, lambda: srv.submit([1, 2 ** 40]), "Server.submit with a token id of 2**40")
        raises(OverflowError, lambda: srv.submit([1, 2], max_tokens=2 ** 40), "Server.submit(max_tokens=2**40)")
        raises(ValueError, lambda: srv.submit([1, 2], top_p=2), "Server.submit(top_p=2): out of mor-run's range")
        raises(ValueError, lambda: srv.submit([1, 2], temperature=-1), "Server.submit(temperature=-1)")
    raises(ValueError, lambda: list(m.generate([1, 2], max_tokens=2, min_p=-1)), "Model.generate(min_p=-1)")


def main():
    with mor.Model(BROWN) as m:
        generation(m)
        seq_add(m)
        bad_input(m)
    t.finish()


if __name__ == "__main__":
    main()
