/* test_lora.c - depth-wise LoRA (src/lora.c, docs/FORMAT.md "Depth-wise
 * LoRA") and the relaxed conversion (src/tools/mor-convert/relax.c):
 *  - runtime: a recursive model with per-layer deltas gives the logits of the
 *    same model with every delta folded by hand into per-layer weights,
 *    unfolded (per row) and folded at load (MOR_MODEL_FOLD_LORA), with F32
 *    and F16 shared weights (Q8_0 and Q4_0: folding exact, the unfolded delta
 *    exact on top of the quantized product, the model within the Q8_0
 *    activation rounding); 1 or 2 threads and one batch or one token at a
 *    time agree; rows at different depths share one shared-weight product
 *    (lora_apply_exec with per-row layers); the unfolded product on 1-4
 *    threads, each row alone and in any batch gives the same bits, the
 *    reference kernels those of the plain float loop; the model size is what is read; every malformed
 *    LoRA tensor or key is MOR_E_FORMAT.
 *  - conversion (vanilla Llama -> recursive + SVD LoRA): full rank reproduces
 *    the original logits; rank r leaves exactly the SVD tail as weight error
 *    (residuals of a known spectrum); zero residuals get the standard init;
 *    a PEFT-style relaxed checkpoint gives the logits of its folded weights;
 *    a llama.cpp GGUF of the model (Q/K permuted) converts to the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "check.h"
#include "convert.h"
#include "gguf.h"
#include "gguf_write.h"
#include "dtype.h"
#include "kernels.h"
#include "lora.h"
#include "model.h"
#include "mor.h"
#include "quant.h"
#include "relax.h"

/* ---- small helpers --------------------------------------------------------- */

static uint64_t rng_state = 88172645463325252u;
static double urand(void)   /* [0, 1) */
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static float frand(float scale) { return (float)((urand() * 2 - 1) * scale); }

/* The bytes gguf_writer_write produces, in a malloc'd buffer. */
static uint8_t *write_image(gguf_writer *w, size_t *size)
{
    FILE *f = tmpfile();
    char err[256] = "";
    uint8_t *buf = NULL;
    if (f && gguf_writer_write(w, f, err, sizeof err) == 0) {
        long n = ftell(f);
        buf = malloc((size_t)n);
        rewind(f);
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
        *size = (size_t)n;
    }
    if (!buf) fprintf(stderr, "write_image: %s\n", err);
    if (f) fclose(f);
    gguf_writer_free(w);
    return buf;
}

/* ---- a synthetic relaxed model --------------------------------------------- */

enum { D = 32, H = 4, HKV = 2, HD = 8, F = 64, V = 61, L = 4, K = 2, NR = 2 };
static const int64_t role_out[ROLE_COUNT] = { D, H * HD, HKV * HD, HKV * HD, D, D, F, F, D };
static const int64_t role_in[ROLE_COUNT] = { 0, D, D, D, H * HD, 0, D, D, F };

typedef struct {
    float emb[V * D], onorm[D];
    float w[K][ROLE_COUNT][F * F];      /* the shared block (norms: D floats) */
    int   r[L][ROLE_COUNT];             /* rank, 0 = no delta */
    float a[L][ROLE_COUNT][F * F], b[L][ROLE_COUNT][F * F];
    float scale[ROLE_COUNT];
} relaxed;

static int is_norm(int role) { return role == ROLE_ATTN_NORM || role == ROLE_FFN_NORM; }

static void make_relaxed(relaxed *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < V * D; i++) m->emb[i] = frand(1.0f);
    for (int i = 0; i < D; i++) m->onorm[i] = 1.0f + frand(0.1f);
    for (int j = 0; j < K; j++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            int64_t n = is_norm(role) ? D : role_out[role] * role_in[role];
            for (int64_t i = 0; i < n; i++) m->w[j][role][i] = is_norm(role) ? 1.0f + frand(0.1f) : frand(0.3f);
        }
    /* ranks: small, full (up: min(32, 64)), one, and some projections plain */
    static const int ranks[ROLE_COUNT] = { 0, 3, 2, 16, 5, 0, 4, 32, 1 };
    for (int l = 0; l < L; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            m->r[l][role] = ranks[role];
            if ((l == 1 && role == ROLE_ATTN_K) || (l == 2 && role == ROLE_FFN_DOWN)) m->r[l][role] = 0;
            for (int64_t i = 0; i < m->r[l][role] * role_in[role]; i++) m->a[l][role][i] = frand(0.3f);
            for (int64_t i = 0; i < m->r[l][role] * role_out[role]; i++) m->b[l][role][i] = frand(0.3f);
        }
    for (int role = 0; role < ROLE_COUNT; role++) m->scale[role] = role == ROLE_FFN_UP ? 1.5f : 0.7f;
}

static void common_keys(gguf_writer *w, int n_rec, int base_depth, int version)
{
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "mor.format_version", (uint32_t)version);
    gguf_writer_add_u32(w, "mor.vocab_size", V);
    gguf_writer_add_u32(w, "mor.context_length", 64);
    gguf_writer_add_u32(w, "mor.embedding_length", D);
    gguf_writer_add_u32(w, "mor.feed_forward_length", F);
    gguf_writer_add_u32(w, "mor.attention.head_count", H);
    gguf_writer_add_u32(w, "mor.attention.head_count_kv", HKV);
    gguf_writer_add_u32(w, "mor.attention.key_length", HD);
    gguf_writer_add_f32(w, "mor.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_add_f32(w, "mor.rope.freq_base", 10000.0f);
    gguf_writer_add_u32(w, "mor.layer_count", L);
    gguf_writer_add_u32(w, "mor.recursion.count", (uint32_t)n_rec);
    gguf_writer_add_u32(w, "mor.recursion.base_depth", (uint32_t)base_depth);
    gguf_writer_add_u32(w, "mor.recursion.prelude", 0);
    gguf_writer_add_u32(w, "mor.recursion.coda", 0);
    gguf_writer_add_str(w, "mor.router.type", "none");
}

static void add_mat(gguf_writer *w, const char *name, int type, const float *src, int64_t rows, int64_t cols, void *keep)
{
    uint64_t dims[2] = { (uint64_t)cols, (uint64_t)rows };
    int nd = rows > 1 || !keep ? 2 : 1;
    if (type == GGML_F16) {
        cv_convert(keep, GGML_F16, src, GGML_F32, (size_t)(rows * cols));
        gguf_writer_add_tensor(w, name, GGML_F16, 2, dims, keep, (uint64_t)(rows * cols) * 2);
    } else if (type == GGML_Q8_0 || type == GGML_Q4_0) {
        size_t rb = tensor_row_bytes((uint32_t)type, cols);
        for (int64_t r = 0; r < rows; r++) quant_row((uint32_t)type, src + r * cols, (char *)keep + r * rb, cols);
        gguf_writer_add_tensor(w, name, type, 2, dims, keep, (uint64_t)rows * rb);
    } else {
        gguf_writer_add_tensor(w, name, GGML_F32, nd, dims, src, (uint64_t)(rows * cols) * 4);
    }
}

