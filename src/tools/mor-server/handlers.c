/* handlers.c - the endpoints:
 *   POST /v1/completions, POST /v1/chat/completions   (api.h; streamed as
 *        server-sent events with "stream": true)
 *   GET  /v1/models[/ID], /health, /metrics (Prometheus text)
 *   (and llama.cpp's POST /tokenize, /detokenize, GET /props: llama_endpoints.c;
 *   its POST /completion: completion_native.c, from the same jobs: generate.h)
 * A generated token's recursion depth is in the extension object "mor" of
 * each choice: {"token_ids": [...], "depths": [...]}, per event when
 * streaming; logprobs, when asked for, in OpenAI's "logprobs" of each choice
 * (logprobs_object). */
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "api.h"
#include "chat.h"
#include "generate.h"
#include "cors.h"
#include "json.h"
#include "jsonw.h"
#include "tools.h"
#include "server.h"
#include "sampling_req.h"
#include "template.h"
#include "text.h"
#include "utf8.h"

static const char *const ep_names[EP_N] = { "completions", "chat_completions", "models", "health", "metrics",
                                            "tokenize", "detokenize", "props", "embeddings", "apply_template",
                                            "slots", "completion", "other" };

int endpoint_of(const char *path)
{
    if (!strcmp(path, "/v1/completions")) return EP_COMPLETIONS;
    if (!strcmp(path, "/v1/chat/completions")) return EP_CHAT;
    if (!strcmp(path, "/completion") || !strcmp(path, "/completions")) return EP_COMPLETION;   /* llama.cpp's both */
    if (!strcmp(path, "/v1/models") || !strncmp(path, "/v1/models/", 11)) return EP_MODELS;
    if (!strcmp(path, "/health")) return EP_HEALTH;
    if (!strcmp(path, "/metrics")) return EP_METRICS;
    if (!strcmp(path, "/tokenize")) return EP_TOKENIZE;
    if (!strcmp(path, "/detokenize")) return EP_DETOKENIZE;
    if (!strcmp(path, "/props")) return EP_PROPS;
    if (!strcmp(path, "/v1/embeddings")) return EP_EMBEDDINGS;
    if (!strcmp(path, "/apply-template")) return EP_APPLY_TEMPLATE;
    if (!strcmp(path, "/slots") || !strncmp(path, "/slots?", 7)) return EP_SLOTS;
    return EP_OTHER;
}

static uint64_t next_random(void)
{
    pthread_mutex_lock(&S.mu);
    uint64_t z = (S.rng += 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&S.mu);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- GET ---------------------------------------------------------------- */

static void model_object(jsonw *w)
{
    jw_obj(w);
    jw_key(w, "id"); jw_str(w, S.model_id);
    jw_key(w, "object"); jw_str(w, "model");
    jw_key(w, "created"); jw_int(w, S.started);
    jw_key(w, "owned_by"); jw_str(w, "libmor");
    jw_key(w, "meta");
    jw_obj(w);
    jw_key(w, "n_vocab"); jw_int(w, S.n_vocab);
    jw_key(w, "n_ctx_train"); jw_int(w, S.n_ctx_train);
    jw_key(w, "n_ctx"); jw_int(w, S.ctx_limit);
    jw_key(w, "n_embd"); jw_int(w, mor_model_n_embd(S.model));
    jw_key(w, "n_layer"); jw_int(w, mor_model_n_layer(S.model));
    jw_key(w, "n_recursion"); jw_int(w, mor_model_n_recursion(S.model));
    jw_key(w, "size_bytes"); jw_int(w, (int64_t)mor_model_size_bytes(S.model));
    jw_key(w, "chat_template");   /* the format: a built-in one's name, or "jinja" for the template itself */
    if (S.chat_tpl) jw_str(w, "jinja");
    else if (S.chat_family >= 0) jw_str(w, chat_name(S.chat_family));
    else jw_null(w);
    jw_obj_end(w);
    jw_obj_end(w);
}

void send_json(conn *c, request *rq, int status, buf *b)
{
    buf_putc(b, '\n');
    if (!buf_ok(b)) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); return; }
    conn_respond(c, rq, status, "application/json", b->p, b->len, NULL);
}

json *parse_object(conn *c, request *rq, const char *body, size_t n, const char *const *allowed)
{
    char jerr[160];
    json *d = json_parse(body, n, jerr, sizeof jerr);
    if (!d) { conn_error(c, rq, 400, NULL, NULL, "the body is not valid JSON (%s)", jerr); return NULL; }
    if (d->type != JSON_OBJECT) { conn_error(c, rq, 400, NULL, NULL, "the body must be a JSON object"); json_free(d); return NULL; }
    for (size_t i = 0; i < d->n; i++) {
        size_t k = 0;
        while (allowed[k] && strcmp(allowed[k], d->keys[i])) k++;
        if (!allowed[k]) {
            char shown[40];
            snprintf(shown, sizeof shown, "%s", d->keys[i]);
            for (char *p = shown; *p; p++) if ((unsigned char)*p < 0x20) *p = '?';
            conn_error(c, rq, 400, shown, NULL, "Unrecognized request argument supplied: %s", shown);
            json_free(d);
            return NULL;
        }
    }
    return d;
}

static void handle_models(conn *c, request *rq)
{
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    if (!strncmp(rq->path, "/v1/models/", 11)) {
        if (strcmp(rq->path + 11, S.model_id)) {
            conn_error(c, rq, 404, "model", "model_not_found", "The model '%s' does not exist", rq->path + 11);
            return;
        }
        model_object(&w);
    } else {
        jw_obj(&w);
        jw_key(&w, "object"); jw_str(&w, "list");
        jw_key(&w, "data");
        jw_arr(&w);
        model_object(&w);
        jw_arr_end(&w);
        jw_obj_end(&w);
    }
    send_json(c, rq, 200, &b);
    buf_free(&b);
}

int health_json(buf *b)
{
    engine_stats st;
    engine_get_stats(S.eng, &st);
    int draining = atomic_load(&S.draining);
    jsonw w;
    jw_init(&w, b);
    jw_obj(&w);
    jw_key(&w, "status"); jw_str(&w, draining ? "draining" : "ok");
    jw_key(&w, "slots_processing"); jw_int(&w, st.running);
    jw_key(&w, "slots_idle"); jw_int(&w, S.o.n_slots - st.running > 0 ? S.o.n_slots - st.running : 0);
    jw_key(&w, "queued"); jw_int(&w, st.queued);
    jw_obj_end(&w);
    return draining ? 503 : 200;
}

static void handle_health(conn *c, request *rq)
{
    buf b = { 0 };
    int status = health_json(&b);
    send_json(c, rq, status, &b);
    buf_free(&b);
}

static void metric(buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP mor_%s %s\n# TYPE mor_%s %s\n", name, help, name, type);
}

/* llama-server's names of the same counts, for dashboards made for it.
 * Left out: its prefill and generation seconds, which one depth-wise step
 * does not split (mor_engine_busy_seconds_total has their sum). */
