/* tokenizer.c - byte-level BPE (GPT-2, SmolLM), as HF `tokenizers` runs a
 * tokenizer.json with a ByteLevel pre-tokenizer, model BPE and a ByteLevel
 * decoder. The data comes from the tokenizer.ggml.* keys (docs/FORMAT.md).
 *
 * Encoding a text goes:
 *   1. with MOR_TOKENIZE_PARSE_SPECIAL, split out the special tokens (types 3
 *      and 4), leftmost match first and the longest one there, as HF's
 *      added-token splitting does; each stretch of text between them is
 *      encoded on its own;
 *   2. pre-tokenize: "smollm" first isolates every numeric code point (HF's
 *      Digits(individual_digits) splits on char::is_numeric); then the GPT-2
 *      regex, written out by hand below, cuts the text into pieces;
 *   3. each piece becomes one symbol per byte (the token of the byte's
 *      byte-level character) and the merges are applied lowest rank first, the
 *      leftmost on ties (HF's BPE::merge_word), with a heap: O(n log n).
 * Invalid UTF-8 cannot reach HF (Rust strings are valid), so its treatment is
 * ours: every byte that does not start a valid sequence is a one-byte
 * character of the "other" class ([^\s\p{L}\p{N}]) and is encoded byte-level
 * like any byte, so that decode(encode(x)) == x for every x.
 *
 * A loaded tokenizer is never written again: encode keeps its scratch memory
 * per call, so one tokenizer serves any number of threads. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "model.h"
#include "status.h"
#include "unicode.h"

enum { PRE_GPT2 = 0, PRE_SMOLLM = 1 };
/* Token types, with llama.cpp's numbers. */
enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4 };

typedef struct {
    const char *p;   /* into tokenizer.bytes */
    uint32_t    n;
    mor_token   id;
} special_token;

struct tokenizer {
    int32_t   n_tokens;     /* V': tokens with a text                          */
    int32_t   n_vocab;      /* the model's V >= V'; ids in [V', V) decode to "" */
    int       pre;          /* PRE_*                                           */
    mor_token bos, eos, pad;
    int       add_bos;      /* tokenizer.ggml.add_bos_token, informational     */
    uint8_t  *type;         /* [n_tokens]                                      */

    /* What token i decodes to, bytes[off[i] .. off[i+1]): the bytes behind the
     * byte-level characters of a normal token, the text itself of a special. */
    char     *bytes;
    uint32_t *off;          /* [n_tokens + 1] */

    mor_token byte_token[256];   /* the token of each byte's byte-level character */

    /* Merges by rank, and a hash table from the pair (left, right) to the rank.
     * Where the file lists a pair twice the later rank wins, as in HF (and in
     * GPT-2's encoder.py): both build a map from the list. */
    int32_t   n_merges;
    mor_token *merge_left, *merge_right, *merge_result;
    uint64_t *pair_key;     /* PAIR_EMPTY or (left << 32 | right) */
    int32_t  *pair_rank;
    uint64_t  pair_mask;
    int       pair_shift;

    /* Specials (non-empty texts of types 3 and 4), sorted by their bytes. */
    special_token *special;
    int32_t   n_special;
    uint8_t   special_first[32];   /* bit set: some special starts with this byte */
};

#define PAIR_EMPTY UINT64_MAX

/* ------------------------------------------------------------------------ */
/* GPT-2's byte-level alphabet                                              */
/* ------------------------------------------------------------------------ */

/* bytes_to_unicode() of GPT-2: printable bytes stand for themselves; the 68
 * others (0x00-0x20, 0x7F-0xA0, 0xAD) are moved, in order, to U+0100.. */
static uint32_t byte_to_cp(uint8_t b)
{
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 0x100 + 67;
    return b;
}

/* The inverse: the byte behind a byte-level character, or -1. */
static int cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) ? -1 : (int)cp;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(0x7F + cp - 0x100 - 33);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

