/* test_quant.c - the number formats and what quantization does to a model:
 *  - F16 and BF16 conversions: known values (rounding to nearest even,
 *    subnormals, overflow, NaN) and every 16-bit pattern round-tripped;
 *  - Q8_0 and Q4_0 blocks byte for byte as ggml lays them out (d as F16
 *    first, then the quants; Q4_0 value j in the low nibble of byte j, value
 *    j+16 in its high nibble), written out by hand for a few values, and the
 *    dequantization of random rows within half a step (Q8_0) or one step
 *    (Q4_0, whose top code is clipped);
 *  - drift: a fixture model re-typed by mor-quantize's code to F16, BF16,
 *    Q8_0 and Q4_0 stays within a bound of the F32 model's logits (mean KL
 *    and top-1 agreement, printed), and so do a larger random-weight model
 *    and the bundled model (models/brown-mor.gguf, on English text);
 *  - the other quants (Q4_1, Q5_0, Q5_1, Q2_K .. Q6_K, Q8_K): hand-built
 *    blocks, random blocks against an independent Python reading of the
 *    layouts (tests/kquant_ref.py), round trips of random rows, the GGUF
 *    reader, non-finite scales; a random-weight model stored as a k-quant mix
 *    decodes close to its dequantized F32 twin;
 *  - KV caches in F16 and Q8_0: logits close to the F32 cache's, bytes as
 *    the type says (mor_kv_bytes), Q8_0 refused for a head_dim that is not a
 *    multiple of 32, an unknown kv_type refused.
 * Models come from $OUT/build/fixtures (make test). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "gguf.h"
#include "kernels.h"
#include "mor.h"
#include "quant.h"
#include "drift.h"
#include "gguf_write.h"
#include "synth_model.h"

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_half(void)
{
    static const struct { uint32_t f; uint16_t h; const char *what; } f16[] = {
        { 0x3f800000, 0x3c00, "1" }, { 0xbf800000, 0xbc00, "-1" }, { 0x80000000, 0x8000, "-0" },
        { 0x477fe000, 0x7bff, "65504 (largest)" }, { 0x477fefff, 0x7bff, "just below 65520" },
        { 0x477ff000, 0x7c00, "65520 rounds to inf" }, { 0x7f800000, 0x7c00, "inf" },
        { 0x33800000, 0x0001, "2^-24 (smallest subnormal)" }, { 0x33000000, 0x0000, "2^-25: tie to even 0" },
        { 0x33c00000, 0x0002, "3*2^-25: tie to even 2" }, { 0x38800000, 0x0400, "2^-14 (smallest normal)" },
        { 0x387fc000, 0x03ff, "largest subnormal" }, { 0x3dcccccd, 0x2e66, "0.1" },
        { 0x3f801000, 0x3c00, "1+2^-11: tie to even" }, { 0x3f803000, 0x3c02, "1+3*2^-11: tie to even" },
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof f16 / sizeof *f16; i++) {
        uint16_t h = f32_to_f16(bits_f(f16[i].f));
        if (!CHECK(h == f16[i].h, "f32 -> f16: %s is 0x%04x (got 0x%04x)", f16[i].what, f16[i].h, h)) ok = 0;
    }
    CHECK((f32_to_f16(bits_f(0x7fc00000)) & 0x7fff) > 0x7c00, "f32 -> f16: NaN stays NaN");
    static const struct { uint32_t f; uint16_t h; const char *what; } bf[] = {
        { 0x3f800000, 0x3f80, "1" }, { 0x3f808000, 0x3f80, "1+2^-8: tie to even" }, { 0x3f818000, 0x3f82, "1+3*2^-8: tie to even" },
        { 0x3f808001, 0x3f81, "above the tie" }, { 0x7f7fffff, 0x7f80, "FLT_MAX rounds to inf" }, { 0x00000001, 0x0000, "smallest subnormal" },
    };
    for (size_t i = 0; i < sizeof bf / sizeof *bf; i++) {
        uint16_t h = f32_to_bf16(bits_f(bf[i].f));
        CHECK(h == bf[i].h, "f32 -> bf16: %s is 0x%04x (got 0x%04x)", bf[i].what, bf[i].h, h);
    }
    CHECK((f32_to_bf16(bits_f(0x7f800001)) & 0x7fff) > 0x7f80, "f32 -> bf16: a signalling NaN stays NaN");
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f16_to_f32((uint16_t)h);
        if (f == f && f32_to_f16(f) != h) bad16++;
        float g = bf16_to_f32((uint16_t)h);
        if (g == g && f32_to_bf16(g) != h) badbf++;
    }
    CHECK(bad16 == 0 && badbf == 0, "every non-NaN F16 and BF16 value round-trips through f32 (%d, %d mismatches)", bad16, badbf);
    (void)ok; (void)f_bits;
}

static void test_blocks(void)
{
    /* Q8_0: amax 127 makes d = 1 (F16 0x3c00), so each quant is roundf(x) */
    float x[32];
    static const float q8in[8] = { 127, -127, 0.5f, -0.5f, 1.4f, 2.5f, -2.5f, 3 };
    for (int j = 0; j < 32; j++) x[j] = j < 8 ? q8in[j] : (float)(j - 20);
    block_q8_0 b8;
    quant_row_q8_0(x, &b8, 32);
    unsigned char want8[34] = { 0x00, 0x3c, 127, (unsigned char)-127, 1, (unsigned char)-1, 1, 3, (unsigned char)-3, 3 };
    for (int j = 8; j < 32; j++) want8[2 + j] = (unsigned char)(int8_t)(j - 20);
    CHECK(!memcmp(&b8, want8, 34), "Q8_0 block bytes: d = 1.0 as F16 (00 3c), then roundf(x) (ties away from 0)");
    float back[32];
    dequant_row(GGML_Q8_0, &b8, back, 32);
    CHECK(back[0] == 127 && back[2] == 1 && back[3] == -1 && back[5] == 3 && back[31] == 11, "Q8_0 dequantizes to d * q");
    /* Q4_0: the value of largest magnitude is -8, so d = -8/-8 = 1 and q = min(15, (int8)(x + 8.5)) */
    static const float q4in[32] = { -8, 7, 0, 1, -1, 3.4f, -3.5f, 6.6f, 2, 2, 2, 2, 2, 2, 2, -7.9f,
                                    7.5f, 7.49f, -0.5f, 0.49f, 4, -4, 5, -5, 0, 0, 0, 0, 0, 0, 0, 6 };
    block_q4_0 b4;
    quant_row_q4_0(q4in, &b4, 32);
    /* low nibble: value j (0..15), high nibble: value j+16 */
    const unsigned char want4[18] = { 0x00, 0x3c,
        (0 | 15 << 4), (15 | 15 << 4), (8 | 8 << 4), (9 | 8 << 4), (7 | 12 << 4), (11 | 4 << 4), (5 | 13 << 4), (15 | 3 << 4),
        (10 | 8 << 4), (10 | 8 << 4), (10 | 8 << 4), (10 | 8 << 4), (10 | 8 << 4), (10 | 8 << 4), (10 | 8 << 4), (0 | 14 << 4) };
    CHECK(!memcmp(&b4, want4, 18), "Q4_0 block bytes: d = 1.0 as F16, value j in the low nibble of byte j, j+16 in the high one");
    dequant_row(GGML_Q4_0, &b4, back, 32);
    CHECK(back[0] == -8 && back[1] == 7 && back[16] == 7 && back[20] == 4 && back[31] == 6,
          "Q4_0 dequantizes to d * (q - 8)");
    /* the row byte counts GGUF uses */
    CHECK(tensor_row_bytes(GGML_Q8_0, 576) == 18 * 34 && tensor_row_bytes(GGML_Q4_0, 576) == 18 * 18 &&
          tensor_row_bytes(GGML_Q8_0, 33) == 0, "row bytes: 576 values are 18 blocks; 33 is not a whole block");
    /* random rows: error within half a step (Q8_0) / one step (Q4_0: code 16 is clipped to 15) */
    uint64_t s = 7;
    float row[256], deq[256];
    double worst8 = 0, worst4 = 0;
    for (int rep = 0; rep < 50; rep++) {
        for (int j = 0; j < 256; j++) row[j] = synth_normal(&s) * (rep % 7 + 1);
        block_q8_0 q8[8];
        block_q4_0 q4[8];
        quant_row_q8_0(row, q8, 256);
        dequant_row(GGML_Q8_0, q8, deq, 256);
        for (int j = 0; j < 256; j++) {
            double d = fabs(f16_to_f32(q8[j / 32].d));
            double e = fabs((double)row[j] - deq[j]) / (d > 0 ? d : 1);
            if (e > worst8) worst8 = e;
        }
        quant_row_q4_0(row, q4, 256);
        dequant_row(GGML_Q4_0, q4, deq, 256);
        for (int j = 0; j < 256; j++) {
            double d = fabs(f16_to_f32(q4[j / 32].d));
            double e = fabs((double)row[j] - deq[j]) / (d > 0 ? d : 1);
            if (e > worst4) worst4 = e;
        }
    }
    /* d is rounded to F16 after the quants were chosen with the exact d: that
     * adds up to |q| * 2^-11 d (q <= 127, resp. 8) */
    CHECK(worst8 <= 0.5 + 127.0 / 2048, "Q8_0 round trip of random rows: error <= d/2 + 127 d 2^-11 (worst %.4f d)", worst8);
    CHECK(worst4 <= 1.0 + 8.0 / 2048, "Q4_0 round trip of random rows: error <= d + 8 d 2^-11 (worst %.4f d)", worst4);
}

