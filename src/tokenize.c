/* tokenize.c - text to tokens and back, with a tokenizer loaded by
 * tokenizer.c, as HF `tokenizers` and llama.cpp run the same data.
 *
 * Encoding a text goes:
 *   1. split out the added tokens the flags ask for (MOR_TOKENIZE_PARSE_*),
 *      leftmost match first and the longest one there, as HF's added-token
 *      splitting does; each stretch of text between them is encoded on its
 *      own, in NFC first if the tokenizer says so (src/normalize.c);
 *   2. byte-level BPE: the pre-tokenizer (src/pretokenize.c) cuts the
 *      stretch into pieces, and each piece starts as one symbol per byte
 *      (the token of the byte's byte-level character);
 *      SentencePiece: the stretch gets its U+2581 prefix (the PREFIX_* rule),
 *      its spaces become U+2581, it is cut at each U+2581 if the tokenizer
 *      says so (HF Metaspace split), and each piece starts as one symbol per
 *      character (its token, or none);
 *   3. adjacent symbols are merged, best pair first and the leftmost among
 *      equals, with a heap (O(n log n)): by merge rank (byte-level BPE, HF's
 *      BPE::merge_word) or by the score of the token the two make (llama.cpp's
 *      SentencePiece); a pair merges only into a token;
 *   4. a SentencePiece symbol without a token (a character outside the
 *      vocabulary) becomes its bytes' <0xNN> tokens (byte fallback), or the
 *      unknown token.
 * Invalid UTF-8 cannot reach HF (Rust strings are valid), so its treatment is
 * ours: every byte that does not start a valid sequence is a one-byte
 * character of the "other" class ([^\s\p{L}\p{N}]), encoded as the byte's
 * token, so that decode(encode(x)) == x for every x where the byte's token is
 * a normal one.
 *
 * A loaded tokenizer is never written again: encode keeps its scratch memory
 * per call, so one tokenizer serves any number of threads. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "normalize.h"
#include "status.h"
#include "unicode.h"

#define NO_PAIR UINT32_MAX

/* Per-call state: the ids produced so far and the merge scratch, sized for
 * the longest piece seen. */
typedef struct {
    const tokenizer *t;
    mor_token *ids;
    size_t     n, cap;
    mor_token *sym;      /* token of each symbol, -1 for none            */
    uint32_t  *start;    /* its bytes in the piece: start, length (0 once merged away) */
    uint32_t  *len;
    int32_t   *next, *prev;
    uint64_t  *heap;     /* (priority << 32 | position of the left symbol), min first */
    size_t     scap;
    uint8_t   *esc;      /* SentencePiece: the stretch with spaces as U+2581 */
    size_t     esc_cap;
    uint8_t   *norm;     /* the stretch in NFC, when the tokenizer normalizes */
    size_t     norm_cap;
} enc_state;

static void enc_free(enc_state *st)
{
    free(st->ids);
    free(st->sym);
    free(st->start);
    free(st->len);
    free(st->next);
    free(st->prev);
    free(st->heap);
    free(st->esc);
    free(st->norm);
}

static mor_status push_id(enc_state *st, mor_token id)
{
    if (st->n >= INT32_MAX)   /* the count must fit *n_out */
        return err_set(MOR_E_INVALID_ARG, "the text gives more than %d tokens", INT32_MAX);
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        mor_token *p = realloc(st->ids, cap * sizeof *p);
        if (!p) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
        st->ids = p;
        st->cap = cap;
    }
    st->ids[st->n++] = id;
    return MOR_OK;
}

