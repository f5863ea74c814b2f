/* embeddings.c - POST /v1/embeddings (OpenAI's shape):
 *
 *   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...],
 *    "encoding_format": "float" (default) | "base64", "model", "user",
 *    "dimensions" (only the model's own)}
 *   -> {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
 *       "model", "usage": {"prompt_tokens", "total_tokens"}}
 *
 * Each input is decoded in one batch on a context of its own (created at
 * the first request, its n_batch the server's --batch: a longer input is a
 * 400, as in llama.cpp), routed as generation routes (causal thresholds for
 * expert-choice models, the same --threshold and --max-depth), and pooled
 * by mor_embeddings_seq: the mean of the final norm's outputs, normalized to
 * unit length (OpenAI's and llama.cpp's default). Texts get BOS when the
 * model adds one. One request embeds at a time: the context is the server's
 * one mutable thing here, under its own lock, beside the generation engine. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"
#include "jsonw.h"
#include "server.h"
#include "text.h"

#define MAX_INPUTS 2048   /* OpenAI's limit of inputs per request */

static pthread_mutex_t emu = PTHREAD_MUTEX_INITIALIZER;
static mor_context *ectx;   /* under emu; NULL until the first request */
static mor_batch *ebatch;
static int32_t ebatch_cap;  /* the most tokens of one input */

void embeddings_free(void)
{
    pthread_mutex_lock(&emu);
    mor_batch_free(ebatch);
    mor_context_free(ectx);
    ebatch = NULL;
    ectx = NULL;
    pthread_mutex_unlock(&emu);
}

/* The context, made at first use (under emu); MOR_OK or a status with mor_last_error(). */
static mor_status ensure_context(void)
{
    if (ectx) return MOR_OK;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.flags = MOR_CTX_CAPTURE_HIDDEN;
    cp.n_batch = (uint32_t)(S.o.n_batch < S.ctx_limit ? S.o.n_batch : S.ctx_limit);
    cp.n_ctx = cp.n_batch;
    cp.n_seq_max = 1;
    cp.n_outputs = 1;   /* no logits are asked for: the smallest buffer */
    cp.n_threads = S.o.n_threads;
    cp.kv_mode = S.o.kv_mode;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_status st = mor_context_create(S.model, &cp, &c);
    if (!st) st = mor_batch_create((int32_t)cp.n_batch, &b);
    mor_router *r = c ? mor_context_router(c) : NULL;
    if (!st && mor_model_router_type(S.model) == MOR_ROUTER_TYPE_EXPERT)
        st = mor_router_set_mode(r, MOR_ROUTE_THRESHOLD, 0);   /* as the engine: causal */
    for (int32_t i = 0; i < S.o.n_thresholds && !st; i++) st = mor_router_set_threshold(r, i, S.o.thresholds[i]);
    if (!st && S.o.max_depth) st = mor_router_set_max_depth(r, S.o.max_depth);
    if (st) { mor_batch_free(b); mor_context_free(c); return st; }
    ectx = c;
    ebatch = b;
    ebatch_cap = (int32_t)cp.n_batch;
    return MOR_OK;
}