static void llamacpp_metric(buf *b, const char *name, const char *type, const char *help, double v)
{
    buf_printf(b, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %.17g\n", name, help, name, type, name, v);
}

static void llamacpp_metrics(buf *b, const engine_stats *st)
{
    llamacpp_metric(b, "prompt_tokens_total", "counter", "Number of prompt tokens processed.",
                    (double)(st->prompt_tokens - st->cached_tokens));
    llamacpp_metric(b, "tokens_predicted_total", "counter", "Number of generation tokens processed.",
                    (double)st->gen_tokens);
    llamacpp_metric(b, "n_decode_total", "counter", "Total number of engine steps (mor_server_step calls)",
                    (double)st->steps);
    llamacpp_metric(b, "spec_decode_num_draft_tokens_total", "counter", "Total draft tokens generated",
                    (double)st->spec_drafted);
    llamacpp_metric(b, "spec_decode_num_accepted_tokens_total", "counter",
                    "Total draft tokens accepted by the target model", (double)st->spec_accepted);
    llamacpp_metric(b, "predicted_tokens_seconds", "gauge", "Generation throughput in tokens/s (last 10 s).",
                    st->tokens_per_second);
    llamacpp_metric(b, "requests_processing", "gauge", "Number of requests processing.", st->running);
    llamacpp_metric(b, "requests_deferred", "gauge", "Number of requests deferred.", st->queued);
    llamacpp_metric(b, "n_busy_slots_per_decode", "gauge", "Average number of busy slots per engine step",
                    st->steps ? (double)st->slot_steps / (double)st->steps : 0.0);
}

static void handle_metrics(conn *c, request *rq)
{
    engine_stats st;
    engine_get_stats(S.eng, &st);
    uint64_t http[EP_N][6];
    int32_t n_conns;
    pthread_mutex_lock(&S.mu);
    memcpy(http, S.http_count, sizeof http);
    n_conns = S.n_conns;
    pthread_mutex_unlock(&S.mu);
    buf b = { 0 };
    static const char *const cls[6] = { "2xx", "400", "404", "4xx", "503", "5xx" };
    metric(&b, "http_requests_total", "counter", "HTTP requests answered, by endpoint and status");
    for (int e = 0; e < EP_N; e++)
        for (int k = 0; k < 6; k++)
            if (http[e][k] || k == 0)
                buf_printf(&b, "mor_http_requests_total{endpoint=\"%s\",status=\"%s\"} %" PRIu64 "\n", ep_names[e],
                           cls[k], http[e][k]);
    static const char *const why[5] = { "none", "length", "stop", "cancelled", "error" };
    metric(&b, "requests_total", "counter", "generation requests finished, by finish reason");
    for (int k = 1; k < 5; k++)
        buf_printf(&b, "mor_requests_total{finish_reason=\"%s\"} %" PRIu64 "\n", why[k], st.requests[k]);
    metric(&b, "prompt_tokens_total", "counter", "prompt tokens of the requests started");
    buf_printf(&b, "mor_prompt_tokens_total %" PRIu64 "\n", st.prompt_tokens);
    metric(&b, "prompt_tokens_cached_total", "counter", "prompt tokens reused from a slot's kept K/V (prompt reuse)");
    buf_printf(&b, "mor_prompt_tokens_cached_total %" PRIu64 "\n", st.cached_tokens);
    metric(&b, "tokens_generated_total", "counter", "tokens generated");
    buf_printf(&b, "mor_tokens_generated_total %" PRIu64 "\n", st.gen_tokens);
    metric(&b, "tokens_at_depth_total", "counter", "tokens generated, by the recursions they ran");
    for (int d = 0; d <= mor_model_n_recursion(S.model) && d < 17; d++)
        buf_printf(&b, "mor_tokens_at_depth_total{depth=\"%d\"} %" PRIu64 "\n", d, st.at_depth[d]);
    metric(&b, "mean_depth", "gauge", "mean recursions per generated token since the start");
    buf_printf(&b, "mor_mean_depth %.4f\n", st.gen_tokens ? (double)st.depth_sum / (double)st.gen_tokens : 0.0);
    metric(&b, "tokens_per_second", "gauge", "tokens generated per second over the last 10 seconds");
    buf_printf(&b, "mor_tokens_per_second %.2f\n", st.tokens_per_second);
    metric(&b, "queue_length", "gauge", "requests waiting for a slot");
    buf_printf(&b, "mor_queue_length %d\n", st.queued);
    metric(&b, "slots_busy", "gauge", "slots running a request");
    buf_printf(&b, "mor_slots_busy %d\n", st.running);
    metric(&b, "slots", "gauge", "slots (requests run at once)");
    buf_printf(&b, "mor_slots %d\n", S.o.n_slots);
    metric(&b, "speculative_drafted_total", "counter", "tokens drafted by self-speculative requests");
    buf_printf(&b, "mor_speculative_drafted_total %" PRIu64 "\n", st.spec_drafted);
    metric(&b, "speculative_accepted_total", "counter", "drafted tokens accepted (the sampler drew the same)");
    buf_printf(&b, "mor_speculative_accepted_total %" PRIu64 "\n", st.spec_accepted);
    metric(&b, "steps_total", "counter", "engine steps");
    buf_printf(&b, "mor_steps_total %" PRIu64 "\n", st.steps);
    metric(&b, "engine_busy_seconds_total", "counter", "seconds the engine spent in steps");
    buf_printf(&b, "mor_engine_busy_seconds_total %.6f\n", st.busy_seconds);
    metric(&b, "connections", "gauge", "open HTTP connections");
    buf_printf(&b, "mor_connections %d\n", n_conns);
    llamacpp_metrics(&b, &st);
    if (!buf_ok(&b)) conn_error(c, rq, 500, NULL, NULL, "out of memory");
    else conn_respond(c, rq, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len, NULL);
    buf_free(&b);
}

/* ---- generation ---------------------------------------------------------- */

/* Tokenize text[0..n) into *out (malloc'd). */
static mor_status tokenize(const char *text, size_t n, mor_token **out, int32_t *n_out)
{
    uint32_t flags = MOR_TOKENIZE_PARSE_SPECIAL | (S.add_bos ? MOR_TOKENIZE_ADD_BOS : 0);
    return text_tokenize(S.model, text, n, flags, out, n_out);
}

typedef struct {
    int         kind;
    char        id[40];
    int64_t     created;
    const char *object;   /* of the response, or of a stream chunk */
    int         return_tokens;   /* llama.cpp's "tokens" in each choice */
    int         tools;           /* parse tool calls from the text (tools given, tool_choice not "none") */
} reply;

static void head_fields(jsonw *w, const reply *r, int chunk);

/* OpenAI's call id: "call_" and 24 letters and digits. */
static void call_id(char out[32])
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t r = next_random(), r2 = next_random();
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) {
        uint64_t *x = i < 12 ? &r : &r2;
        out[5 + i] = al[*x % 62];
        *x /= 62;
    }
    out[29] = 0;
}

/* A parsed reply's message fields: content (null when there are calls and
 * no text) and tool_calls. */