static mor_status ensure_scratch(enc_state *st, size_t n)
{
    if (n <= st->scap) return MOR_OK;
    if (n > INT32_MAX)
        return err_set(MOR_E_INVALID_ARG, "a pre-token of %zu bytes is too long to tokenize", n);
    size_t cap = st->scap ? st->scap : 64;
    while (cap < n) cap *= 2;
    if (cap > SIZE_MAX / (3 * sizeof *st->heap)) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
    free(st->sym); free(st->start); free(st->len); free(st->next); free(st->prev); free(st->heap);
    st->sym = malloc(cap * sizeof *st->sym);
    st->start = malloc(cap * sizeof *st->start);
    st->len = malloc(cap * sizeof *st->len);
    st->next = malloc(cap * sizeof *st->next);
    st->prev = malloc(cap * sizeof *st->prev);
    /* Each merge pushes at most two pairs: n - 1 + 2 (n - 1) entries at most. */
    st->heap = malloc(3 * cap * sizeof *st->heap);
    st->scap = (st->sym && st->start && st->len && st->next && st->prev && st->heap) ? cap : 0;
    if (!st->scap) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
    return MOR_OK;
}

/* ------------------------------------------------------------------------ */
/* Merging                                                                  */
/* ------------------------------------------------------------------------ */

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* The priority of merging symbol p with the next one, q (lower first), and
 * the token they make; NO_PAIR if they do not merge. */
static uint32_t pair_priority(const enc_state *st, const uint8_t *s, int32_t p, int32_t q, mor_token *result)
{
    const tokenizer *t = st->t;
    if (t->model == TOK_SPM) {
        mor_token id = tok_find_raw(t, (const char *)s + st->start[p], st->len[p] + st->len[q]);
        if (id < 0) return NO_PAIR;
        *result = id;
        return t->score_key[id];
    }
    if (st->sym[p] < 0 || st->sym[q] < 0) return NO_PAIR;
    int32_t r = tok_pair_rank(t, st->sym[p], st->sym[q]);
    if (r < 0) return NO_PAIR;
    *result = t->merge_result[r];
    return (uint32_t)r;
}

static void push_pair(enc_state *st, const uint8_t *s, size_t *hn, int32_t p)
{
    mor_token result;
    uint32_t prio = pair_priority(st, s, p, st->next[p], &result);
    if (prio != NO_PAIR) heap_push(st->heap, hn, ((uint64_t)prio << 32) | (uint32_t)p);
}

/* A symbol without a token: SentencePiece's byte fallback, or its unknown
 * token; byte-level BPE drops a byte that has no token (as HF and llama.cpp
 * do; see tokenizer.c). */
static mor_status push_unknown(enc_state *st, const uint8_t *s, size_t n)
{
    const tokenizer *t = st->t;
    mor_status err;
    if (t->model == TOK_BPE) return MOR_OK;
    if (t->byte_token[0] < 0) return push_id(st, t->unk);
    for (size_t i = 0; i < n; i++)
        if ((err = push_id(st, t->byte_token[s[i]])) != MOR_OK) return err;
    return MOR_OK;
}

/* Merge the n symbols set up in st (n >= 1) and append their tokens. */
static mor_status merge_symbols(enc_state *st, const uint8_t *s, size_t n)
{
    mor_token *sym = st->sym;
    uint32_t *len = st->len;
    int32_t *next = st->next, *prev = st->prev;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(st, s, &hn, (int32_t)i);

    while (hn > 0) {
        uint64_t top = heap_pop(st->heap, &hn);
        uint32_t prio = (uint32_t)(top >> 32);
        int32_t p = (int32_t)(uint32_t)top, q = next[p];
        /* A stale entry (a side was merged since) no longer has its priority:
         * the pair there now was pushed with its own. */
        mor_token result;
        if (len[p] == 0 || q < 0 || pair_priority(st, s, p, q, &result) != prio) continue;
        sym[p] = result;
        len[p] += len[q];
        len[q] = 0;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) push_pair(st, s, &hn, prev[p]);
        if (next[p] >= 0) push_pair(st, s, &hn, p);
    }
    mor_status err;
    for (int32_t i = 0; i >= 0; i = next[i]) {
        err = sym[i] >= 0 ? push_id(st, sym[i]) : push_unknown(st, s + st->start[i], len[i]);
        if (err != MOR_OK) return err;
    }
    return MOR_OK;
}

