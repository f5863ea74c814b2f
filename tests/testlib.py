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


def finish():
    print("# checks: %d passed, %d failed" % (_passed, _failed))
    sys.stdout.flush()
    sys.exit(1 if _failed else 0)
