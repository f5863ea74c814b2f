/* completion_native.c - llama.cpp's own POST /completion (and its alias
 * /completions), for clients written against llama-server rather than
 * OpenAI: the request is the completions' (api.h, API_NATIVE: n_predict,
 * a mixed prompt), run by the same jobs (generate.h); the answer is
 * llama.cpp's shape: {"content", "tokens", "stop", "stop_type",
 * "stopping_word", "tokens_predicted", "tokens_evaluated", "truncated",
 * "timings", "generation_settings", "model", "prompt", ...,
 * "completion_probabilities" with n_probs}. Streamed, each token is an event
 * {"content", "tokens", "stop": false, ...} and the last one is the whole
 * object with "stop": true and empty content; there is no "[DONE]"
 * (llama.cpp's native stream has none). Beside llama.cpp's fields, "mor"
 * holds the tokens' recursion depths, as in the OpenAI responses. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "generate.h"
#include "text.h"
#include "utf8.h"

/* llama.cpp's stop_type: the n_predict limit or the context's ("limit"), a
 * stop string ("word"), an end token or a grammar's end ("eos"). */
static const char *stop_type(const gen *g, const job *j)
{
    if (!g->submitted || j->finish == FINISH_LENGTH) return "limit";
    return j->stop_word >= 0 ? "word" : "eos";
}

/* A millisecond count, or 0 for a span that did not happen. */
static double ms(double t0, double t1) { return t0 > 0 && t1 > t0 ? (t1 - t0) * 1e3 : 0.0; }

/* llama.cpp's timings from the engine's clock: the prompt until the first
 * token (its wait for a slot included: one step decodes the prompt and
 * samples that token), generation from then to the end. */
static void timings(jsonw *w, const job *j)
{
    int32_t prompt_n = j->n_prompt - j->n_cached, pred = j->n_tokens;
    double pms = ms(j->t_submit, j->t_first), gms = ms(j->t_first, j->t_done);
    jw_key(w, "timings");
    jw_obj(w);
    jw_key(w, "cache_n"); jw_int(w, j->n_cached);
    jw_key(w, "prompt_n"); jw_int(w, prompt_n);
    jw_key(w, "prompt_ms"); jw_double(w, pms);
    jw_key(w, "prompt_per_token_ms"); jw_double(w, prompt_n > 0 ? pms / prompt_n : 0.0);
    jw_key(w, "prompt_per_second"); jw_double(w, pms > 0 ? 1e3 * prompt_n / pms : 0.0);
    jw_key(w, "predicted_n"); jw_int(w, pred);
    jw_key(w, "predicted_ms"); jw_double(w, gms);
    jw_key(w, "predicted_per_token_ms"); jw_double(w, pred > 0 ? gms / pred : 0.0);
    jw_key(w, "predicted_per_second"); jw_double(w, gms > 0 ? 1e3 * pred / gms : 0.0);
    jw_obj_end(w);
}

/* The settings the request ran with: the job's sampler (the defaults filled
 * in) and the request's limits. */
static void settings(jsonw *w, const gen *g, const job *j)
{
    const api_request *ar = &g->ar;
    jw_key(w, "generation_settings");
    jw_obj(w);
    jw_key(w, "n_ctx"); jw_int(w, S.ctx_limit);
    int64_t n_predict = ar->max_tokens_set ? ar->max_tokens : -1;
    jw_key(w, "n_predict"); jw_int(w, n_predict);
    jw_key(w, "max_tokens"); jw_int(w, n_predict);
    jw_key(w, "seed"); jw_int(w, (int64_t)(j->sp.seed & ((UINT64_C(1) << 53) - 1)));
    sampler_settings(w, &j->sp);
    jw_key(w, "stop");
    jw_arr(w);
    for (int i = 0; i < ar->n_stop; i++) jw_strn(w, ar->stop[i], ar->stop_len[i]);
    jw_arr_end(w);
    jw_key(w, "n_keep"); jw_int(w, ar->num_set[API_N_KEEP] ? (int64_t)ar->num[API_N_KEEP] : 0);
    jw_key(w, "ignore_eos"); jw_bool(w, ar->ignore_eos);
    jw_key(w, "stream"); jw_bool(w, ar->stream);
    jw_key(w, "n_probs"); jw_int(w, j->n_top > 0 ? j->n_top : 0);
    jw_key(w, "grammar"); jw_str(w, g->gown ? g->gown : ar->grammar ? ar->grammar : "");
    jw_obj_end(w);
}

/* One entry of completion_probabilities: {"id", "token" (its bytes' whole
 * UTF-8 characters, as llama.cpp's validate_utf8), "bytes", "logprob"}. */