/* Byte-level BPE of one pre-token. */
static mor_status bpe_piece(void *ctx, const uint8_t *s, size_t n)
{
    enc_state *st = ctx;
    const tokenizer *t = st->t;
    if (n == 1) return t->byte_token[s[0]] >= 0 ? push_id(st, t->byte_token[s[0]]) : MOR_OK;
    mor_status err = ensure_scratch(st, n);
    if (err != MOR_OK) return err;
    for (size_t i = 0; i < n; i++) {
        st->sym[i] = t->byte_token[s[i]];
        st->start[i] = (uint32_t)i;
        st->len[i] = 1;
    }
    return merge_symbols(st, s, n);
}

/* SentencePiece-style BPE of one piece: a symbol per character. HF's BPE
 * (TOK_SPM_MERGES) gives a character outside the vocabulary its byte tokens
 * as symbols at once (they may merge); llama.cpp's SentencePiece keeps the
 * character, which may still merge by its text, and falls back at the end. */
static mor_status spm_piece(enc_state *st, const uint8_t *s, size_t n)
{
    const tokenizer *t = st->t;
    mor_status err = ensure_scratch(st, n);
    if (err != MOR_OK) return err;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = utf8_decode(s + i, n - i, &cp);
        mor_token id = tok_find_raw(t, (const char *)s + i, len);
        if (id < 0 && t->model == TOK_SPM_MERGES && t->byte_token[0] >= 0) {
            for (size_t b = 0; b < len; b++, k++) {
                st->sym[k] = t->byte_token[s[i + b]];
                st->start[k] = (uint32_t)(i + b);
                st->len[k] = 1;
            }
        } else {
            st->sym[k] = id;
            st->start[k] = (uint32_t)i;
            st->len[k] = (uint32_t)len;
            k++;
        }
        i += len;
    }
    return merge_symbols(st, s, k);
}

static const uint8_t u2581[3] = { 0xE2, 0x96, 0x81 };   /* U+2581, SentencePiece's space */

/* A SentencePiece stretch: prefix, spaces as U+2581, pieces. */
static mor_status spm_stretch(enc_state *st, const uint8_t *s, size_t n, int at_start)
{
    const tokenizer *t = st->t;
    int lead_space = s[0] == ' ';
    int prefix = t->prefix == PREFIX_PREPEND || (t->prefix == PREFIX_ALWAYS && !lead_space) ||
                 (t->prefix == PREFIX_FIRST && at_start && !lead_space);
    if (n > (SIZE_MAX - 3) / 3) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
    size_t need = 3 * n + 3;
    if (need > st->esc_cap) {
        uint8_t *p = realloc(st->esc, need);
        if (!p) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
        st->esc = p;
        st->esc_cap = need;
    }
    uint8_t *e = st->esc;
    size_t m = 0;
    if (prefix) { memcpy(e, u2581, 3); m = 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(e + m, u2581, 3); m += 3; }
        else e[m++] = s[i];
    }
    if (!t->split_spaces && !t->cut_at_spaces) return spm_piece(st, e, m);
    /* HF Metaspace split: each U+2581 starts a piece (merged with the next);
     * else, where no merge can cross it (cut_at_spaces), each run of them. */
    size_t a = 0;
    mor_status err;
    for (size_t i = 1; i + 3 <= m; i++) {
        if (memcmp(e + i, u2581, 3) != 0) continue;
        if (t->split_spaces || i < 3 || memcmp(e + i - 3, u2581, 3) != 0) {
            if ((err = spm_piece(st, e + a, i - a)) != MOR_OK) return err;
            a = i;
        }
        i += 2;
    }
    return spm_piece(st, e + a, m - a);
}

/* A stretch of text without added tokens (n > 0). at_start: it begins the text. */
static mor_status encode_stretch(enc_state *st, const uint8_t *s, size_t n, int at_start)
{
    if (st->t->nfc && !nfc_quick(s, n)) {   /* HF normalizes each stretch before pre-tokenizing */
        mor_status err = nfc_normalize(s, n, &st->norm, &st->norm_cap, &n);
        if (err != MOR_OK) return err;
        s = st->norm;
    }
    if (st->t->model == TOK_BPE) return pretok_run(st->t->pre, s, n, bpe_piece, st);
    return spm_stretch(st, s, n, at_start);
}

