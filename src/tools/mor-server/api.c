/* api.c - see api.h. */
#include "api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sampling.h"

static int bad(api_error *err, const char *param, const char *fmt, ...)
{
    va_list ap;
    err->status = 400;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json *v)
{
    static const char *const names[] = { "null", "a boolean", "a number", "a string", "an array", "an object" };
    return v->type >= 0 && v->type <= JSON_OBJECT ? names[v->type] : "?";
}

/* A number in [lo, hi] (lo excluded when lo_open). */
static int get_num(const json *v, const char *k, double lo, double hi, int lo_open, double *out, api_error *err)
{
    if (v->type != JSON_NUMBER) return bad(err, k, "'%s' must be a number, not %s", k, type_name(v));
    if (!isfinite(v->num) || v->num > hi || (lo_open ? v->num <= lo : v->num < lo))
        return bad(err, k, "'%s' must be in %s%g, %g], got %g", k, lo_open ? "(" : "[", lo, hi, v->num);
    *out = v->num;
    return 0;
}

static int get_int(const json *v, const char *k, int64_t lo, int64_t hi, int64_t *out, api_error *err)
{
    if (v->type != JSON_NUMBER) return bad(err, k, "'%s' must be an integer, not %s", k, type_name(v));
    if (!json_as_int(v, lo, hi, out)) {
        if (isfinite(v->num) && floor(v->num) == v->num)
            return bad(err, k, "'%s' must be in [%lld, %lld], got %g", k, (long long)lo, (long long)hi, v->num);
        return bad(err, k, "'%s' must be an integer, got %g", k, v->num);
    }
    return 0;
}

static int get_bool(const json *v, const char *k, int *out, api_error *err)
{
    if (v->type != JSON_BOOL) return bad(err, k, "'%s' must be a boolean, not %s", k, type_name(v));
    *out = v->boolean;
    return 0;
}

/* A field of the OpenAI API that must keep its neutral value here. */
static int neutral(const json *v, const char *k, api_error *err)
{
    int ok = v->type == JSON_NULL;
    if (!strcmp(k, "best_of")) ok |= v->type == JSON_NUMBER && v->num == 1;
    else if (!strcmp(k, "echo")) ok |= v->type == JSON_BOOL && !v->boolean;
    else if (!strcmp(k, "suffix")) ok |= v->type == JSON_STRING && v->str_len == 0;
    /* n_discard 0: llama.cpp's default, half of what a context shift does not keep (the only rule here) */
    else if (!strcmp(k, "n_indent") || !strcmp(k, "t_max_predict_ms") || !strcmp(k, "n_discard"))
        ok |= v->type == JSON_NUMBER && v->num == 0;
    else if (!strcmp(k, "n_cmpl")) ok |= v->type == JSON_NUMBER && v->num == 1;
    else if (!strcmp(k, "timings_per_token") || !strcmp(k, "post_sampling_probs") || !strcmp(k, "return_progress"))
        ok |= v->type == JSON_BOOL && !v->boolean;
    if (!ok) return bad(err, k, "'%s' is not supported by this server beyond its default value", k);
    return 0;
}

static int parse_stop(const json *v, api_request *r, api_error *err)
{
    const json *one = v;
    size_t n = 1;
    if (v->type == JSON_NULL) return 0;
    if (v->type == JSON_ARRAY) {
        n = v->n;
        if (n > API_MAX_STOP) return bad(err, "stop", "'stop' has %zu strings; at most %d are allowed", n, API_MAX_STOP);
    } else if (v->type != JSON_STRING) {
        return bad(err, "stop", "'stop' must be a string or an array of strings, not %s", type_name(v));
    }
    for (size_t i = 0; i < n; i++) {
        if (v->type == JSON_ARRAY) one = v->items[i];
        if (one->type != JSON_STRING) return bad(err, "stop", "'stop' must hold strings, not %s", type_name(one));
        if (one->str_len == 0) return bad(err, "stop", "'stop' strings must not be empty");
        if (one->str_len > API_MAX_STOP_LEN)
            return bad(err, "stop", "'stop' strings must be at most %d bytes", API_MAX_STOP_LEN);
        r->stop[r->n_stop] = one->str;
        r->stop_len[r->n_stop] = one->str_len;
        r->n_stop++;
    }
    return 0;
}

/* An array of token ids (non-empty, each in [0, 2^31 - 1]) into a malloc'd copy. */
static int parse_ids(const json *v, api_request *r, api_error *err)
{
    if (v->n == 0) return bad(err, "prompt", "'prompt' must not be an empty array");
    if (v->n > (size_t)INT32_MAX / sizeof(int32_t)) return bad(err, "prompt", "'prompt' is too long");
    r->prompt_ids = malloc(sizeof(int32_t) * v->n);
    if (!r->prompt_ids) return bad(err, "prompt", "out of memory");
    for (size_t i = 0; i < v->n; i++) {
        int64_t t;
        const json *e = v->items[i];
        if (e->type != JSON_NUMBER || !json_as_int(e, 0, INT32_MAX, &t))
            return bad(err, "prompt", "'prompt' token ids must be integers in [0, 2147483647] (item %zu)", i);
        r->prompt_ids[i] = (int32_t)t;
    }
    r->n_prompt_ids = (int32_t)v->n;
    return 0;
}

