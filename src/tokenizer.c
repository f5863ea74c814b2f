/* tokenizer.c - loading a tokenizer from the tokenizer.ggml.* keys of a GGUF
 * file (docs/FORMAT.md), checked strictly; tokenize.c runs it.
 *
 * Two families, as llama.cpp stores them:
 *   - "gpt2": byte-level BPE (GPT-2, GPT-NeoX, SmolLM, StarCoder, Falcon,
 *     DeepSeek, ...): token texts are in GPT-2's byte-level alphabet, the
 *     merges are ranked, tokenizer.ggml.pre names the pre-tokenizer
 *     (src/pretokenize.c);
 *   - "llama": SentencePiece-style (Llama, TinyLlama, Gemma): texts with
 *     U+2581 for a space, <0xNN> byte tokens (byte fallback), an unknown
 *     token. With tokenizer.ggml.scores and no merges, pairs merge by the
 *     score of the token they make, as llama.cpp runs SentencePiece files;
 *     with merges (what mor-convert writes from a Hugging Face tokenizer.json
 *     holding a BPE with byte_fallback), by the merges' ranks, as HF does.
 * The tokenizer copies what it needs: the file may be freed afterwards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"
#include "status.h"
#include "unicode.h"

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

uint64_t tok_hash(const char *p, size_t n)
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

int32_t tok_pair_rank(const tokenizer *t, mor_token left, mor_token right)
{
    if (t->n_merges == 0) return -1;
    uint64_t key = pair_key_of(left, right);
    for (uint64_t i = pair_hash(key, t->pair_shift);; i = (i + 1) & t->pair_mask) {
        if (t->pair_key[i] == key) return t->pair_rank[i];
        if (t->pair_key[i] == PAIR_EMPTY) return -1;
    }
}

mor_token tok_find_raw(const tokenizer *t, const char *p, size_t n)
{
    for (uint64_t i = tok_hash(p, n) & t->raw_mask;; i = (i + 1) & t->raw_mask) {
        int32_t s = t->raw_slot[i];
        if (s == 0) return -1;
        uint32_t a = t->raw_off[s - 1], len = t->raw_off[s] - a;
        if (len == n && memcmp(t->raw + a, p, n) == 0) return s - 1;
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
    for (uint64_t i = tok_hash(p, n) & ix->mask;; i = (i + 1) & ix->mask) {
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
    pretok_free(t->pre);
    free(t->type);
    free(t->bytes);
    free(t->off);
    free(t->merge_left);
    free(t->merge_right);
    free(t->merge_result);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->raw);
    free(t->raw_off);
    free(t->raw_slot);
    free(t->score_key);
    free(t->special);
    free(t);
}

mor_token tokenizer_bos(const tokenizer *t) { return t ? t->bos : -1; }
mor_token tokenizer_eos(const tokenizer *t) { return t ? t->eos : -1; }
int       tokenizer_add_bos(const tokenizer *t) { return t ? t->add_bos : 0; }

/* For messages: at most 40 bytes of a string. */
#define STR_ARG(s) (int)((s).n < 40 ? (s).n : 40), (s).p
#define NOMEM() err_set(MOR_E_NOMEM, "out of memory loading the tokenizer")

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

