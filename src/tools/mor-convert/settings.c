/* settings.c - read MoR settings from the Hydra config, its JSON form, or
 * flags. Only the keys that change the converted model are read; all others
 * are ignored. See settings.h. */
#include "settings.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "yaml.h"

const char *const ms_route_names[] = {"none", "expert", "token", NULL};
const char *const ms_sharing_names[] = {"none", "cycle", "middle_cycle", "sequence", "middle_sequence", NULL};
const char *const ms_arch_names[] = {"linear", "mlp", NULL};
const char *const ms_func_names[] = {"sigmoid", "tanh", "softmax", "none", NULL};
const char *const ms_gating_names[] = {"weighted", "additive", NULL};
const char *const ms_sampling_names[] = {"aux_loss", "aux_router", "none", NULL};
const char *const ms_balancing_names[] = {"loss", "loss_free", NULL};
const char *const ms_relax_names[] = {"lora", "dora", "adaption_prompt", "recursion_encoding", NULL};
const char *const ms_proj_names[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", NULL};

int ms_lookup(const char *const *names, const char *s)
{
    if (!s) return -1;
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

void cv_settings_init(cv_settings *s)
{
    memset(s, 0, sizeof *s);
    s->type = s->sharing = s->arch = s->func = s->gating = s->sampling = s->balancing = s->kv_shared = -1;
    s->relax = s->relax_method = -1;
}

void cv_settings_merge(cv_settings *d, const cv_settings *s)
{
    if (s->type >= 0) d->type = s->type;
    if (s->num_recursion) d->num_recursion = s->num_recursion;
    if (s->sharing >= 0) d->sharing = s->sharing;
    if (s->base_depth) d->base_depth = s->base_depth;
    if (s->n_capacity) {
        d->n_capacity = s->n_capacity;
        memcpy(d->capacity, s->capacity, sizeof d->capacity);
    }
    if (s->arch >= 0) d->arch = s->arch;
    if (s->func >= 0) d->func = s->func;
    if (s->have_alpha) { d->have_alpha = 1; d->alpha = s->alpha; }
    if (s->have_temp) { d->have_temp = 1; d->temp = s->temp; }
    if (s->gating >= 0) d->gating = s->gating;
    if (s->sampling >= 0) d->sampling = s->sampling;
    if (s->balancing >= 0) d->balancing = s->balancing;
    if (s->kv_shared >= 0) d->kv_shared = s->kv_shared;
    if (s->relax >= 0) d->relax = s->relax;
    if (s->relax_method >= 0) d->relax_method = s->relax_method;
    if (s->lora_r) d->lora_r = s->lora_r;
    if (s->lora_rank_attn) d->lora_rank_attn = s->lora_rank_attn;
    if (s->lora_rank_ffn) d->lora_rank_ffn = s->lora_rank_ffn;
    if (s->have_lora_alpha) { d->have_lora_alpha = 1; d->lora_alpha = s->lora_alpha; }
    if (s->have_lora_alpha_pattern) { d->have_lora_alpha_pattern = 1; d->lora_alpha_pattern = s->lora_alpha_pattern; }
    if (s->lora_targets) d->lora_targets = s->lora_targets;
}

int cv_settings_parse_capacity(cv_settings *s, const char *str, char *err, size_t errcap)
{
    const char *p = str;
    int n = 0;
    for (;;) {
        char *end;
        double c;
        while (*p == ' ') p++;
        errno = 0;
        c = strtod(p, &end);
        if (end == p || errno == ERANGE || !(c > 0.0 && c <= 1.0))
            return cv_fail(err, errcap, "bad capacity list '%.100s' (numbers in (0, 1], comma-separated)", str);
        if (n == MS_MAX_REC) return cv_fail(err, errcap, "more than %d capacities", MS_MAX_REC);
        s->capacity[n++] = c;
        p = end;
        while (*p == ' ') p++;
        if (*p == 0) break;
        if (*p != ',') return cv_fail(err, errcap, "bad capacity list '%.100s'", str);
        p++;
    }
    s->n_capacity = n;
    return 0;
}

/* ---- typed getters over the DOM, with key paths in the messages ------------- */

static const json *path(const json *o, const char *a, const char *b, const char *c)
{
    o = json_get(o, a);
    if (o && b) o = json_get(o, b);
    if (o && c) o = json_get(o, c);
    return o;
}

static int is_null(const json *v) { return !v || v->type == JSON_NULL; }

static int get_bool(const json *v, const char *name, int *out, char *err, size_t errcap)
{
    if (is_null(v)) return 0;
    if (v->type != JSON_BOOL) return cv_fail(err, errcap, "MoR config: %s is not a boolean", name);
    *out = v->boolean;
    return 0;
}

static int get_int(const json *v, const char *name, int *out, char *err, size_t errcap)
{
    int64_t x;
    if (is_null(v)) return 0;
    if (!json_as_int(v, 1, 1 << 20, &x)) return cv_fail(err, errcap, "MoR config: %s is not a positive integer", name);
    *out = (int)x;
    return 0;
}

static int get_num(const json *v, const char *name, int *have, double *out, char *err, size_t errcap)
{
    if (is_null(v)) return 0;
    if (v->type != JSON_NUMBER || !isfinite(v->num)) return cv_fail(err, errcap, "MoR config: %s is not a number", name);
    *have = 1;
    *out = v->num;
    return 0;
}

/* An enum by name; null means `null_value` (e.g. router_func None -> "none"). */
static int get_enum(const json *v, const char *name, const char *const *names, int null_value, int *out, char *err,
                    size_t errcap)
{
    int i;
    if (!v) return 0;
    if (v->type == JSON_NULL) {
        if (null_value >= 0) *out = null_value;
        return 0;
    }
    i = ms_lookup(names, json_as_str(v));
    if (i < 0) return cv_fail(err, errcap, "MoR config: unsupported %s '%.60s'", name, json_as_str(v) ? v->str : "(not a string)");
    *out = i;
    return 0;
}

static int get_router_type(const json *v, cv_settings *s, char *err, size_t errcap)
{
    const char *t = json_as_str(v);
    if (is_null(v)) return 0;
    /* "wide_mlp" is the same module as "mlp" in the official code */
    if (t && strcmp(t, "wide_mlp") == 0) { s->arch = ARCH_MLP; return 0; }
    return get_enum(v, "router_type", ms_arch_names, -1, &s->arch, err, errcap);
}

static int get_capacity(const json *v, cv_settings *s, char *err, size_t errcap)
{
    if (is_null(v)) return 0;
    if (v->type == JSON_STRING) return cv_settings_parse_capacity(s, v->str, err, errcap);
    if (v->type == JSON_NUMBER) {
        if (!(v->num > 0 && v->num <= 1)) return cv_fail(err, errcap, "MoR config: bad capacity");
        s->n_capacity = 1;
        s->capacity[0] = v->num;
        return 0;
    }
    if (v->type == JSON_ARRAY) {
        if (v->n == 0 || v->n > MS_MAX_REC) return cv_fail(err, errcap, "MoR config: bad capacity list");
        for (size_t i = 0; i < v->n; i++) {
            if (v->items[i]->type != JSON_NUMBER || !(v->items[i]->num > 0 && v->items[i]->num <= 1))
                return cv_fail(err, errcap, "MoR config: bad capacity list");
            s->capacity[i] = v->items[i]->num;
        }
        s->n_capacity = (int)v->n;
        return 0;
    }
    return cv_fail(err, errcap, "MoR config: capacity is neither a list nor a comma-separated string");
}

/* The per-type block (mor.expert or mor.token, or the compact "expert"/"token"). */
static int get_type_block(const json *b, int type, cv_settings *s, char *err, size_t errcap)
{
    if (!b || b->type != JSON_OBJECT) return 0;
    if (get_enum(json_get(b, "router_func"), "router_func", ms_func_names, FUNC_NONE, &s->func, err, errcap) ||
        get_num(json_get(b, "alpha"), "alpha", &s->have_alpha, &s->alpha, err, errcap) ||
        get_enum(json_get(b, "gating"), "gating", ms_gating_names, -1, &s->gating, err, errcap))
        return -1;
    if (type == ROUTE_EXPERT)
        return get_enum(json_get(b, "sampling"), "expert.sampling", ms_sampling_names, -1, &s->sampling, err, errcap);
    return get_enum(json_get(b, "balancing"), "token.balancing", ms_balancing_names, -1, &s->balancing, err, errcap);
}

/* The relaxation block: relaxation.{enable, method, lora.{r, alpha,
 * alpha_pattern, rank_pattern.{self_attn, ffn}, target_modules}}. Only LoRA
 * relaxations are supported (DoRA, adaption prompts and recursion encodings
 * change the forward pass). */
static int get_relaxation(const json *rx, cv_settings *s, char *err, size_t errcap)
{
    const json *lora = json_get(rx, "lora"), *rp, *tm, *ap;
    int relax = 0;
    if (!rx || rx->type == JSON_NULL) return 0;
    if (get_bool(json_get(rx, "enable"), "relaxation.enable", &relax, err, errcap) ||
        get_enum(json_get(rx, "method"), "relaxation.method", ms_relax_names, -1, &s->relax_method, err, errcap))
        return -1;
    s->relax = relax;
    if (!relax) return 0;
    if (s->relax_method >= 0 && s->relax_method != RELAX_LORA)
        return cv_fail(err, errcap, "MoR config: relaxation.method %s is not supported (lora is)", ms_relax_names[s->relax_method]);
    if (!lora || lora->type != JSON_OBJECT) return 0;
    if (get_int(json_get(lora, "r"), "relaxation.lora.r", &s->lora_r, err, errcap) ||
        get_num(json_get(lora, "alpha"), "relaxation.lora.alpha", &s->have_lora_alpha, &s->lora_alpha, err, errcap))
        return -1;
    ap = json_get(lora, "alpha_pattern");   /* a float, or a mapping PEFT would take (not the official form) */
    if (ap && ap->type != JSON_NULL && ap->type != JSON_NUMBER)
        return cv_fail(err, errcap, "MoR config: relaxation.lora.alpha_pattern must be a number (alpha = r * alpha_pattern)");
    if (get_num(ap, "relaxation.lora.alpha_pattern", &s->have_lora_alpha_pattern, &s->lora_alpha_pattern, err, errcap))
        return -1;
    rp = json_get(lora, "rank_pattern");
    if (rp && rp->type != JSON_NULL) {
        if (rp->type != JSON_OBJECT) return cv_fail(err, errcap, "MoR config: relaxation.lora.rank_pattern is not a mapping");
        if (get_int(json_get(rp, "self_attn"), "rank_pattern.self_attn", &s->lora_rank_attn, err, errcap) ||
            get_int(json_get(rp, "ffn"), "rank_pattern.ffn", &s->lora_rank_ffn, err, errcap))
            return -1;
    }
    tm = json_get(lora, "target_modules");
    if (tm && tm->type != JSON_NULL) {
        /* PEFT-style substring match of each name against the module path, as
         * the official check_name() does */
        static const char *const path_of[MS_PROJ_COUNT] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                           "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        if (tm->type != JSON_ARRAY) return cv_fail(err, errcap, "MoR config: relaxation.lora.target_modules is not a list");
        for (size_t i = 0; i < tm->n; i++) {
            const char *t = json_as_str(tm->items[i]);
            if (!t) return cv_fail(err, errcap, "MoR config: relaxation.lora.target_modules holds a non-string");
            for (int p = 0; p < MS_PROJ_COUNT; p++)
                if (t[0] && strstr(path_of[p], t)) s->lora_targets |= 1u << p;
        }
    }
    return 0;
}

static int from_hydra(cv_settings *s, const json *doc, char *err, size_t errcap)
{
    int rec = 0, mor = 0, rand_router = 0, kv = -1;
    const json *m = json_get(doc, "mor");
    if (get_relaxation(json_get(doc, "relaxation"), s, err, errcap)) return -1;
    if (get_bool(path(doc, "recursive", "enable", NULL), "recursive.enable", &rec, err, errcap) ||
        get_bool(json_get(m, "enable"), "mor.enable", &mor, err, errcap) ||
        get_bool(path(doc, "kv_sharing", "enable", NULL), "kv_sharing.enable", &kv, err, errcap))
        return -1;
    if (kv >= 0) s->kv_shared = kv;
    if (!rec) {
        if (mor) return cv_fail(err, errcap, "MoR config: mor.enable is set but recursive.enable is not");
        s->type = ROUTE_NONE;
        s->num_recursion = 1;
        s->sharing = SHARE_NONE;
        return 0;
    }
    if (get_int(path(doc, "recursive", "num_recursion", NULL), "recursive.num_recursion", &s->num_recursion, err, errcap) ||
        get_int(path(doc, "recursive", "base_depth", NULL), "recursive.base_depth", &s->base_depth, err, errcap) ||
        get_enum(path(doc, "recursive", "sharing", NULL), "recursive.sharing", ms_sharing_names, -1, &s->sharing, err,
                 errcap))
        return -1;
    if (!mor) {
        s->type = ROUTE_NONE;
        return 0;
    }
    if (get_enum(json_get(m, "type"), "mor.type", ms_route_names, -1, &s->type, err, errcap)) return -1;
    if (s->type != ROUTE_EXPERT && s->type != ROUTE_TOKEN) return cv_fail(err, errcap, "MoR config: mor.type must be expert or token");
    if (get_bool(json_get(m, "rand_router"), "mor.rand_router", &rand_router, err, errcap)) return -1;
    if (rand_router) return cv_fail(err, errcap, "MoR config: rand_router checkpoints are not supported");
    if (get_capacity(json_get(m, "capacity"), s, err, errcap) || get_router_type(json_get(m, "router_type"), s, err, errcap) ||
        get_num(json_get(m, "temp"), "mor.temp", &s->have_temp, &s->temp, err, errcap))
        return -1;
    return get_type_block(json_get(m, s->type == ROUTE_EXPERT ? "expert" : "token"), s->type, s, err, errcap);
}

static int from_compact(cv_settings *s, const json *doc, char *err, size_t errcap)
{
    const json *t = json_get(doc, "mor_type");
    int rand_router = 0, kv = -1;
    if (is_null(t)) s->type = ROUTE_NONE;
    else if (get_enum(t, "mor_type", ms_route_names, -1, &s->type, err, errcap)) return -1;
    if (get_int(json_get(doc, "num_recursion"), "num_recursion", &s->num_recursion, err, errcap) ||
        get_int(json_get(doc, "base_depth"), "base_depth", &s->base_depth, err, errcap) ||
        get_enum(json_get(doc, "sharing"), "sharing", ms_sharing_names, -1, &s->sharing, err, errcap) ||
        get_bool(path(doc, "kv_sharing", "enable", NULL), "kv_sharing.enable", &kv, err, errcap) ||
        get_bool(json_get(doc, "rand_router"), "rand_router", &rand_router, err, errcap))
        return -1;
    if (kv >= 0) s->kv_shared = kv;
    if (rand_router) return cv_fail(err, errcap, "MoR config: rand_router checkpoints are not supported");
    if (get_relaxation(json_get(doc, "relaxation"), s, err, errcap)) return -1;
    if (s->type == ROUTE_NONE) return 0;
    if (get_capacity(json_get(doc, "capacity"), s, err, errcap)) return -1;
    if (!s->n_capacity && get_capacity(json_get(doc, "capacity_string"), s, err, errcap)) return -1;
    if (get_router_type(json_get(doc, "router_type"), s, err, errcap) ||
        get_num(json_get(doc, "temp"), "temp", &s->have_temp, &s->temp, err, errcap))
        return -1;
    return get_type_block(json_get(doc, s->type == ROUTE_EXPERT ? "expert" : "token"), s->type, s, err, errcap);
}

int cv_settings_from_doc(cv_settings *s, const json *doc, char *err, size_t errcap)
{
    if (!doc || doc->type != JSON_OBJECT) return cv_fail(err, errcap, "MoR config: not a mapping");
    if (json_get(doc, "mor_type")) return from_compact(s, doc, err, errcap);
    if (json_get(doc, "recursive") || json_get(doc, "mor")) return from_hydra(s, doc, err, errcap);
    return cv_fail(err, errcap, "MoR config: neither a Hydra config (recursive/mor) nor mor_config.json (mor_type)");
}

int cv_settings_parse(cv_settings *s, const char *text, size_t len, char *err, size_t errcap)
{
    size_t i = 0;
    json *doc;
    int rc;
    while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) i++;
    if (i < len && text[i] == '{') doc = json_parse(text, len, err, errcap);
    else doc = yaml_parse(text, len, err, errcap);
    if (!doc) return -1;
    rc = cv_settings_from_doc(s, doc, err, errcap);
    json_free(doc);
    return rc;
}

int cv_settings_load(cv_settings *s, const char *p, char *err, size_t errcap)
{
    cv_file f;
    int rc;
    if (cv_file_open(&f, p, err, errcap)) return -1;
    rc = cv_settings_parse(s, (const char *)f.data, f.size, err, errcap);
    cv_file_close(&f);
    if (rc) cv_prefix(err, errcap, "%s", p);
    return rc;
}