static void prob_fields(jsonw *w, mor_token t, float lp, buf *bytes)
{
    token_bytes(bytes, t);
    const unsigned char *p = (const unsigned char *)(bytes->p ? bytes->p : "");
    size_t ok = 0;
    for (int k; ok < bytes->len && (k = utf8_seq(p + ok, bytes->len - ok)) > 0;) ok += (size_t)k;
    jw_key(w, "id"); jw_int(w, t);
    jw_key(w, "token"); jw_strn(w, (const char *)p, ok);
    jw_key(w, "bytes");
    jw_arr(w);
    for (size_t i = 0; i < bytes->len; i++) jw_int(w, p[i]);
    jw_arr_end(w);
    jw_key(w, "logprob"); jw_logprob(w, lp);
}

/* "completion_probabilities" of tokens [a, b), when the request asked. */
static void probs(jsonw *w, const job *j, int32_t a, int32_t b)
{
    if (j->n_top < 0 || b <= a) return;
    buf bytes = { 0 };
    const int32_t k = j->n_top;
    jw_key(w, "completion_probabilities");
    jw_arr(w);
    for (int32_t i = a; i < b; i++) {
        jw_obj(w);
        prob_fields(w, j->tokens[i], j->logprob[i], &bytes);
        jw_key(w, "top_logprobs");
        jw_arr(w);
        for (int32_t m = 0; m < k; m++) {
            jw_obj(w);
            prob_fields(w, j->top_ids[(size_t)i * k + m], j->top_logprob[(size_t)i * k + m], &bytes);
            jw_obj_end(w);
        }
        jw_arr_end(w);
        jw_obj_end(w);
    }
    jw_arr_end(w);
    if (!buf_ok(&bytes)) w->b->err = 1;
    buf_free(&bytes);
}

/* "tokens" (ids [a, b) when `ids`, else empty, as llama.cpp without
 * return_tokens) and "mor": {"token_ids", "depths"} of [a, b). */
static void token_fields(jsonw *w, const job *j, int32_t a, int32_t b, int ids)
{
    jw_key(w, "tokens");
    jw_arr(w);
    for (int32_t i = a; ids && i < b; i++) jw_int(w, j->tokens[i]);
    jw_arr_end(w);
    mor_object(w, j, a, b);
}

/* The prompt as text (llama.cpp's "prompt": the tokens detokenized); ""
 * without a tokenizer. */
static void prompt_field(jsonw *w, const gen *g)
{
    char *text = NULL;
    size_t len = 0;
    jw_key(w, "prompt");
    if (S.has_tokenizer && text_detokenize(S.model, g->prompt, g->n_prompt, &text, &len) == MOR_OK)
        jw_strn(w, text, len);
    else
        jw_str(w, "");
    free(text);
}

/* The final object; a stream's has no content (its events had it). */
static void final_object(jsonw *w, const gen *g, const job *j, int stream)
{
    const char *text = j->text.p ? j->text.p : "";
    int32_t n = j->n_tokens;
    jw_obj(w);
    jw_key(w, "index"); jw_int(w, 0);
    jw_key(w, "content"); jw_strn(w, text, stream ? 0 : j->text.len);
    token_fields(w, j, stream ? n : 0, n, g->ar.return_tokens);
    jw_key(w, "id_slot"); jw_int(w, -1);
    jw_key(w, "stop"); jw_bool(w, 1);
    jw_key(w, "model"); jw_str(w, S.model_id);
    jw_key(w, "tokens_predicted"); jw_int(w, n);
    jw_key(w, "tokens_evaluated"); jw_int(w, g->n_prompt);
    settings(w, g, j);
    prompt_field(w, g);
    jw_key(w, "has_new_line"); jw_bool(w, memchr(text, '\n', j->text.len) != NULL);
    /* llama.cpp's: the prompt was cut, the context shifted, or generation stopped at a full context */
    jw_key(w, "truncated");
    jw_bool(w, g->truncated || (g->submitted && (j->n_discarded > 0 || (g->ctx_bound && j->finish == FINISH_LENGTH))));
    jw_key(w, "stop_type"); jw_str(w, stop_type(g, j));
    jw_key(w, "stopping_word");
    if (j->stop_word >= 0 && j->stop_word < g->ar.n_stop) jw_strn(w, g->ar.stop[j->stop_word], g->ar.stop_len[j->stop_word]);
    else jw_str(w, "");
    jw_key(w, "tokens_cached"); jw_int(w, g->n_prompt + n - j->n_discarded);   /* what the context holds */
    timings(w, j);
    if (!stream) probs(w, j, 0, n);
    jw_obj_end(w);
}

/* One token's event: its text [t0, t1) and token i (i < 0: text alone,
 * released at the end after the last token's). */
