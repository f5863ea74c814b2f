/* test_grammar.c - GBNF grammars: the parser (what a grammar matches, and
 * the errors of bad grammars), and mor_grammar on the bundled model's
 * vocabulary (masks that allow exactly the tokens that can continue,
 * constrained generation whose every output is a string of the grammar).
 * The judge of masks and outputs is gbnf_oracle.h, a recognizer that shares
 * no code with the library's (issue 44). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mor.h"
#include "check.h"
#include "gbnf_oracle.h"
#include "grammar.h"
#include "model.h"
#include "tokenizer.h"

static int match(const char *gbnf, const char *s)
{
    grammar_rules *g;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, "test", &g)) return -100;
    int r = grammar_match(g, s, strlen(s));
    grammar_rules_free(g);
    return r;
}

typedef struct { const char *gbnf, *s; int want; } mcase;

static const mcase cases[] = {
    { "root ::= \"abc\"", "abc", 1 },
    { "root ::= \"abc\"", "ab", 0 },
    { "root ::= \"abc\"", "abcd", 0 },
    { "root ::= \"\"", "", 1 },
    { "root ::= [a-c]+", "abcabc", 1 },
    { "root ::= [a-c]+", "", 0 },
    { "root ::= [a-c]+", "abd", 0 },
    { "root ::= [^a-c]*", "xyz \xc3\xa9", 1 },
    { "root ::= [^a-c]*", "xaz", 0 },
    { "root ::= .*", "any\n\xe2\x82\xac\xf0\x9f\x98\x80", 1 },
    { "root ::= \"a\" | \"b\" | \"cd\"", "cd", 1 },
    { "root ::= \"a\" | \"b\" | \"cd\"", "c", 0 },
    { "root ::= (\"ab\" | \"c\")* \"d\"", "abcabd", 1 },
    { "root ::= (\"ab\" | \"c\")* \"d\"", "abad", 0 },
    { "root ::= \"x\"?\"y\"", "y", 1 },
    { "root ::= \"x\"?\"y\"", "xy", 1 },
    { "root ::= \"x\"?\"y\"", "xxy", 0 },
    { "root ::= \"ab\"{2}", "abab", 1 },
    { "root ::= \"ab\"{2}", "ab", 0 },
    { "root ::= [0-9]{2,4}", "1", 0 },
    { "root ::= [0-9]{2,4}", "12", 1 },
    { "root ::= [0-9]{2,4}", "1234", 1 },
    { "root ::= [0-9]{2,4}", "12345", 0 },
    { "root ::= [0-9]{2,}", "123456789", 1 },
    { "root ::= [0-9]{,2}", "", 1 },
    { "root ::= [0-9]{,2}", "123", 0 },
    { "root ::= x y\nx ::= \"a\"\ny ::= \"b\"", "ab", 1 },
    { "root ::= p\np ::= \"(\" p \")\" | \"\"", "((()))", 1 },
    { "root ::= p\np ::= \"(\" p \")\" | \"\"", "(()", 0 },
    { "# a comment\nroot ::= ( # inside\n  \"a\"\n  | \"b\" )   # after\n", "b", 1 },
    { "root ::=\n  \"a\" |\n  \"b\"", "b", 1 },
    { "root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\"", "\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80", 1 },
    { "root ::= [\\x00-\\x1f]", "\x1f", 1 },
    { "root ::= [\\]\\-]+", "]-]", 1 },
    { "root ::= [a-]+", "a-a", 1 },
    { "root ::= \"\xe2\x82\xac\" [\xc3\xa0-\xc3\xbf]", "\xe2\x82\xac\xc3\xa9", 1 },
    { "root ::= \"\xe2\x82\xac\"", "\xe2\x82", 0 },   /* half a character */
    { "root ::= a\na ::= b*\nb ::= \"x\" | \"\"", "xx", 1 },   /* nullable inside a repetition? refused below */
    { "root ::= ws \"{\" ws \"}\"\nws ::= [ \\t\\n]*", " { \n}", 1 },
    { "root-1 ::= \"a\"\nroot ::= root-1 root_2\nroot_2 ::= \"b\"", "ab", 1 },
};

typedef struct { const char *gbnf, *msg; } ecase;

static const ecase errors[] = {
    { "root ::= x", "rule 'x' is used but not defined" },
    { "root ::= \"a\"\nroot ::= \"b\"", "defined twice" },
    { "root ::= root \"a\" | \"b\"", "left-recursive" },
    { "root ::= a\na ::= b \"x\"\nb ::= c\nc ::= a | \"y\"", "left-recursive" },
    { "root ::= n root \"x\" | \"y\"\nn ::= \"\" | \"z\"", "left-recursive" },
    { "root ::= \"a\" root", "matches no string" },
    { "other ::= \"a\"", "no rule 'root'" },
    { "root ::= \"abc", "line 1, column 10: unterminated literal" },
    { "root ::= \"a\"\n\nx ::= \"\\q\"", "line 3, column 8: unknown escape" },
    { "root \"a\"", "expected '::='" },
    { "root ::= \"a\" )", "')' without its '('" },
    { "root ::= ( \"a\"", "'(' without its ')'" },
    { "root ::= \"a\"{3,2}", "max below min" },
    { "root ::= []", "empty character class" },
    { "root ::= * \"a\"", "nothing before it to repeat" },
    { "root ::= [z-a]", "end before its start" },
    { "root ::= \"\\x4\"", "hexadecimal digits" },
    { "root ::= \"\\uD800\"", "not a Unicode scalar value" },
    { "root ::= \"\xc3\"", "invalid UTF-8" },
    { "root ::= \"a\"{99999}", "repetition count above" },
    { "root ::= \"a\" x ::= \"b\"", "new line" },
    { "::= \"a\"", "expected a rule name" },
};

static void test_parse(void)
{
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const mcase *c = &cases[i];
        int got = match(c->gbnf, c->s);
        if (i == 37) {   /* b* with b nullable: left recursion through the repetition */
            CHECK(got == -100 && strstr(mor_last_error(), "left-recursive"), "a repetition of a rule that matches \"\" is refused: %s",
                  mor_last_error());
            continue;
        }
        CHECK(got == c->want, "grammar case %zu: match %d (want %d) %s", i, got, c->want, got < 0 ? mor_last_error() : "");
    }
    for (size_t i = 0; i < sizeof errors / sizeof *errors; i++) {
        grammar_rules *g = NULL;
        mor_status st = grammar_parse(errors[i].gbnf, strlen(errors[i].gbnf), NULL, "test", &g);
        CHECK(st == MOR_E_INVALID_ARG && !g && strstr(mor_last_error(), errors[i].msg),
              "bad grammar %zu refused: %s", i, mor_last_error());
    }
    /* nesting is bounded */
    char deep[2000];
    size_t n = (size_t)snprintf(deep, sizeof deep, "root ::= ");
    for (int i = 0; i < 200; i++) deep[n++] = '(';
    deep[n++] = '"'; deep[n++] = 'a'; deep[n++] = '"';
    for (int i = 0; i < 200; i++) deep[n++] = ')';
    grammar_rules *g = NULL;
    CHECK(grammar_parse(deep, n, NULL, "test", &g) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "nested deeper"),
          "200 nested parentheses refused: %s", mor_last_error());
    /* another start rule */
    const char *two = "a ::= \"x\"\nb ::= \"y\"";
    CHECK(grammar_parse(two, strlen(two), "b", "test", &g) == MOR_OK && grammar_match(g, "y", 1) == 1 &&
          grammar_match(g, "x", 1) == 0, "start rule chosen by name");
    grammar_rules_free(g);
    /* a deep but valid nesting matches (the matcher's pool holds it) */
    const char *par = "root ::= \"(\" root \")\" | \"x\"";
    char s[402];
    for (int i = 0; i < 200; i++) { s[i] = '('; s[201 + i] = ')'; }
    s[200] = 'x';
    CHECK(match(par, "((x))") == 1 && grammar_parse(par, strlen(par), NULL, "t", &g) == MOR_OK &&
          grammar_match(g, s, 401) == 1 && grammar_match(g, s, 400) == 0, "200 nested parentheses matched");
    grammar_rules_free(g);
}