/* ------------------------------------------------------------------------ */
/* Added tokens                                                             */
/* ------------------------------------------------------------------------ */

/* The longest added token of a type in the mask (bit per TT_*) that s[0..n)
 * starts with: its length (0 if none) and id. The sorted list is narrowed
 * byte by byte; a special that ends at byte k sorts first among those
 * sharing its k bytes. */
static size_t special_match(const tokenizer *t, const uint8_t *s, size_t n, unsigned mask, mor_token *id)
{
    const special_token *sp = t->special;
    size_t lo = 0, hi = (size_t)t->n_special, k = 0, best = 0;
    while (lo < hi) {
        if (sp[lo].n == k) {
            if (mask & (1u << sp[lo].type)) {
                best = k;
                *id = sp[lo].id;
            }
            if (++lo == hi) break;
        }
        if (k == n) break;
        uint8_t b = s[k];
        size_t a = lo, z = hi;
        while (a < z) {
            size_t m = a + (z - a) / 2;
            if ((uint8_t)sp[m].p[k] < b) a = m + 1; else z = m;
        }
        size_t first = a;
        z = hi;
        while (a < z) {
            size_t m = a + (z - a) / 2;
            if ((uint8_t)sp[m].p[k] <= b) a = m + 1; else z = m;
        }
        lo = first;
        hi = a;
        k++;
    }
    return best;
}

static mor_status encode_all(const tokenizer *t, const uint8_t *s, size_t len, uint32_t flags,
                             enc_state *st)
{
    mor_status err;
    if ((flags & MOR_TOKENIZE_ADD_BOS) && t->bos >= 0 && (err = push_id(st, t->bos)) != MOR_OK)
        return err;
    unsigned mask = 0;
    if (flags & MOR_TOKENIZE_PARSE_SPECIAL)
        mask = (1u << TT_CONTROL) | (1u << TT_USER_DEFINED) | (1u << TT_UNKNOWN);
    else if (flags & MOR_TOKENIZE_PARSE_USER_DEFINED)
        mask = 1u << TT_USER_DEFINED;
    size_t start = 0, i = 0;
    if (mask && t->n_special > 0) {
        while (i < len) {
            if (t->special_first[s[i] >> 3] & (1u << (s[i] & 7))) {
                mor_token id;
                size_t m = special_match(t, s + i, len - i, mask, &id);
                if (m > 0) {
                    if (i > start && (err = encode_stretch(st, s + start, i - start, start == 0)) != MOR_OK)
                        return err;
                    if ((err = push_id(st, id)) != MOR_OK) return err;
                    i += m;
                    start = i;
                    continue;
                }
            }
            uint32_t cp;
            i += utf8_decode(s + i, len - i, &cp);   /* specials start on a character */
        }
    }
    return len > start ? encode_stretch(st, s + start, len - start, start == 0) : MOR_OK;
}