/* llama.cpp's one mixed prompt: ids and texts, at least one of each (ids
 * alone are the usual array; texts alone, a batch of prompts). */
static int is_mixed(const json *v)
{
    int ids = 0, texts = 0;
    if (v->type != JSON_ARRAY) return 0;
    for (size_t i = 0; i < v->n; i++) {
        if (v->items[i]->type == JSON_NUMBER) ids = 1;
        else if (v->items[i]->type == JSON_STRING) texts = 1;
        else return 0;
    }
    return ids && texts;
}

static int parse_mixed(const json *v, api_request *r, api_error *err)
{
    for (size_t i = 0; i < v->n; i++) {
        int64_t t;
        const json *e = v->items[i];
        if (e->type == JSON_NUMBER && !json_as_int(e, 0, INT32_MAX, &t))
            return bad(err, "prompt", "'prompt' token ids must be integers in [0, 2147483647] (item %zu)", i);
    }
    r->prompt_mixed = v;
    return 0;
}

static int parse_prompt(const json *v, api_request *r, api_error *err)
{
    if (v->type == JSON_STRING) {
        r->prompt_text = v->str;
        r->prompt_len = v->str_len;
        return 0;
    }
    if (v->type != JSON_ARRAY)
        return bad(err, "prompt", "'prompt' must be a string or an array of token ids, not %s", type_name(v));
    if (is_mixed(v)) return parse_mixed(v, r, err);
    if (v->n >= 1 && (v->items[0]->type == JSON_STRING || v->items[0]->type == JSON_ARRAY)) {
        /* a batch of prompts: one is fine */
        if (v->n != 1) return bad(err, "prompt", "one prompt per request: 'prompt' holds %zu", v->n);
        if (v->items[0]->type == JSON_STRING || is_mixed(v->items[0])) return parse_prompt(v->items[0], r, err);
        return parse_ids(v->items[0], r, err);
    }
    return parse_ids(v, r, err);
}

/* A message's tool_calls (an assistant's) and tool_call_id (a tool's). */
static int tool_fields(const json *m, size_t i, api_message *am, api_error *err)
{
    const json *tc = json_get(m, "tool_calls"), *id = json_get(m, "tool_call_id");
    if (id && id->type != JSON_NULL) {
        if (id->type != JSON_STRING) return bad(err, "messages", "messages[%zu].tool_call_id must be a string", i);
        if (strcmp(am->role, "tool")) return bad(err, "messages", "messages[%zu]: tool_call_id is a tool message's", i);
        am->tool_call_id = id->str;
    }
    if (!tc || tc->type == JSON_NULL) return 0;
    if (strcmp(am->role, "assistant")) return bad(err, "messages", "messages[%zu]: tool_calls is an assistant message's", i);
    if (tc->type != JSON_ARRAY) return bad(err, "messages", "messages[%zu].tool_calls must be an array", i);
    for (size_t k = 0; k < tc->n; k++) {
        const json *c = tc->items[k], *f = json_get(c, "function"), *t = json_get(c, "type"), *cid = json_get(c, "id");
        const json *fn = f ? json_get(f, "name") : NULL, *args = f ? json_get(f, "arguments") : NULL;
        if (c->type != JSON_OBJECT || !f || f->type != JSON_OBJECT || !fn || fn->type != JSON_STRING ||
            (t && (t->type != JSON_STRING || strcmp(t->str, "function"))) || (cid && cid->type != JSON_STRING) ||
            (args && args->type != JSON_STRING && args->type != JSON_OBJECT))
            return bad(err, "messages", "messages[%zu].tool_calls[%zu] must be {\"id\": ..., \"type\": \"function\", "
                       "\"function\": {\"name\": ..., \"arguments\": a JSON string}}", i, k);
    }
    if (tc->n) am->tool_calls = tc;
    return 0;
}

