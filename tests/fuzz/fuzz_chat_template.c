/* fuzz_chat_template.c - any bytes as a Jinja chat template: parsed by
 * mor_chat_template_create, then rendered by mor_chat_template_render with a
 * fixed conversation (system, user, an assistant's tool call, the tool's
 * answer; two tools; extra variables), or, when the input has a NUL byte,
 * with the messages JSON after it (the bytes before are the template), so
 * that the JSON reader of the conversation is fuzzed too. Checks: a failure is one of the
 * documented statuses with a message and leaves the out-params untouched;
 * a render is deterministic; a buffer one byte short gives
 * BUFFER_TOO_SMALL with the same size and writes nothing; the bounds
 * (steps, nesting, memory) end every input (libFuzzer's -timeout and
 * -rss_limit_mb catch one that does not). */
#include "fuzz.h"
#include "mor.h"

FUZZ_TARGET(chat_template)

static const char MESSAGES[] =
    "[{\"role\": \"system\", \"content\": \"You can call tools.\"},"
    " {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"Call it.\", \"tool_calls\": [{\"id\": "
    "\"call12345\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"t\\\": 22}\"},"
    " {\"role\": \"assistant\", \"content\": \"22 degrees.\"}, {\"role\": \"user\", \"content\": \"Thanks \\u00e9!\"}]";
static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather.\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
    "[\"city\"]}}}, {\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {}}}]";
static const char EXTRA[] = "{\"enable_thinking\": true, \"documents\": [{\"title\": \"d\", \"text\": \"t\"}]}";

static int failure_ok(mor_status st)
{
    return st == MOR_E_INVALID_ARG || st == MOR_E_UNSUPPORTED || st == MOR_E_NOMEM;
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: any read past it is ASan's to find */
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *src = (char *)fuzz_copy(data, tlen);
    if (!src) return 0;
    mor_chat_template *t = (mor_chat_template *)(uintptr_t)0x10;
    mor_status st = mor_chat_template_create(src, tlen, &t);
    if (st != MOR_OK) {
        FUZZ_ASSERT(failure_ok(st), "create: status %d", (int)st);
        FUZZ_ASSERT(mor_last_error()[0] && t == (mor_chat_template *)(uintptr_t)0x10, "create: a failure without "
                    "a message, or *out written");
        free(src);
        return 0;
    }
    free(src);   /* the template keeps nothing of the caller's text */
    mor_chat_params p;
    MOR_CHAT_PARAMS_INIT(&p);
    /* the messages after the NUL: exactly their bytes (not NUL-terminated), or one space */
    size_t mlen = nul ? size - tlen - 1 : 0;
    char *msgs = NULL;
    if (nul) {
        msgs = mlen ? (char *)fuzz_copy(nul + 1, mlen) : malloc(1);
        if (msgs && !mlen) { msgs[0] = ' '; mlen = 1; }
    }
    p.messages_json = nul ? msgs : MESSAGES;
    p.messages_len = mlen;
    p.tools_json = TOOLS;
    p.extra_json = EXTRA;
    p.add_generation_prompt = 1;
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.now = 1721995200;
    enum { CAP = 1 << 16 };
    char *a = malloc(CAP), *b = malloc(CAP);
    FUZZ_ASSERT(a && b, "malloc");
    size_t n = 12345, m = 0;
    st = mor_chat_template_render(t, &p, a, CAP, &n);
    int accepted = 0;
    if (st == MOR_OK || st == MOR_E_BUFFER_TOO_SMALL) {
        FUZZ_ASSERT(st == MOR_OK || n > CAP, "BUFFER_TOO_SMALL for %zu bytes in %d", n, (int)CAP);
        if (st == MOR_OK && n > 0) {
            /* the same again, one byte short: the size, nothing written */
            memset(b, 0x5a, CAP);
            st = mor_chat_template_render(t, &p, b, n - 1, &m);
            FUZZ_ASSERT(st == MOR_E_BUFFER_TOO_SMALL && m == n, "one short: %d, %zu vs %zu", (int)st, m, n);
            for (size_t i = 0; i < n; i++) FUZZ_ASSERT((unsigned char)b[i] == 0x5a, "byte %zu written on failure", i);
            st = mor_chat_template_render(t, &p, b, n, &m);
            FUZZ_ASSERT(st == MOR_OK && m == n && !memcmp(a, b, n), "not deterministic: %d", (int)st);
        }
        accepted = 1;
    } else {
        FUZZ_ASSERT(failure_ok(st), "render: status %d", (int)st);
        FUZZ_ASSERT(mor_last_error()[0] && n == 12345, "render: a failure without a message, or *n_out written");
    }
    free(a);
    free(b);
    free(msgs);
    mor_chat_template_free(t);
    return accepted;
}