/* ---- the oracle itself: hand-written answers, then agreement with the
 * library's matcher on seeded random strings ---- */

static gbo_grammar *oracle_new(const char *gbnf)
{
    gbo_grammar *g = malloc(sizeof *g);
    if (g && gbo_parse(g, gbnf, "root")) { printf("# %s: %s\n", g->err, gbnf); free(g); g = NULL; }
    return g;
}

static uint64_t rng_next(uint64_t *s)   /* xorshift64*: seeded, the same everywhere */
{
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Strings of random pieces: the oracle and grammar_match must agree on each
 * (and see both answers, or the comparison proves little). */
static void oracle_vs_match(void)
{
    static const struct { const char *gbnf, *pieces[5]; } G[] = {
        { "root ::= (\"ab\" | \"c\")* \"d\"", { "a", "b", "c", "d", "ab" } },
        { "root ::= p\np ::= \"(\" p \")\" p | \"\"", { "(", ")", "()", "((", "))" } },
        { "root ::= [0-9]{2,4} (\",\" [0-9]{2,4})?", { "0", "1", "9", ",", "12" } },
        { "root ::= x{1,3} \";\"\nx ::= \"a\" \"b\"? | \"ba\"", { "a", "b", ";", "ab", "ba" } },
        { "root ::= ([^a\\n] | \"a\" \"\xc3\xa9\"?)+ \"\\n\"", { "a", "\xc3\xa9", "\n", "\xe2\x82\xac", "\xc3" } },
    };
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int n = 0, agree = 0, yes = 0;
    for (size_t k = 0; k < sizeof G / sizeof *G; k++) {
        gbo_grammar *o = oracle_new(G[k].gbnf);
        grammar_rules *r = NULL;
        if (!o || grammar_parse(G[k].gbnf, strlen(G[k].gbnf), NULL, "t", &r)) { free(o); n++; continue; }
        for (int i = 0; i < 600; i++, n++) {
            char s[64];
            size_t len = 0;
            for (int j = (int)(rng_next(&seed) % 10); j > 0; j--) {
                const char *p = G[k].pieces[rng_next(&seed) % 5];
                memcpy(s + len, p, strlen(p));
                len += strlen(p);
            }
            int a = gbo_match(o, s, len), b = grammar_match(r, s, len);
            agree += a == b;
            yes += a == 1;
            if (a != b && n + 1 - agree <= 3)
                printf("# grammar %zu: \"%.*s\": oracle %d, grammar_match %d\n", k, (int)len, s, a, b);
        }
        grammar_rules_free(r);
        free(o);
    }
    CHECK(agree == n && yes > n / 50 && yes < n - n / 50,
          "the oracle and grammar_match agree on %d of %d random strings (%d in the grammars)", agree, n, yes);
}

typedef struct { const char *gbnf, *s; int prefix, whole; } pcase;

/* What "prefix" means: bytes some string of the grammar starts with, also
 * ending inside a UTF-8 character that a string can go on with. */
static const pcase prefixes[] = {
    { "root ::= \"abc\"", "", 1, 0 },
    { "root ::= \"abc\"", "ab", 1, 0 },
    { "root ::= \"abc\"", "abc", 1, 1 },
    { "root ::= \"abc\"", "abd", 0, 0 },
    { "root ::= \"abc\"", "abcd", 0, 0 },
    { "root ::= [a-c]+ \";\"", "cab", 1, 0 },
    { "root ::= [a-c]+ \";\"", "cabd", 0, 0 },
    { "root ::= [a-c]+ \";\"", ";", 0, 0 },
    { "root ::= (\"ab\" | \"c\"){2,3} \".\"", "abcab", 1, 0 },
    { "root ::= (\"ab\" | \"c\"){2,3} \".\"", "abcabc", 0, 0 },
    { "root ::= (\"ab\" | \"c\"){2,3} \".\"", "c.", 0, 0 },
    { "root ::= (\"ab\" | \"c\"){2,3} \".\"", "cc.", 1, 1 },
    { "root ::= \"(\" root \")\" | \"x\"", "(((x)", 1, 0 },
    { "root ::= \"(\" root \")\" | \"x\"", "(((x))))", 0, 0 },
    { "root ::= \"\xe2\x82\xac\" \"!\"", "\xe2\x82", 1, 0 },   /* half a character */
    { "root ::= \"\xe2\x82\xac\" \"!\"", "\xe2\x83", 0, 0 },   /* half of another */
    { "root ::= [^a-z]", "\xed\xa0", 0, 0 },                    /* a surrogate's start: never UTF-8 */
    { "root ::= [^a-z]", "\xe0\x80", 0, 0 },                    /* an overlong form's start */
    { "root ::= [^a-z]", "\xc3", 1, 0 },
    { "root ::= [^\\x00-\\uD7FF]", "\xed", 0, 0 },              /* ED begins only U+D000..U+D7FF here */
    { "root ::= [^\\x00-\\uD7FF]", "\xee", 1, 0 },
    { "root ::= [\\u0100-\\U0010FFFF]*", "\xf4\x8f\xbf\xbf", 1, 1 },
    { "root ::= [\\u0100-\\U0010FFFF]*", "\xf4\x90", 0, 0 },     /* beyond U+10FFFF */
    { "root ::= x* \"y\"\nx ::= \"a\" | \"\"", "aay", 1, 1 },    /* a nullable repetition */
    { "root ::= .{2} [\\n]", "\xc3\xa9\n", 1, 0 },                   /* . takes a newline too */
    { "root ::= .{2} [\\n]", "\xc3\xa9z\n", 1, 1 },
};

static void test_oracle(void)
{
    int agree = 0, n = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++, n++) {
        gbo_grammar *g = oracle_new(cases[i].gbnf);
        int want = i == 37 ? 1 : cases[i].want;   /* the library refuses that grammar; its strings are still x* */
        int got = g ? gbo_match(g, cases[i].s, strlen(cases[i].s)) : -100;
        if (got == want) agree++;
        else printf("# oracle, grammar case %zu: %d, want %d\n", i, got, want);
        free(g);
    }
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++, n++) {
        const pcase *c = &prefixes[i];
        gbo_grammar *g = oracle_new(c->gbnf);
        size_t len = strlen(c->s);
        int p = g ? gbo_prefix(g, c->s, len) : -100, w = g ? gbo_match(g, c->s, len) : -100;
        if (p == c->prefix && w == c->whole) agree++;
        else printf("# oracle, prefix case %zu: prefix %d whole %d, want %d %d\n", i, p, w, c->prefix, c->whole);
        free(g);
    }
    CHECK(agree == n, "the oracle gives the hand-written answers: %d of %d cases (whole strings and prefixes)", agree, n);
    oracle_vs_match();
}

