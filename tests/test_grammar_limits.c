/* test_grammar_limits.c - the grammar matcher's bounds, and the names of
 * the rules a GBNF parser makes for groups (fuzz findings of issue 44):
 *  - a rule the text names "root-2" is the text's, also when a group of
 *    root was met first and named root-2 by the parser (json_schema's
 *    grammars for a property named "2" were refused as "defined twice";
 *    a reference to such a name meant the group);
 *  - settling a stack is done once per (element, parent) in an advance, so
 *    nested optional repetitions cost work linear in their count, not
 *    quadratic (counted in matcher steps: deterministic, unlike time);
 *  - a mask that would take more than GM_WORK steps fails with
 *    MOR_E_UNSUPPORTED, changing nothing, instead of taking seconds; a
 *    grammar whose start state is beyond the matcher's bounds is refused
 *    at creation (it used to look like a grammar that allows nothing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mor.h"
#include "check.h"
#include "grammar.h"

static int match(const char *gbnf, const char *s)
{
    grammar_rules *g;
    if (grammar_parse(gbnf, strlen(gbnf), NULL, "test", &g)) return -100;
    int r = grammar_match(g, s, strlen(s));
    grammar_rules_free(g);
    return r;
}

static void test_names(void)
{
    /* the group ("a") is met before root-1 is named: root-1 is the text's */
    const char *g1 = "root ::= (\"a\") root-1\nroot-1 ::= \"b\"\n";
    CHECK(match(g1, "ab") == 1 && match(g1, "aa") == 0,
          "a rule named like a group's rule (root-1) is the text's rule: \"ab\" %d, \"aa\" %d", match(g1, "ab"),
          match(g1, "aa"));
    const char *g2 = "root ::= (\"a\") x\nx ::= (\"q\") root-1\nroot-1 ::= \"b\" (\"z\")\n";
    CHECK(match(g2, "aqbz") == 1 && match(g2, "aqq") == 0, "and from another rule, with groups of its own");

    /* the schema whose grammar names a property's rule root-2 after root's groups */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"2\":{\"enum\":[\"null\",1]},\"x\":{\"type\":\"string\"}}}";
    char gbnf[4096];
    size_t n = 0;
    mor_status st = mor_json_schema_to_grammar(schema, strlen(schema), gbnf, sizeof gbnf - 1, &n);
    grammar_rules *g = NULL;
    if (st == MOR_OK) {
        gbnf[n] = 0;
        st = grammar_parse(gbnf, n, NULL, "test", &g);
    }
    CHECK(st == MOR_OK, "a schema with a property named \"2\": its grammar parses (%s)", st ? mor_last_error() : "ok");
    if (g) {
        static const struct { const char *s; int want; } cases[] = {
            { "{\"2\": \"null\", \"x\": \"s\"}", 1 }, { "{\"2\":1}", 1 }, { "{}", 1 },
            { "{\"2\": 2}", 0 }, { "{\"x\": 1}", 0 },
        };
        int bad = -1;
        for (int i = 0; i < 5 && bad < 0; i++)
            if (grammar_match(g, cases[i].s, strlen(cases[i].s)) != cases[i].want) bad = i;
        CHECK(bad < 0, "and matches the schema's instances, not others (first wrong: %s)", bad < 0 ? "none" : cases[bad].s);
        grammar_rules_free(g);
    }
}

/* Matcher steps of the first mask of gbnf on model m, or -1 (a message). */
static int64_t first_mask_work(const mor_model *m, const char *gbnf)
{
    mor_grammar *g = NULL;
    if (mor_grammar_create(m, gbnf, strlen(gbnf), NULL, NULL, 0, &g)) return -1;
    int32_t V = mor_model_n_vocab(m);
    float *l = calloc((size_t)V, sizeof *l);
    int64_t w = l && mor_grammar_apply(g, l, V) == MOR_OK ? grammar_work(g) : -1;
    free(l);
    mor_grammar_free(g);
    return w;
}

/* The fuzz finding: a bounded repetition of a nullable group. Masks along a
 * seeded walk succeed, and their work is a few hundred steps per distinct
 * prefix of the vocabulary (it was about 10x more before settling was
 * shared: 22 ms a mask, here 3 ms). */
