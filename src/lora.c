/* lora.c - depth-wise LoRA: loading, folding, and the unfolded product on
 * the context's threads. See lora.h and docs/FORMAT.md ("Depth-wise LoRA"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels.h"
#include "lora.h"
#include "status.h"

static int is_linear(int role) { return role_is_projection(role); }

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
        size_t k = strlen(role_names[r]);
        if (!is_linear(r) || (size_t)(end - p) != k + 2 || memcmp(p, role_names[r], k) != 0 || p[k] != '.') continue;
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
    if (!isfinite(*out)) return err_set(MOR_E_FORMAT, "key '%s' is not finite", key);
    return MOR_OK;
}

/* Each lora.* tensor of g into its delta of lo (the a factors, with their
 * rank and scale; the b factors into bt[l * ROLE_COUNT + role]), checked
 * against the model, and marked used. */
static mor_status read_factors(const gguf_file *g, const mor_model *m, const float *scale, struct lora_set *lo,
                               const gguf_tensor **bt, unsigned char *used)
{
    mor_status st;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int32_t l;
        int role, part;
        if (t->name.n < 5 || memcmp(t->name.p, "lora.", 5) != 0) continue;
        if (!parse_name(t->name, m->n_layer, &l, &role, &part)) {
            st = err_set(MOR_E_FORMAT, "tensor '%.*s': not lora.<layer>.<projection>.<a|b> of this model",
                         (int)(t->name.n > 96 ? 96 : t->name.n), t->name.p);
            return st;
        }
        const tensor *w = &m->layers[l].w[role];
        const int64_t in = w->cols, out = w->rows, rmax = in < out ? in : out;
        if (!w->data) {
            st = err_set(MOR_E_FORMAT, "tensor '%.*s': this model has no %s projection", (int)t->name.n, t->name.p,
                         role_names[role]);
            return st;
        }
        if (t->type != GGML_F32) {
            st = err_set(MOR_E_FORMAT, "tensor '%.*s' has type %s; LoRA factors must be F32", (int)t->name.n, t->name.p,
                         tensor_type_name(t->type));
            return st;
        }
        /* a: GGUF [in, r]; b: [r, out]; 1 <= r <= min(in, out) keeps the
         * product within the model's dims (and the kernels' per-thread scratch) */
        int64_t r = part ? t->ne[0] : t->ne[1];
        if (t->n_dims != 2 || (part ? t->ne[1] != out : t->ne[0] != in) || r < 1 || r > rmax) {
            st = err_set(MOR_E_FORMAT, "tensor '%.*s' has shape [%lld, %lld]; expected [%s] with 1 <= r <= %lld",
                         (int)t->name.n, t->name.p, (long long)t->ne[0], (long long)t->ne[1],
                         part ? "r, out" : "in, r", (long long)rmax);
            return st;
        }
        lora_delta *d = &lo->d[l][role];
        if (part) bt[(size_t)l * ROLE_COUNT + role] = t;
        else { d->a = (const float *)t->data; d->r = (int32_t)r; d->s = scale[role]; }
        used[t - g->tensors] = 1;
    }
    return MOR_OK;
}

/* Every delta has both factors of one rank; B transposed once (bt, owned). */
static mor_status pair_factors(const mor_model *m, struct lora_set *lo, const gguf_tensor *const *bt)
{
    mor_status st;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++) {
            lora_delta *d = &lo->d[l][role];
            const gguf_tensor *b = bt[(size_t)l * ROLE_COUNT + role];
            if (!d->a != !b) {
                st = err_set(MOR_E_FORMAT, "lora.%d.%s has %s but not %s", l, role_names[role], d->a ? "a" : "b",
                             d->a ? "b" : "a");
                return st;
            }
            if (!b) continue;
            if (b->ne[0] != d->r) {
                st = err_set(MOR_E_FORMAT, "lora.%d.%s: a has rank %d but b has %lld", l, role_names[role], d->r,
                             (long long)b->ne[0]);
                return st;
            }
            d->b = (const float *)b->data;
            const int64_t out = m->layers[l].w[role].rows;
            if (!(d->bt = malloc(sizeof(float) * (size_t)(d->r * out)))) {
                st = err_set(MOR_E_NOMEM, "out of memory");
                return st;
            }
            for (int64_t o = 0; o < out; o++)
                for (int32_t q = 0; q < d->r; q++) d->bt[q * out + o] = d->b[o * d->r + q];
        }
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
        return err_set(MOR_E_FORMAT, "LoRA tensors need mor.format_version >= 2 (the file says %u)", fv);
    float scale[ROLE_COUNT], s_all;
    if ((st = read_scale(g, "mor.lora.scale", 1.0f, &s_all))) return st;
    for (int r = 0; r < ROLE_COUNT; r++) {
        char key[64];
        snprintf(key, sizeof key, "mor.lora.scale.%s", role_names[r]);
        if ((st = read_scale(g, key, s_all, &scale[r]))) return st;
    }
    struct lora_set *lo = calloc(1, sizeof *lo);
    if (!lo || !(lo->d = calloc((size_t)m->n_layer, sizeof *lo->d))) {
        free(lo);
        return err_set(MOR_E_NOMEM, "out of memory");
    }
    lo->n_layer = m->n_layer;
    const gguf_tensor **bt = calloc((size_t)m->n_layer * ROLE_COUNT, sizeof *bt);   /* the b of each delta */
    if (!bt) { lora_free(lo); return err_set(MOR_E_NOMEM, "out of memory"); }
    if ((st = read_factors(g, m, scale, lo, bt, used)) || (st = pair_factors(m, lo, bt))) goto fail;
    free(bt);
    m->lora = lo;
    return MOR_OK;