/* ---- on the bundled model's vocabulary ---- */

static mor_model *model;
static int32_t V;

static size_t text_of(const mor_token *t, int32_t n, char *buf, size_t cap)
{
    size_t len = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t k = 0;
        if (mor_token_to_piece(model, t[i], buf + len, cap - len, &k)) return (size_t)-1;
        len += k;
    }
    return len;
}

/* The mask equals "accepting the token succeeds" for every token of the
 * vocabulary, after the tokens hist[0..n). */
static int mask_exact(const char *gbnf, const mor_token *hist, int32_t n)
{
    mor_grammar *a = NULL, *b = NULL;
    float *l = malloc(sizeof *l * (size_t)V);
    int ok = l && !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &a) &&
             !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &b);
    for (int32_t i = 0; ok && i < n; i++) ok = !mor_grammar_accept(a, hist[i]);
    for (int32_t t = 0; ok && t < V; t++) l[t] = 0.0f;
    ok = ok && !mor_grammar_apply(a, l, V);
    int32_t allowed = 0;
    for (int32_t t = 0; ok && t < V; t++) {
        mor_grammar_reset(b);
        int replay = 1;
        for (int32_t i = 0; i < n && replay; i++) replay = !mor_grammar_accept(b, hist[i]);
        int acc = replay && mor_grammar_accept(b, t) == MOR_OK;
        if (acc != (l[t] == 0.0f)) { printf("# token %d: mask %d, accept %d\n", t, l[t] == 0.0f, acc); ok = 0; }
        allowed += acc;
    }
    mor_grammar_free(a);
    mor_grammar_free(b);
    free(l);
    return ok ? allowed : -1;
}

static const char *JSONISH =
    "root ::= \"{\" ws pair (ws \",\" ws pair){0,2} ws \"}\"\n"
    "pair ::= str ws \":\" ws val\n"
    "val  ::= str | num | \"true\" | \"false\" | \"[\" ws (val (ws \",\" ws val)*)? ws \"]\"\n"
    "str  ::= \"\\\"\" [a-z ]{1,12} \"\\\"\"\n"
    "num  ::= \"-\"? [0-9]{1,6}\n"
    "ws   ::= \" \"?\n";

/* ---- masks at many states: the mask, accepting each token, and the
 * oracle agree on every token of the vocabulary ---- */

/* The vocabulary as the oracle sees it: every token's bytes, and the tokens
 * a grammar may write (text, not the end token) sorted by their bytes. */
static struct { char **piece; size_t *len; int *ord; int n_ord; size_t maxlen; } voc;

static int by_bytes(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    size_t la = voc.len[a], lb = voc.len[b];
    int c = memcmp(voc.piece[a], voc.piece[b], la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static int vocab_init(void)
{
    voc.piece = calloc((size_t)V, sizeof *voc.piece);
    voc.len = calloc((size_t)V, sizeof *voc.len);
    voc.ord = malloc(sizeof *voc.ord * (size_t)V);
    if (!voc.piece || !voc.len || !voc.ord) return -1;
    for (mor_token t = 0; t < V; t++) {
        char buf[256];
        size_t k = 0;
        if (mor_token_to_piece(model, t, buf, sizeof buf, &k) || !(voc.piece[t] = malloc(k + 1))) return -1;
        memcpy(voc.piece[t], buf, k);
        voc.len[t] = k;
        if (k > voc.maxlen) voc.maxlen = k;
        if (k && tokenizer_is_text(model->tok, t) && t != mor_model_token_eos(model)) voc.ord[voc.n_ord++] = t;
    }
    qsort(voc.ord, (size_t)voc.n_ord, sizeof *voc.ord, by_bytes);
    return 0;
}

static void vocab_free(void)
{
    for (int32_t t = 0; voc.piece && t < V; t++) free(voc.piece[t]);
    free(voc.piece);
    free(voc.len);
    free(voc.ord);
}

/* A walk down one grammar: the library's state (a), a probe at the same
 * state (b), the oracle's (c, u), and the tokens and text so far. */
typedef struct {
    mor_grammar *a, *b;
    gbo_chart    c;
    gbo_u8       u;
    mor_token    hist[64];
    int          n;
    char         text[64 * 256];
    size_t       len;
    float       *l;    /* [V] the mask */
    uint8_t     *ok;   /* [V] the oracle's */
    long long    states, allowed;
    int          bad, partial;   /* partial: states inside a UTF-8 character */
} walker;

/* Token by token at the walker's state: the mask (left in w->l), accepting
 * on b (put back by a reset and a replay after each token it takes) and the
 * oracle must agree. */
static void check_state(walker *w)
{
    mor_token eos = mor_model_token_eos(model);
    for (int32_t i = 0; i < V; i++) w->l[i] = 0.0f;
    if (mor_grammar_apply(w->a, w->l, V))   /* nothing can come next: the logits stay, the mask is empty */
        for (int32_t i = 0; i < V; i++) w->l[i] = -HUGE_VALF;
    memset(w->ok, 0, (size_t)(uint32_t)V);
    gbo_extend_all(&w->c, w->u, (const char *const *)voc.piece, voc.len, voc.ord, voc.n_ord, w->ok, voc.maxlen);
    if (eos >= 0) w->ok[eos] = !w->u.need && gbo_complete(&w->c);
    for (mor_token t = 0; t < V; t++) {
        int acc = mor_grammar_accept(w->b, t) == MOR_OK, replay = 1;
        if (acc) {
            mor_grammar_reset(w->b);
            for (int i = 0; i < w->n && replay; i++) replay = mor_grammar_accept(w->b, w->hist[i]) == MOR_OK;
        }
        int mask = w->l[t] == 0.0f;
        w->allowed += mask;
        if ((mask != acc || mask != w->ok[t] || !replay) && w->bad++ < 3)
            printf("# after \"%.*s\": token %d \"%.*s\": mask %d, accept %d, oracle %d%s\n", (int)w->len, w->text, (int)t,
                   (int)voc.len[t], voc.piece[t], mask, acc, w->ok[t], replay ? "" : ", replay failed");
    }
    w->states++;
    w->partial += w->u.need > 0;
}

/* An allowed token, seeded: one byte long half the time (to end strings
 * and split characters), else any. -1 if none. */
static mor_token pick_token(const float *l, uint64_t *seed)
{
    int32_t n = 0, n1 = 0;
    for (int32_t t = 0; t < V; t++)
        if (l[t] == 0.0f) { n++; n1 += voc.len[t] == 1; }
    int one = n1 && rng_next(seed) % 2 == 0;
    if (!n) return -1;
    int32_t k = (int32_t)(rng_next(seed) % (uint64_t)(one ? n1 : n));
    for (int32_t t = 0; t < V; t++)
        if (l[t] == 0.0f && (!one || voc.len[t] == 1) && k-- == 0) return t;
    return -1;
}

/* n_paths seeded walks of up to max_len tokens under gbnf, each state
 * checked over the whole vocabulary; utf8: some states must be inside a
 * character (a byte token split it). */
static void mask_walks(const char *what, const char *gbnf, int n_paths, int max_len, uint64_t seed, int utf8)
{
    gbo_grammar *o = oracle_new(gbnf);
    walker *w = calloc(1, sizeof *w);
    int ok = o && w && !gbo_chart_init(&w->c, o) && (w->l = malloc(sizeof *w->l * (size_t)V)) && (w->ok = malloc((size_t)V)) &&
             !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &w->a) &&
             !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &w->b);
    int ends = 0;
    for (int p = 0; ok && p < n_paths; p++) {
        mor_grammar_reset(w->a);
        mor_grammar_reset(w->b);
        gbo_truncate(&w->c, 1);
        w->u = (gbo_u8){ 0, 0, 0 };
        w->n = 0;
        w->len = 0;
        for (;;) {
            check_state(w);
            if (w->n == max_len || (mor_grammar_state(w->a) & MOR_GRAMMAR_MUST_END)) break;
            mor_token t = pick_token(w->l, &seed);
            if (t < 0 || t == mor_model_token_eos(model)) { ends += t >= 0; break; }
            if (mor_grammar_accept(w->a, t) || mor_grammar_accept(w->b, t) || !gbo_feed(&w->c, &w->u, voc.piece[t], voc.len[t])) {
                if (w->bad++ < 3) printf("# %s: token %d, allowed, not taken\n", what, (int)t);
                break;
            }
            w->hist[w->n++] = t;
            memcpy(w->text + w->len, voc.piece[t], voc.len[t]);
            w->len += voc.len[t];
        }
        ends += (mor_grammar_state(w->a) & MOR_GRAMMAR_MUST_END) != 0;
    }
    CHECK(ok && !w->bad && !w->c.overflow && w->states >= n_paths * 4 && (!utf8 || w->partial > 0),
          "%s: mask == accept == oracle at %lld states x %d tokens (%lld allowed; %d states inside a character; %d of %d walks "
          "ended)", what, ok ? w->states : 0, (int)V, ok ? w->allowed : 0, ok ? w->partial : 0, ends, n_paths);
    if (w) {
        mor_grammar_free(w->a);
        mor_grammar_free(w->b);
        gbo_chart_free(&w->c);
        free(w->l);
        free(w->ok);
    }
    free(w);
    free(o);
}