/* An optional bool key: def if absent. */
static mor_status load_bool(const gguf_file *g, const char *key, int def, int *out)
{
    mor_status s = gguf_get_bool(g, key, out);
    if (s == MOR_E_OUT_OF_RANGE) { *out = def; return MOR_OK; }
    return s;
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

/* The hex digit c, or -1. */
static int hex_digit(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a SentencePiece byte token "<0xNN>", or -1. */
static int byte_token_value(const gguf_str *e)
{
    if (e->n != 6 || memcmp(e->p, "<0x", 3) != 0 || e->p[5] != '>') return -1;
    int hi = hex_digit(e->p[3]), lo = hex_digit(e->p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static const char u2581[3] = { '\xe2', '\x96', '\x81' };   /* U+2581, SentencePiece's space */

/* What token i decodes to, into t->bytes at *pos (never longer than its text). */
static void decoded_text(tokenizer *t, int32_t i, const gguf_str *e, uint32_t *pos)
{
    const uint8_t *p = (const uint8_t *)e->p;
    int type = t->type[i];
    if (type == TT_UNUSED) return;
    if (type == TT_BYTE) {
        t->bytes[(*pos)++] = (char)byte_token_value(e);
        return;
    }
    if (type != TT_NORMAL) {
        if (e->n) memcpy(t->bytes + *pos, p, e->n);
        *pos += (uint32_t)e->n;
        return;
    }
    for (size_t k = 0; k < e->n;) {
        if (t->model != TOK_BPE) {   /* U+2581 -> ' ' */
            if (k + 3 <= e->n && memcmp(p + k, u2581, 3) == 0) {
                t->bytes[(*pos)++] = ' ';
                k += 3;
            } else {
                t->bytes[(*pos)++] = (char)p[k++];
            }
            continue;
        }
        /* A character outside the byte-level alphabet (or an invalid byte) in
         * a normal token is kept as it is, as HF's ByteLevel decoder does. */
        uint32_t cp;
        size_t len = utf8_decode(p + k, e->n - k, &cp);
        int b = cp == UTF8_INVALID ? -1 : cp_to_byte(cp);
        if (b >= 0) t->bytes[(*pos)++] = (char)b;
        else { memcpy(t->bytes + *pos, p + k, len); *pos += (uint32_t)len; }
        k += len;
    }
}

/* Every token's type, checked against the model; *total_out: the bytes of
 * all texts as stored. */
static mor_status load_types(tokenizer *t, const gguf_file *g, const gguf_kv *tokens_kv, uint64_t *total_out)
{
    const char *types_key = "tokenizer.ggml.token_type";
    int32_t n = t->n_tokens;
    const gguf_kv *tkv = gguf_find_kv(g, types_key);
    if (!tkv) return err_set(MOR_E_FORMAT, "%s is missing", types_key);
    if (tkv->type != GGUF_ARR || tkv->arr_n != (uint64_t)n)
        return err_set(MOR_E_FORMAT, "%s must be an array of %d integers, like tokenizer.ggml.tokens",
                       types_key, (int)n);
    int32_t *types = malloc((size_t)n * sizeof *types + 1);
    if (!types) return NOMEM();
    mor_status s = gguf_get_arr_i32(g, types_key, types, (uint64_t)n);
    if (s != MOR_OK) { free(types); return s; }

    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        int ty = types[i];
        int ok = t->model == TOK_BPE ? (ty == TT_NORMAL || ty == TT_CONTROL || ty == TT_USER_DEFINED)
                                     : (ty >= TT_NORMAL && ty <= TT_BYTE);
        if (!ok) {
            free(types);
            return err_set(MOR_E_FORMAT, t->model == TOK_BPE
                           ? "%s[%d] = %d: only 1 (normal), 3 (control) and 4 (user-defined) are valid"
                           : "%s[%d] = %d: valid types are 1 (normal) to 6 (byte)", types_key, (int)i, ty);
        }
        t->type[i] = (uint8_t)ty;
        total += tokens_kv->strs[i].n;
    }
    free(types);
    if (total >= UINT32_MAX)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: texts too long in total");
    *total_out = total;
    return MOR_OK;
}

/* SentencePiece: the byte tokens <0xNN>, all 256 of them or none. */
static mor_status spm_byte_tokens(tokenizer *t, const gguf_kv *tokens_kv)
{
    const int32_t n = t->n_tokens;
    int n_byte = 0;
    for (int32_t i = 0; i < n; i++) {
        if (t->type[i] != TT_BYTE) continue;
        const gguf_str *e = &tokens_kv->strs[i];
        int b = byte_token_value(e);
        if (b < 0)
            return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens[%d] = \"%.*s\" has type 6 (byte) but is "
                           "not <0xNN>", (int)i, STR_ARG(*e));
        if (t->byte_token[b] >= 0)
            return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: byte 0x%02X has two tokens, %d and %d", b,
                           (int)t->byte_token[b], (int)i);
        t->byte_token[b] = i;
        n_byte++;
    }
    if (n_byte != 0 && n_byte != 256)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: %d of the 256 byte tokens <0xNN>; byte "
                       "fallback needs all of them", n_byte);
    return MOR_OK;
}