/* Faults to inject into the relaxed file. */
enum { OK_FILE, BAD_VERSION, BAD_NAME, BAD_LAYER, BAD_SHAPE, BAD_RANK, MISSING_B, BAD_TYPE, BAD_SCALE, BAD_NORM_DELTA,
       N_FAULTS };

/* The relaxed model: cycle N_r = 2, shared blocks blk.0/1, deltas lora.l.*;
 * `wtype` is the type of the shared matrices. */
static uint8_t *relaxed_image(const relaxed *m, int wtype, int fault, size_t *size, uint16_t *f16buf)
{
    gguf_writer *w = gguf_writer_new();
    char name[64];
    static const int32_t map[L] = { 0, 1, 0, 1 };
    static float bad[D];
    common_keys(w, NR, K, fault == BAD_VERSION ? 1 : 2);
    gguf_writer_add_str(w, "mor.recursion.sharing", "cycle");
    gguf_writer_add_arr_i32(w, "mor.layer_map", map, L);
    gguf_writer_add_f32(w, "mor.lora.scale", m->scale[ROLE_ATTN_Q]);
    gguf_writer_add_f32(w, "mor.lora.scale.ffn_up", fault == BAD_SCALE ? NAN : m->scale[ROLE_FFN_UP]);
    add_mat(w, "token_embd.weight", GGML_F32, m->emb, V, D, NULL);
    add_mat(w, "output_norm.weight", GGML_F32, m->onorm, 1, D, (void *)1);
    for (int j = 0; j < K; j++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", j, role_names[role]);
            if (is_norm(role)) add_mat(w, name, GGML_F32, m->w[j][role], 1, D, (void *)1);
            else {
                add_mat(w, name, wtype, m->w[j][role], role_out[role], role_in[role], f16buf);
                f16buf += role_out[role] * role_in[role];
            }
        }
    for (int l = 0; l < L; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            int r = m->r[l][role];
            if (!r) continue;
            uint64_t da[2] = { (uint64_t)role_in[role], (uint64_t)r }, db[2] = { (uint64_t)r, (uint64_t)role_out[role] };
            snprintf(name, sizeof name, "lora.%d.%s.a", l, role_names[role]);
            if (l == 3 && role == ROLE_ATTN_Q) {   /* the faults go on one delta */
                if (fault == BAD_NAME) snprintf(name, sizeof name, "lora.%d.attn_qq.a", l);
                if (fault == BAD_LAYER) snprintf(name, sizeof name, "lora.%d.%s.a", L, role_names[role]);
                if (fault == BAD_SHAPE) da[0]--;
                if (fault == BAD_TYPE) {
                    gguf_writer_add_tensor(w, name, GGML_F16, 2, da, f16buf, da[0] * da[1] * 2);
                    goto b;
                }
            }
            gguf_writer_add_tensor(w, name, GGML_F32, 2, da, m->a[l][role], da[0] * da[1] * 4);
        b:
            snprintf(name, sizeof name, "lora.%d.%s.b", l, role_names[role]);
            if (l == 3 && role == ROLE_ATTN_Q && fault == MISSING_B) continue;
            gguf_writer_add_tensor(w, name, GGML_F32, 2, db, m->b[l][role], db[0] * db[1] * 4);
        }
    if (fault == BAD_RANK) {   /* r = 17 > min(32, 16) on attn_k of layer 1 */
        static float big[17 * 32];
        uint64_t da[2] = { D, 17 }, db[2] = { 17, HKV * HD };
        gguf_writer_add_tensor(w, "lora.1.attn_k.a", GGML_F32, 2, da, big, sizeof(float) * 17 * D);
        gguf_writer_add_tensor(w, "lora.1.attn_k.b", GGML_F32, 2, db, big, sizeof(float) * 17 * HKV * HD);
    }
    if (fault == BAD_NORM_DELTA) {
        uint64_t da[2] = { D, 1 };
        gguf_writer_add_tensor(w, "lora.0.attn_norm.a", GGML_F32, 2, da, bad, sizeof bad);
    }
    return write_image(w, size);
}

/* The same model with every delta folded (in double) into per-layer weights:
 * a plain model, N_r = 1, layer map 0..L-1. `wtype`: as the relaxed model's
 * shared weights are rounded. */
static uint8_t *folded_image(const relaxed *m, int wtype, size_t *size, float *store)
{
    gguf_writer *w = gguf_writer_new();
    char name[64];
    static const int32_t map[L] = { 0, 1, 2, 3 };
    static uint8_t qkeep[L * 9 * F * F];   /* quantized copies, alive until the write */
    size_t qoff = 0;
    common_keys(w, 1, L, 1);
    gguf_writer_add_str(w, "mor.recursion.sharing", "none");
    gguf_writer_add_arr_i32(w, "mor.layer_map", map, L);
    add_mat(w, "token_embd.weight", GGML_F32, m->emb, V, D, NULL);
    add_mat(w, "output_norm.weight", GGML_F32, m->onorm, 1, D, (void *)1);
    for (int l = 0; l < L; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            const float *base = m->w[l % K][role];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, role_names[role]);
            if (is_norm(role)) { add_mat(w, name, GGML_F32, base, 1, D, (void *)1); continue; }
            int64_t out = role_out[role], in = role_in[role], r = m->r[l][role];
            if (!r && (wtype == GGML_Q8_0 || wtype == GGML_Q4_0)) {   /* no delta: the shared bytes themselves */
                add_mat(w, name, wtype, base, out, in, qkeep + qoff);
                qoff += (size_t)out * tensor_row_bytes((uint32_t)wtype, in);
                continue;
            }
            float deq[F * F];   /* the shared weight as the relaxed file stores it */
            if (wtype == GGML_F16) for (int64_t i = 0; i < out * in; i++) deq[i] = f16_to_f32(f32_to_f16(base[i]));
            else if (wtype == GGML_Q8_0 || wtype == GGML_Q4_0)
                for (int64_t o = 0; o < out; o++) {
                    uint8_t qrow[F * 2];
                    quant_row((uint32_t)wtype, base + o * in, qrow, in);
                    dequant_row((uint32_t)wtype, qrow, deq + o * in, in);
                }
            else memcpy(deq, base, sizeof(float) * (size_t)(out * in));
            for (int64_t o = 0; o < out; o++)
                for (int64_t c = 0; c < in; c++) {
                    float wv = deq[o * in + c];
                    double acc = wv;
                    for (int64_t q = 0; q < r; q++)
                        acc += (double)m->scale[role] * m->b[l][role][o * r + q] * m->a[l][role][q * in + c];
                    store[o * in + c] = (float)acc;
                }
            add_mat(w, name, GGML_F32, store, out, in, NULL);
            store += out * in;
        }
    return write_image(w, size);
}

