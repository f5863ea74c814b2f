/* convert.c - the conversion: gather dimensions (config.json), MoR settings
 * (config file + flags), the checkpoint's tensors and their layout, then
 * deduplicate the layer weights by value and write the GGUF.
 *
 * Deduplication is by equality of the bytes that will be written, never by
 * name: a .bin checkpoint shares tied tensors while a .safetensors one holds
 * copies, and both must give the same file. For each role, unrolled layers
 * are walked in order; a tensor equal to one already stored for that role
 * reuses its block index, otherwise it becomes the next block. */
#include "convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "dtype.h"
#include "family.h"
#include "gguf_input.h"
#include "gguf_write.h"
#include "hf_config.h"
#include "hf_tokenizer.h"
#include "internal.h"
#include "layout.h"
#include "mor.h"
#include "relax.h"
#include "util.h"

void convert_opts_init(convert_opts *o)
{
    memset(o, 0, sizeof *o);
    o->outtype = OUTTYPE_AUTO;
    o->init = INIT_NONE;
    cv_settings_init(&o->flags);
}

/* ---- tensor bytes in the output type ------------------------------------------ */

/* Buffers made by dtype conversion, freed after the file is written. */
typedef struct {
    void **p;
    size_t n, cap;
} owned_list;

static void owned_free(owned_list *o)
{
    for (size_t i = 0; i < o->n; i++) free(o->p[i]);
    free(o->p);
    memset(o, 0, sizeof *o);
}

/* The bytes of t as type `to`: t's own bytes when the type matches, else a
 * converted copy kept in `own`. */
static int tensor_bytes(const ckpt_tensor *t, int to, owned_list *own, const void **data, uint64_t *nbytes, char *err,
                        size_t errcap)
{
    size_t es = cv_dtype_size(to), overflow;
    void *buf;
    if (t->dtype == to) {
        *data = t->data;
        *nbytes = t->nbytes;
        return 0;
    }
    if (cv_dtype_is_quant(t->dtype) || cv_dtype_is_quant(to))   /* gguf_input keeps quants only when nothing converts */
        return cv_fail(err, errcap, "tensor '%s' is %s and cannot be stored as %s", t->name, cv_dtype_name(t->dtype),
                       cv_dtype_name(to));
    if (t->numel > SIZE_MAX / es) return cv_fail(err, errcap, "tensor '%s' is too large", t->name);
    if (own->n == own->cap) {
        size_t cap = own->cap ? own->cap * 2 : 64;
        void **p = realloc(own->p, cap * sizeof *p);
        if (!p) return cv_fail(err, errcap, "out of memory");
        own->p = p;
        own->cap = cap;
    }
    buf = malloc(t->numel ? (size_t)t->numel * es : 1);
    if (!buf) return cv_fail(err, errcap, "out of memory converting '%s'", t->name);
    overflow = cv_convert(buf, to, t->data, t->dtype, (size_t)t->numel);
    if (overflow) {
        free(buf);
        return cv_fail(err, errcap, "tensor '%s': %zu values are out of the %s range", t->name, overflow, cv_dtype_name(to));
    }
    own->p[own->n++] = buf;
    *data = buf;
    *nbytes = t->numel * es;
    return 0;
}

/* Keep p (malloc'd) until the file is written; NULL if p is NULL or on no memory. */
static void *owned_push(owned_list *own, void *p)
{
    if (!p) return NULL;
    if (own->n == own->cap) {
        size_t cap = own->cap ? own->cap * 2 : 64;
        void **n = realloc(own->p, cap * sizeof *n);
        if (!n) { free(p); return NULL; }
        own->p = n;
        own->cap = cap;
    }
    own->p[own->n++] = p;
    return p;
}

/* Drop the most recent converted copy (a duplicate that will not be stored). */
static void owned_drop_last(owned_list *own, const void *data)
{
    if (own->n && own->p[own->n - 1] == data) free(own->p[--own->n]);
}

/* GGUF dims: the PyTorch shape reversed (fastest first). */
static void gguf_dims(const ckpt_tensor *t, uint64_t *dims)
{
    for (int i = 0; i < t->ndim; i++) dims[i] = t->shape[t->ndim - 1 - i];
}

static void add_tensor(gguf_writer *w, const char *name, const ckpt_tensor *t, int type, const void *data, uint64_t nbytes)
{
    uint64_t dims[CKPT_MAX_DIMS];
    gguf_dims(t, dims);
    gguf_writer_add_tensor(w, name, type, t->ndim, dims, data, nbytes);
}

/* Add t converted to F32 (norms, routers, biases are always F32). */
static int add_f32(gguf_writer *w, const char *name, const ckpt_tensor *t, owned_list *own, char *err, size_t errcap)
{
    const void *d;
    uint64_t n;
    if (tensor_bytes(t, GGML_F32, own, &d, &n, err, errcap)) return -1;
    add_tensor(w, name, t, GGML_F32, d, n);
    return 0;
}

static int matrix_type(const convert_opts *o, const ckpt_tensor *t)
{
    return o->outtype == OUTTYPE_AUTO ? t->dtype : o->outtype;
}

/* ---- the plan ----------------------------------------------------------------- */

typedef struct {
    int route, sharing, n_rec, base_depth, prelude, coda, n_layer;
    int arch, func, gating, sampling, kv_shared;
    double alpha, temp;
    double capacity[MS_MAX_REC];
} plan;

static const char *route_desc(int r)
{
    return r == ROUTE_EXPERT ? "expert-choice" : r == ROUTE_TOKEN ? "token-choice" : "no router";
}