/* A temporary index of the texts as stored; a text listed twice would make
 * merges ambiguous. */
static mor_status index_texts(const tokenizer *t, const gguf_kv *tokens_kv, text_index *ix)
{
    const int32_t n = t->n_tokens;
    uint64_t size = table_size((uint64_t)n, NULL);
    ix->texts = tokens_kv->strs;
    ix->mask = size - 1;
    ix->slot = calloc((size_t)size, sizeof *ix->slot);
    if (!ix->slot) return NOMEM();
    for (int32_t i = 0; i < n; i++) {
        const gguf_str *e = &tokens_kv->strs[i];
        if (e->n == 0) continue;     /* never matched; padding entries may be empty */
        uint64_t h = tok_hash(e->p, e->n) & ix->mask;
        for (;; h = (h + 1) & ix->mask) {
            int32_t sl = ix->slot[h];
            if (sl == 0) { ix->slot[h] = i + 1; break; }
            const gguf_str *o = &tokens_kv->strs[sl - 1];
            if (o->n == e->n && memcmp(o->p, e->p, e->n) == 0)
                return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: token %d \"%.*s\" repeats token %d",
                               (int)i, STR_ARG(*e), (int)(sl - 1));
        }
    }
    return MOR_OK;
}

/* Byte-level BPE: the token of each byte's character. */
static mor_status bpe_byte_tokens(tokenizer *t, const text_index *ix)
{
    /* Byte-level BPE starts from one token per byte. Real vocabularies lack
     * a few: StarCoder's and GPT-NeoX's the bytes UTF-8 never uses (C0, C1),
     * Falcon's some control bytes; such a byte is dropped from the text, as
     * HF and llama.cpp drop it. DeepSeek's give C0, C1 and F5-FF as
     * user-defined tokens, which are taken as they are. A byte whose
     * character is a control token is an error. */
    int n_missing = 0;
    for (int b = 0; b < 256; b++) {
        char ch[2];
        size_t len = utf8_put_small(byte_to_cp((uint8_t)b), ch);
        int32_t id = text_index_find(ix, ch, len);
        if (id >= 0 && t->type[id] != TT_NORMAL && t->type[id] != TT_USER_DEFINED)
            return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: the token of byte 0x%02X (\"%.*s\") is a "
                           "control token", b, (int)len, ch);
        t->byte_token[b] = id;
        n_missing += id < 0;
    }
    if (n_missing > 128)   /* not a byte-level vocabulary at all */
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.tokens: %d of the 256 byte-level characters have no token; "
                       "this is not a byte-level BPE vocabulary", n_missing);
    return MOR_OK;
}

/* The texts: type and decoded bytes of every token, and a temporary index of
 * the texts as stored. */