/* ---- the other legacy quants and the k-quants ---- */

static const uint32_t new_types[] = { GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_Q2_K, GGML_Q3_K,
                                      GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q8_K };
enum { N_NEW = sizeof new_types / sizeof *new_types };

/* Blocks built by hand from the layouts (quant.h, ggml's), with values worked out on paper. */
static void test_kq_hand(void)
{
    float out[256];
    /* Q4_1: d 1, m -2; byte j holds j (value j) and 15 - j (value j + 16) */
    block_q4_1 a = { 0x3c00, 0xc000, { 0 } };
    for (int j = 0; j < 16; j++) a.qs[j] = (uint8_t)(j | (15 - j) << 4);
    dequant_row(GGML_Q4_1, &a, out, 32);
    CHECK(out[0] == -2 && out[5] == 3 && out[16] == 13 && out[31] == -2, "Q4_1 block: d * q + m, low nibbles first");
    /* Q5_0: d 0.5, the same nibbles, fifth bits qh = 0x80000001 (values 0 and 31) */
    block_q5_0 b = { 0x3800, { 0x01, 0, 0, 0x80 }, { 0 } };
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    dequant_row(GGML_Q5_0, &b, out, 32);
    CHECK(out[0] == 0 && out[1] == -7.5f && out[16] == -0.5f && out[31] == 0.0f && out[30] == -7.5f,
          "Q5_0 block: d * ((nibble | bit << 4) - 16), bit j of the little-endian qh");
    /* Q5_1: d 0.25, m 1, qh = 0x00010002 (values 1 and 16) */
    block_q5_1 c = { 0x3400, 0x3c00, { 0x02, 0, 0x01, 0 }, { 0 } };
    for (int j = 0; j < 16; j++) c.qs[j] = (uint8_t)(j | (15 - j) << 4);
    dequant_row(GGML_Q5_1, &c, out, 32);
    CHECK(out[0] == 1 && out[1] == 1 + 0.25f * 17 && out[16] == 1 + 0.25f * 31 && out[17] == 1 + 0.25f * 14,
          "Q5_1 block: d * (nibble | bit << 4) + m");
    /* Q4_K: d 1, dmin 0.5; sub-block 1: scale 3, min 4; sub-block 5: scale 17 = 1 | 1 << 4 (low nibble in
     * byte 9, top bits in byte 1), min 40 = 8 | 2 << 4 (high nibble of byte 9, top bits in byte 5) */
    block_q4_k k4;
    memset(&k4, 0, sizeof k4);
    k4.d = 0x3c00; k4.dmin = 0x3800;
    k4.scales[1] = 3; k4.scales[5] = 4;
    k4.scales[9] = 1 | 8 << 4; k4.scales[1] |= 1 << 6; k4.scales[5] |= 2 << 6;
    k4.qs[7] = 0x50;          /* value 32 + 7 (sub-block 1, high nibble): q 5 */
    k4.qs[64 + 2] = 0xa0;     /* value 128 + 32 + 2 (sub-block 5): q 10 */
    dequant_row(GGML_Q4_K, &k4, out, 256);
    /* sub-block 1's scale byte also carries sub-block 5's top bits: 3 | 64 reads as 3 (6 bits) */
    CHECK(out[39] == 3 * 5 - 0.5f * 4 && out[38] == -2 && out[162] == 17 * 10 - 0.5f * 40 && out[161] == -20 &&
          out[0] == 0, "Q4_K block: d * scale * q - dmin * min, 6-bit scales and mins packed in 12 bytes");
    /* Q6_K: d 0.5; value 200 (second half, r = 72: ql[64 + 8] high nibble, qh[32 + 8] bits 4-5, scale 12) */
    block_q6_k k6;
    memset(&k6, 0, sizeof k6);
    k6.d = 0x3800; k6.scales[12] = -3; k6.scales[0] = 2;
    k6.ql[64 + 8] = 0x70; k6.qh[32 + 8] = 2 << 4;   /* q = 7 | 2 << 4 = 39 -> 7 */
    dequant_row(GGML_Q6_K, &k6, out, 256);
    CHECK(out[200] == 0.5f * -3 * 7 && out[0] == 0.5f * 2 * -32 && out[199] == 0.5f * -3 * -32,
          "Q6_K block: d * scale * (q - 32), 4 low bits and 2 high bits");
    /* Q3_K: d 1; sub-block 9 (values 144..159): scale byte 1 high nibble 5, top bits of byte 9 at bits 4-5:
     * 2 -> 5 | 2 << 4 = 37 - 32 = 5; value 150: low bits qs[32 + 22] bits 0-1 = 3, high bit hmask[22] bit 4 */
    block_q3_k k3;
    memset(&k3, 0, sizeof k3);
    k3.d = 0x3c00; k3.scales[1] = 5 << 4; k3.scales[9] = 2 << 4;
    k3.qs[32 + 22] = 3; k3.hmask[22] = 1 << 4;
    dequant_row(GGML_Q3_K, &k3, out, 256);
    CHECK(out[150] == 5 * 3 && out[151] == 5 * -4 && out[0] == -32 * -4, "Q3_K block: d * (scale - 32) * (q - 4)");
    /* Q2_K: d 2, dmin 1; sub-block 3 scale 5, min 2; value 48 + 1: qs[1] bits 2-3 (values 32..63) */
    block_q2_k k2;
    memset(&k2, 0, sizeof k2);
    k2.d = 0x4000; k2.dmin = 0x3c00; k2.scales[3] = 5 | 2 << 4; k2.qs[17] = 3 << 2;
    dequant_row(GGML_Q2_K, &k2, out, 256);
    CHECK(out[49] == 2 * 5 * 3 - 2 && out[48] == -2 && out[0] == 0, "Q2_K block: d * scale * q - dmin * min");
    /* the row byte counts GGUF uses, and rows that are not whole blocks */
    static const uint64_t bytes[N_NEW] = { 20, 22, 24, 84, 110, 144, 176, 210, 292 };
    int rb_ok = 1;
    for (int t = 0; t < N_NEW; t++) {
        const int64_t bk = tensor_block_size(new_types[t]);
        rb_ok &= tensor_row_bytes(new_types[t], 3 * bk) == 3 * bytes[t] && tensor_row_bytes(new_types[t], bk + 16) == 0;
    }
    CHECK(rb_ok && tensor_row_bytes(GGML_Q4_K, 576) == 0 && tensor_row_bytes(GGML_Q5_0, 576) == 18 * 22,
          "row bytes of the new types: 20, 22, 24 per 32, 84, 110, 144, 176, 210, 292 per 256; partial blocks refused");
}