/* Grammars for the walks: JSON-like; repetitions and nullable groups;
 * characters of 2 and 3 bytes (the byte tokens split them) and negated
 * classes; recursion with strings. */
static const char *REPEAT =
    "root ::= item (\",\" \" \"? item)* ws \".\"?\n"
    "item ::= [a-z]+ (\"=\" [0-9]{1,3})? | \"(\" (item (\"|\" item)*)? \")\"\n"
    "ws   ::= [ ]*\n";
static const char *UTF8 =
    "root ::= word (\" \" word){0,8}\n"
    "word ::= [a-z]{1,8} [^\\x00-\\x7f]? | [\xc3\xa0-\xc3\xbf]+ | \"\xe2\x82\xac\" [0-9]* | [^\\x00-\\x7f]\n";
static const char *NESTED =
    "root ::= \"(\" list \")\"\n"
    "list ::= (elem (\" \" elem)*)?\n"
    "elem ::= [a-z0-9]+ | \"(\" list \")\" | \"\\\"\" [^\"\\\\\\n]* \"\\\"\"\n";

static void mask_walks_all(void)
{
    /* under emulation (MOR_TEST_EMULATED, tests/cross-test.sh: ~100x slower)
     * 2 walks a grammar: the same checks, the cross runs are for the kernels */
    const int n = getenv("MOR_TEST_EMULATED") ? 2 : 8;
    mask_walks("JSON-like", JSONISH, n, 40, 1, 0);
    mask_walks("repetitions, nullable groups", REPEAT, n, 30, 2, 0);
    mask_walks("UTF-8, negated classes", UTF8, n, 24, 3, 1);
    mask_walks("recursion, strings", NESTED, n, 30, 4, 0);
}

/* ---- lazy grammars (mor_grammar_set_triggers): free until a trigger word,
 * then the grammar from the word's first byte. The reference is the
 * oracle's: before a trigger a token is allowed unless the output's text
 * with it holds a word and the text from the word's first byte is not a
 * prefix of the grammar; after it, as an eager grammar over that text. ---- */

static const char *LAZY = "root ::= \"<call>\" [a-z]{1,6} (\",\" [a-z]{1,6}){0,3} \"</call>\"\n";
static const char *const LAZY_WORDS[] = { "<call>", "@@" };   /* the grammar cannot begin with "@@" */

/* Where the first word begins in s[0..n), or -1; none begins before
 * `from` (the text before a token, which held none, less a word's length). */
static int lazy_ref_find(const char *s, size_t n, size_t from)
{
    int first = -1;
    for (int w = 0; w < 2; w++) {
        size_t k = strlen(LAZY_WORDS[w]);
        for (size_t i = from; i + k <= n && (first < 0 || (int)i < first); i++)
            if (!memcmp(s + i, LAZY_WORDS[w], k)) { first = (int)i; break; }
    }
    return first;
}

/* The oracle's chart c (allocated once: a chart per token is megabytes
 * zeroed, minutes under the sanitizers) over bytes s[0..n) from the start:
 * 1 when they are a prefix of a string of the grammar (u: the partial
 * character they end in). */
static int lazy_ref_read(gbo_chart *c, gbo_u8 *u, const char *s, size_t n)
{
    gbo_truncate(c, 1);
    *u = (gbo_u8){ 0, 0, 0 };
    return gbo_feed(c, u, s, n) && (!u->need || gbo_partial_ok(c, u));
}

/* The oracle's mask after text[0..len) (text tokens only; at: where the
 * grammar began, -1 before a trigger) into ok[]. */
static void lazy_ref_mask(gbo_chart *c, const char *text, size_t len, int at, uint8_t *ok)
{
    mor_token eos = mor_model_token_eos(model);
    gbo_u8 u;
    for (mor_token t = 0; t < V; t++) ok[t] = at < 0;   /* control tokens and the EOS: free text only */
    if (at >= 0) {   /* every token from the chart of the text since the word */
        int alive = lazy_ref_read(c, &u, text + at, len - (size_t)at);
        if (alive) gbo_extend_all(c, u, (const char *const *)voc.piece, voc.len, voc.ord, voc.n_ord, ok, voc.maxlen);
        if (eos >= 0) ok[eos] = alive && !u.need && gbo_complete(c);
        return;
    }
    char buf[64 * 256 + 256];
    memcpy(buf, text, len);
    for (int i = 0; i < voc.n_ord; i++) {   /* free, but where the token completes a word */
        mor_token t = voc.ord[i];
        memcpy(buf + len, voc.piece[t], voc.len[t]);
        int w = lazy_ref_find(buf, len + voc.len[t], len > 8 ? len - 8 : 0);
        ok[t] = w < 0 || lazy_ref_read(c, &u, buf + w, len + voc.len[t] - (size_t)w);
    }
}