fail:
    free(bt);
    lora_free(lo);
    return st;
}

void lora_free(struct lora_set *lo)
{
    if (!lo) return;
    for (int32_t l = 0; l < lo->n_layer && lo->d; l++)
        for (int role = 0; role < ROLE_COUNT; role++) free(lo->d[l][role].bt);
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
    struct lora_set *lo = m->lora;
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
            const lora_delta *d = &lo->d[l][role];
            const tensor *w = &m->layers[l].w[role];
            if (!d->a) continue;
            float *f = malloc(sizeof(float) * (size_t)(w->rows * w->cols));
            if (!f) goto oom;
            own[k++] = f;
            for (int64_t o = 0; o < w->rows; o++) {
                k_embed_row(w, (int32_t)o, row);   /* any stored type, as float */
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
            const lora_delta *d = &lo->d[l][role];
            tensor *w = &m->layers[l].w[role];
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
    for (int32_t l = 0; l < m->n_layer; l++)   /* only the unfolded product reads them */
        for (int role = 0; role < ROLE_COUNT; role++) { free(lo->d[l][role].bt); lo->d[l][role].bt = NULL; }
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
    return err_set(MOR_E_NOMEM, "out of memory folding the LoRA deltas");
}

/* ---- the unfolded product, y += s B (A x), on the context's threads ----
 *
 * The rows of a call are cut into groups: runs of consecutive rows at one
 * unrolled layer (callers order rows by layer, as for attention). Each group
 * takes two passes: T = s (X A^T) over all its rows, a matmul of the kernel
 * set with A as an F32 weight (A read once for the group), then Y += T B^T
 * (below). Both are split into chunks of (rows, outputs) over the pool,
 * never inside a sum, and both compute every output the same way whatever
 * the rows, tile or range around it, so a row's bits depend neither on the
 * thread count nor on the other rows of the batch. */

mor_status lora_scratch_init(lora_scratch *s, const mor_model *m, uint32_t n_batch)
{
    memset(s, 0, sizeof *s);
    if (!m->lora || m->lora->folded) return MOR_OK;
    for (int32_t l = 0; l < m->n_layer; l++)
        for (int role = 0; role < ROLE_COUNT; role++)
            if (m->lora->d[l][role].r > s->rmax) s->rmax = m->lora->d[l][role].r;
    s->t = malloc(sizeof(float) * (size_t)n_batch * (size_t)s->rmax);
    s->g = malloc(sizeof *s->g * (size_t)n_batch);
    if (!s->t || !s->g) {
        lora_scratch_free(s);
        return err_set(MOR_E_NOMEM, "cannot allocate LoRA scratch for n_batch %u", n_batch);
    }
    s->cap = (int32_t)n_batch;
    return MOR_OK;
}

void lora_scratch_free(lora_scratch *s)
{
    free(s->t);
    free(s->g);
    memset(s, 0, sizeof *s);
}


typedef struct {
    exec_ctx *e;
    const lora_group *g;
    int32_t ng, phase;          /* 0: T = s (X A^T); 1: Y += T B^T */
    const float *x;
    float *y, *t;
    int64_t ldx, ldy, ldt, in, out;
    int32_t rc;                 /* rows per chunk */
    int64_t oc;                 /* outputs per chunk */
} lora_job;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Outputs of group g in a phase: the rank, then the projection's rows. */
static int64_t phase_outputs(const lora_job *j, const lora_group *g) { return j->phase ? j->out : g->d->r; }

static void lora_task(void *arg, int64_t c, int32_t ith)
{
    const lora_job *j = arg;
    int32_t lo = 0, hi = j->ng - 1;   /* the group holding chunk c: the last with c0 <= c */
    while (lo < hi) {
        int32_t mid = (lo + hi + 1) / 2;
        if (j->g[mid].c0 <= c) lo = mid; else hi = mid - 1;
    }
    const lora_group *g = &j->g[lo];
    const lora_delta *d = g->d;
    const int64_t R = phase_outputs(j, g), nob = ceil_div(R, j->oc), k = c - g->c0;
    const int32_t i0 = g->i0 + (int32_t)(k / nob) * j->rc, i1 = i0 + j->rc < g->i0 + g->n ? i0 + j->rc : g->i0 + g->n;
    const int64_t o0 = (k % nob) * j->oc, o1 = o0 + j->oc < R ? o0 + j->oc : R;
    float *scratch = j->e->mm_scratch[ith];
    if (j->phase == 0) {
        const tensor a = { d->a, GGML_F32, d->r, j->in };
        j->e->k->matmul(&a, j->x + i0 * j->ldx, sizeof(float) * (size_t)j->ldx, j->t + i0 * j->ldt, j->ldt, i1 - i0,
                        o0, o1, 0, scratch);
        for (int32_t i = i0; i < i1; i++)
            for (int64_t q = o0; q < o1; q++) j->t[i * j->ldt + q] *= d->s;
    } else {
        j->e->k->lora_axpy(j->t + i0 * j->ldt, j->ldt, i1 - i0, d->r, d->bt + o0, j->out, j->y + i0 * j->ldy + o0, j->ldy, o1 - o0);
    }
}

/* One phase over the groups: number their chunks, run them. */
static void run_phase(lora_job *j, lora_group *g, int32_t n_rows)
{
    const int32_t nth = j->e->nth;
    int64_t rmax = 0, macs = 0, n_chunks = 0;
    for (int32_t q = 0; q < j->ng; q++) if (g[q].d->r > rmax) rmax = g[q].d->r;
    if (j->phase == 0) {
        /* few outputs (the rank): split the rows when there are enough of them, else the rank */
        if (n_rows >= 4 * nth) { j->rc = (int32_t)pool_chunk(n_rows, 1, nth); j->oc = rmax; }
        else { j->rc = n_rows; j->oc = pool_chunk(rmax, 4, nth); }
    } else {   /* the projection's rows, in whole blocks of the widest axpy (4 vectors of 16) */
        j->rc = n_rows;
        j->oc = pool_chunk(j->out, 64, n_rows > 2 ? 2 * nth : nth);
    }
    for (int32_t q = 0; q < j->ng; q++) {
        g[q].c0 = n_chunks;
        n_chunks += ceil_div(g[q].n, j->rc) * ceil_div(phase_outputs(j, &g[q]), j->oc);
        macs += (int64_t)g[q].n * g[q].d->r * (j->phase ? j->out : j->in);
    }
    exec_run(j->e, n_chunks, lora_task, j, macs);
}

void lora_apply_exec(exec_ctx *e, lora_scratch *s, const mor_model *m, int32_t l, const int32_t *row_layer, int role,
                     const float *x, int64_t ldx, float *y, int64_t ldy, int32_t n)
{
    if (!m->lora || m->lora->folded) return;
    const tensor *w = &m->layers[l].w[role];
    lora_job j = { .e = e, .g = s->g, .x = x, .y = y, .t = s->t, .ldx = ldx, .ldy = ldy, .ldt = s->rmax,
                   .in = w->cols, .out = w->rows };
    for (int32_t b0 = 0; b0 < n; b0 += s->cap) {   /* windows of the scratch's rows (callers stay within) */
        const int32_t b1 = n - b0 < s->cap ? n : b0 + s->cap;
        int32_t ng = 0;
        for (int32_t i0 = b0, i1; i0 < b1; i0 = i1) {   /* runs of rows at one layer with a delta */
            const int32_t li = row_layer ? row_layer[i0] : l;
            for (i1 = i0 + 1; i1 < b1 && (row_layer ? row_layer[i1] : l) == li; i1++) {}
            if (lora_on(m, li, role)) s->g[ng++] = (lora_group){ &m->lora->d[li][role], i0 - b0, i1 - i0, 0 };
        }
        if (!ng) continue;
        for (int32_t q = 0; q < ng; q++)   /* A and B, one pass each per group */
            e->weight_bytes += sizeof(float) * (uint64_t)s->g[q].d->r * (uint64_t)(w->cols + w->rows);
        j.ng = ng;
        j.x = x + b0 * ldx;
        j.y = y + b0 * ldy;
        for (j.phase = 0; j.phase < 2; j.phase++) run_phase(&j, s->g, b1 - b0);
    }
}