static mor_status load_tokens(tokenizer *t, const gguf_file *g, const gguf_kv *tokens_kv,
                              text_index *ix)
{
    const int32_t n = t->n_tokens;
    uint64_t total = 0;
    mor_status s = load_types(t, g, tokens_kv, &total);
    for (int b = 0; b < 256; b++) t->byte_token[b] = -1;
    if (!s && t->model != TOK_BPE) s = spm_byte_tokens(t, tokens_kv);
    if (s) return s;
    t->bytes = malloc(total ? (size_t)total : 1);
    if (!t->bytes) return NOMEM();
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        t->off[i] = pos;
        decoded_text(t, i, &tokens_kv->strs[i], &pos);
    }
    t->off[n] = pos;
    if ((s = index_texts(t, tokens_kv, ix))) return s;
    return t->model == TOK_BPE ? bpe_byte_tokens(t, ix) : MOR_OK;
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
        return NOMEM();
    }
    for (uint64_t i = 0; i < size; i++) t->pair_key[i] = PAIR_EMPTY;

    for (int32_t r = 0; r < n; r++) {
        gguf_str m = kv->strs[r];
        /* "left right": exactly one space, both sides non-empty (tokens never
         * contain a space: byte-level BPE writes it U+0120, SentencePiece
         * U+2581). */
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
            if (!c2) { free(cat); return NOMEM(); }
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

/* A score as a key that sorts higher scores first (an order-preserving map
 * of the float bits, inverted). */
static uint32_t score_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* SentencePiece: the normal tokens by their stored text, for the merges and
 * the first symbols of a text, and the scores. */
static mor_status load_spm(tokenizer *t, const gguf_file *g, const gguf_kv *tokens_kv)
{
    int32_t n = t->n_tokens;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += tokens_kv->strs[i].n;
    t->raw = malloc(total ? (size_t)total : 1);
    t->raw_off = malloc(((size_t)n + 1) * sizeof *t->raw_off);
    uint64_t size = table_size((uint64_t)n, NULL);
    t->raw_mask = size - 1;
    t->raw_slot = calloc((size_t)size, sizeof *t->raw_slot);
    if (!t->raw || !t->raw_off || !t->raw_slot) return NOMEM();
    uint32_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        const gguf_str *e = &tokens_kv->strs[i];
        t->raw_off[i] = pos;
        if (e->n) memcpy(t->raw + pos, e->p, e->n);
        pos += (uint32_t)e->n;
        if (e->n == 0 || t->type[i] != TT_NORMAL) continue;
        uint64_t h = tok_hash(e->p, e->n) & t->raw_mask;   /* texts are unique (checked) */
        while (t->raw_slot[h]) h = (h + 1) & t->raw_mask;
        t->raw_slot[h] = i + 1;
    }
    t->raw_off[n] = pos;

    /* SentencePiece trained with split_by_whitespace (Llama, Gemma) has U+2581
     * only at the start of a token: then a text may be cut before each run of
     * U+2581 and each part merged on its own, with the same result. */
    t->cut_at_spaces = tok_find_raw(t, u2581, 3) >= 0;
    for (int32_t i = 0; i < n && t->cut_at_spaces; i++) {
        const char *p = t->raw + t->raw_off[i];
        uint32_t len = t->raw_off[i + 1] - t->raw_off[i];
        for (uint32_t k = 1; k + 3 <= len; k++)
            if (!memcmp(p + k, u2581, 3) && (k < 3 || memcmp(p + k - 3, u2581, 3))) { t->cut_at_spaces = 0; break; }
    }
    if (t->model != TOK_SPM) return MOR_OK;

    const char *key = "tokenizer.ggml.scores";
    const gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) return err_set(MOR_E_FORMAT, "%s is missing (SentencePiece merges by the tokens' scores)", key);
    if (kv->type != GGUF_ARR || kv->arr_type != GGUF_F32 || kv->arr_n != (uint64_t)n)
        return err_set(MOR_E_FORMAT, "%s must be an array of %d float32, like tokenizer.ggml.tokens", key, (int)n);
    float *scores = malloc((size_t)n * sizeof *scores + 1);
    t->score_key = malloc((size_t)n * sizeof *t->score_key + 1);
    if (!scores || !t->score_key) { free(scores); return NOMEM(); }
    mor_status s = gguf_get_arr_f32(g, key, scores, (uint64_t)n);
    for (int32_t i = 0; s == MOR_OK && i < n; i++) {
        if (isnan(scores[i])) s = err_set(MOR_E_FORMAT, "%s[%d] is NaN", key, (int)i);
        t->score_key[i] = score_key(scores[i]);
    }
    free(scores);
    return s;
}