/* Reconcile the settings with what the checkpoint's keys show. */
static int make_plan(plan *p, const cv_settings *s, const cv_layout *lo, const hf_config *cfg, char *err, size_t errcap)
{
    memset(p, 0, sizeof *p);
    p->route = lo->kind;
    p->n_layer = lo->n_layer;
    p->arch = p->func = p->gating = p->sampling = -1;
    if ((uint32_t)lo->n_layer != cfg->n_layer)
        return cv_fail(err, errcap, "config.json has num_hidden_layers = %u but the checkpoint has %d (unrolled) layers",
                       cfg->n_layer, lo->n_layer);
    if (s->type >= 0 && s->type != lo->kind)
        return cv_fail(err, errcap, "the MoR settings say %s routing but the checkpoint's keys are %s", route_desc(s->type),
                       route_desc(lo->kind));
    p->kv_shared = s->kv_shared > 0;

    if (lo->kind != ROUTE_NONE) {
        p->n_rec = lo->n_rec;
        p->base_depth = lo->base_depth;
        p->prelude = lo->prelude;
        p->coda = lo->coda;
        p->sharing = lo->prelude ? SHARE_MIDDLE_CYCLE : SHARE_CYCLE;
        if (s->sharing >= 0 && s->sharing != p->sharing)
            return cv_fail(err, errcap, "the MoR settings say %s sharing but the checkpoint's layout is %s",
                           ms_sharing_names[s->sharing], ms_sharing_names[p->sharing]);
        if (s->num_recursion && s->num_recursion != p->n_rec)
            return cv_fail(err, errcap, "the MoR settings say num_recursion = %d but the checkpoint has %d recursions",
                           s->num_recursion, p->n_rec);
        if (s->base_depth && s->base_depth != p->base_depth)
            return cv_fail(err, errcap, "the MoR settings say base_depth = %d but the checkpoint's shared block has %d layers",
                           s->base_depth, p->base_depth);
        if (s->func < 0 || !s->have_alpha)
            return cv_fail(err, errcap, "this %s MoR checkpoint needs its MoR settings: pass --mor-config mor_cfg.yaml "
                                        "(or --router-func and --alpha)", route_desc(lo->kind));
        p->arch = lo->arch;
        if (s->arch >= 0 && s->arch != p->arch)
            return cv_fail(err, errcap, "the MoR settings say a %s router but the checkpoint has %s routers",
                           ms_arch_names[s->arch], ms_arch_names[p->arch]);
        p->func = s->func;
        if (lo->kind == ROUTE_EXPERT && p->func == FUNC_SOFTMAX)
            return cv_fail(err, errcap, "router_func softmax is only valid for token-choice routing");
        p->alpha = s->alpha;
        p->temp = s->have_temp ? s->temp : 1.0;
        if (!(p->temp > 0) || !isfinite(p->temp) || fabs(p->alpha) > 3.0e38 || fabs(p->temp) > 3.0e38)
            return cv_fail(err, errcap, "bad router alpha or temp");
        p->gating = s->gating >= 0 ? s->gating : GATE_WEIGHTED;
        if (s->n_capacity && s->n_capacity != p->n_rec && lo->kind == ROUTE_EXPERT)
            return cv_fail(err, errcap, "%d capacities for %d recursions", s->n_capacity, p->n_rec);
        if (s->n_capacity == p->n_rec) {
            memcpy(p->capacity, s->capacity, sizeof p->capacity);
        } else {
            /* the official default (N_r - r) / N_r, as a Python float division;
             * also when a token-choice config lists a wrong number (token-choice
             * does not use capacities, so that is not worth refusing) */
            for (int r = 0; r < p->n_rec; r++) p->capacity[r] = (double)(p->n_rec - r) / (double)p->n_rec;
        }
        for (int r = 1; lo->kind == ROUTE_EXPERT && r < p->n_rec; r++)
            if (p->capacity[r] > p->capacity[r - 1]) return cv_fail(err, errcap, "capacities must not increase");
        if (lo->kind == ROUTE_EXPERT) {
            p->sampling = s->sampling >= 0 ? s->sampling : lo->aux ? SAMPLE_AUX_ROUTER : SAMPLE_AUX_LOSS;
            if (p->sampling == SAMPLE_AUX_ROUTER && !lo->aux)
                return cv_fail(err, errcap, "sampling is aux_router but the checkpoint has no mlp_router");
        } else {
            p->sampling = SAMPLE_NONE;
            if (s->balancing == BAL_LOSS_FREE && !lo->bias)
                return cv_fail(err, errcap, "balancing is loss_free but the checkpoint has no router_bias");
        }
    } else if (s->num_recursion > 1) {
        /* the recursive baseline: plain keys, weights tied by the sharing strategy */
        int mid;
        p->n_rec = s->num_recursion;
        p->sharing = s->sharing;
        if (p->sharing < 0 || p->sharing == SHARE_NONE)
            return cv_fail(err, errcap, "num_recursion = %d needs a sharing strategy (cycle, middle_cycle, sequence, "
                                        "middle_sequence)", p->n_rec);
        p->prelude = p->coda = p->sharing == SHARE_MIDDLE_CYCLE || p->sharing == SHARE_MIDDLE_SEQUENCE;
        mid = lo->n_layer - p->prelude - p->coda;
        if (mid < p->n_rec || mid % p->n_rec)
            return cv_fail(err, errcap, "%d layers cannot be %s-shared over %d recursions", lo->n_layer,
                           ms_sharing_names[p->sharing], p->n_rec);
        p->base_depth = mid / p->n_rec;
        if (s->base_depth && s->base_depth != p->base_depth)
            return cv_fail(err, errcap, "the MoR settings say base_depth = %d but the layout gives %d", s->base_depth,
                           p->base_depth);
    } else {
        if (s->sharing > SHARE_NONE)
            return cv_fail(err, errcap, "sharing %s needs num_recursion > 1", ms_sharing_names[s->sharing]);
        p->n_rec = 1;
        p->base_depth = lo->n_layer;
        p->sharing = SHARE_NONE;
    }
    if (p->kv_shared && p->n_rec < 2) return cv_fail(err, errcap, "KV sharing needs at least 2 recursions");
    if (p->kv_shared && cfg->has_kv_block && cfg->kv_enable) {
        if ((cfg->kv_base_depth && cfg->kv_base_depth != p->base_depth) ||
            (cfg->kv_num_recursion && cfg->kv_num_recursion != p->n_rec) ||
            (cfg->kv_sharing[0] && strcmp(cfg->kv_sharing, ms_sharing_names[p->sharing]) != 0))
            return cv_fail(err, errcap, "config.json's kv_sharing block does not match the checkpoint's layout");
    }
    return 0;
}