static void partial(jsonw *w, const gen *g, const job *j, size_t t0, size_t t1, int32_t i)
{
    int32_t a = i < 0 ? 0 : i, b = i < 0 ? 0 : i + 1;
    jw_obj(w);
    jw_key(w, "index"); jw_int(w, 0);
    jw_key(w, "content"); jw_strn(w, j->text.p ? j->text.p + t0 : "", t1 - t0);
    token_fields(w, j, a, b, 1);   /* llama.cpp streams the ids always */
    jw_key(w, "stop"); jw_bool(w, 0);
    jw_key(w, "id_slot"); jw_int(w, -1);
    jw_key(w, "tokens_predicted"); jw_int(w, b ? b : j->n_tokens);
    jw_key(w, "tokens_evaluated"); jw_int(w, g->n_prompt);
    probs(w, j, a, b);
    jw_obj_end(w);
}

/* Events for the tokens [*sent, n) into b, each followed by a NUL (JSON has
 * none) to be sent one by one once j->mu is released; under j->mu. */
static void partials(buf *b, const gen *g, const job *j, int32_t n, int32_t *sent)
{
    jsonw w;
    for (int32_t i = *sent; i < n; i++) {
        jw_init(&w, b);
        partial(&w, g, j, i ? j->text_end[i - 1] : 0, j->text_end[i], i);
        buf_putc(b, 0);
    }
    *sent = n;
}

/* Send the events of the buf, NUL-separated. */
static void send_events(conn *c, request *rq, const buf *b)
{
    if (!buf_ok(b)) { c->gone = 1; return; }
    for (size_t at = 0; at < b->len && !c->gone;) {
        size_t len = strlen(b->p + at);
        sse(c, rq, b->p + at, len);
        at += len + 1;
    }
}

/* The end of a stream: text released after the last token (a grammar's end
 * flushing what it held) as one more event, then the final object; or the
 * error of a failed job. */
static void stream_end(conn *c, request *rq, const gen *g, job *j, int finish, int32_t sent, buf *b)
{
    jsonw w;
    buf_reset(b);
    if (finish == FINISH_STOP || finish == FINISH_LENGTH || !g->submitted) {
        pthread_mutex_lock(&j->mu);
        size_t t0 = sent ? j->text_end[sent - 1] : 0;
        if (j->text.len > t0) {
            jw_init(&w, b);
            partial(&w, g, j, t0, j->text.len, -1);
            buf_putc(b, 0);
        }
        jw_init(&w, b);
        final_object(&w, g, j, 1);
        buf_putc(b, 0);
        pthread_mutex_unlock(&j->mu);
    } else {
        jw_init(&w, b);
        jw_obj(&w);
        jw_key(&w, "error");
        jw_obj(&w);
        jw_key(&w, "message"); jw_str(&w, finish == FINISH_CANCELLED ? "the server is shutting down" : j->error);
        jw_key(&w, "type"); jw_str(&w, "server_error");
        jw_key(&w, "code"); jw_int(&w, finish == FINISH_CANCELLED ? 503 : 500);
        jw_obj_end(&w);
        jw_obj_end(&w);
        buf_putc(b, 0);
    }
    send_events(c, rq, b);
}

static void native_stream(conn *c, request *rq, gen *g)
{
    job *j = g->js[0];
    buf b = { 0 };
    int32_t sent = 0;
    int finish = FINISH_NONE;
    sse_begin(c, rq);
    while (g->submitted && !c->gone) {
        pthread_mutex_lock(&j->mu);
        j->signalled = 0;
        finish = j->finish;
        buf_reset(&b);
        partials(&b, g, j, j->n_tokens, &sent);
        pthread_mutex_unlock(&j->mu);
        send_events(c, rq, &b);
        if (finish != FINISH_NONE || c->gone) break;
        if (conn_wait(c, j) < 0) break;
    }
    if (!c->gone) stream_end(c, rq, g, j, finish, sent, &b);
    if (c->gone) engine_cancel(S.eng, j);
    else sse_end(c, rq);
    count_request(EP_COMPLETION, 200);
    if (!S.o.quiet)
        fprintf(stderr, "mor-server: %s \"%s %s\" 200 stream prompt=%d tokens=%d %.3fs%s\n", c->peer, rq->method,
                rq->path, g->n_prompt, sent, engine_now() - rq->t_start, c->gone ? " (client gone: cancelled)" : "");
    buf_free(&b);
}

void handle_completion_native(conn *c, request *rq, const char *body, size_t n)
{
    gen g;
    if (gen_start(c, rq, API_NATIVE, body, n, &g)) { gen_free(&g); return; }
    if (g.ar.stream) native_stream(c, rq, &g);
    else if (!gen_wait(c, rq, &g)) {
        buf b = { 0 };
        jsonw w;
        jw_init(&w, &b);
        final_object(&w, &g, g.js[0], 0);
        send_json(c, rq, 200, &b);
        buf_free(&b);
    }
    gen_free(&g);
}
