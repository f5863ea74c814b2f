/* sampling.c - see sampling.h. */
#include <stdlib.h>
#include <string.h>
#include "sampling.h"
#include "text.h"

static const struct { const char *name; int stage; } stage_names[] = {
    { "penalties", MOR_STAGE_PENALTIES }, { "dry", MOR_STAGE_DRY }, { "top_n_sigma", MOR_STAGE_TOP_N_SIGMA },
    { "top_k", MOR_STAGE_TOP_K }, { "typ_p", MOR_STAGE_TYPICAL_P }, { "top_p", MOR_STAGE_TOP_P },
    { "min_p", MOR_STAGE_MIN_P }, { "xtc", MOR_STAGE_XTC }, { "temperature", MOR_STAGE_TEMPERATURE },
    /* llama.cpp's other spellings */
    { "typical_p", MOR_STAGE_TYPICAL_P }, { "typ", MOR_STAGE_TYPICAL_P }, { "nucleus", MOR_STAGE_TOP_P },
    { "temp", MOR_STAGE_TEMPERATURE },
    /* llama.cpp's, not libmor's */
    { "infill", -1 }, { "adaptive_p", -1 },
};

/* name == canonical, where '_' in canonical may also be '-' or nothing */
static int same_name(const char *name, size_t len, const char *canon)
{
    for (int mode = 0; mode < 3; mode++) {
        size_t i = 0;
        const char *c = canon;
        for (; *c && i <= len; c++) {
            char want = *c;
            if (want == '_') {
                if (mode == 2) continue;
                if (mode == 1) want = '-';
            }
            char got = i < len ? name[i] : 0;
            if (got >= 'A' && got <= 'Z') got = (char)(got - 'A' + 'a');
            if (got != want) break;
            i++;
        }
        if (!*c && i == len) return 1;
    }
    return 0;
}

int sampling_stage_by_name(const char *name, size_t len)
{
    for (size_t k = 0; k < sizeof stage_names / sizeof stage_names[0]; k++)
        if (same_name(name, len, stage_names[k].name)) return stage_names[k].stage;
    return 0;
}

int sampling_stage_by_char(char c)
{
    static const char letters[] = "edskypmxt";
    static const int stages[] = { MOR_STAGE_PENALTIES, MOR_STAGE_DRY, MOR_STAGE_TOP_N_SIGMA, MOR_STAGE_TOP_K,
                                  MOR_STAGE_TYPICAL_P, MOR_STAGE_TOP_P, MOR_STAGE_MIN_P, MOR_STAGE_XTC,
                                  MOR_STAGE_TEMPERATURE };
    const char *at = c ? strchr(letters, c) : NULL;
    return at ? stages[at - letters] : 0;
}

const char *sampling_stage_name(int stage)
{
    for (size_t k = 0; k < 9; k++)
        if (stage_names[k].stage == stage) return stage_names[k].name;
    return "?";
}

const char *const SAMPLING_DRY_DEFAULT_BREAKERS[4] = { "\n", ":", "\"", "*" };

typedef struct {
    mor_token *tok;
    int32_t   *len;
    int32_t    n_tok, cap_tok, n_seq, cap_seq;
} seqs;

/* Append the sequence {head, tail[0..n)} unless head already has it. */
static int seqs_add(seqs *s, mor_token head, const mor_token *tail, int32_t n)
{
    for (int32_t k = 0, at = 0; k < s->n_seq; at += s->len[k++])
        if (s->tok[at] == head && s->len[k] == n + 1 && (!n || !memcmp(s->tok + at + 1, tail, sizeof *tail * (size_t)n)))
            return 0;
    if (s->n_tok + n + 1 > s->cap_tok) {
        int32_t cap = 2 * s->cap_tok + n + 64;
        mor_token *t = realloc(s->tok, sizeof *t * (size_t)cap);
        if (!t) return -1;
        s->tok = t; s->cap_tok = cap;
    }
    if (s->n_seq == s->cap_seq) {
        int32_t cap = 2 * s->cap_seq + 64;
        int32_t *l = realloc(s->len, sizeof *l * (size_t)cap);
        if (!l) return -1;
        s->len = l; s->cap_seq = cap;
    }
    s->tok[s->n_tok] = head;
    if (n) memcpy(s->tok + s->n_tok + 1, tail, sizeof *tail * (size_t)n);
    s->n_tok += n + 1;
    s->len[s->n_seq++] = n + 1;
    return 0;
}

/* does the piece w[0..wn) contain str[0..sn)? */
static int contains(const char *w, size_t wn, const char *str, size_t sn)
{
    for (size_t p = 0; p + sn <= wn; p++)
        if (!memcmp(w + p, str, sn)) return 1;
    return 0;
}

/* One breaker str[0..sn) against one token's piece w[0..wn): llama.cpp's
 * get_overlapping_token_sequences for that token. tails[i]: the
 * tokenization of str + i (made when first needed). */
static mor_status breaker_token(const mor_model *m, seqs *out, mor_token t, const char *w, size_t wn, const char *str,
                                size_t sn, mor_token **tails, int32_t *n_tails)
{
    if (contains(w, wn, str, sn)) return seqs_add(out, t, NULL, 0) ? MOR_E_NOMEM : MOR_OK;
    for (size_t pos = 0; pos < wn; pos++) {
        if (w[pos] != str[0]) continue;
        size_t i = 1;
        while (i < sn && i + pos < wn && w[pos + i] == str[i]) i++;
        if (i >= sn || i + pos < wn) continue;   /* a mismatch (the whole string: contained) */
        if (!tails[i]) {
            mor_status st = text_tokenize(m, str + i, sn - i, 0, &tails[i], &n_tails[i]);
            if (st) return st;
            if (n_tails[i] > 20) n_tails[i] = 20;
        }
        if (seqs_add(out, t, tails[i], n_tails[i])) return MOR_E_NOMEM;
    }
    return MOR_OK;
}

mor_status sampling_dry_breakers(const mor_model *m, const char *const *strs, const size_t *lens, int32_t n,
                                 mor_token **tokens, int32_t **seq_lens, int32_t *n_seq)
{
    seqs out = { 0 };
    mor_status st = MOR_OK;
    const int32_t n_vocab = mor_model_n_vocab(m);
    char piece[512];
    *tokens = NULL; *seq_lens = NULL; *n_seq = 0;
    for (int32_t b = 0; b < n && !st; b++) {
        size_t sn = lens[b] > 40 ? 40 : lens[b];
        mor_token *tails[41] = { 0 };
        int32_t n_tails[41] = { 0 };
        for (mor_token t = 0; t < n_vocab && sn && !st; t++) {
            size_t wn = 0;
            if (mor_token_to_piece(m, t, piece, sizeof piece, &wn) != MOR_OK) continue;   /* longer pieces: none */
            st = breaker_token(m, &out, t, piece, wn, strs[b], sn, tails, n_tails);
        }
        for (int i = 0; i <= 40; i++) free(tails[i]);
    }
    if (st) { free(out.tok); free(out.len); return st; }
    *tokens = out.tok; *seq_lens = out.len; *n_seq = out.n_seq;
    return MOR_OK;
}