/* ---- settings ------------------------------------------------------------------- */

static int gather_settings(const convert_opts *o, const hf_config *cfg, cv_settings *s, char *err, size_t errcap)
{
    cv_settings_init(s);
    if (o->mor_config) {
        if (cv_settings_load(s, o->mor_config, err, errcap)) return -1;
    } else {
        static const char *const guesses[] = {"mor_cfg.yaml", "../mor_cfg.yaml"};
        for (int i = 0; i < 2; i++) {
            char *path = cv_path_join(o->dir, guesses[i]);
            int rc = 0, found;
            if (!path) return cv_fail(err, errcap, "out of memory");
            found = cv_file_exists(path);
            if (found) rc = cv_settings_load(s, path, err, errcap);
            free(path);
            if (rc) return -1;
            if (found) break;
        }
    }
    /* config.json's kv_sharing block, added by the official code when on */
    if (cfg->has_kv_block) {
        if (s->kv_shared >= 0 && s->kv_shared != cfg->kv_enable && o->flags.kv_shared < 0)
            return cv_fail(err, errcap, "kv_sharing.enable differs between the MoR config and config.json");
        s->kv_shared = cfg->kv_enable;
    }
    cv_settings_merge(s, &o->flags);
    return 0;
}

/* A looped model (llama.cpp's nanbeige) is recursive already: its loops
 * become N_r = n_loops recursions of the whole stack (cycle sharing), which
 * the settings may repeat but not change. */
static int loop_settings(const convert_opts *o, const hf_config *cfg, cv_settings *s, char *err, size_t errcap)
{
    if (o->init != INIT_NONE)
        return cv_fail(err, errcap, "the model is looped already (%u loops of its layers): it converts plainly, "
                       "without --init", cfg->n_loops);
    if ((s->num_recursion && s->num_recursion != (int)cfg->n_loops) || (s->sharing >= 0 && s->sharing != SHARE_CYCLE))
        return cv_fail(err, errcap, "the model is looped: its %u loops convert as %u recursions with cycle sharing",
                       cfg->n_loops, cfg->n_loops);
    s->num_recursion = (int)cfg->n_loops;
    s->sharing = SHARE_CYCLE;
    return 0;
}

/* ---- writing -------------------------------------------------------------------- */

typedef struct {
    int32_t *map[CV_ROLE_ALL];                   /* [n_layer] block index per role; NULL: the model has none */
    int n_blocks[CV_ROLE_ALL];
    const void **data[CV_ROLE_ALL];              /* [n_blocks] */
    uint64_t *nbytes[CV_ROLE_ALL];
    const ckpt_tensor **src[CV_ROLE_ALL];
} blocks;

static void blocks_free(blocks *b)
{
    for (int r = 0; r < CV_ROLE_ALL; r++) {
        free(b->map[r]);
        free(b->data[r]);
        free(b->nbytes[r]);
        free(b->src[r]);
    }
}

static int is_norm(int role) { return cv_role_is_vector(role); }   /* norms and biases: F32 vectors */

static int dedup(blocks *b, const convert_opts *o, const cv_layout *lo, owned_list *own, int *types, char *err,
                 size_t errcap)
{
    int L = lo->n_layer;
    for (int role = 0; role < CV_ROLE_ALL; role++) {
        if (!lo->role[0][role]) continue;   /* a role this model does not have */
        b->map[role] = malloc((size_t)L * sizeof *b->map[role]);
        b->data[role] = malloc((size_t)L * sizeof *b->data[role]);
        b->nbytes[role] = malloc((size_t)L * sizeof *b->nbytes[role]);
        b->src[role] = malloc((size_t)L * sizeof *b->src[role]);
        if (!b->map[role] || !b->data[role] || !b->nbytes[role] || !b->src[role]) return cv_fail(err, errcap, "out of memory");
        for (int l = 0; l < L; l++) {
            const ckpt_tensor *t = lo->role[l][role];
            int to = is_norm(role) ? GGML_F32 : matrix_type(o, t), k;
            const void *d;
            uint64_t n;
            /* one float type per role (--outtype settles a mix); a llama.cpp file's quants are kept per layer, as
             * its mixes (Q4_K_M: some attn_v and ffn_down in Q6_K) store them */
            if (l == 0) types[role] = to;
            else if (types[role] != to && !cv_dtype_is_quant(to) && !cv_dtype_is_quant(types[role]))
                return cv_fail(err, errcap, "tensor '%s' is %s while other %s weights are %s; use --outtype", t->name,
                               cv_dtype_name(t->dtype), cv_role_gguf[role], cv_dtype_name(types[role]));
            if (tensor_bytes(t, to, own, &d, &n, err, errcap)) return -1;
            for (k = 0; k < b->n_blocks[role]; k++)
                if (b->nbytes[role][k] == n && (b->data[role][k] == d || memcmp(b->data[role][k], d, (size_t)n) == 0)) break;
            if (k < b->n_blocks[role]) {
                owned_drop_last(own, d);
            } else {
                b->data[role][k] = d;
                b->nbytes[role][k] = n;
                b->src[role][k] = t;
                b->n_blocks[role]++;
            }
            b->map[role][l] = k;
        }
    }
    return 0;
}