/* The tokens of input i, in a malloc'd array (*ids, *n); 0, or -1 after a 400/500. */
static int input_tokens(conn *c, request *rq, const json *v, size_t i, mor_token **ids, int32_t *n)
{
    *ids = NULL;
    *n = 0;
    if (v->type == JSON_STRING) {
        if (!S.has_tokenizer) { conn_error(c, rq, 400, "input", NULL, "the model has no tokenizer: give token ids"); return -1; }
        uint32_t flags = MOR_TOKENIZE_PARSE_SPECIAL | (S.add_bos ? MOR_TOKENIZE_ADD_BOS : 0);
        int32_t cnt = 0;
        mor_status st = text_tokenize(S.model, v->str, v->str_len, flags, ids, &cnt);
        if (st) {
            conn_error(c, rq, st == MOR_E_NOMEM ? 500 : 400, "input", NULL, "tokenizing input[%zu] failed: %s", i,
                       mor_last_error());
            return -1;
        }
        *n = cnt;
    } else if (v->type == JSON_ARRAY) {
        *ids = malloc(sizeof **ids * (v->n ? v->n : 1));
        if (!*ids) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); return -1; }
        for (size_t k = 0; k < v->n; k++) {
            int64_t t;
            if (!json_as_int(v->items[k], 0, S.n_vocab - 1, &t)) {
                conn_error(c, rq, 400, "input", NULL, "input[%zu][%zu] is not a token id in [0, %d)", i, k, S.n_vocab);
                free(*ids);
                *ids = NULL;
                return -1;
            }
            (*ids)[k] = (mor_token)t;
        }
        *n = (int32_t)v->n;
    } else {
        conn_error(c, rq, 400, "input", NULL, "input[%zu] must be a string or an array of token ids", i);
        return -1;
    }
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        conn_error(c, rq, 400, "input", NULL, "input[%zu] is empty", i);
        return -1;
    }
    return 0;
}

/* Embed ids into out (n_embd floats), under emu; 0, or -1 after a 400/500. */
static int embed_one(conn *c, request *rq, const mor_token *ids, int32_t n, size_t i, float *out)
{
    if (n > ebatch_cap) {
        /* the cap is the smaller of --batch and the context a request may fill */
        conn_error(c, rq, 400, "input", NULL, "input[%zu] is %d tokens, more than the %d one batch takes "
                   "(%s)", i, n, ebatch_cap, S.o.n_batch < S.ctx_limit ? "mor-server --batch" :
                   "the context: the smaller of mor-server --ctx and the model's training context");
        return -1;
    }
    mor_batch_clear(ebatch);
    mor_status st = MOR_OK;
    for (int32_t k = 0; k < n && !st; k++) st = mor_batch_add(ebatch, ids[k], k, 0, 0);
    if (!st) st = mor_decode(ectx, ebatch);
    if (!st) st = mor_embeddings_seq(ectx, 0, MOR_POOL_MEAN, MOR_EMBD_NORMALIZE, out, mor_model_n_embd(S.model));
    mor_kv_clear(mor_context_kv(ectx));
    if (st) {
        conn_error(c, rq, st == MOR_E_NOMEM ? 500 : 400, "input", NULL, "embedding input[%zu] failed: %s (%s)", i,
                   mor_last_error(), mor_status_str(st));
        return -1;
    }
    return 0;
}

/* p[0..n) in base64 into out (4 * ((n + 2) / 3) bytes); returns that length. */
static size_t base64(const unsigned char *p, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? a[v & 63] : '=';
    }
    return o;
}

