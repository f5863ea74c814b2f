/* lora.c - depth-wise LoRA: loading, folding, and the unfolded per-row
 * product. See lora.h and docs/FORMAT.md ("Depth-wise LoRA"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "lora.h"
#include "status.h"

/* Ranks are processed in chunks of this many, so that the product needs no
 * scratch beyond the stack; the chunking depends only on the model. */
#define LORA_CHUNK 64

static int is_linear(int role) { return role != ROLE_ATTN_NORM && role != ROLE_FFN_NORM; }

/* "lora.<l>.<role>.<a|b>" -> l, role, part (0 = a, 1 = b); 0 if it does not parse. */
static int parse_name(gguf_str nm, int32_t n_layer, int32_t *l, int *role, int *part)
{
    static const char pfx[] = "lora.";
    const char *p = nm.p, *end = nm.p + nm.n;
    int64_t v = 0;
    if (nm.n <= sizeof pfx - 1 || memcmp(p, pfx, sizeof pfx - 1) != 0) return 0;
    p += sizeof pfx - 1;
    if (p == end || *p < '0' || *p > '9' || (*p == '0' && p + 1 < end && p[1] != '.')) return 0;
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p++ - '0');
        if (v >= n_layer) return 0;
    }
    if (p == end || *p++ != '.') return 0;
    for (int r = 0; r < ROLE_COUNT; r++) {
        size_t k = strlen(mor_role_names[r]);
        if (!is_linear(r) || (size_t)(end - p) != k + 2 || memcmp(p, mor_role_names[r], k) != 0 || p[k] != '.') continue;
        if (p[k + 1] != 'a' && p[k + 1] != 'b') return 0;
        *l = (int32_t)v; *role = r; *part = p[k + 1] == 'b';
        return 1;
    }
    return 0;
}

static mor_status read_scale(const gguf_file *g, const char *key, float def, float *out)
{
    mor_status st = gguf_get_f32(g, key, out);
    if (st == MOR_E_OUT_OF_RANGE) { *out = def; return MOR_OK; }
    if (st) return st;
    if (!isfinite(*out)) return mor_err(MOR_E_FORMAT, "key '%s' is not finite", key);
    return MOR_OK;
}