static void add_router(gguf_writer *w, const char *prefix, const lo_router *rt, owned_list *own, int *rc, char *err,
                       size_t errcap)
{
    char name[96];
    if (*rc) return;
    if (rt->w) {
        snprintf(name, sizeof name, "%s.weight", prefix);
        *rc = add_f32(w, name, rt->w, own, err, errcap);
    } else {
        snprintf(name, sizeof name, "%s.fc1.weight", prefix);
        *rc = add_f32(w, name, rt->fc1, own, err, errcap);
        snprintf(name, sizeof name, "%s.fc2.weight", prefix);
        if (!*rc) *rc = add_f32(w, name, rt->fc2, own, err, errcap);
    }
}

static int load_tokenizer(const convert_opts *o, const hf_config *cfg, hf_tokenizer *tok, int *have, char *err,
                          size_t errcap)
{
    char *path = o->tokenizer ? cv_strdup(o->tokenizer) : cv_path_join(o->dir, "tokenizer.json"), *dir = NULL, *tc = NULL;
    int rc = -1;
    *have = 0;
    if (!path) return cv_fail(err, errcap, "out of memory");
    if (!o->tokenizer && !cv_file_exists(path)) { free(path); return 0; }
    if (hf_tokenizer_load(tok, path, err, errcap)) { cv_prefix(err, errcap, "%s", path); goto done; }
    *have = 1;
    if (cfg) {
        tok->bos = cfg->bos;
        tok->eos = cfg->eos;
        tok->pad = cfg->pad;
    }
    if (!(dir = cv_path_dirname(path)) || !(tc = cv_path_join(dir, "tokenizer_config.json"))) {
        cv_fail(err, errcap, "out of memory");
        goto done;
    }
    if (hf_tokenizer_read_config(tok, tc, err, errcap)) goto done;
    if ((tok->bos >= 0 && (size_t)tok->bos >= tok->n_tokens) || (tok->eos >= 0 && (size_t)tok->eos >= tok->n_tokens) ||
        (tok->pad >= 0 && (size_t)tok->pad >= tok->n_tokens)) {
        cv_fail(err, errcap, "a bos/eos/pad token id is outside the tokenizer's %zu tokens", tok->n_tokens);
        goto done;
    }
    rc = 0;
done:
    free(path);
    free(dir);
    free(tc);
    return rc;
}

/* A recursive baseline's layers must be tied: every looped layer's
 * projections equal those of the first layer of its slot (norms may differ). */
static int check_tied(const blocks *b, const plan *p, char *err, size_t errcap)
{
    int seq = p->sharing == SHARE_SEQUENCE || p->sharing == SHARE_MIDDLE_SEQUENCE;
    for (int l = p->prelude; l < p->n_layer - p->coda; l++) {
        int i = l - p->prelude, slot = seq ? i / p->n_rec : i % p->base_depth;
        int lead = p->prelude + (seq ? slot * p->n_rec : slot);
        for (int role = 0; role < CV_ROLE_COUNT; role++)
            if (!is_norm(role) && b->map[role] && b->map[role][l] != b->map[role][lead])
                return cv_fail(err, errcap, "the checkpoint's layers are not tied under %s sharing (layer %d's %s differs "
                                            "from layer %d's); to make a vanilla model recursive, pass --init "
                                            "stepwise|average|lower|upper", ms_sharing_names[p->sharing], l,
                               cv_role_gguf[role], lead);
    }
    return 0;
}

/* The LoRA deltas: mor.lora.scale (the first relaxed projection's scale) and
 * mor.lora.scale.<proj> where a projection's differs; a projection whose
 * deltas do not share one scale gets each scale multiplied into its B. */
static int add_deltas(gguf_writer *w, relax_state *rs, const cv_layout *lo, owned_list *own, char *err, size_t errcap)
{
    float scale[CV_ROLE_COUNT], global = 0;
    int has[CV_ROLE_COUNT] = {0}, mixed[CV_ROLE_COUNT] = {0}, any = 0;
    char name[96];
    for (int l = 0; l < lo->n_layer; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const cv_delta *d = &rs->delta[l][role];
            if (!d->r) continue;
            if (!has[role]) { has[role] = 1; scale[role] = d->scale; }
            else if (d->scale != scale[role]) mixed[role] = 1;
        }
    for (int role = 0; role < CV_ROLE_COUNT; role++) {
        if (mixed[role]) {
            for (int l = 0; l < lo->n_layer; l++) {
                cv_delta *d = &rs->delta[l][role];
                size_t n = (size_t)d->r * lo->role[l][role]->shape[0];
                float *bb;
                if (!d->r) continue;
                if (!(bb = owned_push(own, malloc(sizeof(float) * n)))) return cv_fail(err, errcap, "out of memory");
                for (size_t i = 0; i < n; i++) bb[i] = d->b[i] * d->scale;
                d->b = bb;
                d->scale = 1;
            }
            scale[role] = 1;
        }
        if (has[role] && !any++) global = scale[role];
    }
    gguf_writer_add_f32(w, "mor.lora.scale", global);
    for (int role = 0; role < CV_ROLE_COUNT; role++)
        if (has[role] && scale[role] != global) {
            snprintf(name, sizeof name, "mor.lora.scale.%s", cv_role_gguf[role]);
            gguf_writer_add_f32(w, name, scale[role]);
        }
    for (int l = 0; l < lo->n_layer; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const cv_delta *d = &rs->delta[l][role];
            if (!d->r) continue;
            uint64_t out = lo->role[l][role]->shape[0], in = lo->role[l][role]->shape[1], r = (uint64_t)d->r;
            uint64_t da[2] = {in, r}, db[2] = {r, out};
            snprintf(name, sizeof name, "lora.%d.%s.a", l, cv_role_gguf[role]);
            gguf_writer_add_tensor(w, name, GGML_F32, 2, da, d->a, in * r * 4);
            snprintf(name, sizeof name, "lora.%d.%s.b", l, cv_role_gguf[role]);
            gguf_writer_add_tensor(w, name, GGML_F32, 2, db, d->b, r * out * 4);
        }
    return 0;
}

