/* recursion.c - recursion scheduling (see recursion.h): rows in flight, their
 * verdicts, and passes of the shared block over them. */
#include <math.h>
#include <string.h>
#include "embed_output.h"
#include "kernels.h"
#include "layer.h"
#include "recursion.h"
#include "status.h"

/* One row's record; x, h, hprev, cs, z and p follow it in the block. Private
 * to this file: others ask rec_depth and rec_tag. */
typedef struct {
    int32_t pos, seq;
    int32_t rec;        /* the recursion it runs next */
    int32_t depth;      /* recursions it was taken by */
    int32_t tag;        /* the caller's (serve.c: the slot) */
    router_row rt;      /* the router's record: gate, token-choice depth, dropped */
    uint8_t life;       /* ROW_*, private to recursion.c (check-layers) */
} rec_row;

static inline rec_row *rec_at(const rec_engine *e, int32_t i) { return (rec_row *)(e->rows + (size_t)i * e->stride); }

int32_t rec_depth(const rec_engine *e, int32_t i) { return rec_at(e, i)->depth; }
int32_t rec_tag(const rec_engine *e, int32_t i) { return rec_at(e, i)->tag; }

/* A row's state (recursion.h: the verdicts). */
enum { ROW_FREE, ROW_RUN, ROW_KVONLY, ROW_DISCARD, ROW_EXITED };

/* ---- the row block ---- */

/* A record: the rec_row, then floats x[d], h[d], hprev[d], cs[head_dim],
 * z[n_rec], p[n_rec], rounded up to 64 bytes. */
static size_t floats_off(void) { return (sizeof(rec_row) + 15) / 16 * 16; }
static size_t record_bytes(const mor_model *m)
{
    const size_t nf = 3 * (size_t)m->n_embd + (size_t)m->head_dim + 2 * (size_t)m->n_rec;
    return (floats_off() + nf * sizeof(float) + 63) / 64 * 64;
}

float *rec_x(const rec_engine *e, int32_t i) { return (float *)((unsigned char *)rec_at(e, i) + floats_off()); }
float *rec_h(const rec_engine *e, int32_t i) { return rec_x(e, i) + e->m->n_embd; }
static float *rec_hprev(const rec_engine *e, int32_t i) { return rec_x(e, i) + 2 * e->m->n_embd; }
static float *rec_cs(const rec_engine *e, int32_t i) { return rec_x(e, i) + 3 * e->m->n_embd; }
float *rec_z(const rec_engine *e, int32_t i) { return rec_cs(e, i) + e->m->head_dim; }
float *rec_p(const rec_engine *e, int32_t i) { return rec_z(e, i) + e->m->n_rec; }

/* The scratch after the records, in the order rec_bind lays it out. */
#define REC_SCRATCH(X)                                                     \
    X(float, gx, (size_t)cap * d) X(float, gcs, (size_t)cap * hd)          \
    X(float, tmp, 3 * (size_t)d) X(float, vocab, (size_t)m->n_vocab)       \
    X(float, zb, cap) X(float, pb, cap)                                    \
    X(int32_t, gpos, cap) X(int32_t, gseq, cap) X(int32_t, glayer, cap)    \
    X(int32_t, gseqv, cap) X(int32_t, glist, cap) X(int32_t, tmp_list, cap) \
    X(const float *, gxp, cap) X(router_rank, rank, cap)                   \
    X(router_cand, cand, cap)                                              \
    X(uint8_t, gskip, cap) X(uint8_t, gsel, cap) X(uint8_t, gverdict, cap)

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

size_t rec_bytes(const mor_model *m, int32_t cap)
{
    const size_t d = (size_t)m->n_embd, hd = (size_t)m->head_dim;
    size_t n = (size_t)cap * record_bytes(m);
#define SIZE(T, name, count) n += align64(sizeof(T) * (count));
    REC_SCRATCH(SIZE)
#undef SIZE
    return n;
}

void rec_bind(rec_engine *e, const mor_model *m, mor_kv_cache *kv, mor_router *router, layer_scratch *ls,
              int32_t cap, void *mem)
{
    const size_t d = (size_t)m->n_embd, hd = (size_t)m->head_dim;
    memset(e, 0, sizeof *e);
    e->m = m; e->kv = kv; e->router = router; e->ls = ls; e->cap = cap;
    e->stride = record_bytes(m);
    unsigned char *p = mem;
    e->rows = p;
    p += (size_t)cap * e->stride;
#define LAY(T, name, count) e->name = (void *)p; p += align64(sizeof(T) * (count));
    REC_SCRATCH(LAY)
#undef LAY
    e->rs = (router_scratch){ e->zb, e->pb, e->tmp, e->vocab, e->gxp, e->gseqv, e->glist, e->gsel, e->rank };
    e->drop_life = ROW_EXITED;
}

