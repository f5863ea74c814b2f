/* fuzz_grammar.c - any bytes as a GBNF grammar, a string and a token walk.
 * The first byte picks the vocabulary (bits 0-2, fuzz_vocab.h); the rest is
 * the grammar, then after a NUL byte a string (matched by grammar_match),
 * then after another NUL the choices of a walk: at each step the mask of
 * mor_grammar_apply, and the token the next byte picks among the allowed
 * ones, accepted. Checks: a refused grammar has a message; matching ends;
 * every token the mask allows is accepted; tokens it refuses (a sample of
 * up to 8 per step) are refused by accept too, changing nothing; a MUST_END
 * grammar allows only end tokens; a grammar beyond the matcher's bounds is
 * refused (create) or fails a mask (apply) with its reason. Bit 3 of the
 * first byte makes the grammar lazy (mor_grammar_set_triggers), its word
 * the string's first bytes: the same checks, but a refused token accepted
 * is a failure outright (the oracle judges eager grammars only). */
#include "fuzz_vocab.h"
#include "grammar.h"
#include "../gbnf_oracle.h"

FUZZ_TARGET(grammar)

static mor_model *models[FUZZ_N_VOCABS];

/* Token t, refused by the mask, was accepted after out[0..n). The mask may
 * miss a token only where its bounded walk ran out of room (grammar.c's GM_*
 * limits; accepting one token alone needs less), so t must really continue
 * the grammar: the independent oracle (tests/gbnf_oracle.h) must say that
 * out + t is a prefix of a string of it. The oracle judges only a grammar
 * it reads as the library does on the input's string (r: grammar_match). */
static void check_refused_taken(const char *g, size_t glen, const char *str, size_t slen, int r, const mor_model *m,
                                mor_token t, const char *out, size_t n)
{
    FUZZ_ASSERT(t != mor_model_token_eos(m), "accept took the end token the mask refused");
    char *text = malloc(glen + 1), *buf = malloc(n + 1024);
    gbo_grammar *o = malloc(sizeof *o);
    size_t k = 0;
    if (text && buf && o && !mor_token_to_piece(m, t, buf + n, 1024, &k)) {
        memcpy(text, g, glen);
        text[glen] = 0;
        memcpy(buf, out, n);
        if (strlen(text) == glen && !gbo_parse(o, text, "root") && gbo_match(o, str, slen) == r)
            FUZZ_ASSERT(gbo_prefix(o, buf, n + k) != 0, "accept took token %d, which the mask refused and no string of the "
                        "grammar continues with", (int)t);
    }
    free(text);
    free(buf);
    free(o);
}

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
    const int lazy = (data[0] & 8) && slen > 0;
    if (lazy) {
        char word[9] = { 0 };
        memcpy(word, str, slen < 8 ? slen : 8);   /* str holds no NUL: the word is its first bytes */
        const char *words[1] = { word };
        st = mor_grammar_set_triggers(gr, words, 1);
        FUZZ_ASSERT(st == MOR_OK || st == MOR_E_NOMEM, "set_triggers: %s", mor_last_error());
        FUZZ_ASSERT(mor_grammar_state(gr) == MOR_GRAMMAR_CAN_END, "a lazy grammar before its word: state %d",
                    (int)mor_grammar_state(gr));
    }
    const int32_t V = mor_model_n_vocab(m);
    float *l = malloc(sizeof *l * (size_t)V);
    char *out = malloc(16 * 1024 + 1);   /* the output: 16 tokens of at most 1024 bytes (longer ones are never allowed) */
    size_t n_out = 0;
    uint32_t x = 2166136261u;   /* the sample of refused tokens: seeded by the walk */
    int64_t work = 0;   /* matcher steps of the walk's masks (grammar_work) */
    for (int step = 0; l && out && walk < end && step < 16; step++, walk++) {
        for (int32_t t = 0; t < V; t++) l[t] = 0.0f;
        int32_t state = mor_grammar_state(gr);
        st = mor_grammar_apply(gr, l, V);
        if (st) {
            /* UNSUPPORTED: the mask's work bound (GM_WORK), an error rather than a partial mask */
            FUZZ_ASSERT((st == MOR_E_INVALID_ARG || st == MOR_E_UNSUPPORTED) && mor_last_error()[0], "apply: %s",
                        mor_status_str(st));
            break;
        }
        /* a walk of masks near the work bound (2^24 steps each) would pass the
         * fuzzer's 10 s time-out under sanitizers: half of one bound per input */
        if ((work += grammar_work(gr)) > (1 << 23)) break;
        int32_t n_ok = 0, pick = -1;
        for (int32_t t = 0; t < V; t++) n_ok += l[t] == 0.0f;
        FUZZ_ASSERT(n_ok > 0, "apply succeeded with no token allowed");
        if (state & MOR_GRAMMAR_MUST_END) FUZZ_ASSERT(n_ok <= 1, "MUST_END with %d tokens allowed", (int)n_ok);
        for (int32_t t = 0, k = (unsigned char)*walk % n_ok; t < V && pick < 0; t++)
            if (l[t] == 0.0f && k-- == 0) pick = t;
        /* accept => mask: up to 8 refused tokens, anywhere in the vocabulary */
        x = (x ^ (unsigned char)*walk) * 16777619u;
        for (int tries = 0, n_refused = 0; tries < 32 && n_refused < 8 && n_ok < V; tries++) {
            x = x * 1103515245u + 12345u;
            mor_token t = (mor_token)((x >> 8) % (uint32_t)V);
            if (l[t] == 0.0f) continue;
            n_refused++;
            st = mor_grammar_accept(gr, t);
            FUZZ_ASSERT(!(lazy && st == MOR_OK), "a lazy grammar accepted token %d, which its mask refused", (int)t);
            if (st == MOR_OK) {   /* the state moved on: the walk ends here */
                check_refused_taken(g, glen, str, slen, r, m, t, out, n_out);
                free(out); free(l); mor_grammar_free(gr);
                return 1;
            }
            FUZZ_ASSERT(st == MOR_E_INVALID_ARG && mor_grammar_state(gr) == state, "a refusal changed the state");
        }
        st = mor_grammar_accept(gr, pick);
        FUZZ_ASSERT(st == MOR_OK, "an allowed token %d was refused: %s", (int)pick, mor_last_error());
        size_t k = 0;
        if (pick != mor_model_token_eos(m) && !mor_token_to_piece(m, pick, out + n_out, 1024, &k)) n_out += k;
    }
    free(out);
    free(l);
    mor_grammar_free(gr);
    return 1;
}