mor_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, uint32_t flags,
                                mor_token *out, int32_t cap, int32_t *n_out)
{
    if (!t) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: no tokenizer");
    if (!text && len > 0) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: text is NULL");
    if (!n_out) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: n_out is NULL");
    if (cap < 0 || (cap > 0 && !out))
        return err_set(MOR_E_INVALID_ARG, "mor_tokenize: bad output buffer (cap %d)", (int)cap);
    if (flags & ~(uint32_t)(MOR_TOKENIZE_ADD_BOS | MOR_TOKENIZE_PARSE_SPECIAL | MOR_TOKENIZE_PARSE_USER_DEFINED))
        return err_set(MOR_E_INVALID_ARG, "mor_tokenize: unknown flags 0x%x", (unsigned)flags);

    /* Encode into our own buffer so that a failing call leaves out alone. */
    enc_state st = { 0 };
    st.t = t;
    mor_status err = encode_all(t, (const uint8_t *)text, len, flags, &st);
    if (err == MOR_OK) {
        if (st.n > (size_t)cap) {
            err = err_set(MOR_E_BUFFER_TOO_SMALL, "mor_tokenize: %zu tokens do not fit in %d",
                          st.n, (int)cap);
        } else if (st.n > 0) {
            memcpy(out, st.ids, st.n * sizeof *out);
        }
        *n_out = (int32_t)st.n;
    }
    enc_free(&st);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                 */
/* ------------------------------------------------------------------------ */

/* The bytes of token id (in range): an id of the model's padding has none. */
static const char *piece_of(const tokenizer *t, mor_token id, size_t *len)
{
    if (id >= t->n_tokens) { *len = 0; return ""; }
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

/* Decode toks[0..n) (checked) into buf, or only count when buf is NULL. A
 * SentencePiece tokenizer that puts a space before the text takes one
 * leading space off the first token, as llama.cpp's llama_detokenize and HF's
 * Strip decoder do, so that decode(encode(x)) == x. */
static uint64_t decode_into(const tokenizer *t, const mor_token *toks, int32_t n, char *buf)
{
    uint64_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len;
        const char *p = piece_of(t, toks[i], &len);
        if (i == 0 && len && p[0] == ' ' && t->model != TOK_BPE && t->prefix != PREFIX_NEVER) { p++; len--; }
        if (buf) memcpy(buf + pos, p, len);
        pos += len;
    }
    return pos;
}

mor_status tokenizer_decode(const tokenizer *t, const mor_token *toks, int32_t n,
                                char *buf, size_t cap, size_t *len_out)
{
    if (!t) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: no tokenizer");
    if (n < 0 || (n > 0 && !toks)) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: bad tokens (n %d)", (int)n);
    if (!len_out) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: len_out is NULL");
    if (cap > 0 && !buf) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: buf is NULL");

    for (int32_t i = 0; i < n; i++) {
        mor_token id = toks[i];
        if (id < 0 || id >= t->n_vocab)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_detokenize: token %d (at %d) is not in [0, %d)",
                           (int)id, (int)i, (int)t->n_vocab);
    }
    /* Every piece is shorter than 4 GiB and n < 2^31: the count fits 64 bits. */
    uint64_t total = decode_into(t, toks, n, NULL);
    if (total > SIZE_MAX) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: the text would be too long");
    size_t need = (size_t)total;
    if (need > cap) {
        *len_out = need;
        return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_detokenize: %zu bytes do not fit in %zu", need, cap);
    }
    decode_into(t, toks, n, buf);
    *len_out = need;
    return MOR_OK;
}

int tokenizer_is_text(const tokenizer *t, mor_token id)
{
    if (!t || id < 0 || id >= t->n_tokens) return 0;
    return t->type[id] == TT_NORMAL || t->type[id] == TT_BYTE || t->type[id] == TT_USER_DEFINED;
}

mor_status tokenizer_piece(const tokenizer *t, mor_token id, char *buf, size_t cap, size_t *len_out)
{
    if (!t) return err_set(MOR_E_INVALID_ARG, "mor_token_to_piece: no tokenizer");
    if (!len_out) return err_set(MOR_E_INVALID_ARG, "mor_token_to_piece: len_out is NULL");
    if (cap > 0 && !buf) return err_set(MOR_E_INVALID_ARG, "mor_token_to_piece: buf is NULL");
    if (id < 0 || id >= t->n_vocab)
        return err_set(MOR_E_OUT_OF_RANGE, "mor_token_to_piece: token %d is not in [0, %d)", (int)id,
                       (int)t->n_vocab);
    size_t len;
    const char *p = piece_of(t, id, &len);
    *len_out = len;
    if (len > cap) return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_token_to_piece: %zu bytes do not fit in %zu", len, cap);
    if (len) memcpy(buf, p, len);
    return MOR_OK;
}
