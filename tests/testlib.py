"""tests/testlib.py - the harness of libmor's Python tests (tests/test_*.py).

Standard library only. Use from a test run from the repository root:

    import testlib as t
    t.check(cond, "what was checked")
    t.finish()          # prints "# checks: P passed, F failed" and exits

ROOT is the repository, OUT the build output root (absolute): OUT/bin and
OUT/lib hold what make built.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.abspath(os.path.join(ROOT, os.environ.get("OUT", ".")))
_passed = 0
_failed = 0


def check(cond, what):
    """Print "ok - what" or "FAIL - what"; return cond."""
    global _passed, _failed
    if cond:
        _passed += 1
        print("ok - " + what)
    else:
        _failed += 1
        print("FAIL - " + what)
    sys.stdout.flush()
    return bool(cond)


def gpt2_byte_chars():
    """GPT-2's bytes_to_unicode: {byte: printable character}, in GPT-2's
    token id order (id i is the i-th item)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def finish():
    print("# checks: %d passed, %d failed" % (_passed, _failed))
    sys.stdout.flush()
    sys.exit(1 if _failed else 0)
