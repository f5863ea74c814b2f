/* dtype.c - F32 / F16 / BF16 conversions, bit-exact and independent of the
 * compiler's _Float16 support. See dtype.h. */
#include "dtype.h"

#include <string.h>

size_t cv_dtype_size(int dtype)
{
    switch (dtype) {
    case CV_F32: return 4;
    case CV_F16: return 2;
    case CV_BF16: return 2;
    default: return 0;
    }
}

const char *cv_dtype_name(int dtype)
{
    switch (dtype) {
    case CV_F32: return "F32";
    case CV_F16: return "F16";
    case CV_BF16: return "BF16";
    default: return "?";
    }
}

static float bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

float cv_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | man << 13);   /* inf / NaN */
    if (exp == 0) {
        if (man == 0) return bits_to_f32(sign);
        /* subnormal: man * 2^-24, exact in float */
        {
            float v = (float)man * (1.0f / 16777216.0f);
            return sign ? -v : v;
        }
    }
    return bits_to_f32(sign | (exp + 112) << 23 | man << 13);
}

uint16_t cv_f32_to_f16(float f)
{
    uint32_t x = f32_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t e = (x >> 23) & 0xff, m = x & 0x7fffff;
    uint32_t h, rem, half;
    int shift;

    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (m ? 0x200 | (m >> 13) : 0));
    if (e >= 143) return (uint16_t)(sign | 0x7c00);        /* >= 2^16: overflow */
    if (e >= 113) {                                        /* normal half */
        h = (e - 112) << 10 | m >> 13;
        rem = m & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;   /* may carry into inf */
        return (uint16_t)(sign | h);
    }
    /* Subnormal half (or zero): the value is (2^23 + m) * 2^(e-150), and a
     * half subnormal unit is 2^-24, so drop shift = 126 - e bits. */
    shift = 126 - (int)e;
    if (shift > 24) return sign;
    m |= 0x800000;
    h = m >> shift;
    rem = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float cv_bf16_to_f32(uint16_t b) { return bits_to_f32((uint32_t)b << 16); }

uint16_t cv_f32_to_bf16(float f)
{
    uint32_t x = f32_to_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);   /* quiet NaN */
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float load_f32(const uint8_t *p, int from)
{
    uint16_t h;
    float f;
    if (from == CV_F32) { memcpy(&f, p, 4); return f; }
    memcpy(&h, p, 2);
    return from == CV_F16 ? cv_f16_to_f32(h) : cv_bf16_to_f32(h);
}

static int is_inf_bits16(uint16_t h, int to)
{
    return to == CV_F16 ? (h & 0x7fff) == 0x7c00 : (h & 0x7fff) == 0x7f80;
}

size_t cv_convert(void *dst, int to, const void *src, int from, size_t n)
{
    const uint8_t *s = src;
    uint8_t *d = dst;
    size_t ss = cv_dtype_size(from), ds = cv_dtype_size(to), overflow = 0;
    if (n == 0) return 0;
    if (to == from) {
        memcpy(dst, src, n * ss);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        float f = load_f32(s + i * ss, from);
        if (to == CV_F32) {
            memcpy(d + i * ds, &f, 4);
        } else {
            uint16_t h = to == CV_F16 ? cv_f32_to_f16(f) : cv_f32_to_bf16(f);
            if (is_inf_bits16(h, to) && f == f && f - f == 0.0f) overflow++;
            memcpy(d + i * ds, &h, 2);
        }
    }
    return overflow;
}
