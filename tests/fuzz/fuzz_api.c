/* fuzz_api.c - any bytes as a request body of mor-server
 * (src/tools/mor-server): the OpenAI request checks (api.c, over the strict
 * JSON parser), the chat formats (chat.c), the text stream with its stop
 * strings (textstream.c) and the JSON writer (jsonw.c).
 *
 * Input: byte 0: bit 0 chooses completions or chat, the rest seeds how the
 * text is cut into "tokens"; then the JSON body. Checks: an error names a
 * message; an accepted request's values are in their ranges; every chat
 * family formats its messages; the prompt text (or the formatted chat) as a
 * stream of tokens with the request's stop strings releases exactly the
 * text up to where a stop string is first complete (checked against a
 * naive search), never inside a UTF-8 character; and whatever bytes the
 * writer escapes parse back as JSON. */
#include "fuzz.h"
#include "api.h"
#include "chat.h"
#include "json.h"
#include "jsonw.h"
#include "textstream.h"
#include "utf8.h"

FUZZ_TARGET(api)

/* The text the stream must release: up to the first position where a stop
 * string ends, cut before the longest one ending there. */
static size_t reference_cut(const char *t, size_t n, const api_request *r)
{
    for (size_t end = 1; end <= n; end++) {
        size_t cut = (size_t)-1;
        for (int k = 0; k < r->n_stop; k++) {
            size_t L = r->stop_len[k];
            if (L <= end && !memcmp(t + end - L, r->stop[k], L) && end - L < cut) cut = end - L;
        }
        if (cut != (size_t)-1) return cut;
    }
    return n;
}

static void check_json_string(const char *s, size_t n)
{
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_arr(&w);
    jw_strn(&w, s, n);
    jw_int(&w, -5);
    jw_double(&w, 0.25);
    jw_arr_end(&w);
    FUZZ_ASSERT(buf_ok(&b), "writer failed");
    char err[160];
    json *v = json_parse(b.p, b.len, err, sizeof err);
    FUZZ_ASSERT(v && v->type == JSON_ARRAY && v->n == 3 && v->items[0]->type == JSON_STRING, "written JSON does not parse: %s", err);
    /* valid UTF-8 comes back as it was */
    int valid = 1;
    for (size_t i = 0; i < n && valid;) {
        int k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k <= 0) valid = 0;
        else i += (size_t)k;
    }
    if (valid) FUZZ_ASSERT(v->items[0]->str_len == n && !memcmp(v->items[0]->str, s, n), "round trip changed the string");
    json_free(v);
    buf_free(&b);
}

static void stream_text(const char *t, size_t n, const api_request *r, uint32_t seed)
{
    textstream ts;
    if (ts_init(&ts, r->stop, r->stop_len, r->n_stop)) return;
    buf got = { 0 };
    size_t at = 0;
    while (at < n && !ts.stopped) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 7;
        if (piece > n - at) piece = n - at;
        const char *out;
        size_t k = ts_push(&ts, t + at, piece, &out);
        buf_put(&got, out, k);
        /* what is out never ends inside a character that may still complete */
        FUZZ_ASSERT(ts.stopped || !utf8_incomplete_tail((const unsigned char *)got.p, got.len) ||
                    got.len == 0, "released half a character");
        at += piece;
    }
    const char *out;
    size_t k = ts_flush(&ts, &out);
    buf_put(&got, out, k);
    size_t cut = reference_cut(t, n, r);
    FUZZ_ASSERT(got.len == cut && (!cut || !memcmp(got.p, t, cut)), "released %zu bytes, want %zu", got.len, cut);
    FUZZ_ASSERT(ts.stopped == (cut < n || (cut == n && n && ts.stopped)), "stopped flag");
    check_json_string(got.p ? got.p : "", got.len);
    buf_free(&got);
    ts_free(&ts);
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int kind = data[0] & 1 ? API_CHAT : data[0] & 2 ? API_NATIVE : API_COMPLETIONS;   /* NATIVE: /completion */
    uint32_t seed = data[0] >> 1;
    char *body = (char *)fuzz_copy(data + 1, size - 1);
    if (!body) return 0;
    api_request r;
    api_error e;
    int ok = api_parse(kind, body, size - 1, &r, &e) == 0;
    if (!ok) {
        FUZZ_ASSERT(e.status == 400 && e.msg[0], "error %d without a message", e.status);
        free(body);
        return 0;
    }
    FUZZ_ASSERT(!r.temperature_set || (r.temperature >= 0 && r.temperature <= 2), "temperature");
    FUZZ_ASSERT(!r.top_p_set || (r.top_p > 0 && r.top_p <= 1), "top_p");
    FUZZ_ASSERT(!r.max_tokens_set || r.max_tokens >= (kind == API_NATIVE ? 0 : 1), "max_tokens");   /* n_predict 0 */
    FUZZ_ASSERT(r.n_stop >= 0 && r.n_stop <= API_MAX_STOP, "n_stop");
    for (int k = 0; k < r.n_stop; k++) FUZZ_ASSERT(r.stop_len[k] >= 1 && r.stop_len[k] <= API_MAX_STOP_LEN, "stop length");
    if (kind == API_CHAT) {
        FUZZ_ASSERT(r.n_messages >= 1 && r.messages, "chat without messages");
        for (int f = 0; f < CHAT_N; f++) {
            buf p = { 0 };
            chat_format(f, r.messages, r.n_messages, &p);
            FUZZ_ASSERT(buf_ok(&p) && p.len > 0, "chat family %d wrote nothing", f);
            if (f == (int)(seed % CHAT_N)) stream_text(p.p, p.len, &r, seed);
            buf_free(&p);
        }
        FUZZ_ASSERT(chat_detect(body, size - 1) >= CHAT_UNKNOWN, "detect");
    } else if (r.prompt_text) {
        stream_text(r.prompt_text, r.prompt_len, &r, seed);
    } else {
        FUZZ_ASSERT(r.n_prompt_ids >= 1 && r.prompt_ids, "no token ids");
    }
    api_request_free(&r);
    free(body);
    return 1;
}