mor_status lora_load(const gguf_file *g, mor_model *m, unsigned char *used)
{
    mor_status st;
    int any = 0;
    for (uint64_t i = 0; i < g->n_tensors && !any; i++)
        any = g->tensors[i].name.n > 5 && memcmp(g->tensors[i].name.p, "lora.", 5) == 0;
    if (!any) return MOR_OK;
    uint32_t fv = 0;
    if (gguf_get_u32(g, "mor.format_version", &fv) || fv < 2)
        return mor_err(MOR_E_FORMAT, "LoRA tensors need mor.format_version >= 2 (the file says %u)", fv);
    float scale[ROLE_COUNT], s_all;
    if ((st = read_scale(g, "mor.lora.scale", 1.0f, &s_all))) return st;
    for (int r = 0; r < ROLE_COUNT; r++) {
        char key[64];
        snprintf(key, sizeof key, "mor.lora.scale.%s", mor_role_names[r]);
        if ((st = read_scale(g, key, s_all, &scale[r]))) return st;
    }
    struct mor_lora *lo = calloc(1, sizeof *lo);
    if (!lo || !(lo->d = calloc((size_t)m->n_layer, sizeof *lo->d))) {
        free(lo);
        return mor_err(MOR_E_NOMEM, "out of memory");
    }
    lo->n_layer = m->n_layer;
    const gguf_tensor **bt = calloc((size_t)m->n_layer * ROLE_COUNT, sizeof *bt);   /* the b of each delta */
    if (!bt) { lora_free(lo); return mor_err(MOR_E_NOMEM, "out of memory"); }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int32_t l;
        int role, part;
        if (t->name.n < 5 || memcmp(t->name.p, "lora.", 5) != 0) continue;
        if (!parse_name(t->name, m->n_layer, &l, &role, &part)) {
            st = mor_err(MOR_E_FORMAT, "tensor '%.*s': not lora.<layer>.<projection>.<a|b> of this model",
                         (int)(t->name.n > 96 ? 96 : t->name.n), t->name.p);
            goto fail;
        }
        const mor_weight *w = &m->layers[l].w[role];
        const int64_t in = w->cols, out = w->rows, rmax = in < out ? in : out;
        if (t->type != GGML_F32) {
            st = mor_err(MOR_E_FORMAT, "tensor '%.*s' has type %s; LoRA factors must be F32", (int)t->name.n, t->name.p,
                         gguf_type_name(t->type));
            goto fail;
        }
        /* a: GGUF [in, r]; b: [r, out]; 1 <= r <= min(in, out) keeps a row's
         * product within the chunked stack scratch and the model's dims */
        int64_t r = part ? t->ne[0] : t->ne[1];
        if (t->n_dims != 2 || (part ? t->ne[1] != out : t->ne[0] != in) || r < 1 || r > rmax) {
            st = mor_err(MOR_E_FORMAT, "tensor '%.*s' has shape [%lld, %lld]; expected [%s] with 1 <= r <= %lld",
                         (int)t->name.n, t->name.p, (long long)t->ne[0], (long long)t->ne[1],
                         part ? "r, out" : "in, r", (long long)rmax);
            goto fail;
        }
        mor_lora_delta *d = &lo->d[l][role];
        if (part) bt[(size_t)l * ROLE_COUNT + role] = t;
        else { d->a = (const float *)t->data; d->r = (int32_t)r; d->s = scale[role]; }
        used[t - g->tensors] = 1;
    }
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            mor_lora_delta *d = &lo->d[l][role];
            const gguf_tensor *b = bt[(size_t)l * ROLE_COUNT + role];
            if (!d->a != !b) {
                st = mor_err(MOR_E_FORMAT, "lora.%d.%s has %s but not %s", l, mor_role_names[role], d->a ? "a" : "b",
                             d->a ? "b" : "a");
                goto fail;
            }
            if (!b) continue;
            if (b->ne[0] != d->r) {
                st = mor_err(MOR_E_FORMAT, "lora.%d.%s: a has rank %d but b has %lld", l, mor_role_names[role], d->r,
                             (long long)b->ne[0]);
                goto fail;
            }
            d->b = (const float *)b->data;
        }
    free(bt);
    m->lora = lo;
    return MOR_OK;
fail:
    free(bt);
    lora_free(lo);
    return st;
}

void lora_free(struct mor_lora *lo)
{
    if (!lo) return;
    for (int32_t i = 0; i < lo->n_own; i++) free(lo->own[i]);
    free(lo->own);
    free(lo->d);
    free(lo);
}

static uint64_t tensor_nbytes(const gguf_file *g, const void *data)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].data == data) return g->tensors[i].nbytes;
    return 0;
}