static int parse_messages(const json *v, api_request *r, api_error *err)
{
    if (v->type != JSON_ARRAY) return bad(err, "messages", "'messages' must be an array, not %s", type_name(v));
    if (v->n == 0) return bad(err, "messages", "'messages' must not be empty");
    if (v->n > 4096) return bad(err, "messages", "'messages' has more than 4096 messages");
    r->messages = calloc(v->n, sizeof *r->messages);
    if (!r->messages) return bad(err, "messages", "out of memory");
    for (size_t i = 0; i < v->n; i++) {
        const json *m = v->items[i], *role, *content;
        api_message *am = &r->messages[i];
        r->n_messages = (int32_t)i + 1;
        if (m->type != JSON_OBJECT) return bad(err, "messages", "messages[%zu] must be an object", i);
        for (size_t k = 0; k < m->n; k++)
            if (strcmp(m->keys[k], "role") && strcmp(m->keys[k], "content") && strcmp(m->keys[k], "name") &&
                strcmp(m->keys[k], "tool_calls") && strcmp(m->keys[k], "tool_call_id") &&
                ((strcmp(m->keys[k], "refusal") && strcmp(m->keys[k], "parsed") && strcmp(m->keys[k], "audio")) ||
                 m->items[k]->type != JSON_NULL))   /* OpenAI's clients echo these as null */
                return bad(err, "messages", "messages[%zu]: unrecognized field '%s'", i, m->keys[k]);
        role = json_get(m, "role");
        content = json_get(m, "content");
        const json *name = json_get(m, "name");
        if (!role || role->type != JSON_STRING) return bad(err, "messages", "messages[%zu].role must be a string", i);
        if (!strcmp(role->str, "developer")) am->role = "system";
        else if (!strcmp(role->str, "system") || !strcmp(role->str, "user") || !strcmp(role->str, "assistant") ||
                 !strcmp(role->str, "tool"))
            am->role = role->str;
        else return bad(err, "messages", "messages[%zu].role '%s' is not supported (system, user, assistant, tool)", i,
                        role->str_len < 40 ? role->str : "...");
        if (name && name->type != JSON_STRING) return bad(err, "messages", "messages[%zu].name must be a string", i);
        if (name) am->name = name->str;
        if (tool_fields(m, i, am, err)) return -1;
        if ((!content || content->type == JSON_NULL) && am->tool_calls) {
            am->content = "";
            am->content_null = 1;
            continue;
        }
        if (!content) return bad(err, "messages", "messages[%zu] has no content", i);
        if (content->type == JSON_STRING) {
            am->content = content->str;
            am->content_len = content->str_len;
            continue;
        }
        if (content->type != JSON_ARRAY)
            return bad(err, "messages", "messages[%zu].content must be a string or an array of text parts", i);
        /* text parts, joined by newlines */
        size_t total = 0;
        for (size_t k = 0; k < content->n; k++) {
            const json *part = content->items[k], *type, *text;
            if (part->type != JSON_OBJECT || !(type = json_get(part, "type")) || type->type != JSON_STRING ||
                strcmp(type->str, "text") || !(text = json_get(part, "text")) || text->type != JSON_STRING || part->n != 2)
                return bad(err, "messages", "messages[%zu].content[%zu] must be {\"type\": \"text\", \"text\": ...}", i, k);
            total += text->str_len + 1;
        }
        am->owned = malloc(total + 1);
        if (!am->owned) return bad(err, "messages", "out of memory");
        size_t at = 0;
        for (size_t k = 0; k < content->n; k++) {
            const json *text = json_get(content->items[k], "text");
            if (k) am->owned[at++] = '\n';
            memcpy(am->owned + at, text->str, text->str_len);
            at += text->str_len;
        }
        am->owned[at] = 0;
        am->content = am->owned;
        am->content_len = at;
    }
    return 0;
}

/* The fields of each kind: C completions only, H chat only, B both. */
static const struct { const char *name; char kinds; } fields[] = {
    { "model", 'B' }, { "prompt", 'C' }, { "messages", 'H' }, { "max_tokens", 'B' },
    { "max_completion_tokens", 'H' }, { "temperature", 'B' }, { "top_p", 'B' }, { "top_k", 'B' },
    { "min_p", 'B' }, { "seed", 'B' }, { "stop", 'B' }, { "stream", 'B' }, { "stream_options", 'B' },
    { "repeat_penalty", 'B' }, { "repeat_last_n", 'B' }, { "user", 'B' },
    { "test_hold", 'B' },   /* a test hook: handlers.c refuses it unless mor-server --test-hooks */
    { "logprobs", 'B' }, { "top_logprobs", 'H' }, { "n", 'B' },
    { "grammar", 'B' }, { "json_schema", 'B' }, { "response_format", 'B' },
    { "speculate", 'B' }, { "speculate_depth", 'B' }, { "exit_threshold", 'B' },
    /* llama.cpp's sampling set (and OpenAI's penalties and logit_bias) */
    { "presence_penalty", 'B' }, { "frequency_penalty", 'B' }, { "min_keep", 'B' }, { "typical_p", 'B' },
    { "top_n_sigma", 'B' }, { "dynatemp_range", 'B' }, { "dynatemp_exponent", 'B' }, { "xtc_probability", 'B' },
    { "xtc_threshold", 'B' }, { "mirostat", 'B' }, { "mirostat_tau", 'B' }, { "mirostat_eta", 'B' },
    { "dry_multiplier", 'B' }, { "dry_base", 'B' }, { "dry_allowed_length", 'B' }, { "dry_penalty_last_n", 'B' },
    { "n_keep", 'B' }, { "n_discard", 'B' }, { "id_slot", 'B' }, { "n_probs", 'B' },
    { "logit_bias", 'B' }, { "dry_sequence_breakers", 'B' }, { "samplers", 'B' },
    { "ignore_eos", 'B' }, { "return_tokens", 'B' }, { "cache_prompt", 'B' },
    /* OpenAI's, accepted with their neutral value only */
    { "best_of", 'C' }, { "echo", 'C' }, { "suffix", 'C' },
    { "tools", 'H' }, { "tool_choice", 'H' }, { "parallel_tool_calls", 'H' },
    /* llama.cpp's /completion (and there, the completions' fields too) */
    { "n_predict", 'N' }, { "n_indent", 'N' }, { "t_max_predict_ms", 'N' }, { "n_cmpl", 'N' },
    { "timings_per_token", 'N' }, { "post_sampling_probs", 'N' }, { "return_progress", 'N' },
};
#define N_FIELDS (sizeof fields / sizeof fields[0])