void rec_set_lockstep(rec_engine *e, int on)
{
    e->drop_life = on && e->m->router_type != MOR_ROUTER_TYPE_NONE ? ROW_DISCARD : ROW_EXITED;
}

/* ---- rows ---- */

void rec_reset(rec_engine *e)
{
    for (int32_t i = 0; i < e->cap; i++) rec_at(e, i)->life = ROW_FREE;
}

int32_t rec_n_live(const rec_engine *e)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->cap; i++) n += rec_at(e, i)->life != ROW_FREE;
    return n;
}

mor_status rec_enter(rec_engine *e, mor_token token, mor_pos pos, mor_seq_id seq, int32_t tag, int32_t *row)
{
    const mor_model *m = e->m;
    int32_t i = 0;
    while (i < e->cap && rec_at(e, i)->life != ROW_FREE) i++;
    if (i == e->cap) return err_set(MOR_E_INTERNAL, "recursion engine: all %d rows are in flight", e->cap);
    if (kv_append(e->kv, -1, seq, pos) < 0)
        return err_set(MOR_E_KV_FULL, "KV cache full (%d cells)", e->kv->n_ctx);
    *row = i;
    rec_row *r = rec_at(e, i);
    memset(r, 0, sizeof *r);
    r->pos = pos; r->seq = seq; r->tag = tag; r->life = ROW_RUN;
    model_embed_row(m, token, rec_x(e, i));
    layer_rope_cs(m, e->ls, &pos, 1, rec_cs(e, i));
    float *z = rec_z(e, i), *pr = rec_p(e, i);
    for (int32_t t = 0; t < m->n_rec; t++) z[t] = pr[t] = NAN;
    return MOR_OK;
}

int32_t rec_runnable(const rec_engine *e, int32_t *list)
{
    int32_t n = 0;
    for (int32_t rec = 0; rec < e->m->n_rec; rec++)
        for (int32_t i = 0; i < e->cap; i++) {
            const rec_row *r = rec_at(e, i);
            if (r->rec == rec && (r->life == ROW_RUN || r->life == ROW_KVONLY || r->life == ROW_DISCARD))
                list[n++] = i;
        }
    return n;
}

int32_t rec_recursing(const rec_engine *e, const int32_t *list, int32_t n, int32_t *out)
{
    int32_t k = 0;
    for (int32_t t = 0; t < n; t++) {
        const uint8_t life = rec_at(e, list[t])->life;
        if (life == ROW_RUN || life == ROW_KVONLY || life == ROW_DISCARD) out[k++] = list[t];
    }
    return k;
}

int32_t rec_exited(const rec_engine *e, const int32_t *list, int32_t n, int32_t *out)
{
    int32_t k = 0;
    for (int32_t t = 0; t < n; t++)
        if (rec_at(e, list[t])->life == ROW_EXITED) out[k++] = list[t];
    return k;
}

int32_t rec_exited_of(const rec_engine *e, int32_t tag, int32_t *out)
{
    int32_t n = 0;
    for (int32_t i = 0; i < e->cap; i++)
        if (rec_at(e, i)->life == ROW_EXITED && rec_at(e, i)->tag == tag) out[n++] = i;
    for (int32_t a = 1; a < n; a++)   /* insertion sort by position (few rows, mostly in order) */
        for (int32_t b = a; b > 0 && rec_at(e, out[b])->pos < rec_at(e, out[b - 1])->pos; b--) {
            const int32_t t = out[b]; out[b] = out[b - 1]; out[b - 1] = t;
        }
    return n;
}

void rec_free(rec_engine *e, const int32_t *list, int32_t n)
{
    for (int32_t t = 0; t < n; t++) rec_at(e, list[t])->life = ROW_FREE;
}

int32_t rec_save(const rec_engine *e, void *buf)
{
    int32_t n_hi = 0;
    for (int32_t i = 0; i < e->cap; i++)
        if (rec_at(e, i)->life != ROW_FREE) n_hi = i + 1;
    memcpy(buf, e->rows, rec_span(e, n_hi));
    return n_hi;
}