/* The blocks tests/kquant_ref.py makes: KQ_RANDOM of the same LCG's bytes,
 * then all 0x00, all 0xFF, 0x5A 0xA5 repeated; F16 scale fields fixed. */
enum { KQ_RANDOM = 5, KQ_NB = KQ_RANDOM + 3 };
static void kq_bytes(uint32_t type, unsigned char *buf)
{
    const size_t bs = (size_t)tensor_row_bytes(type, tensor_block_size(type));
    uint64_t x = 1000 + type;
    for (size_t i = 0; i < bs * KQ_RANDOM; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (unsigned char)(x >> 56);
    }
    static const unsigned char pattern[3][2] = { { 0x00, 0x00 }, { 0xFF, 0xFF }, { 0x5A, 0xA5 } };
    for (size_t i = 0; i < bs * 3; i++) buf[bs * KQ_RANDOM + i] = pattern[i / bs][i % bs % 2];
    static const struct { uint32_t t; int off[2], n; } f16s[] = {
        { GGML_Q4_1, { 0, 2 }, 2 }, { GGML_Q5_0, { 0 }, 1 }, { GGML_Q5_1, { 0, 2 }, 2 }, { GGML_Q2_K, { 80, 82 }, 2 },
        { GGML_Q3_K, { 108 }, 1 }, { GGML_Q4_K, { 0, 2 }, 2 }, { GGML_Q5_K, { 0, 2 }, 2 }, { GGML_Q6_K, { 208 }, 1 },
    };
    for (int b = 0; b < KQ_NB; b++) {
        unsigned char *blk = buf + (size_t)b * bs;
        for (size_t i = 0; i < sizeof f16s / sizeof *f16s; i++)
            for (int f = 0; f16s[i].t == type && f < f16s[i].n; f++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(x >> 48);
                uint16_t h = (uint16_t)((r & 0x83ff) | ((8 + (r >> 10) % 7) << 10));
                memcpy(blk + f16s[i].off[f], &h, 2);
            }
        if (type == GGML_Q8_K) { float d = (float)(0.01 * (b + 1)); memcpy(blk, &d, 4); }
    }
}