static int field_of_kind(char kinds, int kind)
{
    if (kinds == 'B') return 1;
    if (kind == API_CHAT) return kinds == 'H';
    return kinds == 'C' || (kind == API_NATIVE && kinds == 'N');
}

/* One constraint per request. */
static int constraint(api_request *r, const char *k, api_error *err)
{
    if (r->constraint) return bad(err, k, "give one of grammar, json_schema and response_format, not both '%s' and '%s'",
                                  r->constraint, k);
    r->constraint = k;
    return 0;
}

static int parse_response_format(const json *v, api_request *r, api_error *err)
{
    const char *k = "response_format";
    const json *t = json_get(v, "type");
    if (v->type != JSON_OBJECT || !t || t->type != JSON_STRING)
        return bad(err, k, "'response_format' must be an object with a 'type' (\"text\", \"json_object\" or \"json_schema\")");
    if (!strcmp(t->str, "text")) {
        if (v->n != 1) return bad(err, k, "response_format \"text\" takes no other field");
        return 0;
    }
    if (!strcmp(t->str, "json_object")) {
        for (size_t i = 0; i < v->n; i++)
            if (strcmp(v->keys[i], "type") && strcmp(v->keys[i], "schema"))
                return bad(err, k, "response_format json_object: unrecognized field '%.40s'", v->keys[i]);
        const json *sc = json_get(v, "schema");   /* llama.cpp's extension */
        if (sc && sc->type != JSON_OBJECT && sc->type != JSON_BOOL)
            return bad(err, k, "response_format.schema must be a JSON Schema (an object)");
        if (constraint(r, k, err)) return -1;
        if (sc) r->json_schema = sc; else r->json_object = 1;
        return 0;
    }
    if (!strcmp(t->str, "json_schema")) {
        const json *js = json_get(v, "json_schema");
        for (size_t i = 0; i < v->n; i++)
            if (strcmp(v->keys[i], "type") && strcmp(v->keys[i], "json_schema"))
                return bad(err, k, "response_format json_schema: unrecognized field '%.40s'", v->keys[i]);
        if (!js || js->type != JSON_OBJECT)
            return bad(err, k, "response_format json_schema needs a 'json_schema' object ({\"name\": ..., \"schema\": {...}})");
        for (size_t i = 0; i < js->n; i++)
            if (strcmp(js->keys[i], "name") && strcmp(js->keys[i], "schema") && strcmp(js->keys[i], "strict") &&
                strcmp(js->keys[i], "description"))
                return bad(err, k, "response_format.json_schema: unrecognized field '%.40s'", js->keys[i]);
        const json *sc = json_get(js, "schema");
        if (sc && sc->type != JSON_OBJECT && sc->type != JSON_BOOL)
            return bad(err, k, "response_format.json_schema.schema must be a JSON Schema (an object)");
        if (constraint(r, k, err)) return -1;
        if (sc) r->json_schema = sc; else r->json_object = 1;   /* no schema: any JSON object */
        return 0;
    }
    return bad(err, k, "response_format type '%.40s' is not one of \"text\", \"json_object\", \"json_schema\"", t->str);
}

/* llama.cpp's numbers, in the order of API_*: integer or not, range. The
 * reals take any finite value that fits a float (the library's checks, in
 * mor.h, are looser or the same); -1 of dry_penalty_last_n (and
 * repeat_last_n) is the context, as llama.cpp had it. */
static const struct { const char *name; int is_int; double lo, hi; } nums[API_N_NUM] = {
    { "presence_penalty", 0, -1e30, 1e30 }, { "frequency_penalty", 0, -1e30, 1e30 },
    { "min_keep", 1, 0, 1 << 30 }, { "typical_p", 0, -1e30, 1e30 }, { "top_n_sigma", 0, -1e30, 1e30 },
    { "dynatemp_range", 0, -1e30, 1e30 }, { "dynatemp_exponent", 0, -1e30, 1e30 },
    { "xtc_probability", 0, -1e30, 1e30 }, { "xtc_threshold", 0, -1e30, 1e30 }, { "mirostat", 1, 0, 2 },
    { "mirostat_tau", 0, -1e30, 1e30 }, { "mirostat_eta", 0, -1e30, 1e30 }, { "dry_multiplier", 0, -1e30, 1e30 },
    { "dry_base", 0, -1e30, 1e30 }, { "dry_allowed_length", 1, 0, 1 << 30 }, { "dry_penalty_last_n", 1, -1, 1 << 30 },
    { "n_keep", 1, -1, INT32_MAX }, { "id_slot", 1, -1, INT32_MAX }, { "n_probs", 1, 0, API_MAX_LOGPROBS },
};