/* UTF-8 of a code point below U+0800 (all the alphabet needs); returns the length. */
static size_t utf8_put_small(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* ------------------------------------------------------------------------ */
/* Hash tables                                                              */
/* ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;               /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 0x100000001b3u;
    return h ^ (h >> 29);
}

static uint64_t pair_hash(uint64_t key, int shift)
{
    return (key * 0x9E3779B97F4A7C15u) >> shift;    /* Fibonacci hashing */
}

static uint64_t pair_key_of(mor_token left, mor_token right)
{
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

/* The rank of the merge of (left, right), or -1. */
static int32_t pair_rank_of(const tokenizer *t, mor_token left, mor_token right)
{
    if (t->n_merges == 0) return -1;
    uint64_t key = pair_key_of(left, right);
    for (uint64_t i = pair_hash(key, t->pair_shift);; i = (i + 1) & t->pair_mask) {
        if (t->pair_key[i] == key) return t->pair_rank[i];
        if (t->pair_key[i] == PAIR_EMPTY) return -1;
    }
}

/* Table size for n entries at a load of at most one half, and its shift. */
static uint64_t table_size(uint64_t n, int *shift)
{
    uint64_t size = 16;
    int bits = 4;
    while (size < 2 * n) { size <<= 1; bits++; }
    if (shift) *shift = 64 - bits;
    return size;
}

/* Token texts -> id, used while loading only. */
typedef struct {
    const gguf_str *texts;
    int32_t *slot;          /* id + 1, 0 for empty */
    uint64_t mask;
} text_index;

static int32_t text_index_find(const text_index *ix, const char *p, size_t n)
{
    for (uint64_t i = hash_bytes(p, n) & ix->mask;; i = (i + 1) & ix->mask) {
        int32_t s = ix->slot[i];
        if (s == 0) return -1;
        const gguf_str *e = &ix->texts[s - 1];
        if (e->n == n && memcmp(e->p, p, n) == 0) return s - 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */
/* ------------------------------------------------------------------------ */

void tokenizer_free(tokenizer *t)
{
    if (!t) return;
    free(t->type);
    free(t->bytes);
    free(t->off);
    free(t->merge_left);
    free(t->merge_right);
    free(t->merge_result);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->special);
    free(t);
}

mor_token tokenizer_bos(const tokenizer *t) { return t ? t->bos : -1; }
mor_token tokenizer_eos(const tokenizer *t) { return t ? t->eos : -1; }

/* For messages: at most 40 bytes of a string. */
#define STR_ARG(s) (int)((s).n < 40 ? (s).n : 40), (s).p

static int special_cmp(const void *a, const void *b)
{
    const special_token *x = a, *y = b;
    uint32_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    return (x->n > y->n) - (x->n < y->n);   /* a prefix sorts first */
}

/* An optional token id key: -1 if absent, else it must name a token. */
static mor_status load_token_id(const gguf_file *g, const char *key, int32_t n_tokens, mor_token *out)
{
    uint32_t v;
    mor_status s = gguf_get_u32(g, key, &v);
    if (s == MOR_E_OUT_OF_RANGE) { *out = -1; return MOR_OK; }
    if (s != MOR_OK) return s;
    if (v >= (uint32_t)n_tokens)
        return err_set(MOR_E_FORMAT, "%s = %u is not a token id (the vocabulary has %d tokens)",
                       key, v, (int)n_tokens);
    *out = (mor_token)v;
    return MOR_OK;
}

static mor_status load_string_array(const gguf_file *g, const char *key, const gguf_kv **out)
{
    mor_status s = gguf_get_arr_str(g, key, out);
    if (s == MOR_E_OUT_OF_RANGE) return err_set(MOR_E_FORMAT, "%s is missing", key);
    if (s != MOR_OK) return s;
    if ((*out)->type != GGUF_ARR || (*out)->arr_type != GGUF_STR || (!(*out)->strs && (*out)->arr_n))
        return err_set(MOR_E_FORMAT, "%s is not an array of strings", key);
    return MOR_OK;
}

/* The texts: type and decoded bytes of every token, and a temporary index. */
static mor_status load_tokens(tokenizer *t, const gguf_file *g, const gguf_kv *tokens_kv,
                              text_index *ix)
{
    const char *types_key = "tokenizer.ggml.token_type";
    int32_t n = t->n_tokens;
    const gguf_kv *tkv = gguf_find_kv(g, types_key);
    if (!tkv) return err_set(MOR_E_FORMAT, "%s is missing", types_key);
    if (tkv->type != GGUF_ARR || tkv->arr_n != (uint64_t)n)
        return err_set(MOR_E_FORMAT, "%s must be an array of %d integers, like tokenizer.ggml.tokens",
                       types_key, (int)n);
    int32_t *types = malloc((size_t)n * sizeof *types);
    if (!types) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    mor_status s = gguf_get_arr_i32(g, types_key, types, (uint64_t)n);
    if (s != MOR_OK) { free(types); return s; }

    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (types[i] != TT_NORMAL && types[i] != TT_CONTROL && types[i] != TT_USER_DEFINED) {
            int32_t bad = types[i];
            free(types);
            return err_set(MOR_E_FORMAT, "%s[%d] = %d: only 1 (normal), 3 (control) and 4 "
                           "(user-defined) are valid", types_key, (int)i, (int)bad);
        }
        t->type[i] = (uint8_t)types[i];
        total += tokens_kv->strs[i].n;
    }
    free(types);
    if (total >= UINT32_MAX)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: texts too long in total");

    /* Decoded bytes are never longer than the text. A character outside the
     * byte-level alphabet (or an invalid byte) in a normal token is kept as it
     * is, as HF's ByteLevel decoder does. */
    t->bytes = malloc(total ? (size_t)total : 1);
    if (!t->bytes) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const gguf_str *e = &tokens_kv->strs[i];
        const uint8_t *p = (const uint8_t *)e->p;
        t->off[i] = pos;
        if (t->type[i] != TT_NORMAL) {
            if (e->n) memcpy(t->bytes + pos, p, e->n);
            pos += (uint32_t)e->n;
            continue;
        }
        for (size_t k = 0; k < e->n;) {
            uint32_t cp;
            size_t len = utf8_decode(p + k, e->n - k, &cp);
            int b = cp == UTF8_INVALID ? -1 : cp_to_byte(cp);
            if (b >= 0) t->bytes[pos++] = (char)b;
            else { memcpy(t->bytes + pos, p + k, len); pos += (uint32_t)len; }
            k += len;
        }
    }
    t->off[n] = pos;

    /* Index the texts; a text listed twice would make merges ambiguous. */
    uint64_t size = table_size((uint64_t)n, NULL);
    ix->texts = tokens_kv->strs;
    ix->mask = size - 1;
    ix->slot = calloc((size_t)size, sizeof *ix->slot);
    if (!ix->slot) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    for (int32_t i = 0; i < n; i++) {
        const gguf_str *e = &tokens_kv->strs[i];
        if (e->n == 0) continue;     /* never matched; padding entries may be empty */
        uint64_t h = hash_bytes(e->p, e->n) & ix->mask;
        for (;; h = (h + 1) & ix->mask) {
            int32_t sl = ix->slot[h];
            if (sl == 0) { ix->slot[h] = i + 1; break; }
            const gguf_str *o = &tokens_kv->strs[sl - 1];
            if (o->n == e->n && memcmp(o->p, e->p, e->n) == 0)
                return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: token %d \"%.*s\" repeats token %d",
                               (int)i, STR_ARG(*e), (int)(sl - 1));
        }
    }

    /* Byte-level BPE starts from one token per byte: all 256 must exist, or
     * some texts could not be encoded at all. */
    for (int b = 0; b < 256; b++) {
        char ch[2];
        size_t len = utf8_put_small(byte_to_cp((uint8_t)b), ch);
        int32_t id = text_index_find(ix, ch, len);
        if (id < 0 || t->type[id] != TT_NORMAL)
            return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: no normal token for byte 0x%02X "
                           "(\"%.*s\"); a byte-level vocabulary needs all 256", b, (int)len, ch);
        t->byte_token[b] = id;
    }
    return MOR_OK;
}