/* FNV-1a over the float32 bit patterns of v[0..n) (kquant_ref.py's fnv1a) */
static uint64_t kq_hash(const float *v, int64_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 1099511628211ull;
    }
    return h;
}

static void test_kq_python(void)
{
    /* python3 tests/kquant_ref.py (tests/test_kquant_table.py checks this table is its output) */
    static const struct { uint32_t t; uint64_t hash[KQ_NB]; } want[] = {
    { GGML_Q4_1, { 0xac2a7e4ccecb246eull, 0xa8fabed5d88dc26aull, 0xbbb7c3272aa219ecull, 0x23d48f0ee41277a3ull, 0xe9c89ac884051199ull, 0x62952c241bbce125ull, 0x0bfc449f6eb86325ull, 0x59c26a1c8bd6bcc5ull } },
    { GGML_Q5_0, { 0xa856a7cf1263c018ull, 0x9059680747d68809ull, 0x9c5a571c38a5de98ull, 0x3dde2acf9248da75ull, 0x83a929d081f28411ull, 0x502b7245927aed25ull, 0x0001a2dcd69aca65ull, 0x75a7327aec98e565ull } },
    { GGML_Q5_1, { 0xbee19118cda6ff15ull, 0xd558e43d68b227adull, 0x8aa22e3df1d8dfe1ull, 0xef740d6374f824e5ull, 0x05943f302183d4ffull, 0x610aab2f95f001e5ull, 0xf55be0876e52d625ull, 0x58d0d83e7dae7ff5ull } },
    { GGML_Q2_K, { 0x33ed7efaf41bd61aull, 0x68a908e45f231fb7ull, 0xf557985ae878126eull, 0xf5cfa3d140eaef2cull, 0x8c92dbefbe48c79dull, 0x51d88627df287325ull, 0x8ccc39213e74fb25ull, 0x97bfc385ef8fcda5ull } },
    { GGML_Q3_K, { 0x4e7ab65edc1e0f1aull, 0x9dd66812361253d6ull, 0xf2cc6554f8a5131cull, 0x66e3a2fadd0e6892ull, 0x9ebf0a978616234full, 0xdc4fb22d341edd25ull, 0xfe8dbc8c39d08b25ull, 0x783b159cf6b01e65ull } },
    { GGML_Q4_K, { 0x5a340de890856831ull, 0x62a060e47b467b8aull, 0xd13fce1b493cddeeull, 0x704a898fd0c29b8bull, 0xca47fc2ed418445full, 0x51d88627df287325ull, 0x321919e68b1cb925ull, 0x392ed4ee6360a7e5ull } },
    { GGML_Q5_K, { 0xdd86487d14198f3cull, 0xdaddb50c15a47e69ull, 0xd88e150b8b8fc036ull, 0xa76dca39f8b6e056ull, 0x48061d3e73b3ba6cull, 0x151ff59c7f287325ull, 0xdecf702fd25bdf25ull, 0x877ab79c1f8bb4a5ull } },
    { GGML_Q6_K, { 0x2060173089592eeeull, 0x23635a6ba65dc547ull, 0xceca4655e35efc77ull, 0x7baddf0b3029701bull, 0xada7bb5d21f99a25ull, 0x151ff59c7f287325ull, 0xb8837fbd45d63b25ull, 0xe866396f83082325ull } },
    { GGML_Q8_K, { 0xa4b0a9df330146daull, 0x7a8267475c25a4f0ull, 0x5da14f67ae6677c1ull, 0x27f288442f6c01acull, 0x084b7217829167eaull, 0x51d88627df287325ull, 0x3d941bac90d65d25ull, 0x40444771daa11625ull } },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const uint32_t t = want[i].t;
        const int64_t bk = tensor_block_size(t);
        const size_t bs = (size_t)tensor_row_bytes(t, bk);
        unsigned char buf[KQ_NB * 292];
        float out[KQ_NB * 256];
        kq_bytes(t, buf);
        dequant_row(t, buf, out, KQ_NB * bk);   /* the row at once, */
        int bad = -1, bad1 = -1;
        for (int b = 0; b < KQ_NB; b++) {
            if (bad < 0 && kq_hash(out + b * bk, bk) != want[i].hash[b]) bad = b;
            float one[256];
            dequant_row(t, buf + (size_t)b * bs, one, bk);   /* and each block alone */
            if (bad1 < 0 && memcmp(one, out + b * bk, sizeof *one * (size_t)bk)) bad1 = b;
        }
        CHECK(bad < 0 && bad1 < 0, "%s: %d blocks (%d random, zeros, ones, 0x5A/0xA5) dequantize bit for bit to the "
              "values of an independent Python reading of the layout (first block that differs: %d; alone: %d)",
              tensor_type_name(t), KQ_NB, KQ_RANDOM, bad, bad1);
    }
}