static void test_nullable_repetition(const mor_model *m)
{
    const char *fz = "root ::= ([a-root ::= ([a-c]? | \"xy+\"){2,51}";
    mor_grammar *g = NULL;
    if (!CHECK(mor_grammar_create(m, fz, strlen(fz), NULL, NULL, 0, &g) == MOR_OK, "the fuzz finding's grammar is taken"))
        return;
    int32_t V = mor_model_n_vocab(m);
    float *l = malloc(sizeof *l * (size_t)V);
    int64_t most = 0;
    int steps = 0, ok = 1;
    uint32_t seed = 7;
    for (; l && steps < 12 && ok; steps++) {
        for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
        if (mor_grammar_apply(g, l, V) != MOR_OK) { ok = 0; break; }
        if (grammar_work(g) > most) most = grammar_work(g);
        int32_t n_ok = 0, pick = -1;
        for (int32_t t = 0; t < V; t++) n_ok += l[t] == 0.0f;
        seed = seed * 1664525u + 1013904223u;
        for (int32_t t = 0, k = (int32_t)((seed >> 8) % (uint32_t)n_ok); t < V && pick < 0; t++)
            if (l[t] == 0.0f && k-- == 0) pick = t;
        if (mor_grammar_accept(g, pick) != MOR_OK) ok = 0;
        if (mor_grammar_state(g) & MOR_GRAMMAR_MUST_END) break;
    }
    CHECK(ok && most > 0 && most < 2000000, "%d masks and tokens along a seeded walk, at most %lld matcher steps a mask",
          steps, (long long)most);
    free(l);
    mor_grammar_free(g);

    /* 4x the optionals: about 4x the work (quadratic would be 16x) */
    int64_t w100 = first_mask_work(m, "root ::= ([a-c]? \"x\"?){0,100}");
    int64_t w400 = first_mask_work(m, "root ::= ([a-c]? \"x\"?){0,400}");
    CHECK(w100 > 0 && w400 > 0 && w400 < 6 * w100, "nested optionals: %lld steps for 100, %lld for 400 (linear)",
          (long long)w100, (long long)w400);
}

/* root ::= [a-z]* "0" | [a-z]* "1" | ... : n stacks alive on every letter */
static char *alternatives(int n)
{
    char *s = malloc((size_t)n * 24 + 16), *p = s;
    if (!s) return NULL;
    p += sprintf(p, "root ::= ");
    for (int i = 0; i < n; i++) p += sprintf(p, "%s[a-z]* \"%d\"", i ? " | " : "", i);
    return s;
}

static void test_budget(const mor_model *m)
{
    char *gb = alternatives(1500);
    mor_grammar *g = NULL;
    if (!gb || !CHECK(mor_grammar_create(m, gb, strlen(gb), NULL, NULL, 0, &g) == MOR_OK,
                      "1500 alternatives sharing [a-z]*: created (%s)", mor_last_error())) {
        free(gb);
        return;
    }
    int32_t V = mor_model_n_vocab(m);
    float *l = malloc(sizeof *l * (size_t)V), *l0 = malloc(sizeof *l0 * (size_t)V);
    for (int32_t t = 0; l && l0 && t < V; t++) l[t] = l0[t] = (float)(t % 7) - 3.0f;
    int32_t state = mor_grammar_state(g);
    mor_status st = l && l0 ? mor_grammar_apply(g, l, V) : MOR_E_NOMEM;
    CHECK(st == MOR_E_UNSUPPORTED && strstr(mor_last_error(), "matcher steps") && !memcmp(l, l0, sizeof *l * (size_t)V) &&
              mor_grammar_state(g) == state,
          "its mask goes over the work bound: MOR_E_UNSUPPORTED (%s), logits and state unchanged", mor_last_error());
    st = mor_grammar_apply(g, l, V);
    CHECK(st == MOR_E_UNSUPPORTED && !memcmp(l, l0, sizeof *l * (size_t)V), "and again the same (no partial mask kept)");
    free(l);
    free(l0);
    mor_grammar_free(g);
    free(gb);

    gb = alternatives(5000);
    g = NULL;
    st = gb ? mor_grammar_create(m, gb, strlen(gb), NULL, NULL, 0, &g) : MOR_E_NOMEM;
    CHECK(st == MOR_E_UNSUPPORTED && !g && strstr(mor_last_error(), "bounds"),
          "5000 alternatives: the start state is beyond the bounds, refused at creation (%s)", mor_last_error());
    free(gb);
}

/* In a server, a request whose grammar goes over the bound fails alone: the
 * step names it (MOR_E_INVALID_ARG, as unsamplable logits), and once it is
 * cancelled the other request gives the tokens it gives alone. */