static mor_status load_merges(tokenizer *t, const gguf_file *g, const text_index *ix)
{
    const char *key = "tokenizer.ggml.merges";
    const gguf_kv *kv;
    mor_status s = load_string_array(g, key, &kv);
    if (s != MOR_OK) return s;
    if (kv->arr_n > INT32_MAX) return err_set(MOR_E_FORMAT, "%s: too many merges", key);
    int32_t n = (int32_t)kv->arr_n;
    t->n_merges = n;
    if (n == 0) return MOR_OK;

    t->merge_left = malloc((size_t)n * sizeof *t->merge_left);
    t->merge_right = malloc((size_t)n * sizeof *t->merge_right);
    t->merge_result = malloc((size_t)n * sizeof *t->merge_result);
    uint64_t size = table_size((uint64_t)n, &t->pair_shift);
    t->pair_mask = size - 1;
    t->pair_key = malloc((size_t)size * sizeof *t->pair_key);
    t->pair_rank = malloc((size_t)size * sizeof *t->pair_rank);
    size_t cat_cap = 256;
    char *cat = malloc(cat_cap);
    if (!t->merge_left || !t->merge_right || !t->merge_result || !t->pair_key || !t->pair_rank || !cat) {
        free(cat);
        return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    }
    for (uint64_t i = 0; i < size; i++) t->pair_key[i] = PAIR_EMPTY;

    for (int32_t r = 0; r < n; r++) {
        gguf_str m = kv->strs[r];
        /* "left right": exactly one space, both sides non-empty (byte-level
         * tokens never contain a space: it is written as U+0120). */
        const char *sp = m.n ? memchr(m.p, ' ', m.n) : NULL;
        size_t nl = sp ? (size_t)(sp - m.p) : 0;
        size_t nr = sp ? m.n - nl - 1 : 0;
        if (!sp || nl == 0 || nr == 0 || memchr(sp + 1, ' ', nr)) {
            free(cat);
            return err_set(MOR_E_FORMAT, "%s[%d] = \"%.*s\" is not \"left right\"", key, (int)r, STR_ARG(m));
        }
        int32_t left = text_index_find(ix, m.p, nl);
        int32_t right = text_index_find(ix, sp + 1, nr);
        if (left < 0 || right < 0) {
            free(cat);
            return err_set(MOR_E_FORMAT, "%s[%d] = \"%.*s\" names a token that is not in the vocabulary",
                           key, (int)r, STR_ARG(m));
        }
        if (nl + nr > cat_cap) {
            char *c2 = realloc(cat, nl + nr);
            if (!c2) { free(cat); return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer"); }
            cat = c2;
            cat_cap = nl + nr;
        }
        memcpy(cat, m.p, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t result = text_index_find(ix, cat, nl + nr);
        if (result < 0) {
            free(cat);
            return err_set(MOR_E_FORMAT, "%s[%d] = \"%.*s\": the merged text is not a token",
                           key, (int)r, STR_ARG(m));
        }
        t->merge_left[r] = left;
        t->merge_right[r] = right;
        t->merge_result[r] = result;
        uint64_t pk = pair_key_of(left, right);
        for (uint64_t h = pair_hash(pk, t->pair_shift);; h = (h + 1) & t->pair_mask) {
            if (t->pair_key[h] == PAIR_EMPTY || t->pair_key[h] == pk) {
                t->pair_key[h] = pk;
                t->pair_rank[h] = r;
                break;
            }
        }
    }
    free(cat);
    return MOR_OK;
}

static mor_status load_specials(tokenizer *t)
{
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_tokens; i++)
        if (t->type[i] != TT_NORMAL && t->off[i + 1] > t->off[i]) n++;
    t->n_special = n;
    if (n == 0) return MOR_OK;
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->special) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    n = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        if (t->type[i] == TT_NORMAL || t->off[i + 1] == t->off[i]) continue;
        special_token *sp = &t->special[n++];
        sp->p = t->bytes + t->off[i];
        sp->n = t->off[i + 1] - t->off[i];
        sp->id = i;
        t->special_first[(uint8_t)sp->p[0] >> 3] |= (uint8_t)(1u << ((uint8_t)sp->p[0] & 7));
    }
    qsort(t->special, (size_t)n, sizeof *t->special, special_cmp);
    return MOR_OK;
}