/* The architecture features (FORMAT.md "Model families"): only those a
 * model has, so a Llama's file has none of them. */
static int write_arch_keys(gguf_writer *w, const cv_arch *a, int n_layer, char *err, size_t errcap)
{
    gguf_writer_add_str(w, "mor.family", cv_family_names[a->family]);
    if (a->layer_norm) gguf_writer_add_str(w, "mor.norm.type", "layer");
    if (a->post_norms) gguf_writer_add_bool(w, "mor.norm.post", 1);
    if (a->act != CV_ACT_SILU) gguf_writer_add_str(w, "mor.ffn.activation", cv_act_names[a->act]);
    if (!a->gated) gguf_writer_add_bool(w, "mor.ffn.gated", 0);
    if (a->attn_bias) gguf_writer_add_bool(w, "mor.attention.bias", 1);
    if (a->ffn_bias) gguf_writer_add_bool(w, "mor.ffn.bias", 1);
    if (a->parallel) gguf_writer_add_bool(w, "mor.residual.parallel", 1);
    if (a->rope_dims) gguf_writer_add_u32(w, "mor.rope.dimension_count", a->rope_dims);
    if (a->attn_scale > 0) gguf_writer_add_f32(w, "mor.attention.scale", a->attn_scale);
    if (a->attn_softcap > 0) gguf_writer_add_f32(w, "mor.attention.logit_softcap", a->attn_softcap);
    if (a->final_softcap > 0) gguf_writer_add_f32(w, "mor.output.logit_softcap", a->final_softcap);
    if (a->embd_scale > 0) gguf_writer_add_f32(w, "mor.embedding.scale", a->embd_scale);
    if (a->loop_norm) gguf_writer_add_bool(w, "mor.recursion.loop_norm", 1);
    if (a->window) {
        int32_t *fl = malloc(sizeof(int32_t) * (size_t)n_layer);
        if (!fl) return cv_fail(err, errcap, "out of memory");
        for (int l = 0; l < n_layer; l++) fl[l] = a->local[l];
        gguf_writer_add_u32(w, "mor.attention.sliding_window", a->window);
        gguf_writer_add_arr_i32(w, "mor.attention.sliding_window_layers", fl, (size_t)n_layer);
        free(fl);
    }
    return 0;
}

/* The weights file: --weights (a path, or a name inside dir), else
 * model.safetensors, else pytorch_model.bin. */
static char *weights_path(const convert_opts *o, char *err, size_t errcap)
{
    static const char *const names[] = {"model.safetensors", "pytorch_model.bin"};
    char *p;
    if (o->weights) {
        if (cv_file_exists(o->weights) || strchr(o->weights, '/')) return cv_strdup(o->weights);
        return cv_path_join(o->dir, o->weights);
    }
    for (int i = 0; i < 2; i++) {
        p = cv_path_join(o->dir, names[i]);
        if (!p || cv_file_exists(p)) return p;
        free(p);
    }
    p = cv_path_join(o->dir, "model.safetensors.index.json");
    if (p && cv_file_exists(p)) cv_fail(err, errcap, "sharded checkpoints are not supported yet (%s)", p);
    else cv_fail(err, errcap, "%s has neither model.safetensors nor pytorch_model.bin", o->dir);
    free(p);
    return NULL;
}