static void tool_message(jsonw *w, const tool_parse *tp)
{
    jw_key(w, "content");
    if (tp->n_calls && !tp->content_len) jw_null(w); else jw_strn(w, tp->content, tp->content_len);
    if (!tp->n_calls) return;
    jw_key(w, "tool_calls");
    jw_arr(w);
    for (int i = 0; i < tp->n_calls; i++) {
        char id[32];
        call_id(id);
        jw_obj(w);
        jw_key(w, "id"); jw_str(w, id);
        jw_key(w, "type"); jw_str(w, "function");
        jw_key(w, "function");
        jw_obj(w);
        jw_key(w, "name"); jw_str(w, tp->calls[i].name);
        jw_key(w, "arguments"); jw_str(w, tp->calls[i].arguments);
        jw_obj_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
}

/* The stream's end of a choice that may hold calls (tools), `released`
 * bytes of its text sent as content already: an event with the role (when
 * not sent) and the content not sent yet, two per call (its index, id, type,
 * name and arguments "", then its arguments), then the finish. */
static void tool_events(conn *c, request *rq, const reply *r, int index, const char *text, size_t n, size_t released,
                        const char *finish, int role, buf *b)
{
    tool_parse tp;
    if (tools_parse(S.tools_format, text, n, &tp)) { c->gone = 1; return; }
    /* the content not sent yet (what was sent is a prefix of it: tools_stream_safe) */
    size_t rest = tp.content_len >= released && !memcmp(tp.content, text, released) ? tp.content_len - released : 0;
    jsonw w;
    int n_ev = 1 + 2 * tp.n_calls + 1;
    for (int ev = 0; ev < n_ev && !c->gone; ev++) {
        if (ev == 0 && !role && !rest) continue;
        buf_reset(b);
        jw_init(&w, b);
        jw_obj(&w);
        head_fields(&w, r, 1);
        jw_key(&w, "choices"); jw_arr(&w); jw_obj(&w);
        jw_key(&w, "index"); jw_int(&w, index);
        jw_key(&w, "delta"); jw_obj(&w);
        if (ev == 0) {
            if (role) { jw_key(&w, "role"); jw_str(&w, "assistant"); }
            jw_key(&w, "content");
            if (tp.n_calls && !rest) jw_null(&w); else jw_strn(&w, tp.content + tp.content_len - rest, rest);
        } else if (ev < n_ev - 1) {
            int k = (ev - 1) / 2, first = (ev - 1) % 2 == 0;
            jw_key(&w, "tool_calls"); jw_arr(&w); jw_obj(&w);
            jw_key(&w, "index"); jw_int(&w, k);
            if (first) {
                char id[32];
                call_id(id);
                jw_key(&w, "id"); jw_str(&w, id);
                jw_key(&w, "type"); jw_str(&w, "function");
            }
            jw_key(&w, "function"); jw_obj(&w);
            if (first) { jw_key(&w, "name"); jw_str(&w, tp.calls[k].name); }
            jw_key(&w, "arguments"); jw_str(&w, first ? "" : tp.calls[k].arguments);
            jw_obj_end(&w);
            jw_obj_end(&w); jw_arr_end(&w);
        }
        jw_obj_end(&w);
        jw_key(&w, "logprobs"); jw_null(&w);
        jw_key(&w, "finish_reason");
        if (ev == n_ev - 1) jw_str(&w, tp.n_calls ? "tool_calls" : finish); else jw_null(&w);
        jw_obj_end(&w); jw_arr_end(&w);
        jw_obj_end(&w);
        if (!buf_ok(b)) { c->gone = 1; break; }
        sse(c, rq, b->p, b->len);
    }
    tools_parse_free(&tp);
}

static const char *finish_name(int f) { return f == FINISH_STOP ? "stop" : f == FINISH_LENGTH ? "length" : NULL; }

/* The usage of a request's n choices: the prompt counted once (OpenAI's),
 * the completions summed; cached_tokens of the first choice (each choice
 * decodes the prompt in its own slot; the first one's reuse is the
 * request's). */
static void usage_object(jsonw *w, job *const *js, int n)
{
    int64_t n_gen = 0;
    for (int i = 0; i < n; i++) n_gen += js[i]->n_tokens;
    jw_key(w, "usage");
    jw_obj(w);
    jw_key(w, "prompt_tokens"); jw_int(w, js[0]->n_prompt);
    jw_key(w, "completion_tokens"); jw_int(w, n_gen);
    jw_key(w, "total_tokens"); jw_int(w, js[0]->n_prompt + n_gen);
    jw_key(w, "prompt_tokens_details");   /* OpenAI's: the prompt tokens a cache gave */
    jw_obj(w);
    jw_key(w, "cached_tokens"); jw_int(w, js[0]->n_cached);
    jw_obj_end(w);
    jw_obj_end(w);
}

/* The start of a response object or chunk: id, object, created, model. */
static void head_fields(jsonw *w, const reply *r, int chunk)
{
    jw_key(w, "id"); jw_str(w, r->id);
    jw_key(w, "object");
    jw_str(w, r->kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    jw_key(w, "created"); jw_int(w, r->created);
    jw_key(w, "model"); jw_str(w, S.model_id);
    jw_key(w, "system_fingerprint"); jw_str(w, "libmor-" MOR_VERSION_STRING);
}

/* "mor": {"token_ids": [...], "depths": [...]} for tokens [a, b). */
/* llama.cpp's return_tokens: the choice's token ids [a, b). */
static void tokens_array(jsonw *w, const reply *r, const job *j, int32_t a, int32_t b)
{
    if (!r->return_tokens) return;
    jw_key(w, "tokens");
    jw_arr(w);
    for (int32_t i = a; i < b; i++) jw_int(w, j->tokens[i]);
    jw_arr_end(w);
}

void mor_object(jsonw *w, const job *j, int32_t a, int32_t b)
{
    jw_key(w, "mor");
    jw_obj(w);
    jw_key(w, "token_ids");
    jw_arr(w);
    for (int32_t i = a; i < b; i++) jw_int(w, j->tokens[i]);
    jw_arr_end(w);
    jw_key(w, "depths");
    jw_arr(w);
    for (int32_t i = a; i < b; i++) jw_int(w, j->depths[i]);
    jw_arr_end(w);
    jw_obj_end(w);
}

/* ---- logprobs, in OpenAI's shapes ----------------------------------------
 * The values are the engine's (engine.h job.logprob): mor_logprobs of the
 * logits each token was sampled from, the model's raw logits (docs/SERVING.md). */

/* The bytes of token t as logprobs show it, into *b (reset first): its piece
 * (mor_token_to_piece: its bytes inside the text; a control token's text);
 * without a tokenizer, its id in decimal. */
void token_bytes(buf *b, mor_token t)
{
    size_t len = 0;
    buf_reset(b);
    if (!S.has_tokenizer) { buf_printf(b, "%d", (int)t); return; }
    if (!buf_reserve(b, 64)) return;   /* cap - 1 bytes and the NUL */
    mor_status st = mor_token_to_piece(S.model, t, b->p, b->cap - 1, &len);
    if (st == MOR_E_BUFFER_TOO_SMALL && buf_reserve(b, len))
        st = mor_token_to_piece(S.model, t, b->p, b->cap - 1, &len);
    b->len = st == MOR_OK ? len : 0;
    b->p[b->len] = 0;
}

/* A token's string: its bytes when they are valid UTF-8, else OpenAI's
 * "bytes:\xNN..." (a piece of a character); into *out. */
static void token_string(buf *out, const buf *bytes)
{
    const unsigned char *p = (const unsigned char *)bytes->p;
    size_t i = 0;
    buf_reset(out);
    while (i < bytes->len) {
        int n = utf8_seq(p + i, bytes->len - i);
        if (n <= 0) break;
        i += (size_t)n;
    }
    if (i == bytes->len) { buf_put(out, bytes->p, bytes->len); return; }
    buf_puts(out, "bytes:");
    for (i = 0; i < bytes->len; i++) buf_printf(out, "\\x%02x", p[i]);
}

/* A log-probability: a float; -inf (a token the model rules out) as -9999,
 * JSON having no infinity. */
void jw_logprob(jsonw *w, float v) { jw_double(w, v > -9999.0f ? (double)v : -9999.0); }

/* {"token", "logprob", "bytes"} of chat's entries and their top_logprobs */
static void chat_token_fields(jsonw *w, mor_token t, float lp, buf *bytes, buf *str)
{
    token_bytes(bytes, t);
    token_string(str, bytes);
    jw_key(w, "token"); jw_strn(w, str->p ? str->p : "", str->len);
    jw_key(w, "logprob"); jw_logprob(w, lp);
    jw_key(w, "bytes");
    jw_arr(w);
    for (size_t i = 0; i < bytes->len; i++) jw_int(w, (unsigned char)bytes->p[i]);
    jw_arr_end(w);
}

/* "logprobs" of tokens [a, b) of a choice (null without logprobs or
 * tokens): chat {"content": [{token, logprob, bytes, top_logprobs: [...]}],
 * "refusal": null}; completions {"tokens", "token_logprobs", "top_logprobs"
 * (a dict per token: the n_top most likely and the token itself, OpenAI's
 * "up to logprobs + 1"), "text_offset"}. */
static void logprobs_object(jsonw *w, const reply *r, const job *j, int32_t a, int32_t b)
{
    jw_key(w, "logprobs");
    if (j->n_top < 0 || b <= a) { jw_null(w); return; }
    buf bytes = { 0 }, str = { 0 }, keys = { 0 };
    const int32_t k = j->n_top;
    jw_obj(w);
    if (r->kind == API_CHAT) {
        jw_key(w, "content");
        jw_arr(w);
        for (int32_t i = a; i < b; i++) {
            jw_obj(w);
            chat_token_fields(w, j->tokens[i], j->logprob[i], &bytes, &str);
            jw_key(w, "top_logprobs");
            jw_arr(w);
            for (int32_t m = 0; m < k; m++) {
                jw_obj(w);
                chat_token_fields(w, j->top_ids[(size_t)i * k + m], j->top_logprob[(size_t)i * k + m], &bytes, &str);
                jw_obj_end(w);
            }
            jw_arr_end(w);
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_key(w, "refusal"); jw_null(w);
    } else {
        jw_key(w, "tokens");
        jw_arr(w);
        for (int32_t i = a; i < b; i++) {
            token_bytes(&bytes, j->tokens[i]);
            token_string(&str, &bytes);
            jw_strn(w, str.p ? str.p : "", str.len);
        }
        jw_arr_end(w);
        jw_key(w, "token_logprobs");
        jw_arr(w);
        for (int32_t i = a; i < b; i++) jw_logprob(w, j->logprob[i]);
        jw_arr_end(w);
        jw_key(w, "top_logprobs");
        jw_arr(w);
        for (int32_t i = a; i < b; i++) {
            /* keys once each: the first (most likely) of tokens with one string */
            size_t ends[API_MAX_LOGPROBS + 1];
            int n_keys = 0;
            buf_reset(&keys);
            jw_obj(w);
            for (int32_t m = 0; m <= k; m++) {
                mor_token t = m < k ? j->top_ids[(size_t)i * k + m] : j->tokens[i];
                float lp = m < k ? j->top_logprob[(size_t)i * k + m] : j->logprob[i];
                int in_top = 0;
                for (int32_t q = 0; q < k && m == k; q++) in_top |= j->top_ids[(size_t)i * k + q] == t;
                if (in_top) continue;
                token_bytes(&bytes, t);
                token_string(&str, &bytes);
                int dup = 0;
                for (int q = 0, at = 0; q < n_keys && !dup; at = (int)ends[q++])
                    dup = ends[q] - (size_t)at == str.len && (!str.len || !memcmp(keys.p + at, str.p, str.len));
                if (dup) continue;
                buf_put(&keys, str.p ? str.p : "", str.len);
                ends[n_keys++] = keys.len;
                jw_keyn(w, str.p ? str.p : "", str.len);
                jw_logprob(w, lp);
            }
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_key(w, "text_offset");
        jw_arr(w);
        for (int32_t i = a; i < b; i++) jw_int(w, j->text_offset[i]);
        jw_arr_end(w);
    }
    jw_obj_end(w);
    if (!buf_ok(&bytes) || !buf_ok(&str) || !buf_ok(&keys)) w->b->err = 1;
    buf_free(&bytes);
    buf_free(&str);
    buf_free(&keys);
}

/* One choice of a stream chunk: text [t0, t1) and tokens [a, b); finish
 * reason (or null). */
static void chunk_choice(jsonw *w, const reply *r, const job *j, int index, size_t t0, size_t t1, int32_t a,
                         int32_t b, const char *finish, int role)
{
    jw_key(w, "choices");
    jw_arr(w);
    jw_obj(w);
    jw_key(w, "index"); jw_int(w, index);
    if (r->kind == API_CHAT) {
        jw_key(w, "delta");
        jw_obj(w);
        if (role) { jw_key(w, "role"); jw_str(w, "assistant"); }
        if (role || t1 > t0 || (!finish && b > a)) { jw_key(w, "content"); jw_strn(w, j->text.p ? j->text.p + t0 : "", t1 - t0); }
        jw_obj_end(w);
    } else {
        jw_key(w, "text"); jw_strn(w, j->text.p ? j->text.p + t0 : "", t1 - t0);
    }
    logprobs_object(w, r, j, a, b);
    jw_key(w, "finish_reason"); if (finish) jw_str(w, finish); else jw_null(w);
    if (b > a) mor_object(w, j, a, b);
    if (b > a) tokens_array(w, r, j, a, b);
    jw_obj_end(w);
    jw_arr_end(w);
}

/* Write an SSE event "data: ...\n\n" (a chunk of the chunked body when
 * HTTP/1.1). */
int sse(conn *c, request *rq, const char *data, size_t n)
{
    buf *o = &c->out;
    buf_reset(o);
    if (rq->minor) buf_printf(o, "%zx\r\n", n + 8);
    buf_puts(o, "data: ");
    buf_put(o, data, n);
    buf_puts(o, "\n\n");
    if (rq->minor) buf_puts(o, "\r\n");
    if (!buf_ok(o)) { c->gone = 1; return -1; }
    return conn_send(c, o->p, o->len);
}

/* Stream choice `index` (job j) until it ends or the client goes; its
 * finish (FINISH_*). A chat choice's first event carries the role. */
static int stream_choice(conn *c, request *rq, job *j, int index, const reply *r, buf *b, int32_t *sent)
{
    jsonw w;
    int finish = FINISH_NONE, role = r->kind == API_CHAT;
    size_t released = 0;   /* tools: the text sent as content */
    int held = 0;          /* tools: a call has begun: the rest waits for the end */
    *sent = 0;
    while (!c->gone) {
        pthread_mutex_lock(&j->mu);
        j->signalled = 0;
        finish = j->finish;
        int32_t n = j->n_tokens;
        buf_reset(b);
        /* tools: the text that cannot be (the start of) a call, as content
         * (no per-token fields); the rest waits for the end, where the calls
         * are parsed */
        size_t safe = 0;
        if (r->tools && n > *sent && !held)
            held = tools_stream_safe(S.tools_format, j->text.p ? j->text.p : "", j->text.len, released, &safe);
        if (safe > released) {
            jw_init(&w, b);
            jw_obj(&w);
            head_fields(&w, r, 1);
            chunk_choice(&w, r, j, index, released, safe, 0, 0, NULL, role);
            jw_obj_end(&w);
            role = 0;
            released = safe;
            buf_putc(b, 0);
        }
        /* else one event per token: its text and depth */
        for (int32_t i = r->tools ? n : *sent; i < n; i++) {
            size_t t0 = i ? j->text_end[i - 1] : 0;
            jw_init(&w, b);
            jw_obj(&w);
            head_fields(&w, r, 1);
            chunk_choice(&w, r, j, index, t0, j->text_end[i], i, i + 1, NULL, role);
            jw_obj_end(&w);
            role = 0;
            buf_putc(b, 0);   /* a separator (JSON has no raw NUL): sent one by one below, unlocked */
        }
        *sent = n;
        pthread_mutex_unlock(&j->mu);
        if (!buf_ok(b)) { c->gone = 1; break; }
        for (size_t at = 0; at < b->len && !c->gone;) {
            size_t len = strlen(b->p + at);
            sse(c, rq, b->p + at, len);
            at += len + 1;
        }
        if (finish != FINISH_NONE || c->gone) break;
        if (conn_wait(c, j) < 0) break;
    }
    if (c->gone) return finish;
    if (r->tools && (finish == FINISH_STOP || finish == FINISH_LENGTH)) {
        tool_events(c, rq, r, index, j->text.p ? j->text.p : "", j->text.len, released, finish_name(finish), role, b);
        return finish;
    }
    buf_reset(b);
    jw_init(&w, b);
    jw_obj(&w);
    if (finish == FINISH_STOP || finish == FINISH_LENGTH) {
        /* text released at the end after the last token's (a grammar's end
         * flushing held-back text): with the finish */
        pthread_mutex_lock(&j->mu);
        size_t t0 = *sent ? j->text_end[*sent - 1] : 0, t1 = j->text.len;
        head_fields(&w, r, 1);
        chunk_choice(&w, r, j, index, t0, t1 > t0 ? t1 : t0, 0, 0, finish_name(finish), role);
        pthread_mutex_unlock(&j->mu);
    } else {
        jw_key(&w, "error");
        jw_obj(&w);
        jw_key(&w, "message"); jw_str(&w, finish == FINISH_CANCELLED ? "the server is shutting down" : j->error);
        jw_key(&w, "type"); jw_str(&w, "server_error");
        jw_key(&w, "param"); jw_null(&w);
        jw_key(&w, "code"); jw_null(&w);
        jw_obj_end(&w);
    }
    jw_obj_end(&w);
    sse(c, rq, b->p, b->len);
    return finish;
}

void sse_begin(conn *c, request *rq)
{
    buf b = { 0 };
    if (atomic_load(&S.draining)) rq->keep_alive = 0;
    if (!rq->minor) rq->keep_alive = 0;   /* HTTP/1.0: the end of the body is the close */
    buf_printf(&b, "HTTP/1.1 200 OK\r\nServer: mor-server/%s\r\nContent-Type: text/event-stream\r\n"
               "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n%sConnection: %s\r\n", mor_version_string(),
               rq->minor ? "Transfer-Encoding: chunked\r\n" : "", rq->keep_alive ? "keep-alive" : "close");
    cors_headers(rq->origin, &b);
    buf_puts(&b, "\r\n");
    if (buf_ok(&b)) conn_send(c, b.p, b.len);
    else c->gone = 1;
    buf_free(&b);
}

void sse_end(conn *c, request *rq)
{
    if (rq->minor && !c->gone) conn_send(c, "0\r\n\r\n", 5);
}

/* n choices streamed one after the other (each choice's events carry its
 * index; the others run meanwhile and their tokens wait in their jobs). */
static void stream_reply(conn *c, request *rq, job *const *js, int n_jobs, const reply *r, int include_usage)
{
    buf b = { 0 };
    jsonw w;
    sse_begin(c, rq);
    int32_t sent = 0, total = 0;
    int ok = 1;
    for (int i = 0; i < n_jobs && !c->gone; i++) {
        int f = stream_choice(c, rq, js[i], i, r, &b, &sent);
        total += sent;
        ok &= f == FINISH_STOP || f == FINISH_LENGTH;
    }
    if (c->gone) {
        for (int i = 0; i < n_jobs; i++) engine_cancel(S.eng, js[i]);
    } else {
        if (include_usage && ok) {
            buf_reset(&b);
            jw_init(&w, &b);
            jw_obj(&w);
            head_fields(&w, r, 1);
            jw_key(&w, "choices"); jw_arr(&w); jw_arr_end(&w);
            usage_object(&w, js, n_jobs);
            jw_obj_end(&w);
            sse(c, rq, b.p, b.len);
        }
        sse(c, rq, "[DONE]", 6);
        sse_end(c, rq);
    }
    count_request(r->kind == API_CHAT ? EP_CHAT : EP_COMPLETIONS, 200);
    if (!S.o.quiet)
        fprintf(stderr, "mor-server: %s \"%s %s\" 200 stream prompt=%d tokens=%d %.3fs%s\n", c->peer, rq->method,
                rq->path, js[0]->n_prompt, total, engine_now() - rq->t_start, c->gone ? " (client gone: cancelled)" : "");
    buf_free(&b);
}

/* Wait for every job's end: 0, or -1 after cancelling them (the client is
 * gone) or answering a failed one's error. */
static int wait_jobs(conn *c, request *rq, job *const *js, int n_jobs)
{
    for (int i = 0; i < n_jobs; i++)
        for (;;) {
            job *j = js[i];
            pthread_mutex_lock(&j->mu);
            j->signalled = 0;
            int f = j->finish;
            pthread_mutex_unlock(&j->mu);
            if (f != FINISH_NONE) break;
            if (conn_wait(c, j) < 0) {
                for (int k = 0; k < n_jobs; k++) engine_cancel(S.eng, js[k]);
                count_request(endpoint_of(rq->path), 499);
                if (!S.o.quiet)
                    fprintf(stderr, "mor-server: %s \"%s %s\" client gone: cancelled %.3fs\n", c->peer, rq->method,
                            rq->path, engine_now() - rq->t_start);
                return -1;
            }
        }
    /* the engine writes nothing more to a finished job */
    for (int i = 0; i < n_jobs; i++) {
        if (js[i]->finish == FINISH_CANCELLED) { conn_error(c, rq, 503, NULL, NULL, "the server is shutting down"); return -1; }
        if (js[i]->finish == FINISH_ERROR) { conn_error(c, rq, 500, NULL, NULL, "%s", js[i]->error); return -1; }
    }
    return 0;
}

int gen_wait(conn *c, request *rq, gen *g) { return g->submitted ? wait_jobs(c, rq, g->js, g->n_jobs) : 0; }

static void whole_reply(conn *c, request *rq, job *const *js, int n_jobs, const reply *r)
{
    if (wait_jobs(c, rq, js, n_jobs)) return;
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    head_fields(&w, r, 0);
    jw_key(&w, "choices");
    jw_arr(&w);
    for (int i = 0; i < n_jobs; i++) {
        const job *j = js[i];
        int calls = 0;
        jw_obj(&w);
        jw_key(&w, "index"); jw_int(&w, i);
        if (r->kind == API_CHAT) {
            jw_key(&w, "message");
            jw_obj(&w);
            jw_key(&w, "role"); jw_str(&w, "assistant");
            tool_parse tp = { 0 };
            if (r->tools && tools_parse(S.tools_format, j->text.p ? j->text.p : "", j->text.len, &tp)) b.err = 1;
            if (r->tools) tool_message(&w, &tp);
            else { jw_key(&w, "content"); jw_strn(&w, j->text.p ? j->text.p : "", j->text.len); }
            calls = tp.n_calls;
            tools_parse_free(&tp);
            jw_obj_end(&w);
        } else {
            jw_key(&w, "text"); jw_strn(&w, j->text.p ? j->text.p : "", j->text.len);
        }
        logprobs_object(&w, r, j, 0, j->n_tokens);
        jw_key(&w, "finish_reason"); jw_str(&w, calls ? "tool_calls" : finish_name(j->finish));
        mor_object(&w, j, 0, j->n_tokens);
        tokens_array(&w, r, j, 0, j->n_tokens);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    usage_object(&w, js, n_jobs);
    jw_obj_end(&w);
    send_json(c, rq, 200, &b);
    buf_free(&b);
}

/* Any JSON object (response_format json_object), with bounded whitespace
 * (so that a model cannot fill its tokens with it) and JSON's escapes. */
static const char JSON_OBJECT_GBNF[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

/* The grammar of a JSON Schema: *out (malloc'd, len bytes) or -1 with a
 * message. */
static int schema_grammar(const json *schema, char **out, size_t *len, char *msg, size_t cap)
{
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_json(&w, schema);   /* the schema as text again: the library takes text */
    size_t n = 0;
    mor_status st = buf_ok(&b) ? mor_json_schema_to_grammar(b.p, b.len, NULL, 0, &n) : MOR_E_NOMEM;
    char *g = st == MOR_E_BUFFER_TOO_SMALL ? malloc(n + 1) : NULL;
    if (g) st = mor_json_schema_to_grammar(b.p, b.len, g, n, &n);
    buf_free(&b);
    if (st || !g) {
        snprintf(msg, cap, "%s", st == MOR_E_NOMEM || (!g && !st) ? "out of memory" : mor_last_error());
        free(g);
        return -1;
    }
    *out = g;
    *len = n;
    return 0;
}

/* One choice's job: a copy of the prompt, the request's limits, stops,
 * sampling with `seed`, logprobs; NULL when out of memory. */
static job *make_job(const api_request *ar, const req_sampling *rs, int kind, const mor_token *prompt, int32_t n_prompt,
                     int64_t max_tokens, uint64_t seed)
{
    job *j = job_new();
    if (!j) return NULL;
    j->prompt = malloc(sizeof *prompt * (size_t)n_prompt);
    if (!j->prompt) { job_unref(j); return NULL; }
    memcpy(j->prompt, prompt, sizeof *prompt * (size_t)n_prompt);
    j->n_prompt = n_prompt;
    j->max_tokens = (int32_t)max_tokens;
    j->detok = S.has_tokenizer;
    j->each_token = ar->stream;   /* a whole response waits for the end: no wake-up per token */
    j->hold = ar->test_hold & 1;
    j->n_top = ar->n_logprobs;
    if (S.eos >= 0 && !ar->ignore_eos) j->stop_tokens[j->n_stop_tokens++] = S.eos;   /* ignore_eos: banned (rs) */
    const char *stops[API_MAX_STOP + 1];
    size_t stop_len[API_MAX_STOP + 1];
    int n_stops = ar->n_stop;
    memcpy(stops, ar->stop, sizeof(char *) * (size_t)ar->n_stop);
    memcpy(stop_len, ar->stop_len, sizeof(size_t) * (size_t)ar->n_stop);
    if (kind == API_CHAT) {
        if (S.chat_end_token >= 0) {
            if (!ar->ignore_eos) j->stop_tokens[j->n_stop_tokens++] = S.chat_end_token;
        }
        else if (S.chat_family >= 0) {   /* a Jinja template of no known family ends at EOS alone */
            stops[n_stops] = chat_end_marker(S.chat_family);
            stop_len[n_stops] = strlen(stops[n_stops]);
            n_stops++;
        }
    }
    if (ts_init(&j->ts, stops, stop_len, n_stops)) { job_unref(j); return NULL; }
    if (ar->temperature_set) j->sp.temperature = (float)ar->temperature;
    if (ar->top_p_set) j->sp.top_p = (float)ar->top_p;
    if (ar->top_k_set) j->sp.top_k = (int32_t)ar->top_k;
    if (ar->min_p_set) j->sp.min_p = (float)ar->min_p;
    if (ar->repeat_penalty_set) j->sp.repeat_penalty = (float)ar->repeat_penalty;
    if (ar->repeat_last_n_set) j->sp.repeat_last_n = (int32_t)ar->repeat_last_n;
    j->sp.seed = seed;
    if (req_sampling_apply(ar, rs, j)) { job_unref(j); return NULL; }
    j->spec_n = (int32_t)(ar->speculate_set ? ar->speculate : S.o.speculate);
    j->spec_d = (int32_t)(ar->speculate_depth_set ? ar->speculate_depth : S.o.speculate_depth);
    j->exit_thr = ar->exit_threshold_set ? (float)ar->exit_threshold : NAN;
    return j;
}

/* llama.cpp's mixed prompt [12, "text", 34]: a text tokenized where it
 * stands, BOS (when the model adds one) only before a first text, as
 * llama.cpp's tokenize_mixed. */
static int mixed_prompt(conn *c, request *rq, const json *v, mor_token **out, int32_t *n_out)
{
    buf ids = { 0 };
    for (size_t i = 0; i < v->n; i++) {
        const json *e = v->items[i];
        if (e->type == JSON_NUMBER) {   /* api.c checked it is an id >= 0 */
            mor_token t = (mor_token)e->num;
            if (t >= S.n_vocab) {
                conn_error(c, rq, 400, "prompt", NULL, "token id %d is out of range (the vocabulary has %d)", t, S.n_vocab);
                buf_free(&ids);
                return -1;
            }
            buf_put(&ids, &t, sizeof t);
            continue;
        }
        if (!S.has_tokenizer) {
            conn_error(c, rq, 400, "prompt", NULL, "this model has no tokenizer: give the prompt as token ids");
            buf_free(&ids);
            return -1;
        }
        mor_token *part = NULL;
        int32_t n_part = 0;
        uint32_t flags = MOR_TOKENIZE_PARSE_SPECIAL | (i == 0 && S.add_bos ? MOR_TOKENIZE_ADD_BOS : 0);
        mor_status st = text_tokenize(S.model, e->str, e->str_len, flags, &part, &n_part);
        if (!st) buf_put(&ids, part, sizeof *part * (size_t)n_part);
        free(part);
        if (st) {
            conn_error(c, rq, 500, "prompt", NULL, "tokenizing the prompt failed: %s", mor_last_error());
            buf_free(&ids);
            return -1;
        }
    }
    if (!buf_ok(&ids) || ids.len / sizeof(mor_token) > INT32_MAX) {
        conn_error(c, rq, 500, NULL, NULL, "out of memory");
        buf_free(&ids);
        return -1;
    }
    *n_out = (int32_t)(ids.len / sizeof(mor_token));
    *out = (mor_token *)ids.p;   /* the buf's malloc'd bytes, now the caller's */
    return 0;
}

/* The request's prompt as tokens into g->prompt: a chat rendered, a text,
 * ids or a mixed array. 0, or -1 answered. */
static int gen_prompt(conn *c, request *rq, int kind, gen *g)
{
    api_request *ar = &g->ar;
    mor_status st = MOR_OK;
    if (kind == API_CHAT) {
        char why[400];
        int bos = 0;
        int cr = chat_prompt(ar, &g->text, &bos, why, sizeof why);
        if (cr) {
            conn_error(c, rq, 400, cr == -2 ? "tools" : "messages", S.chat_tpl ? NULL : "chat_not_supported", "%s", why);
            return -1;
        }
        if (!buf_ok(&g->text)) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); return -1; }
        st = text_tokenize(S.model, g->text.p ? g->text.p : "", g->text.len,
                           MOR_TOKENIZE_PARSE_SPECIAL | (bos ? MOR_TOKENIZE_ADD_BOS : 0), &g->prompt, &g->n_prompt);
    } else if (ar->prompt_mixed) {
        if (mixed_prompt(c, rq, ar->prompt_mixed, &g->prompt, &g->n_prompt)) return -1;
    } else if (ar->prompt_text) {
        if (!S.has_tokenizer) {
            conn_error(c, rq, 400, "prompt", NULL, "this model has no tokenizer: give the prompt as token ids");
            return -1;
        }
        st = tokenize(ar->prompt_text, ar->prompt_len, &g->prompt, &g->n_prompt);
    } else {
        for (int32_t i = 0; i < ar->n_prompt_ids; i++)
            if (ar->prompt_ids[i] >= S.n_vocab) {
                conn_error(c, rq, 400, "prompt", NULL, "token id %d is out of range (the vocabulary has %d)",
                           ar->prompt_ids[i], S.n_vocab);
                return -1;
            }
        g->prompt = ar->prompt_ids;
        g->n_prompt = ar->n_prompt_ids;
        ar->prompt_ids = NULL;
    }
    if (st) { conn_error(c, rq, 500, "prompt", NULL, "tokenizing the prompt failed: %s", mor_last_error()); return -1; }
    if (g->n_prompt == 0) { conn_error(c, rq, 400, "prompt", NULL, "the prompt is empty"); return -1; }
    return 0;
}

/* --context-shift: llama.cpp's n_keep as the library counts it (from the
 * first token: llama-server adds 1 for its BOS, and so does this; -1 the
 * whole prompt), and a prompt longer than the context truncated to its
 * first n_keep tokens and its end (mor_prompt_truncate, llama.cpp's rule).
 * 0, or -1 answered (a truncation that keeps too much to drop anything). */
static int gen_truncate(conn *c, request *rq, gen *g)
{
    const api_request *ar = &g->ar;
    const int64_t nk = ar->num_set[API_N_KEEP] ? (int64_t)ar->num[API_N_KEEP] : 0;
    const int bos = S.add_bos && g->n_prompt > 0 && g->prompt[0] == mor_model_token_bos(S.model);
    g->n_keep = nk < 0 || nk + bos > g->n_prompt ? g->n_prompt : (int32_t)nk + bos;
    if (g->n_prompt <= S.ctx_limit) return 0;
    int32_t n = mor_prompt_truncate(g->prompt, g->n_prompt, S.ctx_limit, g->n_keep);
    if (n < 0) {
        conn_error(c, rq, 400, "n_keep", NULL, "the prompt has %d tokens, more than the context of %d: keeping %d of "
                   "them leaves nothing to drop", g->n_prompt, S.ctx_limit, g->n_keep);
        return -1;
    }
    g->n_prompt = n;
    g->truncated = 1;
    return 0;
}

/* The tokens each job may generate. OpenAI's endpoints refuse a request
 * that does not fit the context; llama.cpp's /completion (n_predict -1 is
 * no limit) generates until the context is full and says so (truncated).
 * With --context-shift a request may ask for more than the context holds
 * (then it shifts); one that leaves max_tokens unset gets what it gets
 * without (completions 16, chats and /completion the room left). */
static int gen_limits(conn *c, request *rq, int kind, gen *g)
{
    const api_request *ar = &g->ar;
    g->n_keep = -1;
    if (S.o.context_shift && gen_truncate(c, rq, g)) return -1;
    int64_t room = S.ctx_limit - g->n_prompt;
    if (S.o.context_shift && ar->max_tokens_set) {
        g->max_tokens = ar->max_tokens;   /* (/completion's n_predict 0: nothing generated) */
    } else if (kind == API_NATIVE && room >= 1) {
        g->ctx_bound = !ar->max_tokens_set || ar->max_tokens > room;
        g->max_tokens = g->ctx_bound ? room : ar->max_tokens;
    } else {
        g->max_tokens = ar->max_tokens_set ? ar->max_tokens : kind == API_CHAT ? room : 16;
    }
    /* what does not fit: without a shift the whole request; with one, an
     * unset length that would be the room left when there is none */
    int bad = kind == API_NATIVE ? room < 1 : g->max_tokens < 1 || g->max_tokens > room;
    if (S.o.context_shift) bad = ar->max_tokens_set || kind == API_COMPLETIONS ? g->max_tokens < 0 : room < 1;
    if (bad) {
        int64_t mt = g->max_tokens > 0 ? g->max_tokens : 0;
        conn_error(c, rq, 400, kind == API_CHAT ? "messages" : "prompt", "context_length_exceeded",
                   "This model's maximum context length is %d tokens, however you requested %lld tokens "
                   "(%d in your prompt; %lld for the completion). Please reduce your prompt or completion length.",
                   S.ctx_limit, (long long)(g->n_prompt + mt), g->n_prompt, (long long)mt);
        return -1;
    }
    if (S.o.context_shift && g->n_prompt + g->max_tokens > S.ctx_limit && g->n_keep > S.ctx_limit - 2) {
        conn_error(c, rq, 400, "n_keep", NULL, "keeping %d tokens leaves nothing to drop in a context of %d",
                   g->n_keep, S.ctx_limit);
        return -1;
    }
    if (ar->speculate_set && ar->speculate > S.o.n_batch - 1) {
        conn_error(c, rq, 400, "speculate", NULL, "'speculate' is at most %d here (the server's --batch less one)",
                   S.o.n_batch - 1);
        return -1;
    }
    if (ar->speculate_depth_set && ar->speculate_depth > mor_model_n_recursion(S.model)) {
        conn_error(c, rq, 400, "speculate_depth", NULL, "'speculate_depth' is at most the model's %d recursions",
                   mor_model_n_recursion(S.model));
        return -1;
    }
    if (ar->exit_threshold_set && S.o.exit_mode == MOR_EXIT_NONE) {
        conn_error(c, rq, 400, "exit_threshold", NULL, "'exit_threshold' needs a server started with --exit");
        return -1;
    }
    if (ar->exit_threshold_set && S.o.exit_mode == MOR_EXIT_LEARNED && !(ar->exit_threshold >= 0 && ar->exit_threshold <= 1)) {
        conn_error(c, rq, 400, "exit_threshold", NULL, "'exit_threshold' of the learned exit is a q in [0, 1]");
        return -1;
    }
    return 0;
}

/* The text of the grammar that constrains the output (*gtext NULL: none);
 * 0, or -1 answered. */
static int gen_grammar(conn *c, request *rq, int kind, gen *g, const char **gtext, size_t *glen)
{
    api_request *ar = &g->ar;
    char emsg[300];
    *gtext = NULL;
    *glen = 0;
    const int forced = ar->tool_choice == API_TOOLS_REQUIRED || ar->tool_choice == API_TOOLS_NAMED;
    const int may_call = ar->tool_choice == API_TOOLS_AUTO && !ar->constraint && ar->tools && ar->tools->n;
    if (kind == API_CHAT && ar->tools && (forced || may_call)) {
        /* the grammar of the format's calls: from the start when a call is
         * forced, from the call's marker on when one may come (lazy) */
        buf tgram = { 0 };
        ar->constraint = forced ? "tool_choice" : "tools";
        g->trigger = forced ? NULL : tools_trigger(S.tools_format);
        if (tools_grammar(S.tools_format, ar->tools, ar->tool_name, ar->parallel_tool_calls, &tgram, emsg, sizeof emsg)) {
            buf_free(&tgram);
            conn_error(c, rq, 400, "tools", NULL, "%s", emsg);
            return -1;
        }
        g->gown = tgram.p;
        *gtext = tgram.p;
        *glen = tgram.len;
    } else if (ar->grammar) { *gtext = ar->grammar; *glen = ar->grammar_len; }
    else if (ar->json_object) { *gtext = JSON_OBJECT_GBNF; *glen = sizeof JSON_OBJECT_GBNF - 1; }
    else if (ar->json_schema) {
        if (schema_grammar(ar->json_schema, &g->gown, glen, emsg, sizeof emsg)) {
            conn_error(c, rq, 400, ar->constraint, NULL, "%s", emsg);
            return -1;
        }
        *gtext = g->gown;
    }
    if (*gtext && !S.has_tokenizer) {
        conn_error(c, rq, 400, ar->constraint, NULL, "'%s' needs a model with a tokenizer", ar->constraint);
        return -1;
    }
    return 0;
}

/* n choices: n jobs with seeds seed, seed + 1, ... (choice i is the request
 * alone with seed + i); each decodes the prompt in its own slot. Submitted
 * unless there is nothing to generate (llama.cpp's n_predict 0). */
static int gen_jobs(conn *c, request *rq, int kind, gen *g, const char *gtext, size_t glen)
{
    const api_request *ar = &g->ar;
    mor_status st;
    const uint64_t seed = ar->seed_set ? ar->seed : next_random();
    for (g->n_jobs = 0; g->n_jobs < (int)ar->n; g->n_jobs++) {
        job *j = g->js[g->n_jobs] = make_job(ar, &g->rs, kind, g->prompt, g->n_prompt, g->max_tokens,
                                             seed + (uint64_t)g->n_jobs);
        if (!j) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); return -1; }
        j->n_keep = g->n_keep;
        /* its grammar ends at the job's stop tokens (EOS, the chat's end) */
        if (gtext && ((st = mor_grammar_create(S.model, gtext, glen, NULL, j->stop_tokens, j->n_stop_tokens, &j->grammar)) ||
                      (g->trigger && (st = mor_grammar_set_triggers(j->grammar, &g->trigger, 1))))) {
            g->n_jobs++;
            if (st == MOR_E_NOMEM) conn_error(c, rq, 500, NULL, NULL, "out of memory");
            else conn_error(c, rq, 400, ar->constraint, NULL, "%s", mor_last_error());
            return -1;
        }
    }
    if (g->max_tokens == 0) return 0;
    for (int i = 0; i < g->n_jobs; i++) {
        int r = engine_submit(S.eng, g->js[i], S.o.max_queue);
        if (r) {
            for (int k = 0; k < i; k++) engine_cancel(S.eng, g->js[k]);
            if (r == -1) conn_error(c, rq, 503, NULL, "server_busy", "%d requests are waiting already (--max-queue)", S.o.max_queue);
            else if (r == -2) conn_error(c, rq, 503, NULL, NULL, "the server is shutting down");
            else conn_error(c, rq, 500, NULL, NULL, "out of memory");
            return -1;
        }
    }
    g->submitted = 1;
    return 0;
}

int gen_start(conn *c, request *rq, int kind, const char *body, size_t n, gen *g)
{
    api_error ae;
    memset(g, 0, sizeof *g);
    if (api_parse(kind, body, n, &g->ar, &ae)) {
        conn_error(c, rq, ae.status, ae.param, NULL, "%s", ae.msg);
        return -1;
    }
    const api_request *ar = &g->ar;
    if (ar->test_hold && !S.o.test_hooks) {
        conn_error(c, rq, 400, "test_hold", NULL, "Unrecognized request argument supplied: test_hold "
                   "(a test hook: start mor-server with --test-hooks)");
        return -1;
    }
    if (ar->model && S.o.reject_unknown_model && strcmp(ar->model, S.model_id)) {
        conn_error(c, rq, 404, "model", "model_not_found", "The model '%.100s' does not exist (this server has '%s')",
                   ar->model, S.model_id);
        return -1;
    }
    const char *gtext;
    size_t glen;
    if (gen_prompt(c, rq, kind, g) || gen_limits(c, rq, kind, g) || gen_grammar(c, rq, kind, g, &gtext, &glen))
        return -1;
    /* the logit bias (texts tokenized), DRY's breakers, ignore_eos */
    if (req_sampling_make(ar, kind, &g->rs, &ae)) {
        conn_error(c, rq, ae.status, ae.param[0] ? ae.param : NULL, NULL, "%s", ae.msg);
        return -1;
    }
    return gen_jobs(c, rq, kind, g, gtext, glen);
}

void gen_free(gen *g)
{
    for (int i = 0; i < g->n_jobs; i++) job_unref(g->js[i]);
    req_sampling_free(&g->rs);
    free(g->prompt);
    free(g->gown);
    buf_free(&g->text);
    api_request_free(&g->ar);
    memset(g, 0, sizeof *g);
}

static void handle_generate(conn *c, request *rq, const char *body, size_t n, int kind)
{
    gen g;
    if (!gen_start(c, rq, kind, body, n, &g)) {
        const api_request *ar = &g.ar;
        reply rp = { kind, "", (int64_t)time(NULL), NULL, ar->return_tokens,
                     kind == API_CHAT && ar->tools && ar->tool_choice != API_TOOLS_NONE };
        snprintf(rp.id, sizeof rp.id, "%s-%016" PRIx64, kind == API_CHAT ? "chatcmpl" : "cmpl", next_random());
        if (ar->stream) stream_reply(c, rq, g.js, g.n_jobs, &rp, ar->include_usage);
        else whole_reply(c, rq, g.js, g.n_jobs, &rp);
    }
    gen_free(&g);
}

/* --test-hooks: POST /test/tools-parse {"format": "hermes", "text": ...}
 * gives what the reply parser finds: {"content", "stream_safe" (the bytes a
 * stream may send as content so far), "tool_calls": [{"name", "arguments"}]}
 * (the parsers unit-tested on fixed texts: test_server.py). */
static void handle_tools_parse(conn *c, request *rq, const char *body, size_t n)
{
    char jerr[160];
    json *d = json_parse(body, n, jerr, sizeof jerr);
    const json *f = d ? json_get(d, "format") : NULL, *t = d ? json_get(d, "text") : NULL;
    int fmt = f && f->type == JSON_STRING ? tools_format_by_name(f->str) : -1;
    if (fmt < 0 || !t || t->type != JSON_STRING) {
        conn_error(c, rq, 400, NULL, NULL, "give {\"format\": \"generic|hermes|llama3|mistral\", \"text\": ...}");
        json_free(d);
        return;
    }
    tool_parse tp;
    buf b = { 0 };
    if (tools_parse(fmt, t->str, t->str_len, &tp)) b.err = 1;
    else {
        jsonw w;
        jw_init(&w, &b);
        jw_obj(&w);
        jw_key(&w, "content"); jw_strn(&w, tp.content, tp.content_len);
        size_t safe;
        tools_stream_safe(fmt, t->str, t->str_len, 0, &safe);
        jw_key(&w, "stream_safe"); jw_int(&w, (int64_t)safe);
        jw_key(&w, "tool_calls");
        jw_arr(&w);
        for (int i = 0; i < tp.n_calls; i++) {
            jw_obj(&w);
            jw_key(&w, "name"); jw_str(&w, tp.calls[i].name);
            jw_key(&w, "arguments"); jw_str(&w, tp.calls[i].arguments);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
        jw_obj_end(&w);
        tools_parse_free(&tp);
    }
    if (!buf_ok(&b)) conn_error(c, rq, 500, NULL, NULL, "out of memory");
    else send_json(c, rq, 200, &b);
    buf_free(&b);
    json_free(d);
}

void handle(conn *c, request *rq, const char *body, size_t n)
{
    int ep = endpoint_of(rq->path);
    int get = !strcmp(rq->method, "GET") || !strcmp(rq->method, "HEAD"), post = !strcmp(rq->method, "POST");
    if (ep == EP_OTHER) {
        if (!strcmp(rq->path, "/") && get) {
            static const char page[] = "mor-server: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
                                       "POST /v1/embeddings, GET /health, GET /metrics; llama.cpp's POST /completion, POST /tokenize, "
                                       "POST /detokenize, GET /props, POST /apply-template, GET /slots\n";
            conn_respond(c, rq, 200, "text/plain; charset=utf-8", page, sizeof page - 1, NULL);
            return;
        }
        if (S.o.test_hooks && !strcmp(rq->path, "/test/tools-parse") && post) {
            handle_tools_parse(c, rq, body, n);
            return;
        }
        conn_error(c, rq, 404, NULL, NULL, "no such endpoint: %s %s", rq->method, rq->path);
        return;
    }
    int want_post = ep == EP_COMPLETIONS || ep == EP_CHAT || ep == EP_COMPLETION || ep == EP_TOKENIZE || ep == EP_DETOKENIZE ||
                    ep == EP_EMBEDDINGS || ep == EP_APPLY_TEMPLATE;
    if (want_post ? !post : !get) {
        conn_error(c, rq, 405, NULL, NULL, "%s takes %s, not %s", rq->path, want_post ? "POST" : "GET", rq->method);
        return;
    }
    switch (ep) {
    case EP_COMPLETIONS: handle_generate(c, rq, body, n, API_COMPLETIONS); break;
    case EP_CHAT: handle_generate(c, rq, body, n, API_CHAT); break;
    case EP_COMPLETION: handle_completion_native(c, rq, body, n); break;
    case EP_MODELS: handle_models(c, rq); break;
    case EP_HEALTH: handle_health(c, rq); break;
    case EP_TOKENIZE: handle_tokenize(c, rq, body, n); break;
    case EP_DETOKENIZE: handle_detokenize(c, rq, body, n); break;
    case EP_PROPS: handle_props(c, rq); break;
    case EP_EMBEDDINGS: handle_embeddings(c, rq, body, n); break;
    case EP_APPLY_TEMPLATE: handle_apply_template(c, rq, body, n); break;
    case EP_SLOTS: handle_slots(c, rq); break;
    default: handle_metrics(c, rq); break;
    }
}
