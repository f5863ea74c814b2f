/* layout.c - classify every state-dict key by the grammar of layout.h, derive
 * the structure (plain, expert-choice or token-choice; P, N_r, K, C), and
 * place each tensor at its unrolled layer. */
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"
#include "util.h"

const char *const cv_role_gguf[CV_ROLE_ALL] = {
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
    "attn_norm.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_norm.bias",
    "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "attn_post_norm", "ffn_post_norm",
};
const char *const cv_role_tensor[CV_ROLE_ALL] = {
    "attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_norm.weight",
    "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    "attn_norm.bias", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_norm.bias",
    "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias", "attn_post_norm.weight", "ffn_post_norm.weight",
};
const char *const cv_role_hf[CV_ROLE_ALL] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.bias", "self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias",
    "self_attn.o_proj.bias", "post_attention_layernorm.bias", "mlp.gate_proj.bias", "mlp.up_proj.bias",
    "mlp.down_proj.bias", "attn_post_norm.weight", "ffn_post_norm.weight",
};

int cv_role_is_vector(int role)
{
    return role == CV_ROLE_ATTN_NORM || role == CV_ROLE_FFN_NORM || role >= CV_ROLE_COUNT;
}

/* what a key is */
enum { K_IGNORE, K_EMBED, K_NORM, K_NORM_B, K_LM_HEAD, K_EXIT_W, K_EXIT_B, K_PLAIN, K_EXPERT, K_TOKEN, K_ROUTER, K_AUX, K_BIAS };
/* router parts */
enum { P_W, P_FC1, P_FC2 };

typedef struct {
    int what, layer, r, j, role;   /* role: CV_ROLE_* or router part P_* */
    int part;                      /* of a layer role: PART_WEIGHT, PART_LORA_A, PART_LORA_B */
    const ckpt_tensor *t;
} keyinfo;

enum { PART_WEIGHT, PART_LORA_A, PART_LORA_B };

/* per model.layers.{i}: what kind of layer it is */
enum { L_UNSEEN, L_PLAIN, L_EXPERT, L_TOKEN, L_ROUTER_ONLY };

/* A layer role "<module>.weight", or for a projection its PEFT forms
 * "<module>.base_layer.weight", "<module>.lora_A.default.weight",
 * "<module>.lora_B.default.weight". */
static int role_of(const char *s, int *part)
{
    static const char *const peft[3] = {"base_layer.weight", "lora_A.default.weight", "lora_B.default.weight"};
    static const int parts[3] = {PART_WEIGHT, PART_LORA_A, PART_LORA_B};
    *part = PART_WEIGHT;
    for (int i = CV_ROLE_COUNT; i < CV_ROLE_ALL; i++)
        if (strcmp(s, cv_role_hf[i]) == 0) return i;
    for (int i = 0; i < CV_ROLE_COUNT; i++) {
        size_t n = strlen(cv_role_hf[i]) - 6;   /* the module, without "weight" */
        if (strcmp(s, cv_role_hf[i]) == 0) return i;
        if (i == CV_ROLE_ATTN_NORM || i == CV_ROLE_FFN_NORM || strncmp(s, cv_role_hf[i], n) != 0) continue;
        for (int k = 0; k < 3; k++)
            if (strcmp(s + n, peft[k]) == 0) {
                *part = parts[k];
                return i;
            }
    }
    return -1;
}

/* Parse "<index>." at *s: a decimal without leading zeros, below the bound. */
static int take_index(const char **s, int *out)
{
    const char *p = *s;
    long v = 0;
    if (*p < '0' || *p > '9') return 0;
    if (*p == '0' && p[1] >= '0' && p[1] <= '9') return 0;
    while (*p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v >= LAYOUT_MAX_INDEX) return 0;
        p++;
    }
    if (*p != '.') return 0;
    *out = (int)v;
    *s = p + 1;
    return 1;
}