int convert_model(const convert_opts *o, FILE *out, char *summary, size_t sumcap, char *err, size_t errcap)
{
    hf_config cfg;
    cv_settings s;
    checkpoint ck;
    family_ckpt fck;
    cv_layout lo;
    plan p;
    blocks b;
    owned_list own = {0};
    hf_tokenizer tok;
    gguf_writer *w = NULL;
    gguf_input gi;
    relax_state rs;
    char *path = NULL, lora_desc[160] = "";
    int have_tok = 0, rc = -1, types[CV_ROLE_ALL], tied = 1, n_tensors = 0, max_blocks = 0, any_rank = 0;
    const int from_gguf = gguf_input_is_gguf(o->dir);
    const void *emb_d, *head_d = NULL;
    const void **shared = NULL;
    uint64_t emb_n, head_n = 0;

    memset(&ck, 0, sizeof ck);
    memset(&fck, 0, sizeof fck);
    memset(&lo, 0, sizeof lo);
    memset(&b, 0, sizeof b);
    memset(&tok, 0, sizeof tok);
    memset(&gi, 0, sizeof gi);
    memset(&rs, 0, sizeof rs);
    rs.progress = o->progress;
    rs.progress_ud = o->progress_ud;
    for (int role = 0; role < CV_ROLE_COUNT; role++) any_rank |= !is_norm(role) && o->lora_rank[role] > 0;
    if (from_gguf) {
        /* a plain conversion keeps a llama.cpp file's quantized matrices as they are (byte for byte); one that
         * relaxes (--init) computes with their values, and --outtype converts them: both read them as F32 */
        const int keep_quant = o->init == INIT_NONE && o->outtype == OUTTYPE_AUTO;
        if (gguf_input_open(&gi, o->dir, keep_quant, &ck, &cfg, err, errcap) || gather_settings(o, &cfg, &s, err, errcap)) goto done;
    } else {
        if (!(path = cv_path_join(o->dir, "config.json"))) return cv_fail(err, errcap, "out of memory");
        if (hf_config_load(&cfg, path, err, errcap)) goto done;
        if (gather_settings(o, &cfg, &s, err, errcap)) goto done;
        free(path);
        if (!(path = weights_path(o, err, errcap))) goto done;
        if (ckpt_open(&ck, path, err, errcap)) goto done;
    }
    if (cfg.n_loops > 1 && loop_settings(o, &cfg, &s, err, errcap)) goto done;
    /* the other families' keys in the Llama grammar, a looped model's layers unrolled (family.h) */
    const int mapped = !from_gguf && (cfg.arch.family != CV_FAMILY_LLAMA || cfg.n_loops > 1 || cfg.ouro);
    if (mapped && family_map(&fck, &ck, &cfg, err, errcap)) goto done;
    if (layout_build(&lo, mapped ? &fck.ck : &ck, err, errcap) || layout_check_shapes(&lo, &cfg, err, errcap)) goto done;
    if (o->init != INIT_NONE) {
        if (lo.lora) { cv_fail(err, errcap, "--init converts a vanilla checkpoint; this one already has LoRA factors"); goto done; }
        if (relax_tie(&rs, &lo, &cfg, s.sharing, s.num_recursion, o->init, o->keep_norms, err, errcap)) goto done;
    } else if (any_rank || o->keep_norms) {
        cv_fail(err, errcap, "%s needs --init (it relaxes a vanilla model being made recursive)",
                any_rank ? "--lora-rank" : "--keep-norms");
        goto done;
    }
    if (make_plan(&p, &s, &lo, &cfg, err, errcap)) goto done;
    if (!from_gguf || o->tokenizer) {
        if (load_tokenizer(o, &cfg, &tok, &have_tok, err, errcap)) goto done;
    }
    if (have_tok && tok.n_tokens > cfg.vocab) {
        cv_fail(err, errcap, "the tokenizer has %zu tokens but the model's vocabulary is %u", tok.n_tokens, cfg.vocab);
        goto done;
    }
    if (dedup(&b, o, &lo, &own, types, err, errcap)) goto done;
    if (p.route == ROUTE_NONE && p.n_rec > 1 && check_tied(&b, &p, err, errcap)) goto done;
    if (any_rank) {   /* SVD deltas against the shared weights as they will be stored */
        if (!(shared = malloc(sizeof *shared * (size_t)p.n_layer * CV_ROLE_COUNT))) { cv_fail(err, errcap, "out of memory"); goto done; }
        for (int l = 0; l < p.n_layer; l++)
            for (int role = 0; role < CV_ROLE_COUNT; role++)
                shared[l * CV_ROLE_COUNT + role] = b.map[role] ? b.data[role][b.map[role][l]] : NULL;
        if (relax_svd(&rs, &lo, p.prelude, p.n_layer - p.coda, o->lora_rank, shared, types, o->svd_exact, o->threads, err,
                      errcap))
            goto done;
        snprintf(lora_desc, sizeof lora_desc, "; LoRA: %d deltas keep %.1f%% of the tying residual (%d zero: standard init)",
                 rs.n_delta, rs.residual2 > 0 ? 100.0 * rs.captured2 / rs.residual2 : 100.0, rs.n_zero);
    }
    if (relax_peft(&rs, &lo, &s, err, errcap)) goto done;
    if (lo.lora) snprintf(lora_desc, sizeof lora_desc, "; LoRA: %d deltas", rs.n_delta);

    /* the default layer map: the FFN's (its up projection's without a gate) */
    const int defrole = b.map[CV_ROLE_FFN_GATE] ? CV_ROLE_FFN_GATE : CV_ROLE_FFN_UP;

    /* attention weights repeat across recursions when every block position
     * maps to the same block in every recursion */
    for (int role = CV_ROLE_ATTN_Q; role <= CV_ROLE_ATTN_OUT; role++)
        for (int r = 1; r < p.n_rec; r++)
            for (int j = 0; j < p.base_depth; j++)
                if (b.map[role][p.prelude + r * p.base_depth + j] != b.map[role][p.prelude + j]) tied = 0;

    /* embeddings and head */
    if (tensor_bytes(lo.embed, matrix_type(o, lo.embed), &own, &emb_d, &emb_n, err, errcap)) goto done;
    if (o->note && o->notecap) o->note[0] = 0;
    if (lo.lm_head) {
        /* bitwise equal as saved (not after --outtype): tied, no output.weight */
        const ckpt_tensor *h = lo.lm_head, *e = lo.embed;
        int equal = h->dtype == e->dtype && h->nbytes == e->nbytes &&
                    (h->data == e->data || memcmp(h->data, e->data, (size_t)h->nbytes) == 0);
        if (!equal && !(o->tie_lm_head && cfg.tie_embeddings)) {
            if (tensor_bytes(h, matrix_type(o, h), &own, &head_d, &head_n, err, errcap)) goto done;
            if (cfg.tie_embeddings && o->note && o->notecap)
                snprintf(o->note, o->notecap, "lm_head.weight differs from model.embed_tokens.weight although "
                         "config.json says tie_word_embeddings = true: it is stored as the output matrix (the "
                         "official recursive baseline trains it untied); --tie-lm-head ties it as transformers would");
        }
    } else if (!cfg.tie_embeddings) {
        cv_fail(err, errcap, "lm_head.weight is missing and config.json does not tie the word embeddings");
        goto done;
    }

    w = gguf_writer_new();
    if (!w) { cv_fail(err, errcap, "out of memory"); goto done; }
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "general.alignment", GGUF_WRITE_ALIGNMENT);
    if (o->name) gguf_writer_add_str(w, "general.name", o->name);
    /* 2: depth-wise LoRA; 3: the model families' features */
    const int llama = cv_arch_is_llama(&cfg.arch);
    gguf_writer_add_u32(w, "mor.format_version", !llama ? 3 : rs.n_delta ? 2 : 1);
    gguf_writer_add_u32(w, "mor.vocab_size", cfg.vocab);
    gguf_writer_add_u32(w, "mor.context_length", cfg.ctx);
    gguf_writer_add_u32(w, "mor.embedding_length", cfg.hidden);
    gguf_writer_add_u32(w, "mor.feed_forward_length", cfg.intermediate);
    gguf_writer_add_u32(w, "mor.attention.head_count", cfg.n_head);
    gguf_writer_add_u32(w, "mor.attention.head_count_kv", cfg.n_head_kv);
    gguf_writer_add_u32(w, "mor.attention.key_length", cfg.head_dim);
    gguf_writer_add_f32(w, cfg.arch.layer_norm ? "mor.attention.layer_norm_epsilon" : "mor.attention.layer_norm_rms_epsilon",
                        cfg.eps);
    gguf_writer_add_f32(w, "mor.rope.freq_base", cfg.rope_theta);
    if (!llama && write_arch_keys(w, &cfg.arch, p.n_layer, err, errcap)) goto done;
    gguf_writer_add_u32(w, "mor.layer_count", (uint32_t)p.n_layer);
    gguf_writer_add_u32(w, "mor.recursion.count", (uint32_t)p.n_rec);
    gguf_writer_add_u32(w, "mor.recursion.base_depth", (uint32_t)p.base_depth);
    gguf_writer_add_u32(w, "mor.recursion.prelude", (uint32_t)p.prelude);
    gguf_writer_add_u32(w, "mor.recursion.coda", (uint32_t)p.coda);
    gguf_writer_add_str(w, "mor.recursion.sharing", ms_sharing_names[p.sharing]);
    /* the FFN's map is the default; other roles get their own only if different */
    gguf_writer_add_arr_i32(w, "mor.layer_map", b.map[defrole], (size_t)p.n_layer);
    for (int role = 0; role < CV_ROLE_ALL; role++) {
        char key[64];
        if (!b.map[role] || memcmp(b.map[role], b.map[defrole], (size_t)p.n_layer * sizeof(int32_t)) == 0) continue;
        snprintf(key, sizeof key, "mor.layer_map.%s", cv_role_gguf[role]);
        gguf_writer_add_arr_i32(w, key, b.map[role], (size_t)p.n_layer);
    }
    gguf_writer_add_str(w, "mor.router.type", ms_route_names[p.route]);
    if (p.route != ROUTE_NONE) {
        float thr[MS_MAX_REC];
        for (int r = 0; r < p.n_rec; r++) thr[r] = 0.5f;
        gguf_writer_add_str(w, "mor.router.arch", ms_arch_names[p.arch]);
        gguf_writer_add_str(w, "mor.router.func", ms_func_names[p.func]);
        gguf_writer_add_f32(w, "mor.router.alpha", (float)p.alpha);
        gguf_writer_add_f32(w, "mor.router.temp", (float)p.temp);
        gguf_writer_add_str(w, "mor.router.gating", ms_gating_names[p.gating]);
        gguf_writer_add_arr_f64(w, "mor.router.capacity", p.capacity, (size_t)p.n_rec);
        gguf_writer_add_arr_f32(w, "mor.router.threshold", thr, (size_t)p.n_rec);
        gguf_writer_add_str(w, "mor.router.sampling", ms_sampling_names[p.sampling]);
    }
    gguf_writer_add_bool(w, "mor.kv.shared", p.kv_shared);
    gguf_writer_add_bool(w, "mor.attention.tied_across_recursions", tied);
    if (have_tok) hf_tokenizer_write(&tok, w);
    else if (from_gguf && gi.has_tokenizer && gguf_input_copy_keys(&gi, w, 0, err, errcap)) goto done;
    if (rs.n_delta && add_deltas(w, &rs, &lo, &own, err, errcap)) goto done;

    /* tensors, in an order that depends only on the model */
    add_tensor(w, "token_embd.weight", lo.embed, matrix_type(o, lo.embed), emb_d, emb_n);
    if (add_f32(w, "output_norm.weight", lo.norm, &own, err, errcap)) goto done;
    if (lo.norm_b && add_f32(w, "output_norm.bias", lo.norm_b, &own, err, errcap)) goto done;
    if (head_d) add_tensor(w, "output.weight", lo.lm_head, matrix_type(o, lo.lm_head), head_d, head_n);
    /* Ouro's exit gate, F32 as the routers: a token's exit probability after each loop */
    if (lo.exit_w && (add_f32(w, "exit_gate.weight", lo.exit_w, &own, err, errcap) ||
                      add_f32(w, "exit_gate.bias", lo.exit_b, &own, err, errcap)))
        goto done;
    for (int role = 0; role < CV_ROLE_ALL; role++)
        if (b.n_blocks[role] > max_blocks) max_blocks = b.n_blocks[role];
    for (int k = 0; k < max_blocks; k++)
        for (int role = 0; role < CV_ROLE_ALL; role++) {
            char name[64];
            if (k >= b.n_blocks[role]) continue;
            snprintf(name, sizeof name, "blk.%d.%s", k, cv_role_tensor[role]);
            add_tensor(w, name, b.src[role][k], is_norm(role) ? GGML_F32 : matrix_type(o, b.src[role][k]), b.data[role][k],
                       b.nbytes[role][k]);
        }
    rc = 0;
    if (p.route == ROUTE_EXPERT) {
        for (int r = 0; r < p.n_rec && !rc; r++) {
            char pre[32];
            snprintf(pre, sizeof pre, "rtr.%d", r);
            add_router(w, pre, &lo.router[r], &own, &rc, err, errcap);
            if (lo.aux) {
                snprintf(pre, sizeof pre, "rtr_aux.%d", r);
                add_router(w, pre, &lo.aux[r], &own, &rc, err, errcap);
            }
        }
    } else if (p.route == ROUTE_TOKEN) {
        add_router(w, "rtr", &lo.router[0], &own, &rc, err, errcap);
        if (!rc && lo.bias) rc = add_f32(w, "rtr.bias", lo.bias, &own, err, errcap);
    }
    if (rc) goto done;
    gguf_writer_set_progress(w, o->progress, o->progress_ud);
    rc = gguf_writer_write(w, out, err, errcap);
    if (rc == 0 && summary && sumcap) {
        char tok_desc[240] = "";
        if (have_tok || (from_gguf && gi.has_tokenizer)) snprintf(tok_desc, sizeof tok_desc, ", tokenizer");
        else if (from_gguf && gi.tokenizer_note[0])
            snprintf(tok_desc, sizeof tok_desc, ", tokenizer not copied (%.200s)", gi.tokenizer_note);
        for (int role = 0; role < CV_ROLE_ALL; role++) n_tensors += b.n_blocks[role];
        snprintf(summary, sumcap, "%s, %s sharing, N_r=%d, K=%d, L=%d; %d stored blocks (attention: %d), %d layer tensors%s%s%s%s",
                 route_desc(p.route), ms_sharing_names[p.sharing], p.n_rec, p.base_depth, p.n_layer,
                 b.n_blocks[defrole], b.n_blocks[CV_ROLE_ATTN_Q], n_tensors, head_d ? ", untied output" : "",
                 tok_desc,
                 rs.n_orig && rs.n_orig != p.n_layer ? ", layers selected by linspace" : "", lora_desc);
    }
