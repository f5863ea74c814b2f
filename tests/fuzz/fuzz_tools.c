/* fuzz_tools.c - any bytes as a model's reply to mor-server's function
 * calling (src/tools/mor-server/tools.c): the parsers of the four formats
 * (Hermes/Qwen <tool_call>, Llama 3.x, Mistral [TOOL_CALLS], generic JSON),
 * the streaming guard beside them, and the grammar that forces a call.
 *
 * Input: byte 0: bits 0-1 the format (TOOLS_*), bit 2 the grammar mode,
 * bits 3-7 seed how the reply is cut into "tokens"; then the reply's text
 * (or, in grammar mode, the JSON of a request's "tools", bit 3 naming its
 * first function and bit 4 asking for parallel calls).
 *
 * Checks on a reply: tools_parse never fails (no allocation fails here);
 * its content is NUL-terminated, no longer than the reply, and the whole
 * reply when no call was found (but for the generic format's
 * {"response": text}); each call has a non-empty name without NUL bytes and
 * arguments that are the text of a JSON object; and what the stream sends
 * as content before the end, tools_stream_safe's safe lengths fed as the
 * server feeds them (handlers.c: from the length sent so far, until it
 * holds), is a prefix of that content. In grammar mode: tools api.c accepts
 * give a grammar that parses (grammar_parse) with a start rule, or an error
 * with a message. */
#include "fuzz.h"
#include "api.h"
#include "grammar.h"
#include "json.h"
#include "tools.h"

FUZZ_TARGET(tools)

static void check_calls(int format, const char *t, size_t n, const tool_parse *p)
{
    FUZZ_ASSERT(p->content && p->content[p->content_len] == 0, "content not NUL-terminated");
    FUZZ_ASSERT(p->content_len <= n, "content of %zu bytes from a reply of %zu", p->content_len, n);
    if (!p->n_calls && (format != TOOLS_GENERIC || p->content_len == n))
        FUZZ_ASSERT(p->content_len == n && !memcmp(p->content, t, n), "no call, but the content is not the reply");
    for (int i = 0; i < p->n_calls; i++) {
        const tool_call *c = &p->calls[i];
        FUZZ_ASSERT(c->name && c->name[0], "call %d has an empty name (a NUL byte in it?)", i);
        char e[80];
        json *a = json_parse(c->arguments, strlen(c->arguments), e, sizeof e);
        FUZZ_ASSERT(a && a->type == JSON_OBJECT, "call %d's arguments %s are not a JSON object (%s)", i, c->arguments,
                    a ? "another value" : e);
        json_free(a);
    }
}

/* The reply as the server streams it: after each token the safe length
 * from the one sent so far, sent when it grows, until a marker is held. */
static size_t stream_sent(int format, const char *t, size_t n, uint32_t seed)
{
    size_t sent = 0, at = 0;
    while (at < n) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 5;
        at = piece > n - at ? n : at + piece;
        size_t safe = 0;
        int held = tools_stream_safe(format, t, at, sent, &safe);
        FUZZ_ASSERT(safe <= at, "safe length %zu past the text's %zu", safe, at);
        if (safe > sent) sent = safe;
        if (held) break;
    }
    return sent;
}

static int reply(int format, const char *t, size_t n, uint32_t seed)
{
    tool_parse p;
    FUZZ_ASSERT(tools_parse(format, t, n, &p) == 0, "tools_parse failed");
    check_calls(format, t, n, &p);
    size_t sent = stream_sent(format, t, n, seed);
    FUZZ_ASSERT(sent <= p.content_len && !memcmp(p.content, t, sent),
                "%s: %zu bytes streamed as content are not the start of the content found at the end (%zu bytes)",
                tools_format_name(format), sent, p.content_len);
    int calls = p.n_calls;
    tools_parse_free(&p);
    return calls > 0 || n > 0;
}

/* The tools of a chat request (api.c's checks), and the grammar of a forced call. */
static int grammar(int format, const char *t, size_t n, int named, int parallel)
{
    static const char head[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": ";
    buf body = { 0 };
    buf_put(&body, head, sizeof head - 1);
    buf_put(&body, t, n);
    buf_printf(&body, ", \"tool_choice\": \"required\", \"parallel_tool_calls\": %s}", parallel ? "true" : "false");
    api_request r;
    api_error err;
    int ok = buf_ok(&body) && !api_parse(API_CHAT, body.p, body.len, &r, &err);
    buf_free(&body);
    if (!ok) return 0;
    if (!r.tools) { api_request_free(&r); return 0; }
    const json *fn = json_get(r.tools->items[0], "function");
    const char *name = named ? json_get(fn, "name")->str : NULL;
    buf g = { 0 };
    char msg[300] = "";
    if (tools_grammar(format, r.tools, name, parallel, &g, msg, sizeof msg)) {
        FUZZ_ASSERT(msg[0], "tools_grammar failed without a message");
    } else {
        grammar_rules *rules = NULL;
        mor_status st = grammar_parse(g.p, g.len, NULL, "tools", &rules);
        FUZZ_ASSERT(st == MOR_OK || st == MOR_E_NOMEM, "the grammar of valid tools does not parse: %s\n%s",
                    mor_last_error(), g.p);
        grammar_rules_free(rules);
    }
    buf_free(&g);
    api_request_free(&r);
    return 1;
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int format = data[0] & 3;
    /* the text in its own allocation of exactly its size (ASan sees reads past it) */
    uint8_t *t = fuzz_copy(data + 1, size - 1);
    if (!t) return 0;
    int fmt = tools_format((const char *)t, size - 1);
    FUZZ_ASSERT(fmt >= 0 && fmt < TOOLS_N_FORMATS && tools_format_by_name(tools_format_name(fmt)) == fmt,
                "tools_format gave %d", fmt);
    int r = data[0] & 4 ? grammar(format, (const char *)t, size - 1, data[0] & 8, data[0] & 16)
                        : reply(format, (const char *)t, size - 1, data[0] >> 3);
    free(t);
    return r;
}