void rec_restore(rec_engine *e, const void *buf, int32_t n_hi)
{
    memcpy(e->rows, buf, rec_span(e, n_hi));
    for (int32_t i = n_hi; i < e->cap; i++) rec_at(e, i)->life = ROW_FREE;
}

static mor_status poll(const rec_engine *e)
{
    if (e->abort_cb && e->abort_cb(e->abort_ud)) return err_set(MOR_E_ABORTED, "aborted by the abort callback");
    return MOR_OK;
}

/* Rows of list into the gathered scratch: their hidden state (x, or h for
 * `from_h`), position, sequence, RoPE angles. */
static void gather(rec_engine *e, const int32_t *list, int32_t n, int from_h)
{
    const int32_t d = e->m->n_embd, hd = e->m->head_dim;
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = list[t];
        memcpy(e->gx + (size_t)t * d, from_h ? rec_h(e, i) : rec_x(e, i), sizeof(float) * (size_t)d);
        memcpy(e->gcs + (size_t)t * hd, rec_cs(e, i), sizeof(float) * (size_t)hd);
        e->gpos[t] = rec_at(e, i)->pos;
        e->gseq[t] = rec_at(e, i)->seq;
    }
}

static void capture(const rec_engine *e, const int32_t *list, int32_t n)
{
    if (e->capture) e->capture(e->capture_ud, e->gx, list, n);
}

mor_status rec_layers(rec_engine *e, const int32_t *list, int32_t n, int32_t l0, int32_t l1)
{
    const int32_t d = e->m->n_embd;
    if (!n || l0 >= l1) return MOR_OK;
    gather(e, list, n, 0);
    for (int32_t l = l0; l < l1; l++) {
        mor_status st = poll(e);
        capture(e, list, n);
        const layer_rows rows = { n, e->gpos, e->gseq, NULL, e->gcs, NULL };
        if (!st) st = layer_forward(e->m, l, e->kv, e->ls, e->gx, &rows);
        if (st) return st;
    }
    for (int32_t t = 0; t < n; t++) memcpy(rec_x(e, list[t]), e->gx + (size_t)t * d, sizeof(float) * (size_t)d);
    return MOR_OK;
}

/* ---- verdicts ---- */

/* The verdicts of the n rows of list, all at recursion rec: the router's
 * (router_verdicts) turned into row states. */
static void decide_at(rec_engine *e, int32_t rec, const int32_t *list, int32_t n, const int32_t *seq_rows)
{
    const mor_model *m = e->m;
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = list[t];
        rec_row *r = rec_at(e, i);
        e->cand[t] = (router_cand){ &r->rt, rec_x(e, i), rec_hprev(e, i), rec_z(e, i), rec_p(e, i), r->seq };
    }
    router_verdicts(e->router, &e->ls->exec, rec, e->cand, n, seq_rows, &e->rs, e->gverdict);
    const int every = rec < m->n_rec && kv_caches_every_row(e->kv, rec);
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = list[t];
        rec_row *r = rec_at(e, i);
        switch (e->gverdict[t]) {
        case ROUTE_TAKEN:
            r->life = ROW_RUN;
            if (m->router_type == MOR_ROUTER_TYPE_TOKEN && rec == 0)   /* the trajectory starts at H^1 */
                memcpy(rec_h(e, i), rec_x(e, i), sizeof(float) * (size_t)m->n_embd);
            break;
        case ROUTE_DROPPED: r->life = every ? ROW_KVONLY : e->drop_life; break;
        default:            r->life = rec < m->n_rec ? e->drop_life : ROW_EXITED; break;
        }
    }
}

void rec_decide(rec_engine *e, const int32_t *list, int32_t n, const int32_t *seq_rows)
{
    int32_t r0 = INT32_MAX;
    for (int32_t t = 0; t < n; t++)
        if (rec_at(e, list[t])->rec < r0) r0 = rec_at(e, list[t])->rec;
    for (int32_t left = n, rec = r0; left > 0; rec++) {   /* the rows at each recursion, in list order */
        int32_t k = 0;
        for (int32_t t = 0; t < n; t++)
            if (rec_at(e, list[t])->rec == rec) e->tmp_list[k++] = list[t];
        if (k) decide_at(e, rec, e->tmp_list, k, seq_rows);
        left -= k;
    }
}

/* ---- passes ---- */

static int same_weights(const mor_model *m, int32_t a, int32_t b)
{
    for (int r = 0; r < ROLE_ALL; r++)
        if (m->layers[a].w[r].data != m->layers[b].w[r].data) return 0;
    return 1;
}