static int router_part(const char *s, const char *head, int *part)
{
    size_t n = strlen(head);
    if (strncmp(s, head, n) != 0) return 0;
    s += n;
    if (strcmp(s, "weight") == 0) *part = P_W;
    else if (strcmp(s, "0.weight") == 0) *part = P_FC1;
    else if (strcmp(s, "2.weight") == 0) *part = P_FC2;
    else return 0;
    return 1;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int classify(const ckpt_tensor *t, keyinfo *k, char *err, size_t errcap)
{
    const char *s = t->name;
    memset(k, 0, sizeof *k);
    k->t = t;
    if (strcmp(s, "model.embed_tokens.weight") == 0) { k->what = K_EMBED; return 0; }
    if (strcmp(s, "model.norm.weight") == 0) { k->what = K_NORM; return 0; }
    if (strcmp(s, "model.norm.bias") == 0) { k->what = K_NORM_B; return 0; }
    if (strcmp(s, "lm_head.weight") == 0) { k->what = K_LM_HEAD; return 0; }
    if (strcmp(s, "model.early_exit_gate.weight") == 0) { k->what = K_EXIT_W; return 0; }
    if (strcmp(s, "model.early_exit_gate.bias") == 0) { k->what = K_EXIT_B; return 0; }
    if (ends_with(s, ".rotary_emb.inv_freq")) { k->what = K_IGNORE; return 0; }
    if (strncmp(s, "model.layers.", 13) == 0) {
        s += 13;
        if (take_index(&s, &k->layer)) {
            if ((k->role = role_of(s, &k->part)) >= 0) { k->what = K_PLAIN; return 0; }
            if (strncmp(s, "block.", 6) == 0) {
                s += 6;
                if (take_index(&s, &k->j) && (k->role = role_of(s, &k->part)) >= 0) { k->what = K_EXPERT; return 0; }
            } else if (strncmp(s, "block_list.", 11) == 0) {
                s += 11;
                if (take_index(&s, &k->r) && take_index(&s, &k->j) && (k->role = role_of(s, &k->part)) >= 0) {
                    k->what = K_TOKEN;
                    return 0;
                }
            } else if (router_part(s, "mor_router.router.", &k->role)) {
                k->what = K_ROUTER;
                return 0;
            } else if (router_part(s, "mlp_router.router.", &k->role)) {
                k->what = K_AUX;
                return 0;
            } else if (strcmp(s, "router_bias") == 0) {
                k->what = K_BIAS;
                return 0;
            }
        }
    }
    if (strstr(t->name, "lora_magnitude_vector"))
        return cv_fail(err, errcap, "DoRA checkpoints are not supported (key '%.200s'); LoRA ones are", t->name);
    if (strstr(t->name, "lora_") || strstr(t->name, "base_layer"))
        return cv_fail(err, errcap, "unexpected LoRA key '%.200s' (expected <proj>.base_layer.weight, "
                                    "<proj>.lora_A.default.weight, <proj>.lora_B.default.weight)", t->name);
    return cv_fail(err, errcap, "unexpected key '%.200s': not part of the MoR / Llama state-dict grammar", t->name);
}

void layout_free(cv_layout *lo)
{
    free(lo->lora);
    free(lo->role);
    free(lo->router);
    free(lo->aux);
    memset(lo, 0, sizeof *lo);
}

/* The key prefix of unrolled layer l, for messages. */
static void layer_prefix(const cv_layout *lo, int first_moe, int l, char *buf, size_t cap)
{
    int mid = lo->n_rec * lo->base_depth;
    if (lo->kind == ROUTE_NONE || l < lo->prelude) snprintf(buf, cap, "model.layers.%d.", l);
    else if (l >= lo->prelude + mid) snprintf(buf, cap, "model.layers.%d.", first_moe + (lo->kind == ROUTE_EXPERT ? lo->n_rec : 1) + (l - lo->prelude - mid));
    else {
        int r = (l - lo->prelude) / lo->base_depth, j = (l - lo->prelude) % lo->base_depth;
        if (lo->kind == ROUTE_EXPERT) snprintf(buf, cap, "model.layers.%d.block.%d.", first_moe + r, j);
        else snprintf(buf, cap, "model.layers.%d.block_list.%d.%d.", first_moe, r, j);
    }
}

static void set_router(lo_router *rt, const keyinfo *k)
{
    const ckpt_tensor **slot = k->role == P_W ? &rt->w : k->role == P_FC1 ? &rt->fc1 : &rt->fc2;
    *slot = k->t;
}

/* A router must be either linear or a complete MLP; returns its arch or -1. */
static int router_arch(const lo_router *rt)
{
    if (rt->w && !rt->fc1 && !rt->fc2) return ARCH_LINEAR;
    if (!rt->w && rt->fc1 && rt->fc2) return ARCH_MLP;
    return -1;
}

int layout_build(cv_layout *lo, const checkpoint *ck, char *err, size_t errcap)
{
    keyinfo *keys = calloc(ck->n ? ck->n : 1, sizeof *keys);
    int *kind = NULL, n_index = 0, first = -1, last = -1, max_r = -1, max_j = -1, rc = -1;
    memset(lo, 0, sizeof *lo);
    lo->arch = -1;
    if (!keys) return cv_fail(err, errcap, "out of memory");

    /* pass 1: classify, and find how many model.layers indices there are */
    for (size_t i = 0; i < ck->n; i++) {
        if (classify(&ck->t[i], &keys[i], err, errcap)) goto done;
        if (keys[i].what >= K_PLAIN && keys[i].layer + 1 > n_index) n_index = keys[i].layer + 1;
    }
    kind = calloc((size_t)n_index + 1, sizeof *kind);
    if (!kind) { cv_fail(err, errcap, "out of memory"); goto done; }
    for (size_t i = 0; i < ck->n; i++) {
        const keyinfo *k = &keys[i];
        int want;
        switch (k->what) {
        case K_EMBED: lo->embed = k->t; continue;
        case K_NORM: lo->norm = k->t; continue;
        case K_NORM_B: lo->norm_b = k->t; continue;
        case K_LM_HEAD: lo->lm_head = k->t; continue;
        case K_EXIT_W: lo->exit_w = k->t; continue;
        case K_EXIT_B: lo->exit_b = k->t; continue;
        case K_IGNORE: continue;
        case K_PLAIN: want = L_PLAIN; break;
        case K_EXPERT: want = L_EXPERT; break;
        case K_TOKEN: want = L_TOKEN; break;
        default: want = L_ROUTER_ONLY; break;
        }
        if (k->what == K_EXPERT || k->what == K_TOKEN) {
            if (k->j > max_j) max_j = k->j;
            if (k->r > max_r) max_r = k->r;
        }
        if (kind[k->layer] == L_UNSEEN || kind[k->layer] == L_ROUTER_ONLY) {
            if (want != L_ROUTER_ONLY) kind[k->layer] = want;
            else if (kind[k->layer] == L_UNSEEN) kind[k->layer] = L_ROUTER_ONLY;
        } else if (want != L_ROUTER_ONLY && want != kind[k->layer]) {
            cv_fail(err, errcap, "key '%.200s' mixes layer forms within model.layers.%d", k->t->name, k->layer);
            goto done;
        }
    }
    if (!lo->embed) { cv_fail(err, errcap, "model.embed_tokens.weight is missing"); goto done; }
    if (!lo->norm) { cv_fail(err, errcap, "model.norm.weight is missing"); goto done; }
    if (n_index == 0) { cv_fail(err, errcap, "the checkpoint has no model.layers"); goto done; }

    /* structure */
    for (int i = 0; i < n_index; i++) {
        if (kind[i] == L_UNSEEN) { cv_fail(err, errcap, "model.layers.%d is missing", i); goto done; }
        if (kind[i] == L_ROUTER_ONLY) { cv_fail(err, errcap, "model.layers.%d has a router but no blocks", i); goto done; }
        if (kind[i] == L_EXPERT || kind[i] == L_TOKEN) {
            if (first < 0) first = i;
            else if (kind[i] != kind[first]) { cv_fail(err, errcap, "expert-choice and token-choice layers are mixed"); goto done; }
            else if (last != i - 1) { cv_fail(err, errcap, "the MoR layers are not consecutive (model.layers.%d)", i); goto done; }
            last = i;
        }
    }
    if (first < 0) {
        lo->kind = ROUTE_NONE;
        lo->n_layer = n_index;
    } else {
        lo->kind = kind[first] == L_EXPERT ? ROUTE_EXPERT : ROUTE_TOKEN;
        lo->prelude = first;
        lo->coda = n_index - 1 - last;
        if (lo->kind == ROUTE_TOKEN && last != first) {
            cv_fail(err, errcap, "more than one token-choice MoR layer (model.layers.%d and %d)", first, last);
            goto done;
        }
        if (lo->prelude != lo->coda || lo->prelude > 1) {
            cv_fail(err, errcap, "unsupported layout: %d plain layer(s) before the MoR layers and %d after "
                                 "(cycle sharing has 0 and 0, middle_cycle 1 and 1)", lo->prelude, lo->coda);
            goto done;
        }
        lo->n_rec = lo->kind == ROUTE_EXPERT ? last - first + 1 : max_r + 1;
        lo->base_depth = max_j + 1;
        if (lo->n_rec > 64) { cv_fail(err, errcap, "%d recursions (at most 64 supported)", lo->n_rec); goto done; }
        if ((long)lo->n_rec * lo->base_depth + lo->prelude + lo->coda > LAYOUT_MAX_INDEX) {
            cv_fail(err, errcap, "too many unrolled layers");
            goto done;
        }
        lo->n_layer = lo->prelude + lo->n_rec * lo->base_depth + lo->coda;
    }

    lo->role = calloc((size_t)lo->n_layer, sizeof *lo->role);
    lo->router = calloc((size_t)(lo->kind == ROUTE_EXPERT ? lo->n_rec : 1), sizeof *lo->router);
    if (!lo->role || !lo->router) { cv_fail(err, errcap, "out of memory"); goto done; }

    /* pass 2: place every tensor */
    for (size_t i = 0; i < ck->n; i++) {
        const keyinfo *k = &keys[i];
        int l = -1;
        switch (k->what) {
        case K_PLAIN:
            if (lo->kind == ROUTE_NONE || k->layer < first) l = k->layer;
            else l = lo->prelude + lo->n_rec * lo->base_depth + (k->layer - last - 1);
            break;
        case K_EXPERT:
            l = lo->prelude + (k->layer - first) * lo->base_depth + k->j;
            break;
        case K_TOKEN:
            l = lo->prelude + k->r * lo->base_depth + k->j;
            break;
        case K_ROUTER:
            if (kind[k->layer] != L_EXPERT && kind[k->layer] != L_TOKEN) {
                cv_fail(err, errcap, "router key '%.200s' on a plain layer", k->t->name);
                goto done;
            }
            set_router(&lo->router[lo->kind == ROUTE_EXPERT ? k->layer - first : 0], k);
            break;
        case K_AUX:
            if (kind[k->layer] != L_EXPERT) {
                cv_fail(err, errcap, "aux router key '%.200s' outside an expert-choice layer", k->t->name);
                goto done;
            }
            if (!lo->aux && !(lo->aux = calloc((size_t)lo->n_rec, sizeof *lo->aux))) {
                cv_fail(err, errcap, "out of memory");
                goto done;
            }
            set_router(&lo->aux[k->layer - first], k);
            break;
        case K_BIAS:
            if (kind[k->layer] != L_TOKEN) {
                cv_fail(err, errcap, "'%.200s': router_bias outside a token-choice layer", k->t->name);
                goto done;
            }
            lo->bias = k->t;
            break;
        default:
            break;
        }
        if (l < 0) continue;
        /* a layer role, or one of its LoRA factors */
        const ckpt_tensor **slot;
        if (k->part == PART_WEIGHT) {
            slot = &lo->role[l][k->role];
        } else {
            if (!lo->lora && !(lo->lora = calloc((size_t)lo->n_layer, sizeof *lo->lora))) {
                cv_fail(err, errcap, "out of memory");
                goto done;
            }
            slot = &lo->lora[l][k->role][k->part == PART_LORA_B];
        }
        if (*slot) {
            cv_fail(err, errcap, "'%.200s' and '%.200s' are the same weight", (*slot)->name, k->t->name);
            goto done;
        }
        *slot = k->t;
    }

    /* completeness: the nine but ffn_gate in every layer, the others in
     * every layer or none */
    int any[CV_ROLE_ALL] = {0};
    for (int l = 0; l < lo->n_layer; l++)
        for (int r = 0; r < CV_ROLE_ALL; r++) any[r] |= lo->role[l][r] != NULL;
    for (int r = 0; r < CV_ROLE_COUNT; r++) any[r] |= r != CV_ROLE_FFN_GATE;
    for (int l = 0; l < lo->n_layer; l++)
        for (int r = 0; r < CV_ROLE_ALL; r++)
            if (!lo->role[l][r] && any[r]) {
                char pre[128];
                layer_prefix(lo, first, l, pre, sizeof pre);
                cv_fail(err, errcap, "%s%s is missing", pre, cv_role_hf[r]);
                goto done;
            }
    for (int l = 0; lo->lora && l < lo->n_layer; l++)
        for (int r = 0; r < CV_ROLE_COUNT; r++)
            if (!lo->lora[l][r][0] != !lo->lora[l][r][1]) {
                cv_fail(err, errcap, "'%.200s' has no lora_%s partner", (lo->lora[l][r][0] ? lo->lora[l][r][0] : lo->lora[l][r][1])->name,
                        lo->lora[l][r][0] ? "B" : "A");
                goto done;
            }
    if (lo->kind != ROUTE_NONE) {
        int nr = lo->kind == ROUTE_EXPERT ? lo->n_rec : 1;
        for (int r = 0; r < nr; r++) {
            int a = router_arch(&lo->router[r]);
            if (a < 0) {
                cv_fail(err, errcap, "model.layers.%d.mor_router: need router.weight (linear) or router.0/router.2 (MLP)",
                        first + r);
                goto done;
            }
            if (r > 0 && a != lo->arch) { cv_fail(err, errcap, "routers of different architectures"); goto done; }
            lo->arch = a;
            if (lo->aux && router_arch(&lo->aux[r]) < 0) {
                cv_fail(err, errcap, "model.layers.%d.mlp_router is incomplete or missing", first + r);
                goto done;
            }
        }
    }
    rc = 0;
done:
    free(keys);
    free(kind);
    if (rc) layout_free(lo);
    return rc;
}

/* ---- shapes -------------------------------------------------------------------- */

static int shape_is(const ckpt_tensor *t, int ndim, uint64_t a, uint64_t b, char *err, size_t errcap)
{
    if (t->ndim == ndim && t->shape[0] == a && (ndim == 1 || t->shape[1] == b)) return 0;
    if (ndim == 1)
        return cv_fail(err, errcap, "tensor '%.200s' should have shape [%llu]", t->name, (unsigned long long)a);
    return cv_fail(err, errcap, "tensor '%.200s' should have shape [%llu, %llu]", t->name, (unsigned long long)a,
                   (unsigned long long)b);
}

static int router_shapes(const lo_router *rt, uint64_t out, uint64_t d, char *err, size_t errcap)
{
    if (rt->w) return shape_is(rt->w, 2, out, d, err, errcap);
    if (shape_is(rt->fc1, 2, 2 * d, d, err, errcap)) return -1;
    return shape_is(rt->fc2, 2, out, 2 * d, err, errcap);
}

int cv_arch_has_role(const cv_arch *a, int role)
{
    switch (role) {
    case CV_ROLE_FFN_GATE: return a->gated;
    case CV_ROLE_ATTN_NORM_B: case CV_ROLE_FFN_NORM_B: return a->layer_norm;
    case CV_ROLE_ATTN_Q_B: case CV_ROLE_ATTN_K_B: case CV_ROLE_ATTN_V_B: case CV_ROLE_ATTN_OUT_B: return a->attn_bias;
    case CV_ROLE_FFN_GATE_B: return a->ffn_bias && a->gated;
    case CV_ROLE_FFN_UP_B: case CV_ROLE_FFN_DOWN_B: return a->ffn_bias;
    case CV_ROLE_ATTN_POST_NORM: case CV_ROLE_FFN_POST_NORM: return a->post_norms;
    default: return 1;
    }
}

int layout_check_shapes(const cv_layout *lo, const hf_config *c, char *err, size_t errcap)
{
    uint64_t d = c->hidden, f = c->intermediate, q = (uint64_t)c->n_head * c->head_dim,
             kv = (uint64_t)c->n_head_kv * c->head_dim, v = c->vocab;
    /* [out, in] per role; in = 0: a vector of out */
    uint64_t shape[CV_ROLE_ALL][2] = { {d, 0}, {q, d}, {kv, d}, {kv, d}, {d, q}, {d, 0}, {f, d}, {f, d}, {d, f} };
    for (int r = CV_ROLE_ATTN_NORM_B; r <= CV_ROLE_FFN_DOWN_B; r++) shape[r][0] = shape[r - CV_ROLE_COUNT][0];
    shape[CV_ROLE_ATTN_POST_NORM][0] = shape[CV_ROLE_FFN_POST_NORM][0] = d;
    if (shape_is(lo->embed, 2, v, d, err, errcap) || shape_is(lo->norm, 1, d, 0, err, errcap) ||
        (lo->lm_head && shape_is(lo->lm_head, 2, v, d, err, errcap)) || (lo->norm_b && shape_is(lo->norm_b, 1, d, 0, err, errcap)) ||
        (lo->exit_w && shape_is(lo->exit_w, 2, 1, d, err, errcap)) || (lo->exit_b && shape_is(lo->exit_b, 1, 1, 0, err, errcap)))
        return -1;
    if (!lo->exit_w != !lo->exit_b)
        return cv_fail(err, errcap, "model.early_exit_gate needs both its weight and its bias");
    if (!lo->norm_b != !c->arch.layer_norm)
        return cv_fail(err, errcap, "model.norm.bias %s (the model's norms are %s)", lo->norm_b ? "is unexpected" : "is missing",
                       c->arch.layer_norm ? "LayerNorms" : "RMSNorms");
    for (int r = 0; r < CV_ROLE_ALL; r++)
        if (!lo->role[0][r] != !cv_arch_has_role(&c->arch, r))
            return cv_fail(err, errcap, "model.layers.0.%s %s for a %s model", cv_role_hf[r],
                           lo->role[0][r] ? "is not expected" : "is missing", cv_family_names[c->arch.family]);
    for (int l = 0; l < lo->n_layer; l++) {
        const ckpt_tensor *const *t = lo->role[l];
        for (int r = 0; r < CV_ROLE_ALL; r++)
            if (t[r] && shape_is(t[r], shape[r][1] ? 2 : 1, shape[r][0], shape[r][1], err, errcap)) return -1;
        for (int r = 0; lo->lora && r < CV_ROLE_COUNT; r++) {
            const ckpt_tensor *a = lo->lora[l][r][0], *b = lo->lora[l][r][1];
            uint64_t out = t[r]->shape[0], in = t[r]->shape[1], rk;
            if (!a) continue;
            rk = a->ndim == 2 ? a->shape[0] : 0;
            if (shape_is(a, 2, rk, in, err, errcap) || shape_is(b, 2, out, rk, err, errcap)) return -1;
            if (rk < 1 || rk > (in < out ? in : out))
                return cv_fail(err, errcap, "'%.200s': LoRA rank %llu is outside [1, min(in, out) = %llu]", a->name,
                               (unsigned long long)rk, (unsigned long long)(in < out ? in : out));
        }
    }
    if (lo->kind == ROUTE_EXPERT) {
        for (int r = 0; r < lo->n_rec; r++)
            if (router_shapes(&lo->router[r], 1, d, err, errcap) || (lo->aux && router_shapes(&lo->aux[r], 1, d, err, errcap)))
                return -1;
    } else if (lo->kind == ROUTE_TOKEN) {
        if (router_shapes(&lo->router[0], (uint64_t)lo->n_rec, d, err, errcap)) return -1;
        if (lo->bias && shape_is(lo->bias, 1, (uint64_t)lo->n_rec, 0, err, errcap)) return -1;
    }
    return 0;
}
