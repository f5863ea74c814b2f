#!/usr/bin/env python3
"""kquant_ref.py - an independent reading of ggml's block formats, for test_quant.c.

For each quantized type, makes NB blocks (NB_RANDOM of pseudo-random bytes from the
LCG below, the same as test_quant.c's kq_bytes, then one of all 0x00, one of all
0xFF and one of 0x5A 0xA5 repeated: every code and scale bit at both values), with
every F16 scale field overwritten by a finite value, dequantizes them from the
published layouts (written here from ggml's format description, not from libmor's
code: bit fields read with shifts and masks of the whole block as one integer where
that is simpler) in float32 arithmetic, and prints for each block the FNV-1a hash of
its values' float32 bit patterns (little-endian, in value order). test_quant.c
compares its dequant_row block by block against these hashes: a wrong value in any
block names that block. tests/test_kquant_table.py checks that test_quant.c holds
this output.
Run: python3 tests/kquant_ref.py"""
import struct

NB_RANDOM = 5
PATTERNS = (b"\x00", b"\xff", b"\x5a\xa5")
NB = NB_RANDOM + len(PATTERNS)
M64 = (1 << 64) - 1


def lcg_bytes(seed, n):
    out, x = bytearray(), seed
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) & M64
        out.append(x >> 56)
    return out, x


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def half(b, off):
    return struct.unpack_from("<e", b, off)[0]


def mul(a, b):
    return f32(f32(a) * f32(b))


def sub(a, b):
    return f32(f32(a) - f32(b))


def add(a, b):
    return f32(f32(a) + f32(b))


# type: (number, block values, block bytes, offsets of F16 fields)
TYPES = {
    "Q4_1": (3, 32, 20, [0, 2]), "Q5_0": (6, 32, 22, [0]), "Q5_1": (7, 32, 24, [0, 2]),
    "Q2_K": (10, 256, 84, [80, 82]), "Q3_K": (11, 256, 110, [108]), "Q4_K": (12, 256, 144, [0, 2]),
    "Q5_K": (13, 256, 176, [0, 2]), "Q6_K": (14, 256, 210, [208]), "Q8_K": (15, 256, 292, []),
}


def fix_scales(b, offs, x):
    """F16 fields: sign, exponent 8..14 (about 2^-7 .. 1), random mantissa; Q8_K: a float d."""
    for o in offs:
        x = (x * 6364136223846793005 + 1442695040888963407) & M64
        r = x >> 48
        h = (r & 0x83ff) | ((8 + (r >> 10) % 7) << 10)
        struct.pack_into("<H", b, o, h)
    return x


def bits(b, lo, n):
    """n bits of the block read as a little-endian integer, from bit lo."""
    return (int.from_bytes(b, "little") >> lo) & ((1 << n) - 1)


def deq_q4_1(b):
    d, m = half(b, 0), half(b, 2)
    return [add(mul(bits(b, 32 + 8 * (j % 16) + 4 * (j // 16), 4), d), m) for j in range(32)]


def q5(b, qs_at, qh_at, j):
    lo = bits(b, 8 * qs_at + 8 * (j % 16) + 4 * (j // 16), 4)
    return lo | bits(b, 8 * qh_at + j, 1) << 4


def deq_q5_0(b):
    d = half(b, 0)
    return [mul(q5(b, 6, 2, j) - 16, d) for j in range(32)]


def deq_q5_1(b):
    d, m = half(b, 0), half(b, 2)
    return [add(mul(q5(b, 8, 4, j), d), m) for j in range(32)]


def scale_min_k4(b, j):
    """6-bit scale and min of sub-block j from the 12 bytes at offset 4 (Q4_K, Q5_K)."""
    s = b[4:16]
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, (s[j + 4] >> 4) | (s[j] >> 6) << 4


def deq_q2_k(b):
    d, dm = half(b, 80), half(b, 82)
    out = []
    for i in range(256):
        sc = b[i // 16]
        # 2-bit fields: each group of 128 values uses 32 bytes; value i's shift is 2 * ((i % 128) // 32)
        q = (b[16 + 32 * (i // 128) + i % 32] >> (2 * ((i % 128) // 32))) & 3
        out.append(sub(mul(mul(d, sc & 15), q), mul(dm, sc >> 4)))
    return out


def deq_q3_k(b):
    d = half(b, 108)
    sc = b[96:108]
    out = []
    for i in range(256):
        j = i // 16
        low = sc[j] & 15 if j < 8 else sc[j - 8] >> 4
        high = (sc[8 + j % 4] >> (2 * (j // 4))) & 3
        s = (low | high << 4) - 32
        q = (b[32 + 32 * (i // 128) + i % 32] >> (2 * ((i % 128) // 32))) & 3
        hbit = (b[i % 32] >> (i // 32)) & 1
        out.append(mul(mul(d, s), (q | hbit << 2) - 4))
    return out


def deq_q45_k(b, five):
    d, dm = half(b, 0), half(b, 2)
    qs = 48 if five else 16
    out = []
    for i in range(256):
        s, m = scale_min_k4(b, i // 32)
        byte = b[qs + 32 * (i // 64) + i % 32]
        q = byte & 15 if i % 64 < 32 else byte >> 4
        if five:
            q |= ((b[16 + i % 32] >> (i // 32)) & 1) << 4
        out.append(sub(mul(mul(d, s), q), mul(dm, m)))
    return out


def deq_q6_k(b):
    d = half(b, 208)
    out = []
    for i in range(256):
        h, r = i // 128, i % 128
        lo = (b[64 * h + r % 64] >> (0 if r < 64 else 4)) & 15
        hi = (b[128 + 32 * h + r % 32] >> (2 * (r // 32))) & 3
        s = struct.unpack_from("<b", b, 192 + i // 16)[0]
        out.append(mul(mul(d, s), (lo | hi << 4) - 32))
    return out


def deq_q8_k(b):
    d = struct.unpack_from("<f", b, 0)[0]
    return [mul(d, struct.unpack_from("<b", b, 4 + i)[0]) for i in range(256)]


DEQ = {"Q4_1": deq_q4_1, "Q5_0": deq_q5_0, "Q5_1": deq_q5_1, "Q2_K": deq_q2_k, "Q3_K": deq_q3_k,
       "Q4_K": lambda b: deq_q45_k(b, False), "Q5_K": lambda b: deq_q45_k(b, True), "Q6_K": deq_q6_k,
       "Q8_K": deq_q8_k}


def blocks(name):
    """The NB blocks of a type, scale fields fixed (as test_quant.c's kq_bytes)."""
    num, nv, nbytes, offs = TYPES[name]
    raw, x = lcg_bytes(1000 + num, NB_RANDOM * nbytes)
    out = [bytearray(raw[i * nbytes:(i + 1) * nbytes]) for i in range(NB_RANDOM)]
    out += [bytearray(p * (nbytes // len(p))) for p in PATTERNS]
    for blk, b in enumerate(out):
        x = fix_scales(b, offs, x)
        if name == "Q8_K":
            struct.pack_into("<f", b, 0, f32(0.01 * (blk + 1)))
    return out


def fnv1a(data):
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & M64
    return h


def block_hashes(name):
    return [fnv1a(b"".join(struct.pack("<f", v) for v in DEQ[name](bytes(b)))) for b in blocks(name)]


if __name__ == "__main__":
    for name in TYPES:
        print("    { GGML_%s, { %s } }," % (name, ", ".join("0x%016xull" % h for h in block_hashes(name))))