mor_status rec_pass(rec_engine *e, const int32_t *list, int32_t n)
{
    const mor_model *m = e->m;
    const int32_t d = m->n_embd, hd = m->head_dim;
    const int tc = m->router_type == MOR_ROUTER_TYPE_TOKEN;
    if (!n) return MOR_OK;
    gather(e, list, n, tc);
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = list[t];
        memcpy(rec_hprev(e, i), rec_x(e, i), sizeof(float) * (size_t)d);   /* for the saturation measure */
        e->gskip[t] = rec_at(e, i)->life == ROW_DISCARD;
        /* a looped model's norm between recursions: on the way in, so that a row
         * exiting after recursion r is normed once, as a model of r loops would */
        if (m->arch.loop_norm && rec_at(e, i)->rec > 0) model_output_norm(m, e->gx + (size_t)t * d, e->gx + (size_t)t * d);
    }
    for (int32_t j = 0; j < m->base_depth; j++) {
        mor_status st = poll(e);
        if (st) return st;
        if (e->capture_in_pass) capture(e, list, n);
        for (int32_t t = 0; t < n; t++) e->glayer[t] = model_layer_of(m, rec_at(e, list[t])->rec, j);
        for (int32_t t0 = 0, t1; t0 < n; t0 = t1) {   /* runs of rows with the same weights */
            for (t1 = t0 + 1; t1 < n && same_weights(m, e->glayer[t0], e->glayer[t1]); t1++) {}
            const layer_rows rows = { t1 - t0, e->gpos + t0, e->gseq + t0, e->glayer + t0,
                                      e->gcs + (size_t)t0 * hd, e->gskip + t0 };
            st = layer_forward(m, e->glayer[t0], e->kv, e->ls, e->gx + (size_t)t0 * d, &rows);
            if (st) return st;
        }
    }
    for (int32_t t = 0; t < n; t++) {
        const int32_t i = list[t];
        rec_row *r = rec_at(e, i);
        const float *y = e->gx + (size_t)t * d;
        const int32_t rec = r->rec++;
        if (r->life != ROW_RUN) continue;   /* only its K/V were wanted, or nothing */
        r->depth = rec + 1;
        if (m->router_type == MOR_ROUTER_TYPE_EXPERT) router_update(m, rec_x(e, i), y, r->rt.gate);
        else if (!tc) memcpy(rec_x(e, i), y, sizeof(float) * (size_t)d);
        else if (r->rt.tdepth == rec + 1) router_update(m, rec_x(e, i), y, r->rt.gate);   /* H^1 + g f^(r+1)(H^1) */
        else memcpy(rec_h(e, i), y, sizeof(float) * (size_t)d);                    /* goes deeper: ungated */
    }
    return MOR_OK;
}

/* ---- finishing ---- */

mor_status rec_finish(rec_engine *e, const int32_t *list, int32_t n, const int32_t *out_idx, int32_t n_out,
                      const tensor *w, float *logits)
{
    const mor_model *m = e->m;
    const int32_t d = m->n_embd;
    if (!n) return MOR_OK;
    gather(e, list, n, 0);
    for (int32_t l = m->n_layer - m->coda; l < m->n_layer; l++) {
        mor_status st = poll(e);
        capture(e, list, n);
        const layer_rows rows = { n, e->gpos, e->gseq, NULL, e->gcs, NULL };
        if (!st) st = layer_forward(m, l, e->kv, e->ls, e->gx, &rows);
        if (st) return st;
    }
    /* Nothing can fail from here on. The final norm, of every row when
     * captured, else of the rows with logits, packed in front (o <= out_idx[o]). */
    if (e->capture) {
        for (int32_t t = 0; t < n; t++) model_output_norm(m, e->gx + (size_t)t * d, e->gx + (size_t)t * d);
        capture(e, list, n);
        for (int32_t o = 0; o < n_out; o++)
            memmove(e->gx + (size_t)o * d, e->gx + (size_t)out_idx[o] * d, sizeof(float) * (size_t)d);
    } else {
        for (int32_t o = 0; o < n_out; o++)
            model_output_norm(m, e->gx + (size_t)o * d, e->gx + (size_t)out_idx[o] * d);
    }
    if (n_out) model_logits_with(m, w ? w : &m->output, &e->ls->exec, e->gx, n_out, logits);
    return MOR_OK;
}