/* Walks: free tokens, then the tokens of a script (a word, maybe split
 * between tokens, and text after it), then free tokens; at each state the
 * mask and the oracle agree on every token, and accepting agrees with them
 * on every token either refuses and on a seeded sample of 24 others (before
 * a trigger nearly every token is accepted, and each one taken needs a
 * replay of the walk: all of them made the test minutes long under the
 * sanitizers). */
static void lazy_walks(void)
{
    static const char *const scripts[] = { "<call>", "x<call>ab", "<ca", "<call>abc,de</call>", "@@",
                                           "<c@@all>", "<call>a,b,c,d</call>", "<<call>q" };
    gbo_grammar *o = oracle_new(LAZY);
    mor_grammar *a = NULL, *b = NULL;
    float *l = malloc(sizeof *l * (size_t)V);
    uint8_t *ok = malloc((size_t)V);
    gbo_chart chart = { 0 };
    int good = o && l && ok && !gbo_chart_init(&chart, o) && !mor_grammar_create(model, LAZY, strlen(LAZY), NULL, NULL, 0, &a) &&
               !mor_grammar_create(model, LAZY, strlen(LAZY), NULL, NULL, 0, &b) &&
               !mor_grammar_set_triggers(a, LAZY_WORDS, 2) && !mor_grammar_set_triggers(b, LAZY_WORDS, 2);
    uint64_t seed = 11;
    int bad = 0, states = 0, triggered = 0, refused = 0, ended = 0;
    long long checked = 0;
    for (int p = 0; good && p < (int)(sizeof scripts / sizeof *scripts) * 2; p++) {
        mor_token hist[64], scr[32];
        int n = 0, at = -1;
        int32_t n_scr = 0, k_scr = 0;
        char text[64 * 256];
        size_t len = 0;
        const char *sc = scripts[p % 8];
        mor_tokenize(model, sc, (int32_t)strlen(sc), 0, scr, 32, &n_scr);
        mor_grammar_reset(a);
        mor_grammar_reset(b);
        const int n_free = (int)(rng_next(&seed) % 4);
        while (n < 40) {
            for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
            if (mor_grammar_apply(a, l, V)) for (int32_t t = 0; t < V; t++) l[t] = -HUGE_VALF;
            lazy_ref_mask(&chart, text, len, at, ok);
            uint64_t pick = rng_next(&seed);
            for (mor_token t = 0; t < V; t++) {
                int mask = l[t] == 0.0f;
                refused += !mask && at < 0;
                if (mask != ok[t] && bad++ < 3)
                    printf("# lazy, after \"%.*s\": token %d \"%.*s\": mask %d, oracle %d\n", (int)len, text, (int)t,
                           (int)voc.len[t], voc.piece[t], mask, ok[t]);
                if (mask && ok[t] && (uint64_t)t % ((uint64_t)V / 24 + 1) != pick % ((uint64_t)V / 24 + 1)) continue;
                int acc = mor_grammar_accept(b, t) == MOR_OK, replay = 1;
                if (acc) {
                    mor_grammar_reset(b);
                    for (int i = 0; i < n && replay; i++) replay = mor_grammar_accept(b, hist[i]) == MOR_OK;
                }
                checked++;
                if ((mask != acc || !replay) && bad++ < 3)
                    printf("# lazy, after \"%.*s\": token %d \"%.*s\": mask %d, accept %d\n", (int)len, text, (int)t,
                           (int)voc.len[t], voc.piece[t], mask, acc);
            }
            states++;
            gbo_u8 u8;
            int st = mor_grammar_state(a),
                want = at < 0 ? MOR_GRAMMAR_CAN_END
                              : lazy_ref_read(&chart, &u8, text + at, len - (size_t)at) && !u8.need && gbo_complete(&chart);
            if ((at < 0 ? st != want : (st & MOR_GRAMMAR_CAN_END) != want) && bad++ < 3)
                printf("# lazy, after \"%.*s\": state %d\n", (int)len, text, st);
            if (st & MOR_GRAMMAR_MUST_END) { ended++; break; }
            /* the next token: free, the script's next (while allowed), free */
            mor_token t = -1;
            if (n >= n_free && k_scr < n_scr) t = l[scr[k_scr]] == 0.0f ? scr[k_scr++] : (k_scr = n_scr, -1);
            for (int tries = 0; t < 0 && tries < 1000; tries++) {
                mor_token c = voc.ord[rng_next(&seed) % (uint64_t)voc.n_ord];
                if (l[c] == 0.0f && (at >= 0 || voc.len[c] == 1 || tries > 100)) t = c;
            }
            if (t < 0 || mor_grammar_accept(a, t) || mor_grammar_accept(b, t)) break;
            hist[n++] = t;
            memcpy(text + len, voc.piece[t], voc.len[t]);
            len += voc.len[t];
            if (at < 0 && (at = lazy_ref_find(text, len, 0)) >= 0) triggered++;
        }
    }
    CHECK(good && !bad && triggered >= 4 && refused > 0 && ended >= 1,
          "lazy grammar: mask == oracle at %d states x %d tokens, == accept on %lld of them (%d walks triggered, %d "
          "ended; before a trigger, %d tokens refused for completing a word the grammar cannot continue)", states,
          (int)V, checked, triggered, ended, refused);
    gbo_chart_free(&chart);
    mor_grammar_free(a);
    mor_grammar_free(b);
    free(o);
    free(l);
    free(ok);
}

/* mor_grammar_set_triggers' errors change nothing; no words: eager again. */
static void lazy_errors(void)
{
    mor_grammar *g = NULL, *e = NULL;
    float *l = malloc(sizeof *l * (size_t)V), *le = malloc(sizeof *le * (size_t)V);
    char long_word[80];
    memset(long_word, 'x', sizeof long_word - 1);
    long_word[sizeof long_word - 1] = 0;
    const char *const bad1[] = { "<call>", "" }, *const bad2[] = { long_word }, *const bad3[] = { NULL };
    const char *many[17];
    for (int i = 0; i < 17; i++) many[i] = "<call>";
    int ok = l && le && !mor_grammar_create(model, LAZY, strlen(LAZY), NULL, NULL, 0, &g) &&
             !mor_grammar_create(model, LAZY, strlen(LAZY), NULL, NULL, 0, &e) && !mor_grammar_set_triggers(g, LAZY_WORDS, 2);
    CHECK(ok && mor_grammar_set_triggers(NULL, LAZY_WORDS, 2) == MOR_E_INVALID_ARG &&
          mor_grammar_set_triggers(g, bad1, 2) == MOR_E_INVALID_ARG && mor_grammar_set_triggers(g, bad2, 1) == MOR_E_INVALID_ARG &&
          mor_grammar_set_triggers(g, bad3, 1) == MOR_E_INVALID_ARG && mor_grammar_set_triggers(g, many, 17) == MOR_E_INVALID_ARG &&
          mor_grammar_set_triggers(g, NULL, 1) == MOR_E_INVALID_ARG && mor_grammar_state(g) == MOR_GRAMMAR_CAN_END,
          "set_triggers: NULL, empty, too long and too many words are refused, the grammar stays lazy (%s)", mor_last_error());
    int32_t n_free = 0, same = 1;
    for (int32_t t = 0; ok && t < V; t++) l[t] = le[t] = 0.0f;
    ok = ok && !mor_grammar_apply(g, l, V);
    for (int32_t t = 0; ok && t < V; t++) n_free += l[t] == 0.0f;
    ok = ok && !mor_grammar_set_triggers(g, NULL, 0) && !mor_grammar_apply(g, l, V) && !mor_grammar_apply(e, le, V);
    for (int32_t t = 0; ok && t < V; t++) same &= (l[t] == 0.0f) == (le[t] == 0.0f);
    CHECK(ok && n_free > V / 2 && same && mor_grammar_state(g) == 0,
          "lazy: %d of %d tokens free before a trigger; no words makes it eager again (the eager grammar's mask)",
          (int)n_free, (int)V);
    mor_grammar_free(g);
    mor_grammar_free(e);
    free(l);
    free(le);
}

