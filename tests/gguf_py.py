"""gguf_py.py - read and write whole GGUF v3 files (keys and tensors), Python
stdlib only, for tests that inspect or alter a converted model.

    f = gguf_py.read(path)          # f.kv: [(key, type, value)], f.tensors: [Tensor]
    f.get("mor.family"); f.set("mor.family", gguf_py.STR, "x"); f.drop("key")
    t = f.tensor("blk.0.attn_q.weight"); t.floats()   # F32 values, row-major
    gguf_py.write(path, f)

Arrays are (element type, [values]). Tensor data is kept as bytes.
"""
import struct

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}
# ggml type: (block, bytes): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K, Q8_K
_TYPE_SIZE = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
              10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292)}


class Tensor:
    def __init__(self, name, ttype, dims, data):
        self.name, self.type, self.dims, self.data = name, ttype, list(dims), data

    def floats(self):
        assert self.type == 0, "F32 tensors only"
        return list(struct.unpack("<%df" % (len(self.data) // 4), self.data))


class File:
    def __init__(self):
        self.kv, self.tensors, self.alignment = [], [], 32

    def get(self, key, default=None):
        for k, _, v in self.kv:
            if k == key:
                return v
        return default

    def set(self, key, typ, value):
        for i, (k, _, _) in enumerate(self.kv):
            if k == key:
                self.kv[i] = (key, typ, value)
                return
        self.kv.append((key, typ, value))

    def drop(self, key):
        self.kv = [e for e in self.kv if e[0] != key]

    def tensor(self, name):
        for t in self.tensors:
            if t.name == name:
                return t
        return None


def _read_str(d, p):
    n = struct.unpack_from("<Q", d, p)[0]
    return d[p + 8:p + 8 + n].decode("utf-8"), p + 8 + n


def _read_val(d, p, t):
    if t == STR:
        return _read_str(d, p)
    if t == ARR:
        et, n = struct.unpack_from("<IQ", d, p)
        p += 12
        out = []
        for _ in range(n):
            v, p = _read_val(d, p, et)
            out.append(v)
        return (et, out), p
    v = struct.unpack_from(_FMT[t], d, p)[0]
    return v, p + struct.calcsize(_FMT[t])


def read(path):
    with open(path, "rb") as fh:
        d = fh.read()
    assert d[:4] == b"GGUF" and struct.unpack_from("<I", d, 4)[0] == 3
    nt, nkv = struct.unpack_from("<QQ", d, 8)
    p = 24
    f = File()
    for _ in range(nkv):
        k, p = _read_str(d, p)
        t = struct.unpack_from("<I", d, p)[0]
        v, p = _read_val(d, p + 4, t)
        f.kv.append((k, t, v))
        if k == "general.alignment":
            f.alignment = v
    infos = []
    for _ in range(nt):
        name, p = _read_str(d, p)
        nd = struct.unpack_from("<I", d, p)[0]
        dims = struct.unpack_from("<%dQ" % nd, d, p + 4)
        p += 4 + 8 * nd
        tt, off = struct.unpack_from("<IQ", d, p)
        p += 12
        infos.append((name, tt, dims, off))
    base = (p + f.alignment - 1) // f.alignment * f.alignment
    for name, tt, dims, off in infos:
        n = 1
        for x in dims:
            n *= x
        blk, nb = _TYPE_SIZE[tt]
        f.tensors.append(Tensor(name, tt, dims, d[base + off:base + off + n // blk * nb]))
    return f


def _w_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _w_val(t, v):
    if t == STR:
        return _w_str(v)
    if t == ARR:
        et, vals = v
        return struct.pack("<IQ", et, len(vals)) + b"".join(_w_val(et, x) for x in vals)
    return struct.pack(_FMT[t], v)


def write(path, f):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(f.tensors), len(f.kv))
    for k, t, v in f.kv:
        head += _w_str(k) + struct.pack("<I", t) + _w_val(t, v)
    off, blobs = 0, []
    for t in f.tensors:
        head += _w_str(t.name) + struct.pack("<I", len(t.dims)) + struct.pack("<%dQ" % len(t.dims), *t.dims)
        head += struct.pack("<IQ", t.type, off)
        pad = (-len(t.data)) % f.alignment
        blobs.append(t.data + b"\0" * pad)
        off += len(t.data) + pad
    head += b"\0" * ((-len(head)) % f.alignment)
    with open(path, "wb") as fh:
        fh.write(head + b"".join(blobs))