static mor_status load_all(tokenizer *t, const gguf_file *g, int32_t n_vocab_model, text_index *ix)
{
    gguf_str pre;
    mor_status s = gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (s == MOR_E_OUT_OF_RANGE) return err_set(MOR_E_FORMAT, "tokenizer.ggml.pre is missing");
    if (s != MOR_OK) return s;
    if (gguf_str_eq(pre, "gpt2")) t->pre = PRE_GPT2;
    else if (gguf_str_eq(pre, "smollm")) t->pre = PRE_SMOLLM;
    else return err_set(MOR_E_FORMAT, "tokenizer.ggml.pre = \"%.*s\": only \"gpt2\" and \"smollm\" "
                        "are supported", STR_ARG(pre));

    const gguf_kv *tokens_kv;
    s = load_string_array(g, "tokenizer.ggml.tokens", &tokens_kv);
    if (s != MOR_OK) return s;
    if (tokens_kv->arr_n > (uint64_t)n_vocab_model)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens has %llu tokens, more than the model's "
                       "vocabulary of %d", (unsigned long long)tokens_kv->arr_n, (int)n_vocab_model);
    t->n_tokens = (int32_t)tokens_kv->arr_n;
    t->n_vocab = n_vocab_model;
    t->type = malloc((size_t)t->n_tokens + 1);
    t->off = malloc(((size_t)t->n_tokens + 1) * sizeof *t->off);
    if (!t->type || !t->off) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");

    if ((s = load_tokens(t, g, tokens_kv, ix)) != MOR_OK) return s;
    if ((s = load_merges(t, g, ix)) != MOR_OK) return s;
    if ((s = load_specials(t)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.bos_token_id", t->n_tokens, &t->bos)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.eos_token_id", t->n_tokens, &t->eos)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.padding_token_id", t->n_tokens, &t->pad)) != MOR_OK) return s;
    s = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    if (s == MOR_E_OUT_OF_RANGE) { t->add_bos = 0; s = MOR_OK; }
    return s;
}