static void test_server(mor_model *m)
{
    mor_token prompt[16], eos = mor_model_token_eos(m);
    int32_t np = 0;
    mor_tokenize(m, "The jury said", 13, 0, prompt, 16, &np);
    mor_token got[2][40];
    int32_t ng[2] = { 0, 0 };
    char *gb = alternatives(1500);
    int ok = gb != NULL, named = 0;
    for (int with = 0; with < 2 && ok; with++) {
        mor_server_params p;
        MOR_SERVER_PARAMS_INIT(&p);
        p.n_slots = 2;
        p.n_ctx = 256;
        mor_server *srv = NULL;
        mor_sampler_params sp;
        MOR_SAMPLER_PARAMS_INIT(&sp);
        sp.seed = 3;
        mor_request_id plain = -1, heavy = -1;
        mor_grammar *g = NULL;
        ok = !mor_server_create(m, &p, &srv) && !mor_server_submit(srv, prompt, np, &sp, 24, &eos, 1, &plain);
        if (ok && with) {
            ok = !mor_server_submit(srv, prompt, np, &sp, 24, &eos, 1, &heavy) &&
                 !mor_grammar_create(m, gb, strlen(gb), NULL, NULL, 0, &g);
            if (ok && mor_server_set_grammar(srv, heavy, g)) ok = 0;   /* the server owns g only on success */
            if (!ok) mor_grammar_free(g);
        }
        for (int steps = 0; ok && steps < 200; steps++) {
            int32_t pending = 0;
            mor_status st = mor_server_step(srv, &pending);
            if (st == MOR_E_INVALID_ARG && with && heavy >= 0) {
                char want[32];
                snprintf(want, sizeof want, "request %d:", (int)heavy);
                named = strstr(mor_last_error(), want) && strstr(mor_last_error(), "matcher steps");
                ok = named && !mor_server_cancel(srv, heavy);
                heavy = -1;
                continue;
            }
            if (st != MOR_OK) ok = 0;
            if (!pending) break;
        }
        if (ok) ok = !mor_server_get_tokens(srv, plain, got[with], NULL, 40, &ng[with]);
        mor_server_free(srv);
    }
    CHECK(ok && named && ng[0] > 0 && ng[0] == ng[1] && !memcmp(got[0], got[1], sizeof got[0][0] * (size_t)ng[0]),
          "server: the request over the bound fails alone (named: %d), the other's %d tokens as alone (%d)", named,
          (int)ng[1], (int)ng[0]);
    free(gb);
}

/* A token ending inside a character is allowed only if a character the
 * class takes begins with its bytes: 0xED begins U+D000..U+D7FF and the
 * surrogates (not UTF-8), so under [^\x00-\uD7FF] nothing can finish it
 * (it was allowed, and the next mask was empty). */
static void test_partial_surrogates(const mor_model *m)
{
    int32_t V = mor_model_n_vocab(m);
    mor_token ed = -1, ee = -1;
    for (mor_token t = 0; t < V; t++) {
        char b[8];
        size_t n = 0;
        if (mor_token_to_piece(m, t, b, sizeof b, &n) || n != 1) continue;
        if ((unsigned char)b[0] == 0xED) ed = t;
        if ((unsigned char)b[0] == 0xEE) ee = t;
    }
    if (ed < 0 || ee < 0) { SKIP("the bundled vocabulary has no byte tokens 0xED and 0xEE"); return; }
    static const struct { const char *g; int ed_ok; } cases[] = {
        { "root ::= [^\\x00-\\uD7FF]+", 0 },   /* only U+E000 and up: 0xED cannot begin one */
        { "root ::= [\\uD000-\\uD7FF]", 1 },  /* 0xED 0x80..0x9F begins these */
    };
    float *l = malloc(sizeof *l * (size_t)V);
    int ok = l != NULL;
    for (int c = 0; c < 2 && ok; c++) {
        mor_grammar *g = NULL;
        for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
        ok = !mor_grammar_create(m, cases[c].g, strlen(cases[c].g), NULL, NULL, 0, &g) && !mor_grammar_apply(g, l, V) &&
             (l[ed] == 0.0f) == cases[c].ed_ok && (l[ee] == 0.0f) == !cases[c].ed_ok &&
             (mor_grammar_accept(g, ed) == MOR_OK) == cases[c].ed_ok;
        mor_grammar_free(g);
    }
    CHECK(ok, "a byte token 0xED: refused by mask and accept under [^\\x00-\\uD7FF], allowed under [\\uD000-\\uD7FF]");
    free(l);
}

int main(void)
{
    test_names();
    mor_model *m = NULL;
    if (mor_model_load_file("models/brown-mor.gguf", NULL, &m)) {
        SKIP("models/brown-mor.gguf: %s", mor_last_error());
        return check_done();
    }
    test_nullable_repetition(m);
    test_budget(m);
    test_server(m);
    test_partial_surrogates(m);
    mor_model_free(m);
    return check_done();
}