/* Generate up to max tokens under the grammar; the text must be a string
 * of the grammar when the grammar ended it. */
static int generate(mor_context *ctx, mor_grammar *g, mor_sampler *s, char *text, size_t cap, int32_t max, int *ended)
{
    mor_token prompt[8];
    int32_t np = 0;
    if (mor_tokenize(model, "The answer:", 11, 0, prompt, 8, &np)) return -1;
    mor_kv_clear(mor_context_kv(ctx));
    mor_batch *b = NULL;
    if (mor_batch_create(64, &b)) return -1;
    for (int32_t i = 0; i < np; i++) mor_batch_add(b, prompt[i], i, 0, i == np - 1);
    mor_token out[256];
    int32_t n = 0;
    float *l = malloc(sizeof *l * (size_t)V);
    *ended = 0;
    int ok = l && !mor_decode(ctx, b);
    int32_t row = np - 1;
    while (ok && n < max) {
        if (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END) { *ended = 1; break; }
        memcpy(l, mor_get_logits(ctx, row), sizeof *l * (size_t)V);
        mor_token t;
        ok = !mor_grammar_apply(g, l, V) && !mor_sampler_sample(s, l, V, &t) && !mor_grammar_accept(g, t);
        if (!ok) break;
        if (t == mor_model_token_eos(model)) { *ended = 1; break; }
        out[n++] = t;
        mor_batch_clear(b);
        mor_batch_add(b, t, np + n - 1, 0, 1);
        ok = !mor_decode(ctx, b);
        row = 0;
    }
    free(l);
    mor_batch_free(b);
    if (!ok) return -1;
    size_t len = text_of(out, n, text, cap - 1);
    if (len == (size_t)-1) return -1;
    text[len] = 0;
    return (int)len;
}


/* Tokens of one generation alone (the server's reference): the prompt in
 * one decode, then one token per decode; grammar g may be NULL. The EOS,
 * when drawn, is the last token (as the server returns a stop token). */
static int32_t alone(mor_context *ctx, mor_grammar *g, const mor_sampler_params *sp, const mor_token *prompt, int32_t np,
                     mor_token *out, int32_t max)
{
    mor_kv_clear(mor_context_kv(ctx));
    mor_batch *b = NULL;
    mor_sampler *s = NULL;
    float *l = malloc(sizeof *l * (size_t)V);
    if (!l || mor_batch_create(64, &b) || mor_sampler_create(sp, &s)) return -1;
    for (int32_t i = 0; i < np; i++) { mor_batch_add(b, prompt[i], i, 0, i == np - 1); mor_sampler_accept(s, prompt[i]); }
    int32_t n = 0, row = np - 1;
    int ok = !mor_decode(ctx, b);
    while (ok && n < max) {
        memcpy(l, mor_get_logits(ctx, row), sizeof *l * (size_t)V);
        mor_token t;
        ok = (!g || !mor_grammar_apply(g, l, V)) && !mor_sampler_sample(s, l, V, &t) && (!g || !mor_grammar_accept(g, t));
        if (!ok) break;
        out[n++] = t;
        if (t == mor_model_token_eos(model) || (g && (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END))) break;
        mor_batch_clear(b);
        mor_batch_add(b, t, np + n - 1, 0, 1);
        ok = !mor_decode(ctx, b);
        row = 0;
    }
    free(l);
    mor_batch_free(b);
    mor_sampler_free(s);
    return ok ? n : -1;
}

/* A lazy grammar in the server: free text until " the", then a phrase that
 * ends with a period; each request's tokens are those it makes alone. */
static void test_server_lazy(mor_context *ctx)
{
    static const char *gbnf = "root ::= \" the\" [a-z ,]{1,40} \".\"\n";
    const char *const word[] = { " the" };
    mor_token prompt[16];
    int32_t np = 0;
    mor_tokenize(model, "It was", 6, 0, prompt, 16, &np);
    mor_token eos = mor_model_token_eos(model);
    gbo_grammar *judge = oracle_new(gbnf);
    int good = 0, fired = 0;
    for (int mode = MOR_SERVE_SEQUENCE; mode <= MOR_SERVE_DEPTHWISE; mode++) {
        mor_server_params p;
        MOR_SERVER_PARAMS_INIT(&p);
        p.mode = mode;
        p.n_slots = 2;
        p.n_ctx = 1024;
        mor_server *srv = NULL;
        mor_request_id id[3];
        mor_sampler_params sp[3];
        int ok = judge && !mor_server_create(model, &p, &srv);
        for (int i = 0; ok && i < 3; i++) {
            MOR_SAMPLER_PARAMS_INIT(&sp[i]);
            sp[i].seed = (uint64_t)(3 + i);
            sp[i].temperature = i == 0 ? 0.0f : 1.0f;
            mor_grammar *g = NULL;
            ok = !mor_server_submit(srv, prompt, np, &sp[i], 100, &eos, 1, &id[i]) &&
                 !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &g) && !mor_grammar_set_triggers(g, word, 1) &&
                 !mor_server_set_grammar(srv, id[i], g);
            if (!ok) mor_grammar_free(g);
        }
        ok = ok && !mor_server_run(srv);
        for (int i = 0; ok && i < 3; i++) {
            mor_token got[128], want[128];
            int32_t ng = 0;
            mor_grammar *g = NULL;
            mor_server_get_tokens(srv, id[i], got, NULL, 128, &ng);
            ok = !mor_grammar_create(model, gbnf, strlen(gbnf), NULL, NULL, 0, &g) && !mor_grammar_set_triggers(g, word, 1);
            int32_t nw = ok ? alone(ctx, g, &sp[i], prompt, np, want, 100) : -1;
            char text[4096];
            int eos_end = ng > 0 && got[ng - 1] == eos;
            size_t len = text_of(got, eos_end ? ng - 1 : ng, text, sizeof text);
            char *at = len != (size_t)-1 ? memmem(text, len, " the", 4) : NULL;
            int whole = g && (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END);
            size_t rest = at ? len - (size_t)(at - text) : 0;
            int valid = !at || (whole ? gbo_match(judge, at, rest) : gbo_prefix(judge, at, rest)) == 1;
            fired += at != NULL;
            if (ok && nw == ng && !memcmp(got, want, sizeof *got * (size_t)ng) && valid) good++;
            else printf("# %s request %d: %d tokens, alone %d, valid %d: %.*s\n", mode == MOR_SERVE_DEPTHWISE ? "DEPTHWISE" :
                        "SEQUENCE", i, (int)ng, (int)nw, valid, (int)(len == (size_t)-1 ? 0 : len), text);
            mor_grammar_free(g);
        }
        mor_server_free(srv);
    }
    free(judge);
    CHECK(good == 6 && fired >= 4, "server, lazy grammar: %d of 6 requests (2 modes x 3) the tokens of alone; the text from "
          "the first \" the\" a string or prefix of the grammar's (oracle); %d triggered", good, fired);
}