static mor_model *load_img(const uint8_t *img, size_t n, uint32_t flags, mor_status *st)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = flags;
    mor_model *m = NULL;
    *st = mor_model_load_memory(img, n, &mp, &m);
    return m;
}

enum { T = 9 };
static const mor_token ids[T] = { 3, 17, 42, 5, 60, 0, 33, 8, 21 };

/* Logits of every position: all tokens in one batch (step 0) or one at a time. */
static int logits_of(mor_model *m, int threads, int one_by_one, float *out)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_threads = threads;
    cp.n_batch = 16;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    int ok = mor_context_create(m, &cp, &c) == MOR_OK && mor_batch_create(16, &b) == MOR_OK;
    for (int s = 0; ok && s < (one_by_one ? T : 1); s++) {
        mor_batch_clear(b);
        int p0 = one_by_one ? s : 0, p1 = one_by_one ? s + 1 : T;
        for (int p = p0; p < p1; p++) mor_batch_add(b, ids[p], p, 0, 1);
        ok = mor_decode(c, b) == MOR_OK;
        for (int p = p0; ok && p < p1; p++) memcpy(out + (size_t)p * V, mor_get_logits(c, p - p0), sizeof(float) * V);
    }
    mor_batch_free(b);
    mor_context_free(c);
    return ok;
}

/* y += the unfolded deltas of model m for the n rows of x at layers lay[]
 * (NULL: l), as layer.c applies them: on nth threads, with kernel set ks,
 * LoRA scratch for `cap` rows (fewer than n: the rows go in windows). */
static int apply_deltas(const mor_model *m, const kernel_set *ks, int nth, int cap, int32_t l, const int32_t *lay,
                        int role, const float *x, int64_t ldx, float *y, int64_t ldy, int32_t n)
{
    exec_ctx e;
    lora_scratch s;
    int64_t kmax = m->n_ff > m->n_embd ? m->n_ff : m->n_embd;
    if ((int64_t)m->n_head * m->head_dim > kmax) kmax = (int64_t)m->n_head * m->head_dim;
    if (exec_init(&e, nth, (uint32_t)n, kmax, m->n_head / m->n_head_kv, 16)) return 0;
    if (lora_scratch_init(&s, m, (uint32_t)cap)) { exec_free(&e); return 0; }
    e.k = ks;
    lora_apply_exec(&e, &s, m, l, lay, role, x, ldx, y, ldy, n);
    lora_scratch_free(&s);
    exec_free(&e);
    return 1;
}

static void test_runtime(void)
{
    static relaxed m;
    static uint16_t f16[K * 9 * F * F];
    static float store[L * 9 * F * F];
    static float lu[T * V], lf[T * V], lh[T * V], lt[T * V], l1[T * V], l3[T * V];
    make_relaxed(&m);
    for (int pass = 0; pass < 4; pass++) {
        /* quantized shared weights: the unfolded shared product quantizes its
         * activations to Q8_0 (as ggml does), the folded F32 one does not, so
         * those two agree only to that rounding; folding at load must still
         * equal folding by hand exactly */
        static const int types[4] = { GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q4_0 };
        static const char *const names[4] = { "F32", "F16", "Q8_0", "Q4_0" };
        const int wtype = types[pass], quant = pass >= 2;
        const char *tn = names[pass];
        size_t nr, nf;
        mor_status st1, st2, st3;
        uint8_t *ri = relaxed_image(&m, wtype, OK_FILE, &nr, f16), *fi = folded_image(&m, wtype, &nf, store);
        mor_model *unf = load_img(ri, nr, 0, &st1), *fold = load_img(ri, nr, MOR_MODEL_FOLD_LORA, &st2),
                  *hand = load_img(fi, nf, 0, &st3);
        if (!CHECK(!st1 && !st2 && !st3, "%s: relaxed (unfolded, folded) and hand-folded models load (%s)", tn,
                   mor_last_error()))
            goto next;
        CHECK(mor_model_n_recursion(unf) == NR && unf->lora && !unf->lora->folded && fold->lora->folded,
              "%s: N_r = 2; deltas unfolded by default, folded with MOR_MODEL_FOLD_LORA", tn);
        int ok = logits_of(unf, 1, 0, lu) && logits_of(fold, 1, 0, lf) && logits_of(hand, 1, 0, lh) &&
                 logits_of(unf, 2, 0, lt) && logits_of(unf, 1, 1, l1) && logits_of(unf, 3, 0, l3);
        if (!CHECK(ok, "%s: decodes run", tn)) goto next;
        double du = check_maxdiff(lu, lh, T * V), df = check_maxdiff(lf, lh, T * V), uf = check_maxdiff(lu, lf, T * V);
        double span = 0;
        for (int i = 0; i < T * V; i++) span = fabs(lh[i]) > span ? fabs(lh[i]) : span;
        if (!quant)
            CHECK(du <= 1e-4 && df <= 1e-4 && uf <= 1e-4,
                  "%s: unfolded, folded-at-load and hand-folded logits agree (%.2g, %.2g; unfolded vs folded %.2g)", tn, du,
                  df, uf);
        else
            CHECK(df <= 1e-4 && du <= 0.05 * span,
                  "%s: folded at load = folded by hand (%.2g); unfolded LoRA over %s = folded up to Q8_0 activations "
                  "(%.2g of logits up to %.3g)", tn, df, tn, du, span);
        CHECK(memcmp(lu, lt, sizeof lu) == 0 && memcmp(lu, l3, sizeof lu) == 0,
              "%s: unfolded LoRA: 2 and 3 threads give bitwise the logits of 1", tn);
        double d1 = check_maxdiff(lu, l1, T * V);
        CHECK(d1 <= 1e-5, "%s: unfolded LoRA: one token at a time = one batch (%.2g)", tn, d1);
        /* the bytes read: unfolded = every tensor; folded = the F32 per-layer
         * copies, the shared weights some layer still uses, no factors */
        uint64_t factors = 0, folded = 0, shared_left = 0;
        int64_t used_shared[K][ROLE_COUNT] = { { 0 } };
        for (int l = 0; l < L; l++)
            for (int role = 0; role < ROLE_COUNT; role++) {
                if (is_norm(role)) continue;
                int r = m.r[l][role];
                factors += (uint64_t)r * (uint64_t)(role_in[role] + role_out[role]) * 4;
                if (r) folded += (uint64_t)(role_in[role] * role_out[role]) * 4;
                else used_shared[l % K][role] = 1;
            }
        for (int j = 0; j < K; j++)
            for (int role = 0; role < ROLE_COUNT; role++)
                if (used_shared[j][role]) shared_left += (uint64_t)role_out[role] * tensor_row_bytes((uint32_t)wtype, role_in[role]);
        uint64_t nonlin = (uint64_t)(V * D + D + K * 2 * D) * 4, all_shared = 0;
        for (int role = 0; role < ROLE_COUNT; role++)
            if (!is_norm(role)) all_shared += K * (uint64_t)role_out[role] * tensor_row_bytes((uint32_t)wtype, role_in[role]);
        CHECK(mor_model_size_bytes(unf) == nonlin + all_shared + factors &&
                  mor_model_size_bytes(fold) == nonlin + shared_left + folded,
              "%s: model size: unfolded %llu (shared + factors), folded %llu (per-layer copies + shared still used)", tn,
              (unsigned long long)mor_model_size_bytes(unf), (unsigned long long)mor_model_size_bytes(fold));
        if (quant) {
            /* one projection: the quantized shared product, then the delta =
             * the same product plus s B A x computed here in double */
            float x[2 * D], y[2 * F], y0[2 * F];
            const lora_delta *dl = &unf->lora->d[3][ROLE_FFN_UP];
            double worst = 0;
            for (int i = 0; i < 2 * D; i++) x[i] = frand(1.0f);
            k_matmul(&unf->layers[3].w[ROLE_FFN_UP], x, y, 2);
            memcpy(y0, y, sizeof y);
            apply_deltas(unf, kernels_best(), 1, 2, 3, NULL, ROLE_FFN_UP, x, D, y, F, 2);
            for (int i = 0; i < 2; i++)
                for (int o = 0; o < F; o++) {
                    double acc = y0[i * F + o];
                    for (int q = 0; q < dl->r; q++) {
                        double t = 0;
                        for (int c = 0; c < D; c++) t += (double)dl->a[q * D + c] * x[i * D + c];
                        acc += (double)dl->s * dl->b[o * dl->r + q] * t;
                    }
                    if (fabs(acc - y[i * F + o]) > worst) worst = fabs(acc - y[i * F + o]);
                }
            CHECK(unf->layers[3].w[ROLE_FFN_UP].type == (uint32_t)wtype && worst <= 1e-4,
                  "%s: the per-row delta adds s B (A x) to the quantized shared product (%.2g)", tn, worst);
        }
        if (pass == 0) {
            /* rows at different unrolled layers (0 and 2 share blk.0): one
             * product with the shared weight for all rows, then each row's
             * own delta = each row through its own folded weight */
            float x[3 * D], y[3 * H * HD], yf[H * HD];
            const int32_t lay[3] = { 0, 2, 0 };
            double worst = 0;
            for (int i = 0; i < 3 * D; i++) x[i] = frand(1.0f);
            k_matmul(&unf->layers[0].w[ROLE_ATTN_Q], x, y, 3);
            apply_deltas(unf, kernels_best(), 2, 3, 0, lay, ROLE_ATTN_Q, x, D, y, H * HD, 3);
            for (int i = 0; i < 3; i++) {
                k_matmul(&fold->layers[lay[i]].w[ROLE_ATTN_Q], x + i * D, yf, 1);
                double dd = check_maxdiff(y + i * H * HD, yf, H * HD);
                if (dd > worst) worst = dd;
            }
            CHECK(unf->layers[0].w[ROLE_ATTN_Q].data == unf->layers[2].w[ROLE_ATTN_Q].data && worst <= 1e-5,
                  "rows of depths 1 and 2 share one product with the shared weight; per-row deltas = folded (%.2g)",
                  worst);
        }
    next:
        mor_model_free(unf);
        mor_model_free(fold);
        mor_model_free(hand);
        free(ri);
        free(fi);
    }
}