mor_status lora_fold(mor_model *m)
{
    struct mor_lora *lo = m->lora;
    if (!lo || lo->folded) return MOR_OK;
    int32_t n = 0, k = 0;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++) n += lo->d[l][role].a != NULL;
    int64_t kmax = m->n_embd;
    if (m->n_ff > kmax) kmax = m->n_ff;
    if ((int64_t)m->n_head * m->head_dim > kmax) kmax = (int64_t)m->n_head * m->head_dim;
    float **own = calloc((size_t)(n ? n : 1), sizeof *own);
    const void **old = calloc((size_t)(n ? n : 1), sizeof *old);
    double *acc = malloc(sizeof(double) * (size_t)kmax);
    float *row = malloc(sizeof(float) * (size_t)kmax);
    if (!own || !old || !acc || !row) goto oom;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            const mor_lora_delta *d = &lo->d[l][role];
            const mor_weight *w = &m->layers[l].w[role];
            if (!d->a) continue;
            float *f = malloc(sizeof(float) * (size_t)(w->rows * w->cols));
            if (!f) goto oom;
            own[k++] = f;
            for (int64_t o = 0; o < w->rows; o++) {
                mor_embed_row(w, (int32_t)o, row);   /* any stored type, as float */
                for (int64_t c = 0; c < w->cols; c++) acc[c] = row[c];
                for (int32_t q = 0; q < d->r; q++) {
                    const double bq = (double)d->s * d->b[o * d->r + q];
                    const float *aq = d->a + (int64_t)q * w->cols;
                    for (int64_t c = 0; c < w->cols; c++) acc[c] += bq * aq[c];
                }
                for (int64_t c = 0; c < w->cols; c++) f[o * w->cols + c] = (float)acc[c];
            }
        }
    /* Nothing fails from here: switch the layers over and recount the bytes
     * read. The factors are no longer read, nor is a shared weight whose
     * every layer got its own copy. */
    uint64_t bytes = m->weight_bytes;
    k = 0;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            const mor_lora_delta *d = &lo->d[l][role];
            mor_weight *w = &m->layers[l].w[role];
            if (!d->a) continue;
            bytes -= (uint64_t)d->r * (uint64_t)(w->rows + w->cols) * sizeof(float);
            bytes += (uint64_t)(w->rows * w->cols) * sizeof(float);
            old[k] = w->data;
            w->data = own[k++];
            w->type = GGML_F32;
        }
    for (int32_t i = 0; i < n; i++) {
        int seen = 0, still = 0;
        for (int32_t j = 0; j < i && !seen; j++) seen = old[j] == old[i];
        for (int32_t l = 0; l < m->n_layer && !seen && !still; l++)
            for (int role = 0; role < ROLE_COUNT && !still; role++) still = m->layers[l].w[role].data == old[i];
        if (!seen && !still) bytes -= tensor_nbytes(m->gguf, old[i]);
    }
    m->weight_bytes = bytes;
    lo->own = own;
    lo->n_own = n;
    lo->folded = 1;
    free(old);
    free(acc);
    free(row);
    return MOR_OK;
oom:
    for (int32_t i = 0; i < k; i++) free(own[i]);
    free(own);
    free(old);
    free(acc);
    free(row);
    return mor_err(MOR_E_NOMEM, "out of memory folding the LoRA deltas");
}

/* y += s B (A x) for one row. */
static void delta_row(const mor_lora_delta *d, int64_t in, int64_t out, const float *x, float *y)
{
    float t[LORA_CHUNK];
    for (int32_t q0 = 0; q0 < d->r; q0 += LORA_CHUNK) {
        const int32_t nq = d->r - q0 < LORA_CHUNK ? d->r - q0 : LORA_CHUNK;
        for (int32_t q = 0; q < nq; q++) {
            const float *aq = d->a + (int64_t)(q0 + q) * in;
            float acc = 0;
            for (int64_t c = 0; c < in; c++) acc += aq[c] * x[c];
            t[q] = d->s * acc;
        }
        for (int64_t o = 0; o < out; o++) {
            const float *bo = d->b + o * d->r + q0;
            float acc = 0;
            for (int32_t q = 0; q < nq; q++) acc += bo[q] * t[q];
            y[o] += acc;
        }
    }
}

void lora_apply(const mor_model *m, int32_t l, int role, const float *x, int64_t ldx, float *y, int64_t ldy, int32_t n)
{
    if (!lora_on(m, l, role)) return;
    const mor_weight *w = &m->layers[l].w[role];
    for (int32_t i = 0; i < n; i++) delta_row(&m->lora->d[l][role], w->cols, w->rows, x + i * ldx, y + i * ldy);
}

void lora_apply_rows(const mor_model *m, const int32_t *layer, int role, const float *x, int64_t ldx, float *y,
                     int64_t ldy, int32_t n)
{
    for (int32_t i = 0; i < n; i++) lora_apply(m, layer[i], role, x + i * ldx, ldx, y + i * ldy, ldy, 1);
}