/* mor_server_set_grammar: constrained requests beside an unconstrained one
 * give, bitwise, the tokens of each generated alone, and the same through
 * mor_server_submit_request. */
static void test_server(mor_context *ctx)
{
    mor_token prompt[16];
    int32_t np = 0;
    mor_tokenize(model, "Here is the record:", 19, 0, prompt, 16, &np);
    mor_token eos = mor_model_token_eos(model);
    gbo_grammar *judge = oracle_new(JSONISH);
    for (int mode = MOR_SERVE_SEQUENCE; mode <= MOR_SERVE_DEPTHWISE; mode++) {
        mor_server_params p;
        MOR_SERVER_PARAMS_INIT(&p);
        p.mode = mode;
        p.n_slots = 4;
        p.n_ctx = 1024;
        mor_server *srv = NULL;
        if (mor_server_create(model, &p, &srv)) { CHECK(0, "server: %s", mor_last_error()); free(judge); return; }
        mor_request_id id[3];
        mor_sampler_params sp[3];
        for (int i = 0; i < 3; i++) {
            MOR_SAMPLER_PARAMS_INIT(&sp[i]);
            sp[i].seed = (uint64_t)(7 + i);
            sp[i].temperature = i == 0 ? 0.0f : 1.0f;
            mor_server_submit(srv, prompt, np, &sp[i], 120, &eos, 1, &id[i]);
        }
        mor_grammar *g0 = NULL, *g1 = NULL;
        mor_grammar_create(model, JSONISH, strlen(JSONISH), NULL, NULL, 0, &g0);
        mor_grammar_create(model, JSONISH, strlen(JSONISH), NULL, NULL, 0, &g1);
        CHECK(!mor_server_set_grammar(srv, id[0], g0) && !mor_server_set_grammar(srv, id[1], g1),
              "grammars set on queued requests");
        CHECK(mor_server_set_grammar(srv, id[0], g1) == MOR_E_INVALID_ARG, "a second grammar is refused");
        CHECK(mor_server_set_grammar(srv, 99, g1) == MOR_E_OUT_OF_RANGE, "an unknown request is refused");
        mor_status st = mor_server_run(srv);
        CHECK(st == MOR_OK, "%s: run: %s", mode == MOR_SERVE_DEPTHWISE ? "DEPTHWISE" : "SEQUENCE", mor_last_error());
        CHECK(mor_server_set_grammar(srv, id[2], g1) == MOR_E_INVALID_ARG, "a finished request is refused");
        for (int i = 0; i < 3; i++) {
            mor_token got[128], want[128];
            int32_t ng = 0;
            mor_server_get_tokens(srv, id[i], got, NULL, 128, &ng);
            mor_grammar *g = NULL;
            if (i < 2) mor_grammar_create(model, JSONISH, strlen(JSONISH), NULL, NULL, 0, &g);
            int32_t nw = alone(ctx, g, &sp[i], prompt, np, want, 120);
            /* the grammar's outputs: a whole string when the EOS or the
             * grammar ended them (g, replayed alone, says which), else
             * cut at max_tokens: a prefix. The oracle judges. */
            int valid = 1, whole = 0;
            if (i < 2) {
                int eos_end = ng > 0 && got[ng - 1] == eos;
                char text[4096];
                size_t len = text_of(got, eos_end ? ng - 1 : ng, text, sizeof text);
                whole = eos_end || (g && (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END));
                valid = judge && len != (size_t)-1 &&
                        (whole ? gbo_match(judge, text, len) : gbo_prefix(judge, text, len)) == 1;
            }
            CHECK(nw == ng && ng > 0 && !memcmp(got, want, sizeof *got * (size_t)ng) && valid,
                  "%s request %d (%s): %d tokens, the same as alone (%d)%s", mode == MOR_SERVE_DEPTHWISE ? "DEPTHWISE" : "SEQUENCE",
                  i, i < 2 ? "grammar" : "free", (int)ng, (int)nw,
                  i == 2 ? "" : whole ? ", a whole string of the grammar (oracle)" : ", a prefix of the grammar's strings (oracle)");
            mor_grammar_free(g);
        }
        /* the same requests through mor_server_submit_request, the grammars in its params: the same tokens */
        mor_server *two = NULL;
        int same = !mor_server_create(model, &p, &two);
        for (int i = 0; i < 3 && same; i++) {
            mor_request_params rp;
            MOR_REQUEST_PARAMS_INIT(&rp);
            rp.sampling = &sp[i]; rp.max_tokens = 120; rp.stop = &eos; rp.n_stop = 1;
            if (i < 2) same = !mor_grammar_create(model, JSONISH, strlen(JSONISH), NULL, NULL, 0, &rp.grammar);
            mor_request_id id2 = -1;
            if (same && mor_server_submit_request(two, prompt, np, &rp, &id2)) {
                same = 0;
                mor_grammar_free(rp.grammar);   /* still ours */
            }
        }
        same = same && !mor_server_run(two);
        for (int i = 0; i < 3 && same; i++) {
            mor_token a[128], b[128];
            int32_t na = -1, nb = -2;
            same = !mor_server_get_tokens(srv, id[i], a, NULL, 128, &na) &&
                   !mor_server_get_tokens(two, i, b, NULL, 128, &nb) && na == nb &&
                   !memcmp(a, b, sizeof *a * (size_t)na);
        }
        CHECK(same, "%s: the grammars given to mor_server_submit_request: the same tokens as mor_server_set_grammar's",
              mode == MOR_SERVE_DEPTHWISE ? "DEPTHWISE" : "SEQUENCE");
        mor_server_free(two);
        mor_server_free(srv);
    }
    free(judge);
}

