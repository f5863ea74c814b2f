/* fuzz_json_schema.c - any bytes as a JSON Schema into
 * mor_json_schema_to_grammar (its own strict JSON parser, then the
 * converter). Checks: a failure is MOR_E_INVALID_ARG (or NOMEM) with a
 * message and writes nothing; a success is a grammar whose lines are all
 * `name ::= body`, the first `root`, every name of [a-zA-Z0-9-], which the
 * library's GBNF parser (grammar.h) takes as it is; a buffer
 * one byte short gives BUFFER_TOO_SMALL, the same size and an untouched
 * buffer; a second call gives the same bytes. */
#include "fuzz.h"
#include "grammar.h"
#include "mor.h"

FUZZ_TARGET(json_schema)

static int fuzz_run(const uint8_t *data, size_t size)
{
    /* a copy of exactly size bytes: any read past it is ASan's to find */
    char *text = (char *)fuzz_copy(data, size);
    if (!text) return 0;
    size_t n = 0;
    mor_status st = mor_json_schema_to_grammar(text, size, NULL, 0, &n);
    if (st != MOR_E_BUFFER_TOO_SMALL) {
        FUZZ_ASSERT(st == MOR_E_INVALID_ARG || st == MOR_E_NOMEM, "status %d", (int)st);
        FUZZ_ASSERT(mor_last_error()[0], "a failure without a message");
        free(text);
        return 0;
    }
    FUZZ_ASSERT(n > 9, "a grammar of %zu bytes", n);
    char *g = malloc(n + 1), *h = malloc(n + 1);
    FUZZ_ASSERT(g && h, "malloc");
    memset(g, 0x5a, n + 1);
    size_t m = 0;
    st = mor_json_schema_to_grammar(text, size, g, n - 1, &m);
    FUZZ_ASSERT(st == MOR_E_BUFFER_TOO_SMALL && m == n, "one short: %d, %zu vs %zu", (int)st, m, n);
    for (size_t i = 0; i < n + 1; i++) FUZZ_ASSERT((unsigned char)g[i] == 0x5a, "byte %zu written on failure", i);
    st = mor_json_schema_to_grammar(text, size, g, n, &m);
    FUZZ_ASSERT(st == MOR_OK && m == n && !mor_last_error()[0], "exact size: %d, %zu vs %zu", (int)st, m, n);
    FUZZ_ASSERT((unsigned char)g[n] == 0x5a, "a byte written past the grammar");
    st = mor_json_schema_to_grammar(text, size, h, n, &m);
    FUZZ_ASSERT(st == MOR_OK && m == n && !memcmp(g, h, n), "not deterministic");
    FUZZ_ASSERT(!memcmp(g, "root ::= ", 9) && g[n - 1] == '\n', "root first, a newline last");
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && g[j] != ' ') {
            char ch = g[j];
            FUZZ_ASSERT((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-',
                        "a rule name with 0x%02x", (unsigned char)ch);
            j++;
        }
        FUZZ_ASSERT(j > i && j + 5 <= n && !memcmp(g + j, " ::= ", 5), "a line without its name ::=");
        const char *eol = memchr(g + j, '\n', n - j);
        FUZZ_ASSERT(eol, "a line without its newline");
        i = (size_t)(eol - g) + 1;
    }
    grammar_rules *gr = NULL;
    st = grammar_parse(g, n, NULL, "fuzz", &gr);
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_NOMEM, "the grammar parser refuses the grammar: %s\n%.*s",
                mor_last_error(), (int)(n > 4000 ? 4000 : n), g);
    grammar_rules_free(gr);
    free(g);
    free(h);
    free(text);
    return 1;
}