/* The unfolded product alone (lora_apply_exec), on 100 rows in runs at
 * unrolled layers 0 and 2 (one shared weight, two deltas; layer 2 has none
 * on ffn_down): 1-4 threads give the same bits, and so does each row alone,
 * a part of the batch, and smaller scratch (rows in windows); the reference
 * kernels give bitwise the plain loop y += s B (A x) in float (the old
 * per-row product), every kernel set the double-precision result to 1e-5;
 * the second pass at every vector width gives the same bits. */
static void test_unfolded_product(void)
{
    static relaxed m;
    static uint16_t f16[K * 9 * F * F];
    enum { N = 100 };
    static float x[N * F], y0[N * F], y[5][N * F], yw[N * F], ya[F];
    int32_t lay[N];
    size_t nr;
    mor_status st;
    make_relaxed(&m);
    uint8_t *img = relaxed_image(&m, GGML_F32, OK_FILE, &nr, f16);
    mor_model *u = img ? load_img(img, nr, 0, &st) : NULL;
    if (!CHECK(u != NULL, "the relaxed model loads (%s)", mor_last_error())) { free(img); return; }
    for (int i = 0; i < N; i++) lay[i] = (i / 7) % 3 == 1 ? 2 : 0;   /* runs of 7 and 14 rows */
    static const int roles[] = { ROLE_ATTN_Q, ROLE_ATTN_V, ROLE_ATTN_OUT, ROLE_FFN_UP, ROLE_FFN_DOWN };
    const kernel_set *sets[2] = { &kernels_ref, kernels_best() };
    for (int si = 0; si < 2; si++)
        for (size_t ri = 0; ri < sizeof roles / sizeof *roles; ri++) {
            const int role = roles[ri];
            const int64_t in = role_in[role], out = role_out[role];
            const char *ks = sets[si]->name, *rn = role_names[role];
            for (int64_t i = 0; i < N * in; i++) x[i] = frand(1.0f);
            for (int64_t i = 0; i < N * out; i++) y0[i] = frand(1.0f);
            int ok = 1;
            for (int nth = 1; nth <= 4; nth++) {
                memcpy(y[nth], y0, sizeof(float) * (size_t)(N * out));
                ok &= apply_deltas(u, sets[si], nth, N, 0, lay, role, x, in, y[nth], out, N);
            }
            if (!CHECK(ok, "%s %s: the product runs", ks, rn)) continue;
            int same = 1;
            for (int nth = 2; nth <= 4; nth++) same &= !memcmp(y[nth], y[1], sizeof(float) * (size_t)(N * out));
            CHECK(same, "%s %s: 2, 3 and 4 threads give bitwise the result of 1", ks, rn);
            int alone = 1;
            for (int i = 0; i < N; i++) {
                memcpy(ya, y0 + i * out, sizeof(float) * (size_t)out);
                apply_deltas(u, sets[si], 1, 1, 0, lay + i, role, x + i * in, in, ya, out, 1);
                alone &= !memcmp(ya, y[1] + i * out, sizeof(float) * (size_t)out);
            }
            CHECK(alone, "%s %s: each row alone = the same row in the batch of %d (bitwise)", ks, rn, N);
            memcpy(yw, y0, sizeof(float) * (size_t)(N * out));
            apply_deltas(u, sets[si], 2, N, 0, lay + 10, role, x + 10 * in, in, yw + 10 * out, out, 53);
            apply_deltas(u, sets[si], 3, 13, 0, lay + 63, role, x + 63 * in, in, yw + 63 * out, out, N - 63);
            CHECK(!memcmp(yw + 10 * out, y[1] + 10 * out, sizeof(float) * (size_t)((N - 10) * out)),
                  "%s %s: rows 10-62 as a batch on 2 threads, 63-99 in windows of 13 rows on 3: the same bits", ks, rn);
            double worst = 0, plain = 0;
            for (int i = 0; i < N; i++) {
                const lora_delta *dl = &u->lora->d[lay[i]][role];
                for (int64_t o = 0; o < out; o++) {
                    double acc = y0[i * out + o];
                    float facc = 0, t[F];
                    for (int q = 0; q < dl->r; q++) {
                        double tq = 0;
                        float fq = 0;
                        for (int64_t c = 0; c < in; c++) {
                            tq += (double)dl->a[q * in + c] * x[i * in + c];
                            fq += dl->a[q * in + c] * x[i * in + c];
                        }
                        acc += (double)dl->s * dl->b[o * dl->r + q] * tq;
                        t[q] = dl->s * fq;
                    }
                    for (int q = 0; q < dl->r; q++) facc += dl->b[o * dl->r + q] * t[q];
                    const float fy = dl->a ? y0[i * out + o] + facc : y0[i * out + o];
                    double e = fabs(acc - y[1][i * out + o]) / (1 + fabs(acc));
                    if (e > worst) worst = e;
                    if (fy != y[1][i * out + o]) plain++;
                }
            }
            CHECK(worst <= 1e-5, "%s %s: within %.2g of the product in double", ks, rn, worst);
            if (si == 0) CHECK(plain == 0, "ref %s: bitwise the plain float loop (%g outputs differ)", rn, plain);
            /* the second pass of every kernel set this CPU runs (4, 8 or 16 floats at a time) */
            for (int isa = 0; isa <= ISA_COUNT; isa++) {
                const kernel_set *other = isa < ISA_COUNT ? kernels_get(isa) : NULL;
#if defined(__x86_64__)
                if (isa == ISA_COUNT && kernels_get(ISA_AVX512)) other = &kernels_avx512_novbmi;
#endif
                if (!other) continue;
                kernel_set mixed = *sets[si];
                mixed.lora_axpy = other->lora_axpy;
                memcpy(yw, y0, sizeof(float) * (size_t)(N * out));
                apply_deltas(u, &mixed, 2, N, 0, lay, role, x, in, yw, out, N);
                CHECK(!memcmp(yw, y[1], sizeof(float) * (size_t)(N * out)), "%s %s: the second pass of %s, the same bits",
                      ks, rn, other->name);
            }
        }
    mor_model_free(u);
    free(img);
}

