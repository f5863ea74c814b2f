/* fuzz_grammar.c - any bytes as a GBNF grammar, a string and a token walk.
 * The first byte picks the vocabulary (bits 0-2, fuzz_vocab.h); the rest is
 * the grammar, then after a NUL byte a string (matched by grammar_match),
 * then after another NUL the choices of a walk: at each step the mask of
 * mor_grammar_apply, and the token the next byte picks among the allowed
 * ones, accepted. Checks: a refused grammar has a message; matching ends;
 * every token the mask allows is accepted, and a refusal changes nothing;
 * a MUST_END grammar allows only end tokens; a grammar beyond the matcher's
 * bounds is refused (create) or fails a mask (apply) with its reason. */
#include "fuzz_vocab.h"
#include "grammar.h"

FUZZ_TARGET(grammar)

static mor_model *models[FUZZ_N_VOCABS];

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const mor_model *m = fuzz_vocab_model(models, data[0] & 7);
    const char *g = (const char *)data + 1, *end = (const char *)data + size;
    const char *s = memchr(g, 0, (size_t)(end - g));
    size_t glen = s ? (size_t)(s - g) : (size_t)(end - g);
    const char *str = s ? s + 1 : end;
    const char *walk = memchr(str, 0, (size_t)(end - str));
    size_t slen = walk ? (size_t)(walk - str) : (size_t)(end - str);
    walk = walk ? walk + 1 : end;

    grammar_rules *rules = NULL;
    mor_status st = grammar_parse(g, glen, NULL, "fuzz", &rules);
    if (st) {
        FUZZ_ASSERT(!rules && mor_last_error()[0], "a refusal without a message");
        return 0;
    }
    int r = grammar_match(rules, str, slen);
    FUZZ_ASSERT(r == 0 || r == 1, "grammar_match: %d", r);
    grammar_rules_free(rules);

    mor_grammar *gr = NULL;
    st = mor_grammar_create(m, g, glen, NULL, NULL, 0, &gr);
    if (st == MOR_E_UNSUPPORTED) {   /* a start beyond the matcher's bounds: refused, with its reason */
        FUZZ_ASSERT(!gr && strstr(mor_last_error(), "bounds"), "a refusal without its reason: %s", mor_last_error());
        return 0;
    }
    FUZZ_ASSERT(st == MOR_OK, "the parser took it, mor_grammar_create did not: %s", mor_last_error());
    const int32_t V = mor_model_n_vocab(m);
    float *l = malloc(sizeof *l * (size_t)V);
    for (int step = 0; l && walk < end && step < 16; step++, walk++) {
        for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
        int32_t state = mor_grammar_state(gr);
        st = mor_grammar_apply(gr, l, V);
        if (st) {
            /* UNSUPPORTED: the mask's work bound (GM_WORK), an error rather than a partial mask */
            FUZZ_ASSERT((st == MOR_E_INVALID_ARG || st == MOR_E_UNSUPPORTED) && mor_last_error()[0], "apply: %s",
                        mor_status_str(st));
            break;
        }
        int32_t n_ok = 0, pick = -1, refused = -1;
        for (int32_t t = 0; t < V; t++) {
            if (l[t] == 0.0f) n_ok++;
            else if (refused < 0 && (unsigned char)*walk % 2) refused = t;
        }
        FUZZ_ASSERT(n_ok > 0, "apply succeeded with no token allowed");
        if (state & MOR_GRAMMAR_MUST_END) FUZZ_ASSERT(n_ok <= 1, "MUST_END with %d tokens allowed", (int)n_ok);
        for (int32_t t = 0, k = (unsigned char)*walk % n_ok; t < V && pick < 0; t++)
            if (l[t] == 0.0f && k-- == 0) pick = t;
        if (refused >= 0) {
            st = mor_grammar_accept(gr, refused);
            /* refused: unless the mask's walk ran out of room where one token alone would not */
            if (st == MOR_OK) { mor_grammar_free(gr); free(l); return 1; }
            FUZZ_ASSERT(st == MOR_E_INVALID_ARG && mor_grammar_state(gr) == state, "a refusal changed the state");
        }
        st = mor_grammar_accept(gr, pick);
        FUZZ_ASSERT(st == MOR_OK, "an allowed token %d was refused: %s", (int)pick, mor_last_error());
    }
    free(l);
    mor_grammar_free(gr);
    return 1;
}
