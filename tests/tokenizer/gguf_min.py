"""gguf_min.py - read and write the key-value part of GGUF v3 files (Python stdlib only).

Enough for the tokenizer scripts and tests: vocab-only files (no tensors) are read whole and
written back, keys in order. Values are Python objects: int, float, bool, str (UTF-8 strings
that are not valid UTF-8 are kept as bytes), or a list of them; the GGUF type of each key is
kept so that a file is written back as it was read.
"""
import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}


class Reader(object):
    def __init__(self, data):
        self.d = data
        self.p = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        b = self.d[self.p:self.p + n]
        self.p += n
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(b)

    def value(self, t):
        if t == STR:
            return self.string()
        if t == ARR:
            et = self.take("<I")
            n = self.take("<Q")
            if et in _SCALAR:   # fast path for long numeric arrays
                fmt = "<%d%s" % (n, _SCALAR[et][1])
                v = list(struct.unpack_from(fmt, self.d, self.p))
                self.p += struct.calcsize(fmt)
                return (et, v)
            return (et, [self.value(et) for _ in range(n)])
        return self.take(_SCALAR[t])


def read(path):
    """[(key, type, value)] of a GGUF v3 file; an array's value is (element type, [items])."""
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    if r.take("<4s") != b"GGUF" or r.take("<I") != 3:
        raise ValueError("%s: not a GGUF v3 file" % path)
    n_tensors = r.take("<Q")
    n_kv = r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        kvs.append((key, t, r.value(t)))
    if n_tensors:
        raise ValueError("%s: has tensors (only vocab-only files are handled)" % path)
    return kvs


def _put_string(out, s):
    b = s if isinstance(s, bytes) else s.encode("utf-8")
    out += struct.pack("<Q", len(b)) + b


def _put_value(out, t, v):
    if t == STR:
        _put_string(out, v)
    elif t == ARR:
        et, items = v
        out += struct.pack("<IQ", et, len(items))
        if et in _SCALAR:
            out += struct.pack("<%d%s" % (len(items), _SCALAR[et][1]), *items)
        else:
            for x in items:
                _put_value(out, et, x)
    else:
        out += struct.pack(_SCALAR[t], v)


def write(path, kvs):
    """Write a GGUF v3 file of the given (key, type, value) list and no tensors."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)))
    for key, t, v in kvs:
        _put_string(out, key)
        out += struct.pack("<I", t)
        _put_value(out, t, v)
    out += b"\0" * ((32 - len(out) % 32) % 32)
    with open(path, "wb") as f:
        f.write(out)


def get(kvs, key, default=None):
    for k, _, v in kvs:
        if k == key:
            return v
    return default


def replace(kvs, key, t, v):
    """The list with key set to (t, v): replaced in place, or appended."""
    out = [(k, kt, kv) for k, kt, kv in kvs if k != key]
    if len(out) == len(kvs):
        return out + [(key, t, v)]
    return [(k, kt, kv) if k != key else (key, t, v) for k, kt, kv in kvs]