mor_status tokenizer_load(const gguf_file *g, int32_t n_vocab_model, tokenizer **out)
{
    if (!out) return err_set(MOR_E_INVALID_ARG, "tokenizer_load: out is NULL");
    *out = NULL;
    if (!g) return err_set(MOR_E_INVALID_ARG, "tokenizer_load: no file");

    gguf_str model;
    mor_status s = gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (s == MOR_E_OUT_OF_RANGE) {
        /* No tokenizer. Other tokenizer keys without this one are an error. */
        if (gguf_find_kv(g, "tokenizer.ggml.tokens") || gguf_find_kv(g, "tokenizer.ggml.merges"))
            return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens without tokenizer.ggml.model");
        return MOR_OK;
    }
    if (s != MOR_OK) return s;
    if (!gguf_str_eq(model, "gpt2"))
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.model = \"%.*s\": only \"gpt2\" (byte-level BPE) "
                       "is supported", STR_ARG(model));
    if (n_vocab_model <= 0)
        return err_set(MOR_E_INVALID_ARG, "tokenizer_load: model vocabulary size %d", (int)n_vocab_model);

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return err_set(MOR_E_NOMEM, "out of memory loading the tokenizer");
    t->bos = t->eos = t->pad = -1;
    text_index ix = { 0 };
    s = load_all(t, g, n_vocab_model, &ix);
    free(ix.slot);
    if (s != MOR_OK) { tokenizer_free(t); return s; }
    *out = t;
    return MOR_OK;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                 */
/* ------------------------------------------------------------------------ */

/* Per-call state: the ids produced so far and the BPE scratch, sized for the
 * longest piece seen. */
typedef struct {
    mor_token *ids;
    size_t     n, cap;
    mor_token *sym;     /* symbol ids of the piece, -1 once merged away */
    int32_t   *next, *prev;
    uint64_t  *heap;    /* (rank << 32 | position of the left symbol), min first */
    size_t     scap;
} enc_state;