/* Quantize -> dequantize of seeded random rows (normal values at several scales, a row of one sign, a row
 * with an outlier, a zero row): the RMS error relative to the row's RMS within each type's bound, zero rows
 * exact; and the same floats give the same bytes twice. */
static void test_kq_roundtrip(void)
{
    /* bounds about 25% above the worst row ggml's reference quantizers reach here (measured: printed
     * below), in units of the row's RMS; the worst rows are those with outliers */
    static const double bound[N_NEW] = { 0.125, 0.11, 0.065, 0.40, 0.25, 0.12, 0.062, 0.038, 0.03 };
    enum { K = 1024 };
    static float row[K], back[K];
    static unsigned char q1[K * 2], q2[K * 2];
    for (int t = 0; t < N_NEW; t++) {
        const uint32_t ty = new_types[t];
        const size_t rb = (size_t)tensor_row_bytes(ty, K);
        uint64_t s = 11 + (uint64_t)t;
        double worst = 0, sum_e = 0, sum_x = 0;
        int same = 1, zero_ok = 1;
        for (int rep = 0; rep < 24; rep++) {
            /* standard deviations 1e-3, 1, 30 and 0.05 (synth_normal's is 0.02) */
            const float sc = rep % 4 == 0 ? 0.05f : rep % 4 == 1 ? 50.0f : rep % 4 == 2 ? 1500.0f : 2.5f;
            for (int j = 0; j < K; j++) {
                row[j] = synth_normal(&s) * sc;
                if (rep % 6 == 5) row[j] = fabsf(row[j]) + sc;           /* one sign, offset */
                if (rep % 6 == 4 && j % 97 == 0) row[j] *= 12;            /* outliers */
            }
            if (rep == 23) memset(row, 0, sizeof row);
            quant_row(ty, row, q1, K);
            quant_row(ty, row, q2, K);
            same &= !memcmp(q1, q2, rb);
            dequant_row(ty, q1, back, K);
            double e2 = 0, x2 = 0;
            for (int j = 0; j < K; j++) {
                e2 += ((double)row[j] - back[j]) * ((double)row[j] - back[j]);
                x2 += (double)row[j] * row[j];
            }
            if (rep == 23) { zero_ok = e2 == 0; continue; }
            const double rel = sqrt(e2 / x2);
            if (rel > worst || rel != rel) worst = rel != rel ? INFINITY : rel;
            sum_e += e2; sum_x += x2;
        }
        CHECK(worst < bound[t] && same && zero_ok, "%s round trip of 23 random rows of %d: RMS error %.4f of the "
              "rows' RMS overall, worst row %.4f (bound %.3f); the same bytes twice; a zero row exact",
              tensor_type_name(ty), K, sqrt(sum_e / sum_x), worst, bound[t]);
    }
}

/* A one-tensor GGUF image: header, no keys, one info (2 dims), data at offset 0. */
static size_t tiny_gguf(unsigned char *buf, uint32_t type, uint64_t ne0, uint64_t ne1, size_t nbytes)
{
    size_t n = 0;
    const uint32_t v3 = 3, two = 2;
    const uint64_t one = 1, zero = 0, name_len = 1;
    memcpy(buf, "GGUF", 4); n = 4;
#define PUT(x) (memcpy(buf + n, &(x), sizeof(x)), n += sizeof(x))
    PUT(v3); PUT(one); PUT(zero);
    PUT(name_len); buf[n++] = 'w';
    PUT(two); PUT(ne0); PUT(ne1); PUT(type); PUT(zero);
#undef PUT
    n = (n + 31) / 32 * 32;
    memset(buf + n, 0, nbytes);
    return n + nbytes;
}

/* The GGUF reader takes every new type (sizes by block), refuses a row that is not whole blocks; a
 * non-finite scale or min is found by quant_find_nonfinite (the loader's check of every tensor). */