done:
    gguf_writer_free(w);
    blocks_free(&b);
    owned_free(&own);
    if (have_tok) hf_tokenizer_free(&tok);
    relax_free(&rs);
    layout_free(&lo);
    family_free(&fck);
    ckpt_free(&ck);
    gguf_input_close(&gi);
    free(shared);
    free(path);
    return rc;
}

/* A vocab-only `mor` file from the tokenizer of any GGUF file (a llama.cpp
 * vocab or model file, or a `mor` file): libmor loads it first, so that only
 * a tokenizer it can run is written; the tokenizer.ggml.* keys and
 * general.name are copied as they are. */
static int vocab_from_gguf(const char *path, FILE *out, char *summary, size_t sumcap, char *err, size_t errcap)
{
    mor_model_params mp;
    mor_model *m = NULL;
    gguf_writer *w = NULL;
    gguf_input gi;
    int rc = -1;
    char model[32] = "", pre[64] = "";
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    memset(&gi, 0, sizeof gi);
    if (mor_model_load_file(path, &mp, &m)) return cv_fail(err, errcap, "%s: %s", path, mor_last_error());
    /* the keys to copy: the file parsed again (the model keeps its own) */
    if (cv_file_open(&gi.file, path, err, errcap)) goto done;
    if (gguf_parse(gi.file.data, gi.file.size, &gi.g)) { cv_fail(err, errcap, "%s: %s", path, mor_last_error()); goto done; }
    if (!(w = gguf_writer_new())) { cv_fail(err, errcap, "out of memory"); goto done; }
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "general.alignment", GGUF_WRITE_ALIGNMENT);
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)mor_model_n_vocab(m));
    if (gguf_input_copy_keys(&gi, w, 1, err, errcap)) goto done;
    rc = gguf_writer_write(w, out, err, errcap);
    mor_model_meta_str(m, "tokenizer.ggml.model", model, sizeof model, NULL);
    if (mor_model_meta_str(m, "tokenizer.ggml.pre", pre, sizeof pre, NULL)) snprintf(pre, sizeof pre, "none");
    if (rc == 0 && summary && sumcap)
        snprintf(summary, sumcap, "vocab only: %d tokens, model %s, pre-tokenizer %s, from a GGUF file",
                 (int)mor_model_n_vocab(m), model, pre);
