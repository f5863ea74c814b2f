/* model.c - the trainable model: configuration, parameter layout, init. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"

const char *const tr_role_names[TR_NROLE] = {
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
    "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"
};

void tr_config_defaults(tr_config *c)
{
    memset(c, 0, sizeof *c);
    c->ctx = 2048; c->eps = 1e-5f; c->theta = 10000.0f;
    c->n_rec = 1;
    c->router = TR_ROUTER_NONE;
    c->func = TR_FUNC_SOFTMAX;
    c->alpha = 0.1f;
    for (int r = 0; r < TR_MAX_REC; r++) c->cap[r] = 1.0;
    c->aux_coef = 0.001f;
    c->bal_coef = 0.1f; c->z_coef = 1e-5f;
    c->bias_rate = 0.001f;
    c->lora_alpha = 0;
}

const char *tr_config_check(const tr_config *c)
{
    if (c->vocab < 2 || c->d < 2 || c->ff < 1 || c->n_head < 1 || c->n_kv < 1 || c->head_dim < 2)
        return "vocab, d, ff, heads and head_dim must be positive";
    if (c->n_head % c->n_kv) return "heads must be a multiple of kv heads";
    if (c->head_dim % 2) return "head_dim must be even";
    if (c->n_rec < 1 || c->n_rec > TR_MAX_REC) return "recursions must be in [1, 16]";
    if (c->K < 1 || c->K > 16) return "the shared block must have 1..16 layers";
    if (c->prelude < 0 || c->coda < 0) return "negative prelude or coda";
    if (c->prelude + c->n_rec * c->K + c->coda > 256) return "more than 256 unrolled layers";
    if (c->prelude + c->K + c->coda > 64) return "more than 64 stored layers";
    if (c->router != TR_ROUTER_NONE && c->n_rec < 2) return "routing needs at least 2 recursions";
    if (c->router != TR_ROUTER_NONE && c->prelude != c->coda) return "routing needs cycle or middle-cycle sharing";
    if (c->router == TR_ROUTER_EXPERT)
        for (int r = 0; r < c->n_rec; r++)
            if (!(c->cap[r] > 0 && c->cap[r] <= 1) || (r && c->cap[r] > c->cap[r - 1]))
                return "capacities must be in (0,1] and non-increasing";
    if (c->router == TR_ROUTER_TOKEN && c->func != TR_FUNC_SOFTMAX && c->func != TR_FUNC_SIGMOID)
        return "token-choice router function must be softmax or sigmoid";
    if (c->lora_rank < 0 || c->lora_rank > 4096) return "bad LoRA rank";
    if (c->lora_rank && c->n_rec < 2) return "LoRA per recursion needs recursions";
    if (c->ctx < 1) return "context must be positive";
    return NULL;
}

static size_t add_tensor(tr_model *m, int *cap, const char *name, int64_t rows, int64_t cols, int decay,
                         int role, int rec)
{
    if (m->n_t == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        tr_tensor *t = realloc(m->t, sizeof *t * (size_t)*cap);
        if (!t) return (size_t)-1;
        m->t = t;
    }
    tr_tensor *t = &m->t[m->n_t++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows; t->cols = cols; t->off = m->n_params; t->decay = decay;
    t->layer_role = role; t->rec = rec;
    m->n_params += (size_t)(rows * cols);
    return t->off;
}

const tr_tensor *tr_model_find(const tr_model *m, const char *name)
{
    for (int i = 0; i < m->n_t; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

uint64_t tr_rand_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

double tr_rand_normal(uint64_t *s)
{
    /* Box-Muller on two uniforms in (0, 1] */
    double u1 = ((tr_rand_u64(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double u2 = (tr_rand_u64(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tr_model_free(tr_model *m)
{
    if (!m) return;
    free(m->t); free(m->p); free(m->g);
    memset(m, 0, sizeof *m);
}

/* [out, in] of each role's weight */
static void role_shapes(const tr_config *c, int64_t shape[TR_NROLE][2])
{
    const int64_t d = c->d, qd = (int64_t)c->n_head * c->head_dim, kvd = (int64_t)c->n_kv * c->head_dim, F = c->ff;
    const int64_t s[TR_NROLE][2] = {
        { 1, d }, { qd, d }, { kvd, d }, { kvd, d }, { d, qd }, { 1, d }, { F, d }, { F, d }, { d, F }
    };
    memcpy(shape, s, sizeof s);
}

int tr_model_init(tr_model *m, const tr_config *c, uint64_t seed)
{
    if (c->lora_rank <= 0) return tr_model_init_lora(m, c, NULL, seed);
    if (tr_config_check(c) || isnan(c->lora_alpha)) { memset(m, 0, sizeof *m); return -1; }
    /* a rank above min(in, out) adds nothing a smaller one cannot express,
     * and the format does not allow it: cap it (the scale keeps alpha/R) */
    tr_lora_layout *lo = calloc(1, sizeof *lo);
    if (!lo) { memset(m, 0, sizeof *m); return -1; }
    int64_t shape[TR_NROLE][2];
    role_shapes(c, shape);
    for (int role = 0; role < TR_NROLE; role++) {
        if (role == TR_NORM1 || role == TR_NORM2) continue;
        int64_t cap = shape[role][0] < shape[role][1] ? shape[role][0] : shape[role][1];
        lo->scale[role] = c->lora_alpha / (float)c->lora_rank;
        for (int r = 0; r < c->n_rec; r++)
            for (int j = 0; j < c->K; j++) lo->rank[r][j][role] = (int32_t)(c->lora_rank < cap ? c->lora_rank : cap);
    }
    int rc = tr_model_init_lora(m, c, lo, seed);
    if (!rc) m->c.lora_alpha = c->lora_alpha;
    free(lo);
    return rc;
}

int tr_model_init_lora(tr_model *m, const tr_config *c, const tr_lora_layout *lo, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    if (tr_config_check(c)) return -1;
    int64_t shape[TR_NROLE][2];
    role_shapes(c, shape);
    int32_t rmax = 0;
    if (lo)
        for (int r = 0; r < TR_MAX_REC; r++)
            for (int j = 0; j < 16; j++)
                for (int role = 0; role < TR_NROLE; role++) {
                    int32_t R = lo->rank[r][j][role];
                    int64_t cap = shape[role][0] < shape[role][1] ? shape[role][0] : shape[role][1];
                    if (!R) continue;
                    if (R < 0 || R > cap || r >= c->n_rec || j >= c->K || role == TR_NORM1 || role == TR_NORM2 ||
                        c->n_rec < 2 || !isfinite(lo->scale[role]))
                        return -1;
                    if (R > rmax) rmax = R;
                }
    m->c = *c;
    m->c.lora_rank = rmax;
    m->c.lora_alpha = 0;
    m->lora_rmax = rmax;
    if (rmax) m->lora = *lo;
    m->L = c->prelude + c->n_rec * c->K + c->coda;
    m->n_blocks = c->prelude + c->K + c->coda;
    for (int l = 0; l < m->L; l++) {
        if (l < c->prelude) m->map[l] = l;
        else if (l < c->prelude + c->n_rec * c->K) m->map[l] = c->prelude + (l - c->prelude) % c->K;
        else m->map[l] = c->prelude + c->K + (l - c->prelude - c->n_rec * c->K);
    }
    const int64_t d = c->d;
    int cap = 0;
    char name[64];
    m->embd = add_tensor(m, &cap, "token_embd.weight", c->vocab, d, 1, -1, -1);
    m->onorm = add_tensor(m, &cap, "output_norm.weight", 1, d, 0, -1, -1);
    for (int b = 0; b < m->n_blocks; b++)
        for (int r = 0; r < TR_NROLE; r++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", b, tr_role_names[r]);
            m->blk[b][r] = add_tensor(m, &cap, name, shape[r][0], shape[r][1],
                                      r != TR_NORM1 && r != TR_NORM2, r, -1);
        }
    if (c->router == TR_ROUTER_EXPERT)
        for (int r = 0; r < c->n_rec; r++) {
            snprintf(name, sizeof name, "rtr.%d.weight", r);
            m->rtr[r] = add_tensor(m, &cap, name, 1, d, 0, -1, -1);
        }
    if (c->router == TR_ROUTER_TOKEN) m->rtr_tc = add_tensor(m, &cap, "rtr.weight", c->n_rec, d, 0, -1, -1);
    memset(m->lora_a, 0xff, sizeof m->lora_a);
    memset(m->lora_b, 0xff, sizeof m->lora_b);
    if (rmax)
        for (int r = 0; r < c->n_rec; r++)
            for (int j = 0; j < c->K; j++)
                for (int role = 0; role < TR_NROLE; role++) {
                    const int32_t R = m->lora.rank[r][j][role];
                    if (!R) continue;
                    snprintf(name, sizeof name, "lora.%d.%s.a", tr_layer_of(m, r, j), tr_role_names[role]);
                    m->lora_a[r][j][role] = add_tensor(m, &cap, name, R, shape[role][1], 0, role, r);
                    snprintf(name, sizeof name, "lora.%d.%s.b", tr_layer_of(m, r, j), tr_role_names[role]);
                    m->lora_b[r][j][role] = add_tensor(m, &cap, name, shape[role][0], R, 0, role, r);
                }
    for (int i = 0; i < m->n_t; i++) if (m->t[i].off == (size_t)-1) { tr_model_free(m); return -1; }
    m->p = calloc(m->n_params, sizeof(real));
    m->g = calloc(m->n_params, sizeof(real));
    if (!m->p || !m->g) { tr_model_free(m); return -1; }

    /* N(0, 0.02); the projections that write into the residual stream are
     * scaled down by sqrt(2 L) (GPT-2); norms start at 1; LoRA B at 0 so that
     * training starts from the shared weights. */
    uint64_t rng = seed * 0x2545F4914F6CDD1Du + 1;
    for (int i = 0; i < m->n_t; i++) {
        tr_tensor *t = &m->t[i];
        real *p = m->p + t->off;
        size_t n = (size_t)(t->rows * t->cols);
        int is_norm = !strcmp(t->name, "output_norm.weight") || t->layer_role == TR_NORM1 || t->layer_role == TR_NORM2;
        if (t->rec >= 0) {   /* LoRA */
            int is_b = t->name[strlen(t->name) - 1] == 'b';
            for (size_t k = 0; k < n; k++) p[k] = is_b ? 0 : (real)(tr_rand_normal(&rng) / sqrt((double)t->cols));
            continue;
        }
        if (is_norm) { for (size_t k = 0; k < n; k++) p[k] = 1; continue; }
        double sd = 0.02;
        if (t->layer_role == TR_O || t->layer_role == TR_DOWN) sd /= sqrt(2.0 * m->L);
        for (size_t k = 0; k < n; k++) p[k] = (real)(sd * tr_rand_normal(&rng));
    }
    return 0;
}