static void test_kq_reader(void)
{
    static unsigned char img[64 + 4 * 292 * 2];
    int all_ok = 1, refused = 1, nonfinite = 1;
    for (int t = 0; t < N_NEW; t++) {
        const uint32_t ty = new_types[t];
        const int64_t bk = tensor_block_size(ty), cols = 2 * bk;
        const size_t nbytes = (size_t)tensor_row_bytes(ty, cols) * 2;
        size_t n = tiny_gguf(img, ty, (uint64_t)cols, 2, nbytes);
        gguf_file *g = NULL;
        all_ok &= gguf_parse(img, n, &g) == MOR_OK && g->tensors[0].type == ty && g->tensors[0].nbytes == nbytes;
        gguf_free(g); g = NULL;
        n = tiny_gguf(img, ty, (uint64_t)(cols - 16), 2, nbytes);   /* 16 short of whole blocks */
        refused &= gguf_parse(img, n, &g) == MOR_E_FORMAT;
        gguf_free(g);
        /* every block finite, then a NaN, an infinity in the second block's scale fields */
        unsigned char blocks[4 * 292];
        float x[4 * 256];
        for (int j = 0; j < 4 * bk; j++) x[j] = (float)((j * 37) % 19) - 9.0f;
        quant_row(ty, x, blocks, 4 * bk);
        nonfinite &= quant_find_nonfinite(ty, blocks, 4 * bk) == -1;
        const size_t bs = (size_t)tensor_row_bytes(ty, bk);
        static const struct { uint32_t t; int off[2], n, quant; } fields[] = {
            { GGML_Q4_1, { 0, 2 }, 2, 4 }, { GGML_Q5_0, { 0 }, 1, 6 }, { GGML_Q5_1, { 0, 2 }, 2, 8 },
            { GGML_Q2_K, { 80, 82 }, 2, 20 }, { GGML_Q3_K, { 108 }, 1, 40 }, { GGML_Q4_K, { 0, 2 }, 2, 20 },
            { GGML_Q5_K, { 0, 2 }, 2, 60 }, { GGML_Q6_K, { 208 }, 1, 100 }, { GGML_Q8_K, { 0 }, 1, 10 },
        };
        const uint16_t h[2] = { 0x7c00, 0xfe00 };   /* inf, NaN */
        const float f[2] = { INFINITY, NAN };
        for (int fi = 0; fi < fields[t].n; fi++)
            for (int v = 0; v < 2; v++) {
                unsigned char *at = blocks + bs + fields[t].off[fi], save[4];
                memcpy(save, at, 4);
                if (ty == GGML_Q8_K) memcpy(at, &f[v], 4); else memcpy(at, &h[v], 2);
                nonfinite &= quant_find_nonfinite(ty, blocks, 4 * bk) == bk;
                memcpy(at, save, 4);
            }
        /* quants are integers: any bytes there are values */
        memset(blocks + bs + fields[t].quant, 0xff, 2);
        nonfinite &= fields[t].t == ty && quant_find_nonfinite(ty, blocks, 4 * bk) == -1;
    }
    CHECK(all_ok, "GGUF reader: a tensor of each new type (Q4_1 .. Q8_K) is read, its bytes counted by block");
    CHECK(refused, "GGUF reader: a row of each new type that is not a whole number of blocks is refused");
    CHECK(nonfinite, "quant_find_nonfinite: every new type's scales and mins (F16; Q8_K's float d) checked");
}

static char outdir[600];

/* Write g's model re-typed to path. */
static int retype_file(const char *src, const char *dst, uint32_t type)
{
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    void *buf = malloc((size_t)n);
    int rc = -1;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        gguf_file *g = NULL;
        if (gguf_parse(buf, (size_t)n, &g) == MOR_OK) {
            gguf_writer *b = gguf_writer_new();
            int fb = 0;
            if (b) {
                gguf_writer_add_retyped(b, g, type, type == GGML_Q4_0 ? GGML_Q8_0 : type, &fb);
                rc = gguf_writer_write_file(b, dst, NULL, 0);
            }
            gguf_writer_free(b);
            gguf_free(g);
        }
    }
    fclose(f);
    free(buf);
    return rc;
}

/* bounds: about 5x the mean KL measured when this test was written. The
 * random models' near-flat distributions flip their top-1 easily; the
 * trained model's do not. */
typedef struct { uint32_t type; const char *name; double kl, top1; } drift_bound;
static const drift_bound bounds_random[] = {
    { GGML_F16, "F16", 2e-5, 0.95 }, { GGML_BF16, "BF16", 2e-4, 0.90 },
    { GGML_Q8_0, "Q8_0", 4e-3, 0.80 }, { GGML_Q4_0, "Q4_0", 0.2, 0.30 },
};
static const drift_bound bounds_trained[] = {
    { GGML_F16, "F16", 1e-6, 0.99 }, { GGML_BF16, "BF16", 2e-5, 0.98 },
    { GGML_Q8_0, "Q8_0", 1e-3, 0.97 }, { GGML_Q4_0, "Q4_0", 1.2e-2, 0.90 },
};