static void test_format_errors(void)
{
    static relaxed m;
    static uint16_t f16[K * 9 * F * F];
    static const char *const what[N_FAULTS] = {
        "", "format_version 1", "unknown projection name", "layer out of range", "a of the wrong shape",
        "rank above min(in, out)", "a without b", "F16 factor", "NaN scale", "a delta on a norm" };
    make_relaxed(&m);
    for (int f = 1; f < N_FAULTS; f++) {
        size_t n;
        mor_status st = MOR_OK;
        uint8_t *img = relaxed_image(&m, GGML_F32, f, &n, f16);
        mor_model *mm = img ? load_img(img, n, 0, &st) : NULL;
        CHECK(img && !mm && st == MOR_E_FORMAT, "malformed LoRA: %s is MOR_E_FORMAT (%s)", what[f], mor_last_error());
        mor_model_free(mm);
        free(img);
    }
}

/* ---- the conversion ---------------------------------------------------------- */

static char tmpdir[64];

/* A vanilla checkpoint: config.json and model.safetensors (F32) of n tensors. */
typedef struct { char name[96]; int64_t shape[2]; int nd; const float *data; } st_tensor;

static int write_checkpoint(const st_tensor *t, int n, int n_layer)
{
    char path[160], hdr[65536];
    size_t len = 0, off = 0;
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "{");
    for (int i = 0; i < n; i++) {
        size_t nb = (size_t)(t[i].shape[0] * (t[i].nd == 2 ? t[i].shape[1] : 1)) * 4;
        if (t[i].nd == 2)
            len += (size_t)snprintf(hdr + len, sizeof hdr - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],\"data_offsets\":[%zu,%zu]}",
                                    i ? "," : "", t[i].name, (long long)t[i].shape[0], (long long)t[i].shape[1], off, off + nb);
        else
            len += (size_t)snprintf(hdr + len, sizeof hdr - len, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[%zu,%zu]}",
                                    i ? "," : "", t[i].name, (long long)t[i].shape[0], off, off + nb);
        off += nb;
    }
    len += (size_t)snprintf(hdr + len, sizeof hdr - len, "}");
    while (len % 8) hdr[len++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    for (int i = 0; i < n; i++)
        fwrite(t[i].data, 4, (size_t)(t[i].shape[0] * (t[i].nd == 2 ? t[i].shape[1] : 1)), f);
    fclose(f);
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    if (!(f = fopen(path, "w"))) return -1;
    fprintf(f, "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, \"num_hidden_layers\": %d, "
               "\"vocab_size\": %d, \"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, "
               "\"tie_word_embeddings\": true}\n", D, F, H, HKV, HD, n_layer, V);
    fclose(f);
    return 0;
}

/* Convert o->dir (NULL: tmpdir) with o into a GGUF image in memory. */
static uint8_t *convert_img(convert_opts *o, size_t *n, char *err, size_t errcap)
{
    FILE *f = tmpfile();
    uint8_t *buf = NULL;
    if (!o->dir) o->dir = tmpdir;
    if (f && convert_model(o, f, NULL, 0, err, errcap) == 0) {
        long sz = ftell(f);
        rewind(f);
        if ((buf = malloc((size_t)sz)) && fread(buf, 1, (size_t)sz, f) != (size_t)sz) { free(buf); buf = NULL; }
        *n = (size_t)sz;
    }
    if (f) fclose(f);
    return buf;
}

/* Columns of an m x k matrix (column-major) with orthonormal columns, by
 * modified Gram-Schmidt (twice) of Gaussian-ish columns. */
static void orthonormal(double *q, int m, int k)
{
    for (int i = 0; i < m * k; i++) q[i] = urand() * 2 - 1;
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < k; j++) {
            double *c = q + j * m, nn = 0;
            for (int o = 0; o < j; o++) {
                double d = 0;
                for (int i = 0; i < m; i++) d += c[i] * q[o * m + i];
                for (int i = 0; i < m; i++) c[i] -= d * q[o * m + i];
            }
            for (int i = 0; i < m; i++) nn += c[i] * c[i];
            for (int i = 0; i < m; i++) c[i] /= sqrt(nn);
        }
}