static int parse_num(api_request *r, int i, const json *v, api_error *err)
{
    r->num_set[i] = 1;
    if (!nums[i].is_int) return get_num(v, nums[i].name, nums[i].lo, nums[i].hi, 0, &r->num[i], err);
    int64_t x;
    if (get_int(v, nums[i].name, (int64_t)nums[i].lo, (int64_t)nums[i].hi, &x, err)) return -1;
    r->num[i] = (double)x;
    return 0;
}

/* A bias: a finite number, or false (a ban). */
static int bias_value(const json *v, api_error *err)
{
    if (v->type == JSON_BOOL && !v->boolean) return 0;
    if (v->type != JSON_NUMBER || !isfinite(v->num) || fabs(v->num) > 1e30)
        return bad(err, "logit_bias", "'logit_bias' biases must be finite numbers, or false to ban a token");
    return 0;
}

/* OpenAI's {"id": bias} (a key that is not an integer is a text, as
 * llama.cpp) or llama.cpp's [[id or "text", bias], ...]; resolved by the
 * caller (api_logit_bias). */
static int parse_logit_bias(const json *v, api_request *r, api_error *err)
{
    const char *k = "logit_bias";
    if (v->type == JSON_OBJECT) {
        for (size_t i = 0; i < v->n; i++) {
            if (!v->keys[i][0]) return bad(err, k, "'logit_bias' keys must be token ids or texts, not \"\"");
            if (bias_value(v->items[i], err)) return -1;
        }
    } else if (v->type == JSON_ARRAY) {
        for (size_t i = 0; i < v->n; i++) {
            const json *e = v->items[i];
            int64_t t;
            if (e->type != JSON_ARRAY || e->n != 2)
                return bad(err, k, "'logit_bias' as an array holds [token id or text, bias] pairs (item %zu)", i);
            if (e->items[0]->type != JSON_STRING && (e->items[0]->type != JSON_NUMBER ||
                                                     !json_as_int(e->items[0], 0, INT32_MAX, &t)))
                return bad(err, k, "'logit_bias'[%zu][0] must be a token id (an integer >= 0) or a text", i);
            if (bias_value(e->items[1], err)) return -1;
        }
    } else {
        return bad(err, k, "'logit_bias' must be an object {\"token id\": bias} or an array [[id, bias], ...], not %s",
                   type_name(v));
    }
    r->logit_bias = v;
    return 0;
}

static int parse_breakers(const json *v, api_request *r, api_error *err)
{
    const char *k = "dry_sequence_breakers";
    if (v->type != JSON_ARRAY || v->n == 0)
        return bad(err, k, "'dry_sequence_breakers' must be a non-empty array of strings");
    if (v->n > API_MAX_BREAKERS) return bad(err, k, "'dry_sequence_breakers' has more than %d strings", API_MAX_BREAKERS);
    for (size_t i = 0; i < v->n; i++) {
        if (v->items[i]->type != JSON_STRING) return bad(err, k, "'dry_sequence_breakers' must hold strings (item %zu)", i);
        r->breakers[i] = v->items[i]->str;
        r->breaker_len[i] = v->items[i]->str_len;
    }
    r->n_breakers = (int)v->n;
    return 0;
}

/* llama.cpp's samplers: an array of stage names, or a string of letters. */
static int parse_samplers(const json *v, api_request *r, api_error *err)
{
    const char *k = "samplers";
    size_t n = v->type == JSON_ARRAY ? v->n : v->type == JSON_STRING ? v->str_len : 0;
    if (v->type != JSON_ARRAY && v->type != JSON_STRING)
        return bad(err, k, "'samplers' must be an array of stage names or a string of letters, not %s", type_name(v));
    if (n > 16) return bad(err, k, "'samplers' lists %zu stages; at most 16", n);
    if (n == 0)   /* llama.cpp's plain softmax draw: no stage of mor.h's sampler is that alone */
        return bad(err, k, "'samplers' is empty; this server needs at least one stage (\"temperature\" with "
                   "temperature 1 draws from the plain softmax)");
    for (size_t i = 0; i < n; i++) {
        const json *e = v->type == JSON_ARRAY ? v->items[i] : NULL;
        if (e && e->type != JSON_STRING) return bad(err, k, "'samplers' must hold stage names (item %zu)", i);
        int st = e ? sampling_stage_by_name(e->str, e->str_len) : sampling_stage_by_char(v->str[i]);
        if (st <= 0) {
            char shown[40];
            snprintf(shown, sizeof shown, "%.*s", e ? (int)(e->str_len < 30 ? e->str_len : 30) : 1, e ? e->str : v->str + i);
            return bad(err, k, "'samplers': %s stage '%s'%s", st < 0 ? "llama.cpp's" : "no", shown,
                       st < 0 ? " is not supported by this server" :
                       " (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature; or letters edskypmxt)");
        }
        r->samplers[i] = st;
    }
    r->n_samplers = (int)n;
    return 0;
}

/* tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}, ...] */
static int parse_tools(const json *v, api_request *r, api_error *err)
{
    const char *k = "tools";
    if (v->type != JSON_ARRAY) return bad(err, k, "'tools' must be an array, not %s", type_name(v));
    if (v->n > 128) return bad(err, k, "'tools' has more than 128 tools");
    for (size_t i = 0; i < v->n; i++) {
        const json *t = v->items[i], *ty = json_get(t, "type"), *f = json_get(t, "function");
        if (t->type != JSON_OBJECT || !ty || ty->type != JSON_STRING || strcmp(ty->str, "function") || !f ||
            f->type != JSON_OBJECT)
            return bad(err, k, "tools[%zu] must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                       "\"parameters\": {...}}}", i);
        const json *name = json_get(f, "name"), *params = json_get(f, "parameters"), *d = json_get(f, "description");
        if (!name || name->type != JSON_STRING || !name->str_len || name->str_len > 64)
            return bad(err, k, "tools[%zu].function.name must be a string of 1 to 64 characters", i);
        for (size_t c = 0; c < name->str_len; c++) {
            char ch = name->str[c];
            if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '-' || ch == '.'))
                return bad(err, k, "tools[%zu].function.name may hold only a-z, A-Z, 0-9, _, - and .", i);
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(json_get(json_get(v->items[j], "function"), "name")->str, name->str))
                return bad(err, k, "tools: two functions are named '%s'", name->str);
        if (params && params->type != JSON_OBJECT && params->type != JSON_NULL)
            return bad(err, k, "tools[%zu].function.parameters must be a JSON Schema (an object)", i);
        if (d && d->type != JSON_STRING && d->type != JSON_NULL)
            return bad(err, k, "tools[%zu].function.description must be a string", i);
    }
    r->tools = v->n ? v : NULL;
    return 0;
}