static void test_drift(const char *label, const char *f32path, int n, const drift_bound *bounds)
{
    mor_model *ref = NULL;
    if (!CHECK(mor_model_load_file(f32path, NULL, &ref) == MOR_OK, "%s: load %s", label, f32path)) return;
    for (size_t i = 0; i < 4; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/drift-%s-%s-%ld.gguf", outdir, label, bounds[i].name, (long)getpid());
        mor_model *q = NULL;
        drift_result d;
        int ok = retype_file(f32path, path, bounds[i].type) == 0 && mor_model_load_file(path, NULL, &q) == MOR_OK &&
                 drift_measure(ref, q, n, 11, &d) == 0;
        CHECK(ok && d.mean_kl <= bounds[i].kl && d.top1 >= bounds[i].top1,
              "%s %s vs F32 over %d tokens: mean KL %.3g nats (bound %.3g; max %.3g), top-1 agreement %.3f (bound %.2f), "
              "mean depth %.3f vs %.3f", label, bounds[i].name, ok ? d.n : 0, ok ? d.mean_kl : NAN, bounds[i].kl,
              ok ? d.max_kl : NAN, ok ? d.top1 : NAN, bounds[i].top1, ok ? d.depth_b : NAN, ok ? d.depth_a : NAN);
        mor_model_free(q);
        remove(path);
    }
    mor_model_free(ref);
}

/* A llama.cpp-like k-quant mix: attn_v and ffn_down Q6_K, the other attention matrices Q4_K, ffn_gate and
 * ffn_up Q5_K, the embedding (tied to the output) Q5_0; routers and norms kept. */
static uint32_t pick_mix(const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, void *user)
{
    (void)ne; (void)user;
    if (n_dims != 2 || !strncmp(name, "rtr", 3)) return type;
    if (strstr(name, "attn_v.") || strstr(name, "ffn_down.")) return GGML_Q6_K;
    if (strstr(name, "ffn_gate.") || strstr(name, "ffn_up.")) return GGML_Q5_K;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) return GGML_Q5_0;
    return GGML_Q4_K;
}

/* src re-typed to dst by pick (NULL: every matrix to F32, the dequantized twin). */
static int retype_with(const char *src, const char *dst, gguf_type_pick_fn pick)
{
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    void *buf = malloc((size_t)n);
    int rc = -1, fb = 0;
    gguf_file *g = NULL;
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n && gguf_parse(buf, (size_t)n, &g) == MOR_OK) {
        gguf_writer *b = gguf_writer_new();
        if (b && pick) gguf_writer_add_retyped_fn(b, g, pick, NULL, &fb);
        else if (b) gguf_writer_add_retyped(b, g, GGML_F32, GGML_F32, &fb);
        if (b && !fb) rc = gguf_writer_write_file(b, dst, NULL, 0);
        gguf_writer_free(b);
        gguf_free(g);
    }
    fclose(f);
    free(buf);
    return rc;
}

/* A random-weight MoR model stored as a k-quant mix (Q4_K, Q5_K, Q6_K, Q5_0 embedding and output) loads
 * (every tensor checked) and decodes with logits close to those of its dequantized F32 twin: they differ
 * only by the activations' quantization (Q8_K, Q8_0 rows). */
static void test_kq_model(const char *f32path)
{
    char mix[700], twin[700];
    snprintf(mix, sizeof mix, "%s/kq-mix-%ld.gguf", outdir, (long)getpid());
    snprintf(twin, sizeof twin, "%s/kq-twin-%ld.gguf", outdir, (long)getpid());
    mor_model *a = NULL, *b = NULL;
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags |= MOR_MODEL_CHECK_TENSORS;
    int ok = retype_with(f32path, mix, pick_mix) == 0 && retype_with(mix, twin, NULL) == 0 &&
             mor_model_load_file(mix, &mp, &a) == MOR_OK && mor_model_load_file(twin, &mp, &b) == MOR_OK;
    if (!CHECK(ok, "k-quant mix of a random-weight MoR model and its dequantized F32 twin written and loaded"))
        goto done;
    enum { NT = 48 };
    const int32_t V = mor_model_n_vocab(a);
    mor_token toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (mor_token)((i * 7919 + 13) % V);
    float *la = malloc(sizeof(float) * NT * (size_t)V), *lb = malloc(sizeof(float) * NT * (size_t)V);
    double da = 0, db = 0, diff = 0, big = 0;
    int top_same = 0;
    ok = la && lb && drift_run(a, toks, NT, la, &da) == 0 && drift_run(b, toks, NT, lb, &db) == 0;
    for (int i = 0; ok && i < NT; i++) {
        int ta = 0, tb = 0;
        for (int32_t v = 0; v < V; v++) {
            const float x = la[(size_t)i * V + v], y = lb[(size_t)i * V + v];
            if (fabs((double)x - y) > diff || x != x) diff = x != x ? INFINITY : fabs((double)x - y);
            if (fabs(y) > big) big = fabs(y);
            if (x > la[(size_t)i * V + ta]) ta = v;
            if (y > lb[(size_t)i * V + tb]) tb = v;
        }
        top_same += ta == tb;
    }
    CHECK(ok && diff < 0.04 * big && top_same >= NT * 8 / 10, "k-quant mix vs its dequantized F32 twin, %d tokens: "
          "max logit difference %.3g (largest logit %.3g), top-1 agrees at %d of %d, mean depth %.3f vs %.3f", NT,
          diff, big, top_same, NT, da, db);
    free(la); free(lb);
done:
    mor_model_free(a); mor_model_free(b);
    remove(mix); remove(twin);
}