enum { RANK = 3 };

/* Matrix `name` (rows x cols floats) of the llama.cpp-layout GGUF in ggml's legacy quants, as llama.cpp keeps
 * rows that are not whole k-quant blocks (the embedding Q4_1, feed-forward Q5_1, attention Q5_0): stored
 * quantized, or (!quantized) as the same values dequantized, in F32. The writer owns the buffer. */
static void add_legacy_quant(gguf_writer *w, const char *name, int embd, const float *data, int64_t rows, int64_t cols,
                             int quantized)
{
    const uint32_t qt = embd ? GGML_Q4_1 : strstr(name, "ffn_") ? GGML_Q5_1 : GGML_Q5_0;
    const size_t rb = (size_t)tensor_row_bytes(qt, cols);
    unsigned char *q = malloc(rb * (size_t)rows);
    float *f = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t r = 0; q && f && r < rows; r++) {
        quant_row(qt, data + r * cols, q + (size_t)r * rb, cols);
        dequant_row(qt, q + (size_t)r * rb, f + r * cols, cols);
    }
    if (quantized) { gguf_writer_add_matrix(w, name, qt, cols, rows, q, rb * (size_t)rows, 1); free(f); }
    else { gguf_writer_add_matrix(w, name, GGML_F32, cols, rows, f, sizeof(float) * (size_t)(rows * cols), 1); free(q); }
}

/* Pass 2: the quantized file's model m converts and loads, close to the F32 model `want` (its logits kept
 * in lq); pass 3: the dequantized twin's, the same bit for bit. */
static void check_legacy_quant(mor_model *m, mor_model *want, int pass, float *lq, const char *err)
{
    static float l[T * V];
    if (pass == 2) {
        int ok = m && m->lora && logits_of(m, 1, 0, lq) && logits_of(want, 1, 0, l);
        double big = 0;
        for (int i = 0; ok && i < T * V; i++) big = fabs(l[i]) > big ? fabs(l[i]) : big;
        const double e = ok ? check_maxdiff(lq, l, T * V) : INFINITY;
        /* 4-5 bit weights of a tiny random model: 0.815 of 10.1 when written (Q8_0 weights: 0.123) */
        CHECK(ok && e < 0.12 * big, "llama GGUF in Q5_0, Q5_1 and Q4_1: converts and loads, logits within %.3g of "
              "the F32 model's (largest %.3g) (%s)", e, big, err);
        return;
    }
    int ok = m && m->lora && logits_of(m, 1, 0, l);
    CHECK(ok && !memcmp(lq, l, sizeof l), "llama GGUF in Q5_0, Q5_1 and Q4_1: the same model as from its "
          "dequantized F32 twin, logits bit for bit (%.2g)", ok ? check_maxdiff(lq, l, T * V) : INFINITY);
}

/* Pass 4: the quantized llama.cpp file converted plain. Each matrix of the output (img) has the type
 * llama.cpp stored and its bytes (the Q and K rows back in Hugging Face order, which quantizing the
 * checkpoint's rows gives: ggml's quants are row by row); the model m runs, close to the checkpoint
 * converted plain in F32. */
static void check_plain_quant(const st_tensor *t, int n, const uint8_t *img, size_t nimg, mor_model *m, const char *err)
{
    gguf_file *g = NULL;
    int kept = 0, total = 0;
    if (img && gguf_parse(img, nimg, &g) == MOR_OK)
        for (int i = 0; i < n; i++) {
            if (t[i].nd != 2) continue;
            char name[96];
            int embd = !strcmp(t[i].name, "model.embed_tokens.weight"), role = -1, l = embd ? -1 : atoi(t[i].name + strlen("model.layers."));
            for (int r = 0; !embd && r < ROLE_COUNT; r++)
                if (strstr(t[i].name, r == ROLE_ATTN_Q ? "q_proj" : r == ROLE_ATTN_K ? "k_proj" : r == ROLE_ATTN_V ? "v_proj"
                                      : r == ROLE_ATTN_OUT ? "o_proj" : r == ROLE_FFN_GATE ? "gate_proj"
                                      : r == ROLE_FFN_UP ? "up_proj" : r == ROLE_FFN_DOWN ? "down_proj" : "-"))
                    role = r;
            if (embd) snprintf(name, sizeof name, "token_embd.weight");
            else snprintf(name, sizeof name, "blk.%d.%s.weight", l, role_names[role]);
            const uint32_t qt = embd ? GGML_Q4_1 : role >= ROLE_FFN_GATE ? GGML_Q5_1 : GGML_Q5_0;
            const int64_t rows = t[i].shape[0], cols = t[i].shape[1];
            const size_t rb = (size_t)tensor_row_bytes(qt, cols);
            unsigned char *q = malloc(rb * (size_t)rows);
            for (int64_t r = 0; q && r < rows; r++) quant_row(qt, t[i].data + r * cols, q + (size_t)r * rb, cols);
            const gguf_tensor *gt = gguf_find_tensor(g, name);
            total++;
            kept += q && gt && gt->type == qt && !memcmp(gt->data, q, rb * (size_t)rows);
            free(q);
        }
    gguf_free(g);
    CHECK(total > 0 && kept == total, "llama GGUF in Q5_0, Q5_1 and Q4_1 converted plain: %d of %d matrices kept in "
          "their type, byte for byte (%s)", kept, total, err);
    static float l[T * V], lf[T * V];
    convert_opts plain;
    convert_opts_init(&plain);
    size_t nf = 0;
    char ferr[256] = "";
    mor_status st;
    uint8_t *fimg = convert_img(&plain, &nf, ferr, sizeof ferr);   /* the checkpoint (tmpdir), F32 */
    mor_model *f = fimg ? load_img(fimg, nf, 0, &st) : NULL;
    int ok = m && f && logits_of(m, 1, 0, l) && logits_of(f, 1, 0, lf);
    double big = 0;
    for (int i = 0; ok && i < T * V; i++) big = fabs(lf[i]) > big ? fabs(lf[i]) : big;
    const double e = ok ? check_maxdiff(l, lf, T * V) : INFINITY;
    /* the bound of the relaxed models' comparison (check_legacy_quant) */
    CHECK(ok && e < 0.12 * big, "llama GGUF in Q5_0, Q5_1 and Q4_1 converted plain: runs, logits within %.3g of the "
          "F32 checkpoint's converted plain (largest %.3g) (%s)", e, big, ferr);
    mor_model_free(f);
    free(fimg);
}

/* The same vanilla model as llama.cpp writes it (general.architecture
 * "llama", Q and K rows permuted for GGML's RoPE: row h*hd + 2j + t holds HF
 * row h*hd + t*hd/2 + j): converted with the same options, it gives the
 * model converted from the checkpoint, logits bit for bit; with RoPE
 * scaling it is refused. */
