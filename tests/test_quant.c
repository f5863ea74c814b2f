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
    const char *out = getenv("OUT");
    snprintf(outdir, sizeof outdir, "%s/build/tmp", out ? out : ".");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", outdir);
    if (system(cmd) != 0) { CHECK(0, "cannot make %s", outdir); return check_done(); }
    char fix[700];
    snprintf(fix, sizeof fix, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", out ? out : ".");
    test_drift("fixture expert_mc3_fix", fix, 64, bounds_random);
    /* a larger random-weight MoR model: d 256, 6 layers (1 + 2 x 2 + 1), vocab 2048 */
    synth_spec sp = { 256, 6, 4, 2, 64, 768, 2048, 512, 2, GGML_F32, GGML_F32, 5 };
    char synth[700];
    snprintf(synth, sizeof synth, "%s/drift-synth-f32-%ld.gguf", outdir, (long)getpid());   /* other runs may share the tree */
    if (CHECK(synth_write(&sp, synth) == 0, "write a random-weight MoR model (d 256, 6 layers, vocab 2048)")) {
        test_drift("synthetic MoR", synth, 128, bounds_random);
        test_kv_types(synth, fix);
    }
    remove(synth);
    /* the bundled model (F16 weights: its F32 reference is exact), on English text through its tokenizer */
    if (access("models/brown-mor.gguf", R_OK) == 0) test_drift("bundled brown-mor", "models/brown-mor.gguf", 256, bounds_trained);
    else printf("# skip the bundled model: models/brown-mor.gguf is not here\n");
    return check_done();
}