static void test_model(void)
{
    if (mor_model_load_file("models/brown-mor.gguf", NULL, &model)) { SKIP("models/brown-mor.gguf: %s", mor_last_error()); return; }
    V = mor_model_n_vocab(model);

    /* the mask is exactly the tokens whose bytes can continue */
    mor_token hist[4];
    int32_t nh = 0;
    int a0 = mask_exact(JSONISH, hist, 0);
    CHECK(a0 >= 1 && a0 < 20, "at the start only '{'-tokens are allowed (%d)", a0);
    mor_tokenize(model, "{\"ab", 4, 0, hist, 4, &nh);
    int a1 = mask_exact(JSONISH, hist, nh);
    CHECK(a1 > 20, "inside a string many tokens are allowed (%d tokens after %d)", a1, nh);
    const char *utf = "root ::= \"\xc3\xa9t\xc3\xa9\" | [\xe2\x82\xa0-\xe2\x82\xbf]+";
    int a2 = mask_exact(utf, hist, 0);
    CHECK(a2 >= 2, "tokens ending inside a UTF-8 character are allowed where a character can start with them (%d)", a2);
    mor_token c3 = -1;
    for (mor_token t = 0; t < V && c3 < 0; t++) {
        char p[8];
        size_t k;
        if (!mor_token_to_piece(model, t, p, sizeof p, &k) && k == 1 && (unsigned char)p[0] == 0xC3) c3 = t;
    }
    if (c3 >= 0) {
        int a3 = mask_exact(utf, &c3, 1);
        CHECK(a3 >= 1, "after a token with half a character, its rest is allowed (%d)", a3);
        mor_grammar *g = NULL;
        mor_grammar_create(model, utf, strlen(utf), NULL, NULL, 0, &g);
        CHECK(g && !mor_grammar_accept(g, c3) && mor_grammar_state(g) == 0, "half a character: the output cannot end");
        mor_grammar_free(g);
    } else SKIP("the vocabulary has no token of the byte 0xC3");

    /* errors */
    mor_grammar *g = NULL;
    CHECK(mor_grammar_create(model, "root ::= x", 10, NULL, NULL, 0, &g) == MOR_E_INVALID_ARG && !g,
          "a bad grammar is refused: %s", mor_last_error());
    mor_token bad = V;
    CHECK(mor_grammar_create(model, "root ::= \"a\"", 12, NULL, &bad, 1, &g) == MOR_E_OUT_OF_RANGE && !g,
          "an end token out of range is refused");
    mor_token none[1];
    CHECK(!mor_grammar_create(model, "root ::= \"a\"", 12, NULL, none, 0, &g), "a grammar without end tokens");
    float *l = malloc(sizeof *l * (size_t)V);
    for (int32_t t = 0; t < V; t++) l[t] = 1.0f;
    mor_token ta = -1;
    for (mor_token t = 0; t < V && ta < 0; t++) {
        char p[8];
        size_t k;
        if (!mor_token_to_piece(model, t, p, sizeof p, &k) && k == 1 && p[0] == 'a') ta = t;
    }
    CHECK(!mor_grammar_apply(g, l, V) && l[ta] == 1.0f, "'a' allowed");
    CHECK(mor_grammar_accept(g, ta == 0 ? 1 : 0) == MOR_E_INVALID_ARG && mor_grammar_state(g) == 0,
          "a token the grammar refuses is refused, changing nothing");
    CHECK(!mor_grammar_accept(g, ta) && mor_grammar_state(g) == (MOR_GRAMMAR_CAN_END | MOR_GRAMMAR_MUST_END),
          "after 'a' the output must end");
    for (int32_t t = 0; t < V; t++) l[t] = 1.0f;
    CHECK(mor_grammar_apply(g, l, V) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "complete") && l[ta] == 1.0f,
          "complete with no end token: a clear error, logits unchanged (%s)", mor_last_error());
    CHECK(mor_grammar_apply(g, l, V - 1) == MOR_E_INVALID_ARG, "a wrong n_vocab is refused");
    mor_grammar_reset(g);
    CHECK(mor_grammar_state(g) == 0 && !mor_grammar_apply(g, l, V), "reset: back to the start");
    mor_grammar_free(g);
    /* with the EOS as end token: only it after a complete output */
    mor_token eos = mor_model_token_eos(model);
    CHECK(!mor_grammar_create(model, "root ::= \"a\"", 12, NULL, NULL, 0, &g) && !mor_grammar_accept(g, ta),
          "grammar with EOS");
    for (int32_t t = 0; t < V; t++) l[t] = 1.0f;
    int n_ok = 0;
    CHECK(!mor_grammar_apply(g, l, V), "apply after a complete output");
    for (int32_t t = 0; t < V; t++) n_ok += l[t] == 1.0f;
    CHECK(n_ok == 1 && eos >= 0 && l[eos] == 1.0f, "only the EOS is allowed then");
    CHECK(!mor_grammar_accept(g, eos) && mor_grammar_accept(g, ta) == MOR_E_INVALID_ARG, "nothing after the EOS");
    mor_grammar_free(g);
    free(l);

    /* masks at many states of seeded walks, over the whole vocabulary */
    if (vocab_init()) CHECK(0, "the vocabulary's pieces");
    else { mask_walks_all(); lazy_walks(); lazy_errors(); }
    vocab_free();

    /* constrained generation: every output is a string of the grammar */
    mor_context *ctx = NULL;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 512;
    cp.n_batch = 64;
    grammar_rules *rules = NULL;
    if (mor_context_create(model, &cp, &ctx) || grammar_parse(JSONISH, strlen(JSONISH), NULL, "t", &rules)) {
        CHECK(0, "context: %s", mor_last_error());
        mor_model_free(model);
        return;
    }
    int good = 0, ended = 0, runs = 7;   /* few: decoding is slow under emulation (cross-test); the last cut short */
    gbo_grammar *judge = oracle_new(JSONISH);
    for (int seed = 0; seed < runs; seed++) {
        mor_sampler_params sp;
        MOR_SAMPLER_PARAMS_INIT(&sp);
        sp.seed = (uint64_t)seed;
        sp.temperature = seed == 0 ? 0.0f : 1.0f;
        sp.top_k = 0; sp.top_p = 1.0f; sp.min_p = 0.0f;
        mor_sampler *s = NULL;
        mor_grammar_create(model, JSONISH, strlen(JSONISH), NULL, NULL, 0, &g);
        mor_sampler_create(&sp, &s);
        char text[4096];
        int end = 0;
        int32_t max = seed == runs - 1 ? 12 : 150;
        int len = g && s && judge ? generate(ctx, g, s, text, sizeof text, max, &end) : -1;
        /* an ended output is a whole string (to the oracle, and to the
         * library's own matcher); one cut at the token limit a prefix of one */
        int m = len < 0 ? -1 : end ? gbo_match(judge, text, (size_t)len) : gbo_prefix(judge, text, (size_t)len);
        if (end && m == 1) m = grammar_match(rules, text, (size_t)len);
        ended += len >= 0 && end;
        good += m == 1;
        if (m != 1)
            printf("# seed %d (%s): not %s of the grammar: %.300s %s\n", seed, end ? "ended" : "cut",
                   end ? "a string" : "a prefix", len >= 0 ? text : "", len >= 0 ? "" : mor_last_error());
        mor_sampler_free(s);
        mor_grammar_free(g);
    }
    free(judge);
    CHECK(good == runs && ended >= runs / 2 && ended < runs, "constrained generation: %d of %d outputs valid to the oracle (%d whole "
          "strings, the rest prefixes cut at the token limit)", good, runs, ended);
    if (mor_model_router_type(model) == MOR_ROUTER_TYPE_EXPERT)   /* the server's causal routing */
        mor_router_set_mode(mor_context_router(ctx), MOR_ROUTE_THRESHOLD, 0);
    test_server(ctx);
    test_server_lazy(ctx);
    grammar_rules_free(rules);
    mor_context_free(ctx);
    mor_model_free(model);
}

int main(void)
{
    test_parse();
    test_oracle();
    test_model();
    return check_done();
}