static void test_llama_gguf(const st_tensor *t, int n, convert_opts *o, mor_model *want)
{
    static float perm[2][L][F * F], lq[T * V];
    char path[160], err[512] = "";
    snprintf(path, sizeof path, "%s/llama.gguf", tmpdir);
    /* pass 0: F32; 1: with RoPE scaling (refused); 2: the matrices in ggml's legacy quants, as llama.cpp
     * keeps the rows that are not whole k-quant blocks (attention Q5_0, feed-forward Q5_1, embedding
     * Q4_1); 3: the values of pass 2, dequantized, in F32; 4: the file of pass 2 converted plain (no
     * relaxation): every matrix kept in its type, byte for byte (check_plain_quant) */
    for (int pass = 0; pass < 5; pass++) {
        const int fault = pass == 1;
        err[0] = 0;
        gguf_writer *w = gguf_writer_new();
        gguf_writer_add_str(w, "general.architecture", "llama");
        gguf_writer_add_u32(w, "llama.context_length", 64);
        gguf_writer_add_u32(w, "llama.embedding_length", D);
        gguf_writer_add_u32(w, "llama.feed_forward_length", F);
        gguf_writer_add_u32(w, "llama.block_count", L);
        gguf_writer_add_u32(w, "llama.attention.head_count", H);
        gguf_writer_add_u32(w, "llama.attention.head_count_kv", HKV);
        gguf_writer_add_u32(w, "llama.rope.dimension_count", HD);
        gguf_writer_add_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
        gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f);
        if (fault) gguf_writer_add_str(w, "llama.rope.scaling.type", "linear");
        for (int i = 0; i < n; i++) {
            int l = -1, role = -1;
            char name[96];
            const float *data = t[i].data;
            if (!strcmp(t[i].name, "model.embed_tokens.weight")) snprintf(name, sizeof name, "token_embd.weight");
            else if (!strcmp(t[i].name, "model.norm.weight")) snprintf(name, sizeof name, "output_norm.weight");
            else {
                l = atoi(t[i].name + strlen("model.layers."));
                for (int r = 0; r < ROLE_COUNT; r++)
                    if (strstr(t[i].name, r == ROLE_ATTN_NORM ? "input_layernorm" : r == ROLE_ATTN_Q ? "q_proj"
                                          : r == ROLE_ATTN_K ? "k_proj" : r == ROLE_ATTN_V ? "v_proj"
                                          : r == ROLE_ATTN_OUT ? "o_proj" : r == ROLE_FFN_NORM ? "post_attention"
                                          : r == ROLE_FFN_GATE ? "gate_proj" : r == ROLE_FFN_UP ? "up_proj" : "down_proj"))
                        role = r;
                snprintf(name, sizeof name, "blk.%d.%s.weight", l, role_names[role]);
            }
            if (role == ROLE_ATTN_Q || role == ROLE_ATTN_K) {
                float *p = perm[role == ROLE_ATTN_K][l];
                for (int64_t r = 0; r < t[i].shape[0]; r++) {
                    const int64_t h = r / HD, j = (r % HD) / 2, tt = r % 2;
                    memcpy(p + r * t[i].shape[1], data + (h * HD + tt * (HD / 2) + j) * t[i].shape[1],
                           sizeof(float) * (size_t)t[i].shape[1]);
                }
                data = p;
            }
            uint64_t dims[2] = { (uint64_t)(t[i].nd == 2 ? t[i].shape[1] : t[i].shape[0]), (uint64_t)t[i].shape[0] };
            if (pass >= 2 && t[i].nd == 2) {
                add_legacy_quant(w, name, role < 0, data, t[i].shape[0], t[i].shape[1], pass != 3);
                continue;
            }
            gguf_writer_add_tensor(w, name, GGML_F32, t[i].nd, dims, data,
                                   (uint64_t)(t[i].shape[0] * (t[i].nd == 2 ? t[i].shape[1] : 1)) * 4);
        }
        FILE *f = fopen(path, "wb");
        int wrote = f && gguf_writer_write(w, f, err, sizeof err) == 0;
        if (f) fclose(f);
        gguf_writer_free(w);
        if (!CHECK(wrote, "llama GGUF written (%s)", err)) break;
        size_t nimg = 0;
        mor_status st;
        convert_opts plain;
        convert_opts_init(&plain);
        convert_opts *co = pass == 4 ? &plain : o;
        co->dir = path;
        uint8_t *img = convert_img(co, &nimg, err, sizeof err);
        co->dir = NULL;
        mor_model *m = img ? load_img(img, nimg, 0, &st) : NULL;
        if (fault) {
            CHECK(!img && strstr(err, "RoPE scaling"), "llama GGUF with RoPE scaling: refused (%s)", err);
        } else if (pass == 4) {
            check_plain_quant(t, n, img, nimg, m, err);
        } else if (pass >= 2) {
            check_legacy_quant(m, want, pass, lq, err);
        } else if (CHECK(m && m->lora, "llama GGUF: converts and loads (%s)", err)) {
            static float la[T * V], lb[T * V];
            int ok = logits_of(m, 1, 0, la) && logits_of(want, 1, 0, lb);
            CHECK(ok && !memcmp(la, lb, sizeof la),
                  "llama GGUF (Q/K permuted by llama.cpp): the relaxed model converted from the checkpoint, bit for bit (%.2g)",
                  ok ? check_maxdiff(la, lb, T * V) : INFINITY);
        }
        mor_model_free(m);
        free(img);
    }
    remove(path);
}

