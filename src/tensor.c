/* tensor.c - element types and the F16/BF16 conversions (see tensor.h).
 * Bit-exact and independent of the compiler's _Float16 support. */
#include <string.h>
#include "tensor.h"

uint64_t tensor_row_bytes(uint32_t type, int64_t k)
{
    if (k < 0) return 0;
    switch (type) {
    case GGML_F32:  return (uint64_t)k * 4;
    case GGML_F16:  case GGML_BF16: return (uint64_t)k * 2;
    case GGML_Q8_0: return k % QK ? 0 : (uint64_t)(k / QK) * (2 + QK);       /* f16 scale + 32 int8 */
    case GGML_Q4_0: return k % QK ? 0 : (uint64_t)(k / QK) * (2 + QK / 2);   /* f16 scale + 16 bytes */
    default:        return 0;
    }
}

const char *tensor_type_name(uint32_t type)
{
    switch (type) {
    case GGML_F32:  return "F32";
    case GGML_F16:  return "F16";
    case GGML_Q4_0: return "Q4_0";
    case GGML_Q8_0: return "Q8_0";
    case GGML_BF16: return "BF16";
    }
    return "unknown";
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
