"""test_kquant_table.py - test_quant.c's table of k-quant block hashes is
what tests/kquant_ref.py prints now (the independent Python reading of
ggml's block layouts), so that the C test cannot drift from its oracle."""
import os
import subprocess
import sys

import testlib as t

here = os.path.join(t.ROOT, "tests")
out = subprocess.run([sys.executable, os.path.join(here, "kquant_ref.py")], capture_output=True, text=True)
rows = [r for r in out.stdout.splitlines() if r.strip()]
with open(os.path.join(here, "test_quant.c")) as f:
    src = f.read().splitlines()
missing = [r for r in rows if r not in src]
t.check(out.returncode == 0 and len(rows) == 9 and not missing,
        "kquant_ref.py ran (%d) and printed 9 types' block hashes, each a line of test_quant.c's table%s"
        % (out.returncode, ": missing " + missing[0].split(",")[0].strip() if missing else ""))
t.finish()
