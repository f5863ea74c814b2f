"""test_layers.py - `make check-layers` inside make test: every library
include points to a lower layer, and the programs reach the library only
through mor.h and internal.h (scripts/check_layers.py, docs/ARCHITECTURE.md).
Then the checker itself, on altered copies of src/: an upward include, a
circle between modules, a program reaching past internal.h and a caller of
the recursion engine touching a row's state are caught."""
import os
import shutil
import subprocess
import sys
import tempfile

import testlib as t

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
script = os.path.join(root, "scripts", "check_layers.py")


def run(args):
    p = subprocess.run([sys.executable, script] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


rc, out = run([])
t.check(rc == 0, "the tree: " + out.strip().splitlines()[-1])
for line in out.strip().splitlines()[:-1]:
    print("# " + line)

cases = [
    ("src/kernels_ref.c", '#include "serve.h"\n', "a kernel file including a header of a higher layer"),
    ("src/lora.c", '#include "kv_cache.h"\n', "a module including another of its own layer (a circle in waiting)"),
    ("src/tools/mor-run/mor-run.c", '#include "context.h"\n', "a program including a library header other than internal.h"),
    ("src/serve.c", 'static void f(rec_row *r) { r->life = 0; }\n', "a caller of the recursion engine writing a row's state"),
    ("src/decode.c", 'static int f(const rec_engine *e) { return rec_at(e, 0)->life == 4; }\n',
     "a caller of the recursion engine reading a row's state"),
    ("src/context.c", 'static int32_t f(const rec_engine *e) { return rec_at(e, 0)->depth; }\n',
     "a row's record read outside the recursion engine"),
    ("src/decode.c", 'struct mor_router { int x; };\n', "a router's record defined outside router.c"),
    ("src/serve.c", 'static int f(mor_server *s) { return s->ctx->kv->mode; }\n', "the server reading a cache's field"),
    ("src/serve.c", 'static int f(mor_server *s) { return s->ctx->router->mode; }\n', "the server reading a router's field"),
]
with tempfile.TemporaryDirectory() as tmp:
    for path, line, what in cases:
        copy = os.path.join(tmp, "c")
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(os.path.join(root, "src"), os.path.join(copy, "src"))
        with open(os.path.join(copy, path), "a") as f:
            f.write(line)
        rc, out = run(["--root", copy])
        t.check(rc == 1 and os.path.basename(path) in out, "caught: " + what)
t.finish()