static void enc_free(enc_state *st)
{
    free(st->ids);
    free(st->sym);
    free(st->next);
    free(st->prev);
    free(st->heap);
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
    free(st->sym); free(st->next); free(st->prev); free(st->heap);
    st->sym = malloc(cap * sizeof *st->sym);
    st->next = malloc(cap * sizeof *st->next);
    st->prev = malloc(cap * sizeof *st->prev);
    /* Each merge pushes at most two pairs: n - 1 + 2 (n - 1) entries at most. */
    st->heap = malloc(3 * cap * sizeof *st->heap);
    st->scap = (st->sym && st->next && st->prev && st->heap) ? cap : 0;
    if (!st->scap) return err_set(MOR_E_NOMEM, "out of memory tokenizing");
    return MOR_OK;
}

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

static void push_pair(const tokenizer *t, enc_state *st, size_t *hn, int32_t pos)
{
    int32_t r = pair_rank_of(t, st->sym[pos], st->sym[st->next[pos]]);
    if (r >= 0) heap_push(st->heap, hn, ((uint64_t)r << 32) | (uint32_t)pos);
}

/* BPE of one pre-token: lowest rank first, leftmost first among equal ranks. */
static mor_status bpe_piece(const tokenizer *t, const uint8_t *s, size_t n, enc_state *st)
{
    if (n == 1) return push_id(st, t->byte_token[s[0]]);
    mor_status err = ensure_scratch(st, n);
    if (err != MOR_OK) return err;
    mor_token *sym = st->sym;
    int32_t *next = st->next, *prev = st->prev;
    for (size_t i = 0; i < n; i++) {
        sym[i] = t->byte_token[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, st, &hn, (int32_t)i);

    while (hn > 0) {
        uint64_t top = heap_pop(st->heap, &hn);
        int32_t r = (int32_t)(top >> 32), p = (int32_t)(uint32_t)top;
        int32_t q = next[p];
        /* Stale entries (a side was merged since) no longer show the pair. */
        if (sym[p] < 0 || q < 0 || sym[p] != t->merge_left[r] || sym[q] != t->merge_right[r])
            continue;
        sym[p] = t->merge_result[r];
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        if (prev[p] >= 0) push_pair(t, st, &hn, prev[p]);
        if (next[p] >= 0) push_pair(t, st, &hn, p);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) {
        if ((err = push_id(st, sym[i])) != MOR_OK) return err;
    }
    return MOR_OK;
}

/* Length and class of the character at s[i] (i < n). */
static size_t char_at(const uint8_t *s, size_t n, size_t i, int *cls)
{
    uint32_t cp;
    size_t len = utf8_decode(s + i, n - i, &cp);
    *cls = unicode_class(cp);
    return len;
}

/* Encode text without specials: pre-tokenize, then BPE each piece. */
static mor_status encode_fragment(const tokenizer *t, const uint8_t *s, size_t n, enc_state *st)
{
    mor_status err;
    size_t i = 0;
    while (i < n) {
        size_t end = n;
        if (t->pre == PRE_SMOLLM) {
            /* A numeric character is a piece by itself; the regex runs on the
             * stretches between them as on whole texts. */
            int c;
            size_t len = char_at(s, n, i, &c);
            if (c == UC_NUMBER) {
                if ((err = bpe_piece(t, s + i, len, st)) != MOR_OK) return err;
                i += len;
                continue;
            }
            for (end = i + len; end < n; end += len) {
                len = char_at(s, n, end, &c);
                if (c == UC_NUMBER) break;
            }
        }
        while (i < end) {
            size_t e = gpt2_piece_end(s, end, i);
            if ((err = bpe_piece(t, s + i, e - i, st)) != MOR_OK) return err;
            i = e;
        }
    }
    return MOR_OK;
}

/* The longest special token that s[0..n) starts with: its length (0 if none)
 * and id. The sorted list is narrowed byte by byte; a special that ends at
 * byte k sorts first among those sharing its k bytes. */
static size_t special_match(const tokenizer *t, const uint8_t *s, size_t n, mor_token *id)
{
    const special_token *sp = t->special;
    size_t lo = 0, hi = (size_t)t->n_special, k = 0, best = 0;
    while (lo < hi) {
        if (sp[lo].n == k) {
            best = k;
            *id = sp[lo].id;
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
    size_t start = 0, i = 0;
    if ((flags & MOR_TOKENIZE_PARSE_SPECIAL) && t->n_special > 0) {
        while (i < len) {
            if (t->special_first[s[i] >> 3] & (1u << (s[i] & 7))) {
                mor_token id;
                size_t m = special_match(t, s + i, len - i, &id);
                if (m > 0) {
                    if ((err = encode_fragment(t, s + start, i - start, st)) != MOR_OK) return err;
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
    return encode_fragment(t, s + start, len - start, st);
}

mor_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, uint32_t flags,
                                mor_token *out, int32_t cap, int32_t *n_out)
{
    if (!t) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: no tokenizer");
    if (!text && len > 0) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: text is NULL");
    if (!n_out) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: n_out is NULL");
    if (cap < 0 || (cap > 0 && !out))
        return err_set(MOR_E_INVALID_ARG, "mor_tokenize: bad output buffer (cap %d)", (int)cap);
    if (flags & ~(uint32_t)(MOR_TOKENIZE_ADD_BOS | MOR_TOKENIZE_PARSE_SPECIAL))
        return err_set(MOR_E_INVALID_ARG, "mor_tokenize: unknown flags 0x%x", (unsigned)flags);

    /* Encode into our own buffer so that a failing call leaves out alone. */
    enc_state st = { 0 };
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

mor_status tokenizer_decode(const tokenizer *t, const mor_token *toks, int32_t n,
                                char *buf, size_t cap, size_t *len_out)
{
    if (!t) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: no tokenizer");
    if (n < 0 || (n > 0 && !toks)) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: bad tokens (n %d)", (int)n);
    if (!len_out) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: len_out is NULL");
    if (cap > 0 && !buf) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: buf is NULL");

    size_t need = 0;
    for (int32_t i = 0; i < n; i++) {
        mor_token id = toks[i];
        if (id < 0 || id >= t->n_vocab)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_detokenize: token %d (at %d) is not in [0, %d)",
                           (int)id, (int)i, (int)t->n_vocab);
        if (id < t->n_tokens) {   /* ids of the model's padding have no text */
            size_t len = t->off[id + 1] - t->off[id];
            if (len > SIZE_MAX - need)
                return err_set(MOR_E_INVALID_ARG, "mor_detokenize: the text would be too long");
            need += len;
        }
    }
    if (need > cap) {
        *len_out = need;
        return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_detokenize: %zu bytes do not fit in %zu", need, cap);
    }
    size_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        mor_token id = toks[i];
        if (id >= t->n_tokens) continue;
        size_t len = t->off[id + 1] - t->off[id];
        memcpy(buf + pos, t->bytes + t->off[id], len);
        pos += len;
    }
    *len_out = need;
    return MOR_OK;
}

/* ------------------------------------------------------------------------ */
/* Public API                                                               */
/* ------------------------------------------------------------------------ */

mor_status mor_tokenize(const mor_model *model, const char *text, size_t len,
                        uint32_t flags, mor_token *out, int32_t cap, int32_t *n_out)
{
    err_clear();
    if (!model) return err_set(MOR_E_INVALID_ARG, "mor_tokenize: model is NULL");
    const tokenizer *t = model_tokenizer(model);
    if (!t) return err_set(MOR_E_UNSUPPORTED, "mor_tokenize: the model has no tokenizer");
    return tokenizer_encode(t, text, len, flags, out, cap, n_out);
}

mor_status mor_detokenize(const mor_model *model, const mor_token *tokens, int32_t n,
                          char *buf, size_t cap, size_t *len_out)
{
    err_clear();
    if (!model) return err_set(MOR_E_INVALID_ARG, "mor_detokenize: model is NULL");
    const tokenizer *t = model_tokenizer(model);
    if (!t) return err_set(MOR_E_UNSUPPORTED, "mor_detokenize: the model has no tokenizer");
    return tokenizer_decode(t, tokens, n, buf, cap, len_out);
}