done:
    gguf_writer_free(w);
    gguf_input_close(&gi);
    mor_model_free(m);
    return rc;
}

int convert_vocab_only(const char *dir, const char *tok_json, FILE *out, char *summary, size_t sumcap, char *err,
                       size_t errcap)
{
    if (!tok_json && gguf_input_is_gguf(dir)) return vocab_from_gguf(dir, out, summary, sumcap, err, errcap);
    convert_opts o;
    hf_tokenizer tok;
    hf_config ids;
    gguf_writer *w = NULL;
    char *cfg_path = cv_path_join(dir, "config.json"), *tk = NULL;
    int have = 0, rc = -1;
    memset(&tok, 0, sizeof tok);
    memset(&ids, 0, sizeof ids);
    ids.bos = ids.eos = ids.pad = -1;
    convert_opts_init(&o);
    o.dir = dir;
    if (!tok_json) {
        if (!(tk = cv_path_join(dir, "tokenizer.json"))) { cv_fail(err, errcap, "out of memory"); goto done; }
        tok_json = tk;
    }
    o.tokenizer = tok_json;
    if (!cfg_path) { cv_fail(err, errcap, "out of memory"); goto done; }
    if (cv_file_exists(cfg_path) && hf_config_token_ids(cfg_path, &ids.bos, &ids.eos, &ids.pad, err, errcap)) goto done;
    if (load_tokenizer(&o, &ids, &tok, &have, err, errcap)) goto done;
    if (tok.n_tokens > UINT32_MAX) { cv_fail(err, errcap, "too many tokens"); goto done; }
    w = gguf_writer_new();
    if (!w) { cv_fail(err, errcap, "out of memory"); goto done; }
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "general.alignment", GGUF_WRITE_ALIGNMENT);
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)tok.n_tokens);
    hf_tokenizer_write(&tok, w);
    rc = gguf_writer_write(w, out, err, errcap);
    if (rc == 0 && summary && sumcap)
        snprintf(summary, sumcap, "vocab only: %zu tokens, %zu merges, model %s, pre-tokenizer %s", tok.n_tokens,
                 tok.n_merges, tok.model, tok.pre);
done:
    gguf_writer_free(w);
    if (have) hf_tokenizer_free(&tok);
    free(cfg_path);
    free(tk);
    return rc;
}