/* Logits of a 40-token prefill and 8 single-token steps with a kv_type cache. */
static int kv_run(mor_model *m, int32_t kv_type, float *logits, uint64_t *bytes, mor_status *st_out)
{
    const int32_t V = mor_model_n_vocab(m);
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 48; cp.kv_type = kv_type;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_status st = mor_context_create(m, &cp, &c);
    if (st_out) *st_out = st;
    if (st) return 0;
    int ok = mor_batch_create(48, &b) == MOR_OK && mor_router_set_mode(mor_context_router(c), MOR_ROUTE_FORCED, 2) == MOR_OK;
    for (int32_t i = 0; ok && i < 40; i++) mor_batch_add(b, (i * 37 + 3) % V, i, 0, i == 39);
    ok = ok && mor_decode(c, b) == MOR_OK;
    if (ok) memcpy(logits, mor_get_logits(c, 39), sizeof(float) * (size_t)V);
    for (int32_t p = 40; ok && p < 48; p++) {
        mor_batch_clear(b);
        mor_batch_add(b, (p * 37 + 3) % V, p, 0, 1);
        ok = mor_decode(c, b) == MOR_OK;
        if (ok) memcpy(logits + (size_t)(p - 39) * V, mor_get_logits(c, 0), sizeof(float) * (size_t)V);
    }
    if (ok && bytes) mor_kv_bytes(mor_context_kv(c), MOR_KV_ALL, bytes, NULL);
    mor_batch_free(b);
    mor_context_free(c);
    return ok;
}

static void test_kv_types(const char *synth, const char *fixture)
{
    mor_model *m = NULL;
    if (!CHECK(mor_model_load_file(synth, NULL, &m) == MOR_OK, "load the random MoR model for the KV types")) return;
    const int32_t V = mor_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * 9 * (size_t)V), *l = malloc(sizeof(float) * 9 * (size_t)V);
    uint64_t b32 = 0, b = 0;
    int ok32 = kv_run(m, MOR_KV_TYPE_F32, ref, &b32, NULL);
    double scale = 0;
    for (size_t i = 0; i < 9 * (size_t)V; i++) if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
    static const struct { int32_t t; const char *name; double tol, bytes; } kt[] = {
        { MOR_KV_TYPE_F16, "F16", 1e-3, 0.5 }, { MOR_KV_TYPE_Q8_0, "Q8_0", 2e-2, 34.0 / 128 },
    };
    for (size_t i = 0; i < 2; i++) {
        int ok = ok32 && kv_run(m, kt[i].t, l, &b, NULL);
        double e = ok ? check_maxdiff(ref, l, 9 * (long)V) : INFINITY;
        CHECK(ok && e <= kt[i].tol * scale, "%s KV cache: prefill + 8 steps, logits within %.0e of the largest (max diff %.2g of %.2g)",
              kt[i].name, kt[i].tol, e, scale);
        CHECK(ok && (double)b == kt[i].bytes * (double)b32, "%s KV cache: %llu bytes allocated, %.4f of F32's %llu",
              kt[i].name, (unsigned long long)b, kt[i].bytes, (unsigned long long)b32);
    }
    mor_status st = MOR_OK;
    kv_run(m, 2, l, NULL, &st);
    CHECK(st == MOR_E_INVALID_ARG, "kv_type 2 (not a cache type) is MOR_E_INVALID_ARG: %s", mor_status_str(st));
    free(ref); free(l);
    mor_model_free(m);
    mor_model *f = NULL;
    if (mor_model_load_file(fixture, NULL, &f) == MOR_OK) {
        float *fl = malloc(sizeof(float) * 9 * (size_t)mor_model_n_vocab(f));
        st = MOR_OK;
        kv_run(f, MOR_KV_TYPE_Q8_0, fl, NULL, &st);
        CHECK(st == MOR_E_UNSUPPORTED, "Q8_0 KV cache with head_dim %d is MOR_E_UNSUPPORTED: %s", mor_model_head_dim(f), mor_status_str(st));
        CHECK(kv_run(f, MOR_KV_TYPE_F16, fl, NULL, NULL), "F16 KV cache with head_dim %d decodes", mor_model_head_dim(f));
        free(fl);
        mor_model_free(f);
    }
}

int main(void)
{
    test_half();
    test_blocks();
    test_kq_hand();
    test_kq_python();
    test_kq_roundtrip();
    test_kq_reader();
    const char *out = getenv("OUT");
    snprintf(outdir, sizeof outdir, "%s/build/tmp", out ? out : ".");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", outdir);
    if (system(cmd) != 0) { CHECK(0, "cannot make %s", outdir); return check_done(); }
    char fix[700];
    snprintf(fix, sizeof fix, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", out ? out : ".");
    test_drift("fixture expert_mc3_fix", fix, 64, bounds_random);
    /* a larger random-weight MoR model: d 256, 6 layers (1 + 2 x 2 + 1), vocab 2048 */
    synth_spec sp = { 256, 6, 4, 2, 64, 768, 2048, 512, 2, GGML_F32, GGML_F32, 5, 0 };
    char synth[700];
    snprintf(synth, sizeof synth, "%s/drift-synth-f32-%ld.gguf", outdir, (long)getpid());   /* other runs may share the tree */
    if (CHECK(synth_write(&sp, synth) == 0, "write a random-weight MoR model (d 256, 6 layers, vocab 2048)")) {
        test_drift("synthetic MoR", synth, 128, bounds_random);
        test_kq_model(synth);
        test_kv_types(synth, fix);
    }
    remove(synth);
    /* the bundled model (F16 weights: its F32 reference is exact), on English text through its tokenizer */
    if (access("models/brown-mor.gguf", R_OK) == 0) test_drift("bundled brown-mor", "models/brown-mor.gguf", 256, bounds_trained);
    else printf("# skip the bundled model: models/brown-mor.gguf is not here\n");
    return check_done();
}
