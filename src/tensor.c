/* tensor.c - element types and the F16/BF16 conversions (see tensor.h).
 * Bit-exact and independent of the compiler's _Float16 support. */
#include <string.h>
#include "tensor.h"

/* Each type's name, values per block and bytes per block, as ggml lays them out. */
static const struct { uint32_t type; const char *name; int64_t block, bytes; } types[] = {
    { GGML_F32, "F32", 1, 4 },          { GGML_F16, "F16", 1, 2 },          { GGML_BF16, "BF16", 1, 2 },
    { GGML_Q4_0, "Q4_0", QK, 18 },      /* f16 d, 16 bytes of nibbles */
    { GGML_Q4_1, "Q4_1", QK, 20 },      /* f16 d, f16 m, 16 bytes */
    { GGML_Q5_0, "Q5_0", QK, 22 },      /* f16 d, 4 bytes of high bits, 16 bytes */
    { GGML_Q5_1, "Q5_1", QK, 24 },      /* f16 d, f16 m, 4 + 16 bytes */
    { GGML_Q8_0, "Q8_0", QK, 34 },      /* f16 d, 32 int8 */
    { GGML_Q2_K, "Q2_K", QK_K, 84 },    /* 16 scale/min bytes, 64 bytes of 2-bit quants, f16 d, dmin */
    { GGML_Q3_K, "Q3_K", QK_K, 110 },   /* 32 bytes high bits, 64 low, 12 of 6-bit scales, f16 d */
    { GGML_Q4_K, "Q4_K", QK_K, 144 },   /* f16 d, dmin, 12 of 6-bit scales and mins, 128 of nibbles */
    { GGML_Q5_K, "Q5_K", QK_K, 176 },   /* as Q4_K, and 32 bytes of high bits */
    { GGML_Q6_K, "Q6_K", QK_K, 210 },   /* 128 low nibbles, 64 of high 2 bits, 16 int8 scales, f16 d */
    { GGML_Q8_K, "Q8_K", QK_K, 292 },   /* f32 d, 256 int8, 16 int16 sums */
};

static int type_index(uint32_t type)
{
    for (int i = 0; i < (int)(sizeof types / sizeof *types); i++)
        if (types[i].type == type) return i;
    return -1;
}

int64_t tensor_block_size(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? 0 : types[i].block;
}

uint64_t tensor_row_bytes(uint32_t type, int64_t k)
{
    int i = type_index(type);
    if (k < 0 || i < 0 || k % types[i].block) return 0;
    return (uint64_t)(k / types[i].block) * (uint64_t)types[i].bytes;
}

const char *tensor_type_name(uint32_t type)
{
    int i = type_index(type);
    return i < 0 ? "unknown" : types[i].name;
}

float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;   /* bf16 is the top half of an f32: exact */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) u = sign;
        else {                          /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));   /* NaN stays NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);   /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;           /* below half the smallest subnormal */
        uint32_t man = (ax & 0x7fffff) | 0x800000, e = ax >> 23;   /* value = man * 2^(e-150) */
        uint32_t shift = 126 - e;                                   /* to units of 2^-24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax + 0xfff + ((ax >> 13) & 1);   /* round to nearest even at bit 13 */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);   /* quiet NaN */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
