"""test_escape.py - control characters from model files never reach a
terminal raw.

A model file's strings (the pre-tokenizer name, a merge, a tokenizer.json
model type) end up quoted in error messages. Patched copies of the bundled
model and a crafted tokenizer.json carry a terminal escape (ESC [2J, clear
screen) and a bell; the messages of the library (mor_last_error, through the
Python binding), of mor-run and of mor-convert must show them as \\x1b and
\\x07 and contain no control character but the final newline.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import testlib as t

sys.path.insert(0, os.path.join(t.ROOT, "bindings", "python"))
t.reexec_under_asan()   # under SANITIZE=1 the library is an ASan build
os.environ.setdefault("MOR_LIB_PATH", os.path.join(t.OUT, "lib"))
import mor  # noqa: E402

BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")
RUN = os.path.join(t.OUT, "bin", "mor-run")
CONVERT = os.path.join(t.OUT, "bin", "mor-convert")


def string_value(img, key):
    """Offset and length of the value of string key `key` (GGUF v3)."""
    k = struct.pack("<Q", len(key)) + key.encode()
    i = img.index(k) + len(k)
    typ, n = struct.unpack_from("<IQ", img, i)
    assert typ == 8
    return i + 12, n


def first_array_string(img, key):
    k = struct.pack("<Q", len(key)) + key.encode()
    i = img.index(k) + len(k)
    typ, et, count = struct.unpack_from("<IIQ", img, i)
    assert typ == 9 and et == 8 and count > 0
    (n,) = struct.unpack_from("<Q", img, i + 16)
    return i + 24, n


def clean(msg):
    """No control character in a message but a final newline."""
    body = msg[:-1] if msg.endswith("\n") else msg
    return not any(ord(c) < 0x20 or ord(c) == 0x7f for c in body)


def main():
    with open(BROWN, "rb") as f:
        img = bytearray(f.read())
    with tempfile.TemporaryDirectory() as tmp:
        off, n = string_value(img, "tokenizer.ggml.pre")
        pre = bytearray(img)
        pre[off:off + n] = b"\x1b[2J"[:n].ljust(n, b"\x07")
        off, n = first_array_string(img, "tokenizer.ggml.merges")
        merge = bytearray(img)
        one = bytes(merge[off:off + n]).replace(b" ", b"\x07", 1)
        merge[off:off + n] = one
        for name, data, want in (("pre-tokenizer", pre, "\\x1b[2J"), ("merge", merge, "\\x07")):
            path = os.path.join(tmp, name + ".gguf")
            with open(path, "wb") as f:
                f.write(data)
            try:
                mor.Model(path)
                t.check(False, "%s: the patched model is refused" % name)
            except mor.MorError as e:
                t.check(want in e.message and clean(e.message),
                        "%s: mor_last_error() shows the control characters escaped (%r)" % (name, e.message[:120]))
            p = subprocess.run([RUN, "-m", path, "-p", "x", "-n", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            err = p.stderr.decode("utf-8", "replace")
            t.check(p.returncode == 1 and want in err and clean(err),
                    "%s: mor-run exits 1 with the message escaped (%r)" % (name, err[:120]))
        d = os.path.join(tmp, "tok")
        os.mkdir(d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump({"model": {"type": "BPE\x1b[2J\x07", "vocab": {"a": 0}, "merges": []}}, f)
        p = subprocess.run([CONVERT, "--vocab-only", d, "-o", os.path.join(tmp, "v.gguf")], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        err = p.stderr.decode("utf-8", "replace")
        t.check(p.returncode == 1 and "\\x1b[2J\\x07" in err and clean(err),
                "mor-convert: a tokenizer.json's strings are escaped in its message (%r)" % err[:120])
        p = subprocess.run([RUN, "-m", BROWN, "-p", "x", "--routing", "top\x1bk"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        err = p.stderr.decode("utf-8", "replace")
        t.check(p.returncode == 2 and "top\\x1bk" in err and clean(err),
                "a command-line value is escaped in a usage error (%r)" % err[:100])
    t.finish()


if __name__ == "__main__":
    main()