static int parse_tool_choice(const json *v, api_request *r, api_error *err)
{
    const char *k = "tool_choice";
    if (v->type == JSON_STRING) {
        if (!strcmp(v->str, "auto")) r->tool_choice = API_TOOLS_AUTO;
        else if (!strcmp(v->str, "none")) r->tool_choice = API_TOOLS_NONE;
        else if (!strcmp(v->str, "required")) r->tool_choice = API_TOOLS_REQUIRED;
        else return bad(err, k, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
        return 0;
    }
    const json *ty = json_get(v, "type"), *f = json_get(v, "function"), *name = f ? json_get(f, "name") : NULL;
    if (v->type != JSON_OBJECT || !ty || ty->type != JSON_STRING || strcmp(ty->str, "function") || !name ||
        name->type != JSON_STRING)
        return bad(err, k, "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                   "\"function\": {\"name\": ...}}");
    r->tool_choice = API_TOOLS_NAMED;
    r->tool_name = name->str;
    return 0;
}

/* llama.cpp's n_predict: -1 no limit but the context's, 0 nothing generated. */
static int parse_n_predict(const json *v, api_request *r, api_error *err)
{
    const char *k = "n_predict";
    int64_t x;
    if (r->max_tokens_set) return bad(err, k, "give n_predict or max_tokens, not both");
    if (get_int(v, k, -1, INT32_MAX, &x, err)) return -1;
    r->n_predict_set = 1;
    r->max_tokens_set = x >= 0;
    r->max_tokens = x >= 0 ? x : 0;
    return 0;
}

/* chat: a boolean; completions: how many of the most likely per token. */
static int parse_logprobs(const json *v, api_request *r, api_error *err)
{
    const char *k = "logprobs";
    if (r->kind == API_CHAT) return get_bool(v, k, &r->logprobs, err);
    if (v->type == JSON_BOOL && !v->boolean) return 0;   /* false: none, as null */
    if (v->type != JSON_NUMBER)
        return bad(err, k, "'logprobs' must be an integer in [0, %d] (how many of the most likely tokens "
                   "to list beside each token), not %s", API_MAX_LOGPROBS, type_name(v));
    r->logprobs = 1;
    return get_int(v, k, 0, API_MAX_LOGPROBS, &r->top_logprobs, err);
}

static int parse_stream_options(const json *v, api_request *r, api_error *err)
{
    const char *k = "stream_options";
    if (v->type == JSON_NULL) return 0;
    if (v->type != JSON_OBJECT) return bad(err, k, "'stream_options' must be an object");
    for (size_t i = 0; i < v->n; i++) {
        if (strcmp(v->keys[i], "include_usage")) return bad(err, k, "stream_options: unrecognized field '%s'", v->keys[i]);
        if (get_bool(v->items[i], "stream_options.include_usage", &r->include_usage, err)) return -1;
    }
    r->include_usage |= 2;   /* given: checked against stream below */
    return 0;
}

static int field(api_request *r, const char *k, const json *v, api_error *err)
{
    if (!strcmp(k, "prompt")) return parse_prompt(v, r, err);
    if (!strcmp(k, "messages")) return parse_messages(v, r, err);
    if (v->type == JSON_NULL && strcmp(k, "stream_options")) return 0;   /* null: the default */
    if (!strcmp(k, "model")) {
        if (v->type != JSON_STRING) return bad(err, k, "'model' must be a string, not %s", type_name(v));
        r->model = v->str;
        return 0;
    }
    if (!strcmp(k, "n_predict")) return parse_n_predict(v, r, err);
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
        if (r->max_tokens_set || r->n_predict_set)
            return bad(err, k, "give %s or %s, not both", r->n_predict_set ? "n_predict" : "max_tokens", k);
        r->max_tokens_set = 1;
        return get_int(v, k, 1, INT32_MAX, &r->max_tokens, err);
    }
    if (!strcmp(k, "temperature")) { r->temperature_set = 1; return get_num(v, k, 0, 2, 0, &r->temperature, err); }
    if (!strcmp(k, "top_p")) { r->top_p_set = 1; return get_num(v, k, 0, 1, 1, &r->top_p, err); }
    if (!strcmp(k, "min_p")) { r->min_p_set = 1; return get_num(v, k, 0, 1, 0, &r->min_p, err); }
    if (!strcmp(k, "top_k")) { r->top_k_set = 1; return get_int(v, k, 0, INT32_MAX, &r->top_k, err); }
    if (!strcmp(k, "repeat_penalty")) { r->repeat_penalty_set = 1; return get_num(v, k, 0, 10, 1, &r->repeat_penalty, err); }
    if (!strcmp(k, "speculate")) { r->speculate_set = 1; return get_int(v, k, 0, 65535, &r->speculate, err); }
    if (!strcmp(k, "speculate_depth")) { r->speculate_depth_set = 1; return get_int(v, k, 1, 64, &r->speculate_depth, err); }
    if (!strcmp(k, "exit_threshold")) { r->exit_threshold_set = 1; return get_num(v, k, -1e30, 1e30, 0, &r->exit_threshold, err); }
    if (!strcmp(k, "repeat_last_n")) { r->repeat_last_n_set = 1; return get_int(v, k, -1, 65536, &r->repeat_last_n, err); }
    for (int i = 0; i < API_N_NUM; i++)
        if (!strcmp(k, nums[i].name)) return parse_num(r, i, v, err);
    if (!strcmp(k, "logit_bias")) return parse_logit_bias(v, r, err);
    if (!strcmp(k, "dry_sequence_breakers")) return parse_breakers(v, r, err);
    if (!strcmp(k, "samplers")) return parse_samplers(v, r, err);
    if (!strcmp(k, "ignore_eos")) return get_bool(v, k, &r->ignore_eos, err);
    if (!strcmp(k, "return_tokens")) return get_bool(v, k, &r->return_tokens, err);
    if (!strcmp(k, "cache_prompt")) return get_bool(v, k, &r->cache_prompt, err);
    if (!strcmp(k, "seed")) {
        int64_t s;
        if (get_int(v, k, -1, (int64_t)1 << 53, &s, err)) return -1;
        r->seed_set = s >= 0;            /* -1: a random seed, as llama.cpp */
        r->seed = (uint64_t)(s >= 0 ? s : 0);
        return 0;
    }
    if (!strcmp(k, "logprobs")) return parse_logprobs(v, r, err);
    if (!strcmp(k, "top_logprobs")) { r->top_logprobs_set = 1; return get_int(v, k, 0, API_MAX_LOGPROBS, &r->top_logprobs, err); }
    if (!strcmp(k, "stop")) return parse_stop(v, r, err);
    if (!strcmp(k, "grammar")) {
        if (v->type != JSON_STRING) return bad(err, k, "'grammar' must be a string (a GBNF grammar), not %s", type_name(v));
        if (!v->str_len) return 0;   /* "": none, as llama.cpp */
        if (constraint(r, k, err)) return -1;
        r->grammar = v->str;
        r->grammar_len = v->str_len;
        return 0;
    }
    if (!strcmp(k, "json_schema")) {
        if (v->type != JSON_OBJECT && v->type != JSON_BOOL)
            return bad(err, k, "'json_schema' must be a JSON Schema (an object), not %s", type_name(v));
        if (constraint(r, k, err)) return -1;
        r->json_schema = v;
        return 0;
    }
    if (!strcmp(k, "response_format")) return parse_response_format(v, r, err);
    if (!strcmp(k, "tools")) return parse_tools(v, r, err);
    if (!strcmp(k, "tool_choice")) return parse_tool_choice(v, r, err);
    if (!strcmp(k, "parallel_tool_calls")) return get_bool(v, k, &r->parallel_tool_calls, err);
    if (!strcmp(k, "n")) return get_int(v, k, 1, API_MAX_N, &r->n, err);
    if (!strcmp(k, "stream")) return get_bool(v, k, &r->stream, err);
    if (!strcmp(k, "test_hold")) {
        int hold = 0;
        if (get_bool(v, k, &hold, err)) return -1;
        r->test_hold = 2 | hold;   /* 2: given (refused without --test-hooks) */
        return 0;
    }
    if (!strcmp(k, "stream_options")) return parse_stream_options(v, r, err);
    if (!strcmp(k, "user")) {
        if (v->type != JSON_STRING) return bad(err, k, "'user' must be a string");
        return 0;
    }
    return neutral(v, k, err);
}