/* SentencePiece: how a space goes before the text. */
static mor_status load_prefix(tokenizer *t, const gguf_file *g)
{
    static const char *const names[] = { "never", "prepend", "always", "first" };
    int add = 1;
    const char *key = "tokenizer.ggml.add_space_prefix";
    mor_status s = load_bool(g, key, 1, &add);
    if (s != MOR_OK) return s;
    t->prefix = add ? PREFIX_PREPEND : PREFIX_NEVER;

    gguf_str v;
    s = gguf_get_str(g, "mor.tokenizer.prefix_space", &v);
    if (s == MOR_E_OUT_OF_RANGE) return MOR_OK;
    if (s != MOR_OK) return s;
    int k;
    for (k = 0; k < 4 && !gguf_str_eq(v, names[k]); k++) {}
    if (k == 4)
        return err_set(MOR_E_FORMAT, "mor.tokenizer.prefix_space = \"%.*s\": never, prepend, always or first",
                       STR_ARG(v));
    if (gguf_find_kv(g, key) && (k != PREFIX_NEVER) != (add != 0))
        return err_set(MOR_E_FORMAT, "mor.tokenizer.prefix_space = \"%s\" contradicts %s = %s", names[k], key,
                       add ? "true" : "false");
    t->prefix = k;
    return MOR_OK;
}

static mor_status load_specials(tokenizer *t)
{
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_tokens; i++)
        if ((t->type[i] == TT_CONTROL || t->type[i] == TT_USER_DEFINED || t->type[i] == TT_UNKNOWN) &&
            t->off[i + 1] > t->off[i])
            n++;
    t->n_special = n;
    if (n == 0) return MOR_OK;
    t->special = malloc((size_t)n * sizeof *t->special);
    if (!t->special) return NOMEM();
    n = 0;
    for (int32_t i = 0; i < t->n_tokens; i++) {
        if (!(t->type[i] == TT_CONTROL || t->type[i] == TT_USER_DEFINED || t->type[i] == TT_UNKNOWN) ||
            t->off[i + 1] == t->off[i])
            continue;
        special_token *sp = &t->special[n++];
        sp->p = t->bytes + t->off[i];
        sp->n = t->off[i + 1] - t->off[i];
        sp->id = i;
        sp->type = t->type[i];
        t->special_first[(uint8_t)sp->p[0] >> 3] |= (uint8_t)(1u << ((uint8_t)sp->p[0] & 7));
    }
    qsort(t->special, (size_t)n, sizeof *t->special, special_cmp);
    return MOR_OK;
}

/* tokenizer.ggml.pre: the pre-tokenizer. */
static mor_status load_pre(tokenizer *t, const gguf_file *g)
{
    gguf_str pre;
    mor_status s = gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    if (t->model != TOK_BPE) {
        /* SentencePiece runs on the whole text; llama.cpp writes "default".
         * "metaspace": HF's Metaspace with split, a piece at every space. */
        if (s == MOR_E_OUT_OF_RANGE) return MOR_OK;
        if (s != MOR_OK) return s;
        if (gguf_str_eq(pre, "default")) return MOR_OK;
        if (gguf_str_eq(pre, "metaspace")) { t->split_spaces = 1; return MOR_OK; }
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.pre = \"%.*s\": a \"llama\" tokenizer takes \"default\" "
                       "or \"metaspace\"", STR_ARG(pre));
    }
    if (s == MOR_E_OUT_OF_RANGE)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.pre is missing (llama.cpp then guesses a pre-tokenizer "
                       "no model was trained with; libmor does not)");
    if (s != MOR_OK) return s;
    if ((s = pretok_new(pre.p, (size_t)pre.n, &t->pre)) != MOR_OK) return s;
    if (!t->pre)
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.pre = \"%.*s\" is not supported (supported: %s)",
                       STR_ARG(pre), pretok_names());
    return MOR_OK;
}

/* mor.tokenizer.normalizer: "nfc" (HF's NFC normalizer, GPT-NeoX's), or none. */
static mor_status load_normalizer(tokenizer *t, const gguf_file *g)
{
    gguf_str v;
    mor_status s = gguf_get_str(g, "mor.tokenizer.normalizer", &v);
    if (s == MOR_E_OUT_OF_RANGE) return MOR_OK;
    if (s != MOR_OK) return s;
    if (!gguf_str_eq(v, "nfc"))
        return err_set(MOR_E_FORMAT, "mor.tokenizer.normalizer = \"%.*s\": only \"nfc\" is supported", STR_ARG(v));
    t->nfc = 1;
    return MOR_OK;
}