void handle_embeddings(conn *c, request *rq, const char *body, size_t n)
{
    static const char *const allowed[] = { "input", "model", "encoding_format", "user", "dimensions", NULL };
    json *d = parse_object(c, rq, body, n, allowed);
    if (!d) return;
    const int32_t dim = mor_model_n_embd(S.model);
    const json *in = json_get(d, "input"), *fmt = json_get(d, "encoding_format"), *dims = json_get(d, "dimensions");
    const json *model = json_get(d, "model"), *user = json_get(d, "user");
    int b64 = 0;
    float *vec = NULL;
    char *text = NULL;
    buf b = { 0 };
    const json *one[1];
    const json *const *items = one;
    size_t n_in = 1;
    if (!in || (in->type != JSON_STRING && in->type != JSON_ARRAY)) {
        conn_error(c, rq, 400, "input", NULL, "'input' is required: a string, an array of strings, an array of "
                   "token ids or an array of such arrays");
        goto done;
    }
    if (model && model->type != JSON_STRING && model->type != JSON_NULL) {
        conn_error(c, rq, 400, "model", NULL, "'model' must be a string");
        goto done;
    }
    if (model && model->type == JSON_STRING && S.o.reject_unknown_model && strcmp(model->str, S.model_id)) {
        conn_error(c, rq, 404, "model", "model_not_found", "The model '%.100s' does not exist (this server has '%s')",
                   model->str, S.model_id);
        goto done;
    }
    if (user && user->type != JSON_STRING && user->type != JSON_NULL) {
        conn_error(c, rq, 400, "user", NULL, "'user' must be a string");
        goto done;
    }
    if (fmt && fmt->type != JSON_NULL) {
        if (fmt->type != JSON_STRING || (strcmp(fmt->str, "float") && strcmp(fmt->str, "base64"))) {
            conn_error(c, rq, 400, "encoding_format", NULL, "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        b64 = !strcmp(fmt->str, "base64");
    }
    if (dims && dims->type != JSON_NULL) {
        int64_t v;
        if (!json_as_int(dims, 1, INT32_MAX, &v) || v != dim) {
            conn_error(c, rq, 400, "dimensions", NULL, "'dimensions' must be the model's embedding size, %d", dim);
            goto done;
        }
    }
    /* one input (a string, or one array of ids) or an array of inputs */
    one[0] = in;
    if (in->type == JSON_ARRAY && in->n > 0 && (in->items[0]->type == JSON_STRING || in->items[0]->type == JSON_ARRAY)) {
        items = (const json *const *)in->items;
        n_in = in->n;
    }
    if (in->type == JSON_ARRAY && in->n == 0) { conn_error(c, rq, 400, "input", NULL, "'input' is empty"); goto done; }
    if (n_in > MAX_INPUTS) {
        conn_error(c, rq, 400, "input", NULL, "%zu inputs, more than %d in one request", n_in, MAX_INPUTS);
        goto done;
    }
    vec = malloc(sizeof *vec * (size_t)dim);
    text = malloc(4 * (((size_t)dim * 4 + 2) / 3));
    if (!vec || !text) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); goto done; }

    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "object"); jw_str(&w, "list");
    jw_key(&w, "data");
    jw_arr(&w);
    int64_t n_tokens = 0;
    pthread_mutex_lock(&emu);
    mor_status st = ensure_context();
    if (st) {
        pthread_mutex_unlock(&emu);
        conn_error(c, rq, 500, NULL, NULL, "cannot create the embeddings context: %s (%s)", mor_last_error(),
                   mor_status_str(st));
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        mor_token *ids;
        int32_t cnt;
        if (input_tokens(c, rq, items[i], i, &ids, &cnt) || embed_one(c, rq, ids, cnt, i, vec)) {
            free(ids);
            pthread_mutex_unlock(&emu);
            goto done;
        }
        free(ids);
        n_tokens += cnt;
        jw_obj(&w);
        jw_key(&w, "object"); jw_str(&w, "embedding");
        jw_key(&w, "index"); jw_int(&w, (int64_t)i);
        jw_key(&w, "embedding");
        if (b64) {
            /* little-endian float32, as OpenAI's clients decode it */
            unsigned char *raw = (unsigned char *)vec;
            for (int32_t k = 0; k < dim; k++) {
                uint32_t u;
                memcpy(&u, &vec[k], 4);
                raw[4 * k] = (unsigned char)u; raw[4 * k + 1] = (unsigned char)(u >> 8);
                raw[4 * k + 2] = (unsigned char)(u >> 16); raw[4 * k + 3] = (unsigned char)(u >> 24);
            }
            jw_strn(&w, text, base64(raw, (size_t)dim * 4, text));
        } else {
            jw_arr(&w);
            for (int32_t k = 0; k < dim; k++) jw_double(&w, vec[k]);
            jw_arr_end(&w);
        }
        jw_obj_end(&w);
    }
    pthread_mutex_unlock(&emu);
    jw_arr_end(&w);
    jw_key(&w, "model"); jw_str(&w, S.model_id);
    jw_key(&w, "usage");
    jw_obj(&w);
    jw_key(&w, "prompt_tokens"); jw_int(&w, n_tokens);
    jw_key(&w, "total_tokens"); jw_int(&w, n_tokens);
    jw_obj_end(&w);
    jw_obj_end(&w);
    send_json(c, rq, 200, &b);
done:
    buf_free(&b);
    free(vec);
    free(text);
    json_free(d);
}