static void test_conversion(void)
{
    /* Layers l and l+2 of a 4-layer model are S + D and S - D per
     * projection, D = P diag(sigma) Q^T of a known spectrum: Average tying
     * (cycle, N_r = 2) leaves exactly +-D to the LoRA, whose rank-3
     * truncation must leave sqrt(sum_{t >= 3} sigma_t^2). */
    static float w[L][ROLE_COUNT][F * F], emb[V * D], onorm[D];
    static double sig[K][ROLE_COUNT][F];
    static st_tensor t[2 + L * ROLE_COUNT];
    double *P = malloc(sizeof(double) * F * F), *Q = malloc(sizeof(double) * F * F);
    int n = 0;
    for (int i = 0; i < V * D; i++) emb[i] = frand(1.0f);
    for (int i = 0; i < D; i++) onorm[i] = 1.0f + frand(0.1f);
    for (int j = 0; j < K; j++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            const int out = (int)role_out[role], in = (int)role_in[role], k = out < in ? out : in;
            if (is_norm(role)) {
                for (int i = 0; i < D; i++) w[j][role][i] = w[j + K][role][i] = 1.0f + frand(0.1f);
                continue;
            }
            orthonormal(P, out, k);
            orthonormal(Q, in, k);
            for (int q = 0; q < k; q++) sig[j][role][q] = 0.8 * pow(0.7, q) * (j + 1);
            for (int o = 0; o < out; o++)
                for (int c = 0; c < in; c++) {
                    double dd = 0, sv = frand(0.3f);
                    for (int q = 0; q < k; q++) dd += P[q * out + o] * sig[j][role][q] * Q[q * in + c];
                    w[j][role][o * in + c] = (float)(sv + dd);
                    w[j + K][role][o * in + c] = (float)(sv - dd);
                }
        }
    t[n++] = (st_tensor){ "model.embed_tokens.weight", { V, D }, 2, emb };
    t[n++] = (st_tensor){ "model.norm.weight", { D, 0 }, 1, onorm };
    static const char *const hf[ROLE_COUNT] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight" };
    for (int l = 0; l < L; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            st_tensor *x = &t[n++];
            snprintf(x->name, sizeof x->name, "model.layers.%d.%s", l, hf[role]);
            x->nd = is_norm(role) ? 1 : 2;
            x->shape[0] = is_norm(role) ? D : role_out[role];
            x->shape[1] = is_norm(role) ? 0 : role_in[role];
            x->data = w[l][role];
        }
    free(P);
    free(Q);
    if (!CHECK(write_checkpoint(t, n, L) == 0, "conversion: the vanilla checkpoint is written")) return;

    char err[512] = "";
    convert_opts o;
    size_t nimg;
    mor_status st;
    convert_opts_init(&o);
    o.flags.num_recursion = NR;
    o.flags.sharing = SHARE_CYCLE;
    o.init = INIT_AVERAGE;
    for (int role = 0; role < ROLE_COUNT; role++) o.lora_rank[role] = is_norm(role) ? 0 : RANK;
    o.threads = 2;
    uint8_t *img = convert_img(&o, &nimg, err, sizeof err);
    mor_model *m = img ? load_img(img, nimg, 0, &st) : NULL;
    if (!CHECK(m && m->lora, "conversion: average, cycle x2, rank %d converts and loads (%s%s)", RANK, err,
               m ? "" : mor_last_error()))
        goto out;
    test_llama_gguf(t, n, &o, m);
    double worst = 0, worst_rel = 0;
    int shared_ok = 1;
    for (int l = 0; l < L; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            if (is_norm(role)) continue;
            const tensor *sw = &m->layers[l].w[role];
            const lora_delta *d = &m->lora->d[l][role];
            const int out = (int)role_out[role], in = (int)role_in[role], k = out < in ? out : in;
            double e2 = 0, tail2 = 0;
            shared_ok &= sw->data == m->layers[l % K].w[role].data && d->r == RANK && d->s == 1.0f;
            for (int o2 = 0; o2 < out; o2++)
                for (int c = 0; c < in; c++) {
                    double r = (double)w[l][role][o2 * in + c] - ((const float *)sw->data)[o2 * in + c];
                    for (int q = 0; q < d->r; q++) r -= (double)d->b[o2 * d->r + q] * d->a[q * in + c];
                    e2 += r * r;
                }
            for (int q = RANK; q < k; q++) tail2 += sig[l % K][role][q] * sig[l % K][role][q];
            double tl = sqrt(tail2), e = sqrt(e2);
            if (fabs(e - tl) > worst) worst = fabs(e - tl);
            if (fabs(e - tl) / tl > worst_rel) worst_rel = fabs(e - tl) / tl;
        }
    CHECK(shared_ok, "conversion: every looped layer reads its slot's shared weight, with a rank-%d delta of scale 1", RANK);
    CHECK(worst <= 1e-5, "conversion: ||W_l - (W_shared + B A)||_F = the SVD tail sqrt(sum_{t>=%d} sigma_t^2) "
                         "(max abs err %.2g, rel %.2g)", RANK, worst, worst_rel);
    {   /* the converted model: folded = unfolded */
        static float lu[T * V], lf[T * V];
        mor_model *mf = load_img(img, nimg, MOR_MODEL_FOLD_LORA, &st);
        int ok = mf && logits_of(m, 1, 0, lu) && logits_of(mf, 1, 0, lf);
        double dd = ok ? check_maxdiff(lu, lf, T * V) : INFINITY;
        CHECK(ok && dd <= 1e-4, "conversion: folded and unfolded runs of the converted model agree (%.2g)", dd);
        mor_model_free(mf);
    }
    mor_model_free(m);
    m = NULL;
    free(img);

    /* Stepwise: the source layers (0 and 3 here) lose nothing; their deltas
     * get the standard init, B = 0 and A ~ N(0, 1/r^2) */
    o.init = INIT_STEPWISE;
    img = convert_img(&o, &nimg, err, sizeof err);
    m = img ? load_img(img, nimg, 0, &st) : NULL;
    if (!CHECK(m && m->lora, "conversion: stepwise converts (%s)", err)) goto out;
    {
        int zero_b = 1, nonzero_svd = 1;
        double a2 = 0;
        long na = 0;
        for (int l = 0; l < L; l++)
            for (int role = 0; role < ROLE_COUNT; role++) {
                const lora_delta *d = &m->lora->d[l][role];
                if (is_norm(role)) continue;
                double b2 = 0;
                for (int64_t i = 0; i < role_out[role] * d->r; i++) b2 += (double)d->b[i] * d->b[i];
                if (l == 0 || l == 3) {
                    zero_b &= b2 == 0;
                    for (int64_t i = 0; i < role_in[role] * d->r; i++) { a2 += (double)d->a[i] * d->a[i]; na++; }
                } else {
                    nonzero_svd &= b2 > 0;
                }
            }
        double sd = sqrt(a2 / (double)na) * RANK;
        CHECK(zero_b && nonzero_svd && sd > 0.9 && sd < 1.1,
              "conversion: stepwise source layers get B = 0 and Gaussian A of std 1/r (measured %.3g/r); the others SVD", sd);
    }
    {   /* B = 0: those layers compute exactly the shared weight's product */
        static float lu[T * V], lf[T * V];
        mor_model *mf = load_img(img, nimg, MOR_MODEL_FOLD_LORA, &st);
        int ok = mf && logits_of(m, 1, 0, lu) && logits_of(mf, 1, 0, lf);
        CHECK(ok && mf->layers[0].w[ROLE_ATTN_Q].type == GGML_F32 &&
                  memcmp(mf->layers[0].w[ROLE_ATTN_Q].data, m->layers[0].w[ROLE_ATTN_Q].data, sizeof(float) * H * HD * D) == 0,
              "conversion: folding a zero-B delta leaves the shared weight bit for bit");
        mor_model_free(mf);
    }
out:
    mor_model_free(m);
    free(img);
    char path[160];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    remove(path);
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    remove(path);
}

int main(void)
{
    test_runtime();
    test_unfolded_product();
    test_format_errors();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mor_test_lora_XXXXXX");
    if (CHECK(mkdtemp(tmpdir) != NULL, "a temporary directory")) {
        test_conversion();
        rmdir(tmpdir);
    }
    return check_done();
}