/* Keys that would change how a text is tokenized in ways libmor does not do. */
static mor_status refuse_unsupported(const gguf_file *g)
{
    int b = 0;
    if (gguf_get_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &b) == MOR_OK && b)
        return err_set(MOR_E_UNSUPPORTED, "tokenizer.ggml.remove_extra_whitespaces = true is not supported");
    if (gguf_find_kv(g, "tokenizer.ggml.precompiled_charsmap"))
        return err_set(MOR_E_UNSUPPORTED, "tokenizer.ggml.precompiled_charsmap (a SentencePiece normalizer) "
                       "is not supported");
    return MOR_OK;
}

static mor_status load_all(tokenizer *t, const gguf_file *g, int32_t n_vocab_model, text_index *ix)
{
    mor_status s;
    if ((s = refuse_unsupported(g)) != MOR_OK || (s = load_pre(t, g)) != MOR_OK || (s = load_normalizer(t, g)) != MOR_OK)
        return s;

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
    if (!t->type || !t->off) return NOMEM();

    if ((s = load_tokens(t, g, tokens_kv, ix)) != MOR_OK) return s;
    if (t->model != TOK_SPM && (s = load_merges(t, g, ix)) != MOR_OK) return s;
    if (t->model != TOK_BPE && ((s = load_spm(t, g, tokens_kv)) != MOR_OK || (s = load_prefix(t, g)) != MOR_OK))
        return s;
    if ((s = load_specials(t)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.bos_token_id", t->n_tokens, &t->bos)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.eos_token_id", t->n_tokens, &t->eos)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.padding_token_id", t->n_tokens, &t->pad)) != MOR_OK) return s;
    if ((s = load_token_id(g, "tokenizer.ggml.unknown_token_id", t->n_tokens, &t->unk)) != MOR_OK) return s;
    if (t->unk < 0)   /* the one token of type unknown, if there is exactly one */
        for (int32_t i = 0; i < t->n_tokens; i++)
            if (t->type[i] == TT_UNKNOWN) t->unk = t->unk < 0 ? i : INT32_MAX;
    if (t->unk == INT32_MAX) t->unk = -1;
    if (t->model != TOK_BPE && t->byte_token[0] < 0 && t->unk < 0)
        return err_set(MOR_E_FORMAT, "a \"llama\" tokenizer needs the 256 byte tokens <0xNN> or an unknown "
                       "token, or characters outside its vocabulary could not be encoded");
    /* As llama.cpp: SentencePiece models want BOS unless they say otherwise. */
    return load_bool(g, "tokenizer.ggml.add_bos_token", t->model != TOK_BPE, &t->add_bos);
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
    int kind;
    if (gguf_str_eq(model, "gpt2")) kind = TOK_BPE;
    else if (gguf_str_eq(model, "llama")) kind = gguf_find_kv(g, "tokenizer.ggml.merges") ? TOK_SPM_MERGES : TOK_SPM;
    else
        return err_set(MOR_E_FORMAT, "tokenizer.ggml.model = \"%.*s\": only \"gpt2\" (byte-level BPE) and "
                       "\"llama\" (SentencePiece) are supported", STR_ARG(model));
    if (n_vocab_model <= 0)
        return err_set(MOR_E_INVALID_ARG, "tokenizer_load: model vocabulary size %d", (int)n_vocab_model);

    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NOMEM();
    t->model = kind;
    t->bos = t->eos = t->pad = t->unk = -1;
    text_index ix = { 0 };
    s = load_all(t, g, n_vocab_model, &ix);
    free(ix.slot);
    if (s != MOR_OK) { tokenizer_free(t); return s; }
    *out = t;
    return MOR_OK;
}