int api_parse(int kind, const char *body, size_t len, api_request *r, api_error *err)
{
    char jerr[160];
    memset(r, 0, sizeof *r);
    memset(err, 0, sizeof *err);
    r->kind = kind;
    r->n_samplers = r->n_breakers = -1;
    r->cache_prompt = 1;
    r->parallel_tool_calls = 1;
    r->doc = json_parse(body, len, jerr, sizeof jerr);
    if (!r->doc) return bad(err, NULL, "the body is not valid JSON (%s)", jerr);
    const json *d = r->doc;
    if (d->type != JSON_OBJECT) { bad(err, NULL, "the body must be a JSON object"); goto fail; }
    unsigned char seen[N_FIELDS] = { 0 };
    for (size_t i = 0; i < d->n; i++) {
        const char *k = d->keys[i];
        size_t f = 0;
        while (f < N_FIELDS && (strcmp(fields[f].name, k) || !field_of_kind(fields[f].kinds, kind))) f++;
        if (f == N_FIELDS) {
            char shown[40];
            snprintf(shown, sizeof shown, "%s", k);
            for (char *c = shown; *c; c++) if ((unsigned char)*c < 0x20) *c = '?';
            bad(err, shown, "Unrecognized request argument supplied: %s", shown);
            goto fail;
        }
        if (seen[f]++) { bad(err, k, "'%s' is given twice", k); goto fail; }
        if (field(r, k, d->items[i], err)) goto fail;
    }
    if (kind == API_NATIVE && r->n > 1) {
        bad(err, "n", "llama.cpp's /completion gives one completion: for n > 1 use /v1/completions");
        goto fail;
    }
    if (kind != API_CHAT && !r->prompt_text && !r->prompt_ids && !r->prompt_mixed) { bad(err, "prompt", "'prompt' is required"); goto fail; }
    if (kind == API_CHAT && !r->messages) { bad(err, "messages", "'messages' is required"); goto fail; }
    if (kind == API_CHAT && r->top_logprobs_set && r->top_logprobs > 0 && !r->logprobs) {
        bad(err, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        goto fail;
    }
    if (r->num_set[API_N_PROBS] && r->num[API_N_PROBS] > 0) {   /* llama.cpp's count of the most likely */
        if (r->logprobs || r->top_logprobs_set) { bad(err, "n_probs", "give n_probs or logprobs, not both"); goto fail; }
        r->logprobs = 1;
        r->top_logprobs = (int64_t)r->num[API_N_PROBS];
    }
    r->n_logprobs = r->logprobs ? (int32_t)r->top_logprobs : -1;
    if (!r->n) r->n = 1;
    if (r->tool_choice == API_TOOLS_REQUIRED || r->tool_choice == API_TOOLS_NAMED) {
        if (!r->tools) { bad(err, "tool_choice", "'tool_choice' %s needs 'tools'", r->tool_name ? "naming a function" : "\"required\""); goto fail; }
        if (r->constraint) { bad(err, "tool_choice", "give '%s' or a 'tool_choice' that forces a call, not both", r->constraint); goto fail; }
    }
    if (r->tool_name) {
        size_t i = 0;
        while (i < r->tools->n && strcmp(json_get(json_get(r->tools->items[i], "function"), "name")->str, r->tool_name)) i++;
        if (i == r->tools->n) { bad(err, "tool_choice", "'tool_choice' names '%.64s', which is not in 'tools'", r->tool_name); goto fail; }
    }
    if (r->include_usage & 2) {
        if (!r->stream) { bad(err, "stream_options", "'stream_options' is only allowed with \"stream\": true"); goto fail; }
        r->include_usage &= 1;
    }
    return 0;
fail:
    api_request_free(r);
    return -1;
}

void api_request_free(api_request *r)
{
    for (int32_t i = 0; i < r->n_messages; i++) free(r->messages[i].owned);
    free(r->messages);
    free(r->prompt_ids);
    json_free(r->doc);
    memset(r, 0, sizeof *r);
}
