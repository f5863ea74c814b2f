"""tests/testlib.py - the harness of libmor's Python tests (tests/test_*.py).

Standard library only. Use from a test run from the repository root:

    import testlib as t
    t.check(cond, "what was checked")
    t.skip("why it cannot run here (Debian: apt-get install PKG)")
    if t.need_tool("node", "nodejs"): ...   # a counted skip when a tool is missing
    t.finish()          # prints "# checks: P passed, F failed[, S skipped]" and exits

A skip is never a failure: it is counted and shown by tests/run.sh.

ROOT is the repository, OUT the build output root (absolute): OUT/bin and
OUT/lib hold what make built.
"""
import os
import struct
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.abspath(os.path.join(ROOT, os.environ.get("OUT", ".")))
_passed = 0
_failed = 0
_skipped = 0



def mor_convert(src, out, flags=()):
    """bin/mor-convert SRC -o OUT FLAGS: (converted?, its output)."""
    p = subprocess.run([os.path.join(OUT, "bin", "mor-convert"), src, "-o", out] + list(flags),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


def mor_logits(gguf, ids, tmp, extra=()):
    """bin/mor-run's logits of one pass over ids (--dump-logits, into tmp):
    (the floats of every position in a row, ""), or (None, its stderr)."""
    out = os.path.join(tmp, "L.f32")
    p = subprocess.run([os.path.join(OUT, "bin", "mor-run"), "-q", "-m", gguf, "--ids", ",".join(map(str, ids)),
                        "--dump-logits", out] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        return None, p.stderr.strip()
    with open(out, "rb") as f:
        raw = f.read()
    return list(struct.unpack("<%df" % (len(raw) // 4), raw)), ""

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


def skip(why):
    """Print "skip - why" for checks that cannot run on this machine."""
    global _skipped
    _skipped += 1
    print("skip - " + why)
    sys.stdout.flush()


def need_tool(cmd, package, what=None):
    """True if cmd is on PATH; else one skip naming the Debian package, False."""
    if shutil.which(cmd):
        return True
    skip("%s: %s not found (Debian: apt-get install %s)" % (what or "the checks that need " + cmd, cmd, package))
    return False


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


def reexec_under_asan():
    """Under SANITIZE=1, run this script again with the ASan runtime loaded
    first, as a sanitized libmor.so needs when Python loads it (call before
    anything else is done: the script starts over)."""
    import subprocess
    if os.environ.get("SANITIZE") != "1" or os.environ.get("MOR_PY_ASAN"):
        return
    cc = os.environ.get("CC", "cc")
    rt = []
    for name in ("libasan.so", "libubsan.so"):
        p = subprocess.run([cc, "-print-file-name=" + name], stdout=subprocess.PIPE, universal_newlines=True)
        path = p.stdout.strip()
        if p.returncode == 0 and os.path.isabs(path):
            rt.append(path)
    env = dict(os.environ, MOR_PY_ASAN="1", LD_PRELOAD=" ".join(rt),
               # the interpreter itself is not built for leak checking
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def libmor_path():
    """$OUT/lib/libmor.so.MAJOR.MINOR.PATCH, the version read from include/mor.h."""
    import re
    with open(os.path.join(ROOT, "include", "mor.h")) as f:
        h = f.read()
    v = [re.search(r"#define MOR_VERSION_%s (\d+)" % k, h).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return os.path.join(OUT, "lib", "libmor.so." + ".".join(v))


# MOR_TEST_INSTALLED=1 (tests/test_python_package.py): the tests run on the
# package pip installed into this interpreter's environment, not on the source.
INSTALLED = os.environ.get("MOR_TEST_INSTALLED") == "1"


def use_bindings():
    """Make `import mor` find the package under test: bindings/python on the
    libmor.so make built, or under INSTALLED the installed package with the
    library inside it. MOR_TEST_NO_NUMPY=1 hides NumPy, as if not installed."""
    if os.environ.get("MOR_TEST_NO_NUMPY") == "1":
        sys.modules["numpy"] = None   # import numpy now raises ImportError
    if INSTALLED:
        os.environ.pop("MOR_LIB_PATH", None)
        return
    os.environ["MOR_LIB_PATH"] = libmor_path()
    sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))


def import_mor():
    """The Python bindings (see use_bindings)."""
    reexec_under_asan()
    use_bindings()
    import mor
    return mor



def finish():
    if _skipped:
        print("# checks: %d passed, %d failed, %d skipped" % (_passed, _failed, _skipped))
    else:
        print("# checks: %d passed, %d failed" % (_passed, _failed))
    sys.stdout.flush()
    sys.exit(1 if _failed else 0)


def gguf_layout(data):
    """(offset after the key-values, offset after the tensor infos, the data
    section's start, alignment, {tensor: (dims, type, offset in the data)})."""
    o = 8
    n_t, n_kv = struct.unpack_from("<QQ", data, o)
    o += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    align = 32

    def skip_val(o, vt):
        if vt == 8:
            n, = struct.unpack_from("<Q", data, o)
            return o + 8 + n
        if vt == 9:
            at, n = struct.unpack_from("<IQ", data, o)
            o += 12
            for _ in range(n):
                o = skip_val(o, at)
            return o
        return o + sizes[vt]
    for _ in range(n_kv):
        n, = struct.unpack_from("<Q", data, o)
        k = data[o + 8:o + 8 + n]
        o += 8 + n
        vt, = struct.unpack_from("<I", data, o)
        o += 4
        if k == b"general.alignment":
            align, = struct.unpack_from("<I", data, o)
        o = skip_val(o, vt)
    kv_end = o
    tensors = {}
    for _ in range(n_t):
        n, = struct.unpack_from("<Q", data, o)
        name = data[o + 8:o + 8 + n].decode()
        o += 8 + n
        nd, = struct.unpack_from("<I", data, o)
        dims = struct.unpack_from("<%dQ" % nd, data, o + 4)
        tt, off = struct.unpack_from("<IQ", data, o + 4 + 8 * nd)
        tensors[name] = (dims, tt, off)
        o += 4 + 8 * nd + 12
    return kv_end, o, (o + align - 1) // align * align, align, tensors


def gguf_with_key(src, dst, key, value):
    """A copy of a GGUF file with one more string key (the tensors as they
    were, re-aligned)."""
    with open(src, "rb") as f:
        data = f.read()
    n_t, n_kv = struct.unpack_from("<QQ", data, 8)
    kv_end, infos_end, data_start, align, _ = gguf_layout(data)
    kb, vb = key.encode(), value.encode()
    extra = struct.pack("<Q", len(kb)) + kb + struct.pack("<I", 8) + struct.pack("<Q", len(vb)) + vb
    head = data[:8] + struct.pack("<QQ", n_t, n_kv + 1) + data[24:kv_end] + extra + data[kv_end:infos_end]
    head += b"\0" * ((len(head) + align - 1) // align * align - len(head))
    with open(dst, "wb") as f:
        f.write(head + data[data_start:])
