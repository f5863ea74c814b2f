/* test_tokenizer.c - the byte-level BPE tokenizer (src/tokenizer.c).
 *
 *  - the real GPT-2 vocabulary (tests/data/tokenizer/gpt2-merges.txt, from
 *    which every GPT-2 token follows) plus a few added tokens, written into a
 *    GGUF here, with pre "gpt2" and "smollm": every case of cases.txt gives the
 *    ids that the oracles of tests/tokenizer/gen_oracle.mjs computed (OpenAI's
 *    encoder, tokenizers.js, an emulation of the HF Rust crate), and decodes
 *    back to its bytes;
 *  - decode(encode(x)) == x for invalid UTF-8, NUL bytes and random bytes;
 *  - buffers too small, flags, out-of-range ids, NULL arguments, the public
 *    mor_tokenize / mor_detokenize on vocab-only and tokenizer-less models;
 *  - corrupt tokenizer metadata gives MOR_E_FORMAT;
 *  - 1 MB in well under a second; several threads on one tokenizer.
 * Runs from the repository root and reads committed files only. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cputime.h"
#include "gguf.h"
#include "mor.h"
#include "tokenizer.h"

#define DATA_DIR "tests/data/tokenizer/"

/* ------------------------------------------------------------------------ */
/* A growing byte buffer and a GGUF v3 writer                               */
/* ------------------------------------------------------------------------ */

typedef struct { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { fprintf(stderr, "out of memory\n"); exit(2); }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }   /* the test hosts are little-endian */
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s, size_t n) { put_u64(b, n); put(b, s, n); }

/* Key-value pairs are written into kv and counted. */
typedef struct { buf kv; uint64_t n_kv; buf ti; buf data; uint64_t n_tensors; } gguf_w;

static void kv_key(gguf_w *w, const char *key, uint32_t type)
{
    put_str(&w->kv, key, strlen(key));
    put_u32(&w->kv, type);
    w->n_kv++;
}
static void kv_str(gguf_w *w, const char *key, const char *v)
{
    kv_key(w, key, GGUF_STR);
    put_str(&w->kv, v, strlen(v));
}
static void kv_u32(gguf_w *w, const char *key, uint32_t v) { kv_key(w, key, GGUF_U32); put_u32(&w->kv, v); }
static void kv_f32(gguf_w *w, const char *key, float v) { kv_key(w, key, GGUF_F32); put(&w->kv, &v, 4); }
static void kv_bool(gguf_w *w, const char *key, int v)
{
    uint8_t b = (uint8_t)(v != 0);
    kv_key(w, key, GGUF_BOOL);
    put(&w->kv, &b, 1);
}
static void kv_arr_str(gguf_w *w, const char *key, char *const *s, const size_t *len, size_t n)
{
    kv_key(w, key, GGUF_ARR);
    put_u32(&w->kv, GGUF_STR);
    put_u64(&w->kv, n);
    for (size_t i = 0; i < n; i++) put_str(&w->kv, s[i], len ? len[i] : strlen(s[i]));
}
static void kv_arr_i32(gguf_w *w, const char *key, const int32_t *v, size_t n)
{
    kv_key(w, key, GGUF_ARR);
    put_u32(&w->kv, GGUF_I32);
    put_u64(&w->kv, n);
    put(&w->kv, v, n * 4);
}
/* An F32 tensor of ne0 x ne1 (ne1 = 0: one dimension), filled with a pattern. */
static void tensor_f32(gguf_w *w, const char *name, int64_t ne0, int64_t ne1)
{
    put_str(&w->ti, name, strlen(name));
    put_u32(&w->ti, ne1 ? 2 : 1);
    put_u64(&w->ti, (uint64_t)ne0);
    if (ne1) put_u64(&w->ti, (uint64_t)ne1);
    put_u32(&w->ti, GGML_F32);
    put_u64(&w->ti, w->data.n);
    int64_t n = ne0 * (ne1 ? ne1 : 1);
    for (int64_t i = 0; i < n; i++) {
        float f = ne1 ? (float)((i * 7) % 11 - 5) * 0.05f : 1.0f;
        put(&w->data, &f, 4);
    }
    static const uint8_t zero[32];
    put(&w->data, zero, (32 - w->data.n % 32) % 32);
    w->n_tensors++;
}
/* The whole file (alignment 32). */
static buf gguf_finish(gguf_w *w)
{
    buf out = { 0 };
    put(&out, "GGUF", 4);
    put_u32(&out, 3);
    put_u64(&out, w->n_tensors);
    put_u64(&out, w->n_kv);
    put(&out, w->kv.p, w->kv.n);
    put(&out, w->ti.p, w->ti.n);
    static const uint8_t zero[32];
    put(&out, zero, (32 - out.n % 32) % 32);
    put(&out, w->data.p, w->data.n);
    free(w->kv.p); free(w->ti.p); free(w->data.p);
    memset(w, 0, sizeof *w);
    return out;
}

/* ------------------------------------------------------------------------ */
/* Vocabularies                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *model, *pre;          /* NULL: key left out */
    char   **tok;  size_t *tok_len;  int32_t n_tok;
    int32_t *type;                    /* n_type entries */
    int32_t  n_type;
    char   **merge; int32_t n_merge;
    int64_t  bos, eos, pad;           /* < 0: left out */
    int      add_bos;                 /* < 0: left out */
    uint32_t vocab_size;
    int      no_types, no_merges, tokens_as_ints;
} vocab;

static void write_tokenizer(gguf_w *w, const vocab *v)
{
    if (v->model) kv_str(w, "tokenizer.ggml.model", v->model);
    if (v->pre) kv_str(w, "tokenizer.ggml.pre", v->pre);
    if (v->tokens_as_ints) kv_arr_i32(w, "tokenizer.ggml.tokens", v->type, (size_t)v->n_type);
    else kv_arr_str(w, "tokenizer.ggml.tokens", v->tok, v->tok_len, (size_t)v->n_tok);
    if (!v->no_types) kv_arr_i32(w, "tokenizer.ggml.token_type", v->type, (size_t)v->n_type);
    if (!v->no_merges) kv_arr_str(w, "tokenizer.ggml.merges", v->merge, NULL, (size_t)v->n_merge);
    if (v->bos >= 0) kv_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) kv_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->pad >= 0) kv_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    if (v->add_bos >= 0) kv_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
}

/* A vocab-only file, as `mor-convert --vocab-only` writes it. */
static buf vocab_gguf(const vocab *v)
{
    gguf_w w = { 0 };
    kv_str(&w, "general.architecture", "mor");
    kv_u32(&w, "mor.format_version", 1);
    kv_u32(&w, "mor.vocab_size", v->vocab_size);
    write_tokenizer(&w, v);
    return gguf_finish(&w);
}

/* Parse a file and load its tokenizer; the file is freed before returning,
 * which also checks that the tokenizer keeps nothing of it. */
static mor_status load_tokenizer(const vocab *v, int32_t n_vocab_model, tokenizer **out)
{
    buf b = vocab_gguf(v);
    gguf_file *g = NULL;
    mor_status s = gguf_parse(b.p, b.n, &g);
    if (s == MOR_OK) {
        s = tokenizer_load(g, n_vocab_model, out);
        gguf_free(g);
    }
    memset(b.p, 0xAB, b.n);
    free(b.p);
    return s;
}

/* GPT-2's byte-level character of a byte, as UTF-8. */
static size_t byte_char(int b, char *out)
{
    uint32_t cp = (uint32_t)b;
    if (b <= 0x20) cp = 0x100 + (uint32_t)b;
    else if (b >= 0x7F && b <= 0xA0) cp = 0x100 + 33 + (uint32_t)(b - 0x7F);
    else if (b == 0xAD) cp = 0x100 + 67;
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* GPT-2's id order of the bytes: printable ones first (bytes_to_unicode). */
static int byte_order(int *order)
{
    int n = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) order[n++] = b;
    for (int b = 0; b < 256; b++)
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) order[n++] = b;
    return n;
}

static void vocab_add(vocab *v, const char *s, size_t n, int32_t type)
{
    v->tok = realloc(v->tok, (size_t)(v->n_tok + 1) * sizeof *v->tok);
    v->tok_len = realloc(v->tok_len, (size_t)(v->n_tok + 1) * sizeof *v->tok_len);
    v->type = realloc(v->type, (size_t)(v->n_tok + 1) * sizeof *v->type);
    if (!v->tok || !v->tok_len || !v->type) { fprintf(stderr, "out of memory\n"); exit(2); }
    v->tok[v->n_tok] = malloc(n + 1);
    memcpy(v->tok[v->n_tok], s, n);
    v->tok[v->n_tok][n] = 0;
    v->tok_len[v->n_tok] = n;
    v->type[v->n_tok] = type;
    v->n_tok++;
    v->n_type = v->n_tok;
}

static void vocab_add_merge(vocab *v, const char *m)
{
    v->merge = realloc(v->merge, (size_t)(v->n_merge + 1) * sizeof *v->merge);
    v->merge[v->n_merge++] = strdup(m);
}

static void vocab_free(vocab *v)
{
    for (int32_t i = 0; i < v->n_tok; i++) free(v->tok[i]);
    for (int32_t i = 0; i < v->n_merge; i++) free(v->merge[i]);
    free(v->tok); free(v->tok_len); free(v->type); free(v->merge);
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    buf b = { 0 };
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, k);
    fclose(f);
    put(&b, "", 1);
    *n = b.n - 1;
    return (char *)b.p;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decode hex (or "-" for empty) into out; returns the length or -1. */
static long unhex(const char *h, char **out)
{
    if (strcmp(h, "-") == 0) { *out = malloc(1); return 0; }
    size_t n = strlen(h);
    if (n % 2) return -1;
    *out = malloc(n / 2 + 1);
    for (size_t i = 0; i < n / 2; i++) {
        int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);
        if (a < 0 || b < 0) { free(*out); return -1; }
        (*out)[i] = (char)(a * 16 + b);
    }
    return (long)(n / 2);
}

/* The GPT-2 vocabulary (50257 tokens from the merges) plus the added tokens
 * listed in cases.txt. */
static int gpt2_vocab(vocab *v, const char *cases)
{
    memset(v, 0, sizeof *v);
    v->model = "gpt2"; v->pre = "gpt2";
    v->bos = v->eos = 50256; v->pad = -1; v->add_bos = 0;
    v->vocab_size = 50304;                     /* padded, as models often are */
    int order[256];
    byte_order(order);
    for (int i = 0; i < 256; i++) {
        char c[2];
        vocab_add(v, c, byte_char(order[i], c), 1);
    }
    size_t n;
    char *text = read_file(DATA_DIR "gpt2-merges.txt", &n);
    if (!text) return 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "#version", 8)) continue;   /* the header; merges may start with '#' */
        char *sp = strchr(line, ' ');
        if (!sp) { free(text); return 0; }
        size_t nl = (size_t)(sp - line), nr = strlen(sp + 1);
        char *cat = malloc(nl + nr);
        memcpy(cat, line, nl);
        memcpy(cat + nl, sp + 1, nr);
        vocab_add(v, cat, nl + nr, 1);
        vocab_add_merge(v, line);
        free(cat);
    }
    free(text);
    /* The added tokens: "special ID TYPE HEX", ids following on. */
    for (const char *p = cases; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, "special ", 8) != 0) continue;
        int id, type;
        char hex[512];
        if (sscanf(p, "special %d %d %511s", &id, &type, hex) != 3) return 0;
        char *s;
        long len = unhex(hex, &s);
        if (len < 0) return 0;
        if (id == v->n_tok) vocab_add(v, s, (size_t)len, type);
        else if (id < v->n_tok && v->tok_len[id] == (size_t)len && !memcmp(v->tok[id], s, (size_t)len))
            v->type[id] = type;                /* <|endoftext|>, already there */
        else { free(s); return 0; }
        free(s);
    }
    if (v->n_tok < 50257) return 0;
    v->n_type = v->n_tok;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Encode into a fresh array (*n tokens); NULL on error. */
static mor_token *encode(const tokenizer *t, const char *s, size_t len, uint32_t flags, int32_t *n)
{
    int32_t need = -1;
    mor_status st = tokenizer_encode(t, s, len, flags, NULL, 0, &need);
    if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL) return NULL;
    mor_token *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (tokenizer_encode(t, s, len, flags, ids, need, n) != MOR_OK || *n != need) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* decode(encode(s)) == s, byte for byte. */
static int round_trip(const tokenizer *t, const char *s, size_t len, uint32_t flags)
{
    int32_t n;
    mor_token *ids = encode(t, s, len, flags, &n);
    if (!ids) return 0;
    size_t need = 0;
    int ok = tokenizer_decode(t, ids, n, NULL, 0, &need) == (len ? MOR_E_BUFFER_TOO_SMALL : MOR_OK);
    char *back = malloc(need + 1);
    size_t got = 0;
    ok = ok && need == len && tokenizer_decode(t, ids, n, back, need, &got) == MOR_OK && got == len &&
         memcmp(back, s, len) == 0;
    free(back);
    free(ids);
    return ok;
}

static int ids_eq(const mor_token *a, int32_t na, const mor_token *b, int32_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* For messages: the text, with non-printable bytes escaped, cut at 60. */
static const char *show(const char *s, size_t n)
{
    static char out[300];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 240; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') out[k++] = (char)c;
        else k += (size_t)snprintf(out + k, sizeof out - k, "\\x%02x", c);
        if (i == 59 && n > 60) { k += (size_t)snprintf(out + k, sizeof out - k, "...(%zu bytes)", n); break; }
    }
    out[k] = 0;
    return out;
}

static mor_token token_id(const vocab *v, const char *text)
{
    for (int32_t i = 0; i < v->n_tok; i++)
        if (v->tok_len[i] == strlen(text) && !memcmp(v->tok[i], text, v->tok_len[i])) return i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The oracle cases                                                         */
/* ------------------------------------------------------------------------ */

static void test_cases(const tokenizer *gpt2, const tokenizer *smollm, char *cases)
{
    int n_cases = 0;
    char *save = NULL;
    for (char *line = strtok_r(cases, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "case ", 5) != 0) continue;
        char pre[16], hex[65536];
        int special, n_exp, off;
        if (sscanf(line, "case %15s %d %65535s %d%n", pre, &special, hex, &n_exp, &off) != 4) {
            CHECK(0, "cases.txt: bad line %.40s", line);
            continue;
        }
        char *text;
        long len = unhex(hex, &text);
        mor_token *exp = malloc(((size_t)n_exp + 1) * sizeof *exp);
        const char *p = line + off;
        for (int i = 0; i < n_exp; i++) {
            char *end;
            exp[i] = (mor_token)strtol(p, &end, 10);
            p = end;
        }
        const tokenizer *t = strcmp(pre, "smollm") == 0 ? smollm : gpt2;
        uint32_t flags = special ? MOR_TOKENIZE_PARSE_SPECIAL : 0;
        int32_t n = 0;
        mor_token *got = len >= 0 ? encode(t, text, (size_t)len, flags, &n) : NULL;
        CHECK(got && ids_eq(got, n, exp, n_exp), "%s%s \"%s\": %d tokens as the oracle", pre,
              special ? " +special" : "", show(text, (size_t)(len > 0 ? len : 0)), n_exp);
        CHECK(len >= 0 && round_trip(t, text, (size_t)len, flags), "%s%s \"%s\": decodes back", pre,
              special ? " +special" : "", show(text, (size_t)(len > 0 ? len : 0)));
        free(got);
        free(exp);
        free(text);
        n_cases++;
    }
    CHECK(n_cases >= 250, "cases.txt has %d cases", n_cases);
}

/* ------------------------------------------------------------------------ */
/* Bytes that are not UTF-8, NULs, random bytes                             */
/* ------------------------------------------------------------------------ */

static void test_bytes(const tokenizer *t, const vocab *v)
{
#define L(lit) lit, sizeof lit - 1   /* a literal and its length, NULs included */
    static const struct { const char *s; size_t n; } odd[] = {
        { L("\xff") }, { L("\x80") }, { L("a\xff" "b") }, { L("\xc3") }, { L("\xc3(") },
        { L("\xe2\x82") }, { L("\xe2\x82\xac\xe2\x82") }, { L("\xf0\x9f\x98") }, { L("\xed\xa0\x80") },
        { L("\xc0\xaf") }, { L("\xe0\x80\xaf") }, { L("\xf4\x90\x80\x80") }, { L("\xf8\x88\x80\x80\x80") },
        { L("\0") }, { L("a\0b\0\0c") }, { L("\0\0\0 \0") }, { L(" \xff\xfe hello \x80\x81") },
        { L("'\xff's \xff\xff\xff") }, { L("\xef\xbb\xbfHello") }, { L("12\xff" "34") },
    };
#undef L
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        CHECK(round_trip(t, odd[i].s, odd[i].n, 0) && round_trip(t, odd[i].s, odd[i].n, MOR_TOKENIZE_PARSE_SPECIAL),
              "\"%s\" decodes back", show(odd[i].s, odd[i].n));
    }

    /* An invalid byte is a one-byte character of the "other" class: it is
     * encoded as the token of its byte, and splits words like punctuation. */
    mor_token ff = token_id(v, "\xc3\xbf");   /* byte 0xFF stands for itself, U+00FF */
    int32_t n;
    mor_token *ids = encode(t, "\xff", 1, 0, &n);
    CHECK(ids && n == 1 && ids[0] == ff, "\\xff -> the token of byte 0xFF (%d)", (int)ff);
    free(ids);
    ids = encode(t, "a\xff" "b", 3, 0, &n);
    CHECK(ids && n == 3 && ids[0] == token_id(v, "a") && ids[1] == ff && ids[2] == token_id(v, "b"),
          "a\\xffb -> a, \\xff, b");
    free(ids);
    ids = encode(t, "\0", 1, 0, &n);
    CHECK(ids && n == 1 && ids[0] == token_id(v, "\xc4\x80"), "NUL -> the token of byte 0x00 (U+0100)");
    free(ids);

    /* Random byte strings, biased towards UTF-8 lead and continuation bytes. */
    uint64_t r = 0x9E3779B97F4A7C15u;
    int ok = 1;
    char s[300];
    for (int k = 0; k < 3000 && ok; k++) {
        size_t len = 0;
        r = r * 6364136223846793005u + 1442695040888963407u;
        size_t want = (size_t)(r >> 33) % 200;
        for (size_t i = 0; i < want; i++) {
            r = r * 6364136223846793005u + 1442695040888963407u;
            unsigned x = (unsigned)(r >> 33);
            switch (x % 6) {
            case 0: s[len++] = (char)(x >> 8); break;                     /* any byte */
            case 1: s[len++] = (char)(0x80 | ((x >> 8) & 0x3F)); break;   /* continuation */
            case 2: s[len++] = (char)(0xC0 | ((x >> 8) & 0x3F)); break;   /* lead */
            case 3: s[len++] = " \n\t'"[(x >> 8) % 4]; break;
            default: s[len++] = (char)('0' + (x >> 8) % 75); break;       /* ASCII */
            }
        }
        ok = round_trip(t, s, len, 0) && round_trip(t, s, len, MOR_TOKENIZE_PARSE_SPECIAL);
        if (!ok) CHECK(0, "random bytes \"%s\" decode back", show(s, len));
    }
    CHECK(ok, "3000 random byte strings decode back");
}

/* ------------------------------------------------------------------------ */
/* Flags, buffers, ids, arguments                                           */
/* ------------------------------------------------------------------------ */

static void test_api(const tokenizer *t, const vocab *v)
{
    mor_token out[16];
    int32_t n = -1;
    const char *hw = "Hello world";
    mor_token hello = token_id(v, "Hello"), world = token_id(v, "\xc4\xa0world");   /* "Ġworld" */

    /* Sizes. */
    CHECK(tokenizer_encode(t, hw, 11, 0, NULL, 0, &n) == MOR_E_BUFFER_TOO_SMALL && n == 2,
          "cap 0: MOR_E_BUFFER_TOO_SMALL, 2 needed");
    for (int i = 0; i < 16; i++) out[i] = -7;
    n = -1;
    CHECK(tokenizer_encode(t, hw, 11, 0, out, 1, &n) == MOR_E_BUFFER_TOO_SMALL && n == 2 && out[0] == -7,
          "cap 1: MOR_E_BUFFER_TOO_SMALL, 2 needed, nothing written");
    CHECK(*mor_last_error() != 0, "... with a message: %s", mor_last_error());
    CHECK(tokenizer_encode(t, hw, 11, 0, out, 2, &n) == MOR_OK && n == 2 && out[0] == hello &&
          out[1] == world && out[2] == -7, "cap 2: Hello, Gworld (%d %d)", (int)hello, (int)world);
    CHECK(tokenizer_encode(t, "", 0, 0, out, 0, &n) == MOR_OK && n == 0, "empty text: 0 tokens");
    CHECK(tokenizer_encode(t, NULL, 0, 0, NULL, 0, &n) == MOR_OK && n == 0, "NULL text of length 0: 0 tokens");

    /* BOS. */
    CHECK(tokenizer_bos(t) == 50256 && tokenizer_eos(t) == 50256, "bos and eos 50256");
    CHECK(tokenizer_encode(t, hw, 11, MOR_TOKENIZE_ADD_BOS, out, 16, &n) == MOR_OK && n == 3 &&
          out[0] == 50256 && out[1] == hello, "ADD_BOS prepends BOS");
    CHECK(tokenizer_encode(t, "", 0, MOR_TOKENIZE_ADD_BOS, out, 16, &n) == MOR_OK && n == 1 &&
          out[0] == 50256, "ADD_BOS on empty text: BOS alone");
    CHECK(tokenizer_encode(t, "", 0, MOR_TOKENIZE_ADD_BOS, out, 0, &n) == MOR_E_BUFFER_TOO_SMALL && n == 1,
          "ADD_BOS counts BOS in the size needed");

    /* Specials on and off. */
    const char *eot = "<|endoftext|>";
    CHECK(tokenizer_encode(t, eot, 13, MOR_TOKENIZE_PARSE_SPECIAL, out, 16, &n) == MOR_OK && n == 1 &&
          out[0] == 50256, "PARSE_SPECIAL: <|endoftext|> is 50256");
    int has = 0;
    CHECK(tokenizer_encode(t, eot, 13, 0, out, 16, &n) == MOR_OK && n > 1, "without: %d ordinary tokens", (int)n);
    for (int i = 0; i < n; i++) has |= out[i] >= 50256;
    CHECK(!has, "... none of them special");
    CHECK(tokenizer_encode(t, "<|end|>xyz", 10, MOR_TOKENIZE_PARSE_SPECIAL, out, 16, &n) == MOR_OK &&
          n >= 2 && out[0] == 50259, "leftmost-longest: <|end|>xyz starts with <|end, not d|>xyz");
    CHECK(tokenizer_encode(t, "<|endoftext|>", 13, MOR_TOKENIZE_PARSE_SPECIAL | MOR_TOKENIZE_ADD_BOS, out, 16,
                               &n) == MOR_OK && n == 2 && out[0] == 50256 && out[1] == 50256, "ADD_BOS + PARSE_SPECIAL");

    /* Decoding. */
    char text[64];
    size_t len = 99;
    mor_token toks[4] = { hello, world, 50257, 50256 };
    memset(text, '#', sizeof text);
    CHECK(tokenizer_decode(t, toks, 4, text, sizeof text, &len) == MOR_OK && len == 36 &&
          memcmp(text, "Hello world<|im_start|><|endoftext|>", 36) == 0 && text[36] == '#',
          "decode: specials render as their text, no NUL added");
    len = 0;
    memset(text, '#', sizeof text);
    CHECK(tokenizer_decode(t, toks, 4, text, 35, &len) == MOR_E_BUFFER_TOO_SMALL && len == 36 && text[0] == '#',
          "decode cap 35: MOR_E_BUFFER_TOO_SMALL, 36 needed, nothing written");
    CHECK(tokenizer_decode(t, toks, 4, NULL, 0, &len) == MOR_E_BUFFER_TOO_SMALL && len == 36,
          "decode NULL/0: the size needed");
    CHECK(tokenizer_decode(t, toks, 0, NULL, 0, &len) == MOR_OK && len == 0, "decode 0 tokens");

    /* Ids. The model's vocabulary is padded to 50304: ids of the padding are
     * valid and have no text; past it, and below 0, they are out of range. */
    mor_token bad[3][2] = { { hello, -1 }, { hello, 50304 }, { INT32_MAX, hello } };
    for (int i = 0; i < 3; i++) {
        len = 77;
        CHECK(tokenizer_decode(t, bad[i], 2, text, sizeof text, &len) == MOR_E_OUT_OF_RANGE && len == 77,
              "decode id %d: MOR_E_OUT_OF_RANGE, nothing changed", (int)bad[i][1 - (i == 2)]);
    }
    mor_token pad[2] = { 50303, hello };
    CHECK(tokenizer_decode(t, pad, 2, text, sizeof text, &len) == MOR_OK && len == 5 && !memcmp(text, "Hello", 5),
          "decode an id of the model's padding (50303): no text");

    /* Arguments. */
    CHECK(tokenizer_encode(NULL, hw, 11, 0, out, 16, &n) == MOR_E_INVALID_ARG, "encode NULL tokenizer");
    CHECK(tokenizer_encode(t, NULL, 3, 0, out, 16, &n) == MOR_E_INVALID_ARG, "encode NULL text, len 3");
    CHECK(tokenizer_encode(t, hw, 11, 0, out, 16, NULL) == MOR_E_INVALID_ARG, "encode NULL n_out");
    CHECK(tokenizer_encode(t, hw, 11, 0, NULL, 4, &n) == MOR_E_INVALID_ARG, "encode NULL out, cap 4");
    CHECK(tokenizer_encode(t, hw, 11, 0, out, -1, &n) == MOR_E_INVALID_ARG, "encode cap -1");
    CHECK(tokenizer_encode(t, hw, 11, 1u << 7, out, 16, &n) == MOR_E_INVALID_ARG, "encode unknown flag");
    CHECK(tokenizer_decode(NULL, toks, 1, text, 64, &len) == MOR_E_INVALID_ARG, "decode NULL tokenizer");
    CHECK(tokenizer_decode(t, NULL, 1, text, 64, &len) == MOR_E_INVALID_ARG, "decode NULL tokens");
    CHECK(tokenizer_decode(t, toks, -1, text, 64, &len) == MOR_E_INVALID_ARG, "decode n -1");
    CHECK(tokenizer_decode(t, toks, 1, NULL, 64, &len) == MOR_E_INVALID_ARG, "decode NULL buf, cap 64");
    CHECK(tokenizer_decode(t, toks, 1, text, 64, NULL) == MOR_E_INVALID_ARG, "decode NULL len_out");
    CHECK(tokenizer_bos(NULL) == -1 && tokenizer_eos(NULL) == -1, "bos/eos of NULL: -1");
    tokenizer_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* Through the public API                                                   */
/* ------------------------------------------------------------------------ */

/* A tiny plain model (1 layer, V = 300, d = 4), with or without a tokenizer. */
static buf tiny_model(const vocab *v)
{
    gguf_w w = { 0 };
    const int V = 300, d = 4;
    int32_t map[1] = { 0 };
    kv_str(&w, "general.architecture", "mor");
    kv_u32(&w, "mor.format_version", 1);
    kv_u32(&w, "mor.vocab_size", (uint32_t)V);
    kv_u32(&w, "mor.context_length", 64);
    kv_u32(&w, "mor.embedding_length", (uint32_t)d);
    kv_u32(&w, "mor.feed_forward_length", (uint32_t)d);
    kv_u32(&w, "mor.attention.head_count", 1);
    kv_u32(&w, "mor.attention.head_count_kv", 1);
    kv_u32(&w, "mor.attention.key_length", (uint32_t)d);
    kv_f32(&w, "mor.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&w, "mor.rope.freq_base", 10000.0f);
    kv_u32(&w, "mor.layer_count", 1);
    kv_u32(&w, "mor.recursion.count", 1);
    kv_u32(&w, "mor.recursion.base_depth", 1);
    kv_u32(&w, "mor.recursion.prelude", 0);
    kv_u32(&w, "mor.recursion.coda", 0);
    kv_str(&w, "mor.recursion.sharing", "none");
    kv_arr_i32(&w, "mor.layer_map", map, 1);
    kv_str(&w, "mor.router.type", "none");
    if (v) write_tokenizer(&w, v);
    tensor_f32(&w, "token_embd.weight", d, V);
    tensor_f32(&w, "output_norm.weight", d, 0);
    static const char *const roles[] = { "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                         "ffn_norm", "ffn_gate", "ffn_up", "ffn_down" };
    for (int r = 0; r < 9; r++) {
        char name[64];
        snprintf(name, sizeof name, "blk.0.%s.weight", roles[r]);
        tensor_f32(&w, name, d, r == 0 || r == 5 ? 0 : d);
    }
    return gguf_finish(&w);
}

/* 256 byte tokens and "hello" by four merges, "<s>" control. */
static void small_vocab(vocab *v)
{
    memset(v, 0, sizeof *v);
    v->model = "gpt2"; v->pre = "gpt2";
    v->bos = -1; v->eos = -1; v->pad = -1; v->add_bos = -1;
    v->vocab_size = 300;
    for (int b = 0; b < 256; b++) {
        char c[2];
        vocab_add(v, c, byte_char(b, c), 1);
    }
    static const char *const merges[] = { "h e", "l l", "he ll", "hell o", "\xc4\xa0 hello" };
    static const char *const results[] = { "he", "ll", "hell", "hello", "\xc4\xa0hello" };
    for (int i = 0; i < 5; i++) {
        vocab_add(v, results[i], strlen(results[i]), 1);
        vocab_add_merge(v, merges[i]);
    }
    vocab_add(v, "<s>", 3, 3);
}

static void test_public(void)
{
    vocab v;
    small_vocab(&v);
    v.bos = 261;
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    buf b = vocab_gguf(&v);
    mor_model *m = NULL;
    mor_status st = mor_model_load_memory(b.p, b.n, &mp, &m);
    CHECK(st == MOR_OK && m, "vocab-only model loads: %s %s", mor_status_str(st), mor_last_error());
    if (m) {
        mor_token out[8];
        int32_t n = 0;
        CHECK(mor_model_token_bos(m) == 261 && mor_model_token_eos(m) == -1, "bos 261, no eos");
        CHECK(mor_tokenize(m, "hello hello", 11, MOR_TOKENIZE_ADD_BOS, out, 8, &n) == MOR_OK && n == 3 &&
              out[0] == 261 && out[1] == 259 && out[2] == 260, "mor_tokenize: <s> hello Ghello");
        CHECK(mor_tokenize(m, "hello hello", 11, 0, out, 1, &n) == MOR_E_BUFFER_TOO_SMALL && n == 2,
              "mor_tokenize: MOR_E_BUFFER_TOO_SMALL with the count");
        CHECK(mor_tokenize(m, "<s>hello", 8, MOR_TOKENIZE_PARSE_SPECIAL, out, 8, &n) == MOR_OK && n == 2 &&
              out[0] == 261 && out[1] == 259, "mor_tokenize: PARSE_SPECIAL");
        char text[32];
        size_t len = 0;
        mor_token toks[3] = { 261, 259, 260 };
        CHECK(mor_detokenize(m, toks, 3, text, sizeof text, &len) == MOR_OK && len == 14 &&
              !memcmp(text, "<s>hello hello", 14), "mor_detokenize");
        toks[1] = 300;
        CHECK(mor_detokenize(m, toks, 3, text, sizeof text, &len) == MOR_E_OUT_OF_RANGE, "mor_detokenize: id 300 (V)");
        toks[1] = 299;
        CHECK(mor_detokenize(m, toks, 3, text, sizeof text, &len) == MOR_OK && len == 9,
              "mor_detokenize: id 299 (padding) has no text");
        CHECK(mor_detokenize(m, toks, 3, text, 2, &len) == MOR_E_BUFFER_TOO_SMALL && len == 9,
              "mor_detokenize: MOR_E_BUFFER_TOO_SMALL with the size");
    }
    mor_model_free(m);
    free(b.p);

    mor_token out[4];
    int32_t n;
    char text[8];
    size_t len;
    CHECK(mor_tokenize(NULL, "a", 1, 0, out, 4, &n) == MOR_E_INVALID_ARG, "mor_tokenize(NULL model)");
    CHECK(mor_detokenize(NULL, out, 0, text, 8, &len) == MOR_E_INVALID_ARG, "mor_detokenize(NULL model)");

    /* A full model without tokenizer keys. */
    b = tiny_model(NULL);
    m = NULL;
    st = mor_model_load_memory(b.p, b.n, NULL, &m);
    CHECK(st == MOR_OK && m, "tiny model without tokenizer loads: %s %s", mor_status_str(st), mor_last_error());
    if (m) {
        out[0] = 1;
        CHECK(mor_tokenize(m, "a", 1, 0, out, 4, &n) == MOR_E_UNSUPPORTED, "mor_tokenize: no tokenizer -> UNSUPPORTED");
        CHECK(mor_detokenize(m, out, 1, text, 8, &len) == MOR_E_UNSUPPORTED, "mor_detokenize: UNSUPPORTED");
        CHECK(mor_model_token_bos(m) == -1, "no tokenizer: bos -1");
    }
    mor_model_free(m);
    free(b.p);

    /* The same with the tokenizer: V' = 262 <= V = 300. A vocabulary larger
     * than the model's is an error. */
    b = tiny_model(&v);
    m = NULL;
    st = mor_model_load_memory(b.p, b.n, NULL, &m);
    CHECK(st == MOR_OK && m && mor_tokenize(m, "hello", 5, 0, out, 4, &n) == MOR_OK && n == 1 && out[0] == 259,
          "tiny model with tokenizer: %s %s", mor_status_str(st), mor_last_error());
    mor_model_free(m);
    free(b.p);
    v.vocab_size = 200;
    b = vocab_gguf(&v);
    m = NULL;
    st = mor_model_load_memory(b.p, b.n, &mp, &m);
    CHECK(st == MOR_E_FORMAT && !m, "262 tokens for a vocab_size of 200: MOR_E_FORMAT (%s)", mor_last_error());
    free(b.p);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------ */
/* Corrupt metadata                                                         */
/* ------------------------------------------------------------------------ */

static void expect_format(vocab *v, const char *what)
{
    tokenizer *t = (tokenizer *)1;
    mor_status st = load_tokenizer(v, 300, &t);
    CHECK(st == MOR_E_FORMAT && t == NULL && *mor_last_error(), "%s: MOR_E_FORMAT (%s)", what, mor_last_error());
    if (st == MOR_OK) tokenizer_free(t);
}

static void test_corrupt(void)
{
    vocab v;
    tokenizer *t = NULL;
    small_vocab(&v);
    CHECK(load_tokenizer(&v, 300, &t) == MOR_OK && t, "the small vocabulary loads");
    int32_t n;
    mor_token out[4];
    CHECK(t && tokenizer_encode(t, " hello hell", 11, 0, out, 4, &n) == MOR_OK && n == 3 && out[0] == 260 &&
          out[1] == ' ' && out[2] == 258, "small vocabulary: \" hello hell\" -> Ghello, G, hell");
    tokenizer_free(t);

    /* No tokenizer at all. */
    v.model = NULL;
    gguf_w w = { 0 };
    kv_str(&w, "general.architecture", "mor");
    buf b = gguf_finish(&w);
    gguf_file *g = NULL;
    t = (tokenizer *)1;
    CHECK(gguf_parse(b.p, b.n, &g) == MOR_OK && tokenizer_load(g, 300, &t) == MOR_OK && t == NULL,
          "no tokenizer keys: MOR_OK and no tokenizer");
    gguf_free(g);
    free(b.p);
    expect_format(&v, "tokens without tokenizer.ggml.model");
    v.model = "llama";  expect_format(&v, "model \"llama\"");
    v.model = "gpt2";
    v.pre = NULL;       expect_format(&v, "pre missing");
    v.pre = "llama3";   expect_format(&v, "pre \"llama3\"");
    v.pre = "gpt2";

    v.tokens_as_ints = 1;  expect_format(&v, "tokens an int32 array");
    v.tokens_as_ints = 0;
    v.no_types = 1;        expect_format(&v, "token_type missing");
    v.no_types = 0;
    v.n_type--;            expect_format(&v, "token_type one short");
    v.n_type++;
    v.type[100] = 2;       expect_format(&v, "token type 2");
    v.type[100] = 0;       expect_format(&v, "token type 0");
    v.type[100] = 1;
    v.no_merges = 1;       expect_format(&v, "merges missing");
    v.no_merges = 0;

    char *keep = v.merge[2];
    v.merge[2] = "he lx";    expect_format(&v, "merge naming a missing token");
    v.merge[2] = "h ll";     expect_format(&v, "merge whose result is not a token");
    v.merge[2] = "hell";     expect_format(&v, "merge without a space");
    v.merge[2] = "he  ll";   expect_format(&v, "merge with two spaces");
    v.merge[2] = " hell";    expect_format(&v, "merge with an empty left side");
    v.merge[2] = keep;

    v.bos = 262;             expect_format(&v, "bos id 262 of 262 tokens");
    v.bos = -1;
    v.eos = 100000;          expect_format(&v, "eos id 100000");
    v.eos = -1;

    char *tok = v.tok[0x41];   /* "A" */
    v.tok[0x41] = "B";         expect_format(&v, "a token repeated (and byte A missing)");
    v.tok[0x41] = tok;
    v.type[0x41] = 3;          expect_format(&v, "the token of byte A is a control token");
    v.type[0x41] = 1;

    /* More tokens than the model's vocabulary. */
    t = (tokenizer *)1;
    CHECK(load_tokenizer(&v, 261, &t) == MOR_E_FORMAT && t == NULL, "262 tokens, model vocabulary 261: MOR_E_FORMAT");
    CHECK(load_tokenizer(&v, 262, &t) == MOR_OK && t, "262 tokens, model vocabulary 262: loads");
    tokenizer_free(t);

    /* Truncated files never reach the tokenizer: the parser rejects each. */
    b = vocab_gguf(&v);
    {
        int parsed = 0, loaded = 0, n_cut = 0;
        for (size_t cut = 0; cut < b.n; cut += 97, n_cut++) {
            g = NULL;
            if (gguf_parse(b.p, cut, &g) == MOR_OK) {
                parsed++;
                t = NULL;
                if (tokenizer_load(g, 300, &t) == MOR_OK) { loaded++; tokenizer_free(t); }
                gguf_free(g);
            }
        }
        CHECK(parsed == 0 && n_cut > 10, "%d truncations of a %zu-byte file: all rejected by the parser (%d parsed, %d loaded)",
              n_cut, b.n, parsed, loaded);
    }
    free(b.p);
    vocab_free(&v);
}

/* ------------------------------------------------------------------------ */
/* Speed and threads                                                        */
/* ------------------------------------------------------------------------ */

/* About 1 MB of mixed text: prose, code, numbers, other scripts, emoji. */
static char *big_text(size_t *n)
{
    static const char *const parts[] = {
        "It was the best of times, it was the worst of times; in 1859 Dickens wrote 45 chapters. ",
        "def f(x):\n    return x ** 2  # square\n\n", "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 ",
        "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82 ", "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d ",
        "3.14159 2,718 1000000 ", "   \t\n", "I'm sure they'll say it's fine. ",
        "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80! ", "<|endoftext|>",
    };
    buf b = { 0 };
    uint32_t r = 1;
    while (b.n < (1u << 20)) {
        r = r * 1103515245u + 12345u;
        const char *p = parts[(r >> 16) % (sizeof parts / sizeof parts[0])];
        put(&b, p, strlen(p));
    }
    *n = b.n;
    return (char *)b.p;
}

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t len;
    const mor_token *expect;
    int32_t n_expect;
    int ok;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->ok = 1;
    for (int rep = 0; rep < 3 && j->ok; rep++) {
        int32_t n;
        mor_token *ids = encode(j->t, j->text, j->len, MOR_TOKENIZE_PARSE_SPECIAL, &n);
        j->ok = ids && ids_eq(ids, n, j->expect, j->n_expect);
        free(ids);
    }
    return NULL;
}

static void test_speed_threads(const tokenizer *gpt2, const tokenizer *smollm)
{
    size_t len;
    char *text = big_text(&len);
    const tokenizer *tk[2] = { gpt2, smollm };
    size_t quarter = len / 4;   /* cut before a character, not inside one */
    while (quarter > 0 && ((unsigned char)text[quarter] & 0xC0) == 0x80) quarter--;
    for (int k = 0; k < 2; k++) {
        /* the work grows linearly with the text: CPU time of a quarter of
         * it against the whole (check.h), never a wall-clock bound */
        int32_t n, n4;
        double t0 = check_thread_cpu();
        mor_token *head = encode(tk[k], text, quarter, MOR_TOKENIZE_PARSE_SPECIAL, &n4);
        double t1 = check_thread_cpu();
        mor_token *ids = encode(tk[k], text, len, MOR_TOKENIZE_PARSE_SPECIAL, &n);
        double t2 = check_thread_cpu();
        free(head);
        CHECK(ids && head && t2 - t1 < CHECK_GROWTH_4X * (t1 - t0) + 0.01,
              "%s: %.2f MB -> %d tokens (counting and encoding) in %.3f CPU s, a quarter of it in %.3f: linear",
              k ? "smollm" : "gpt2", len / 1048576.0, ids ? (int)n : -1, t2 - t1, t1 - t0);
        char *back = malloc(len);
        size_t got = 0;
        CHECK(ids && tokenizer_decode(tk[k], ids, n, back, len, &got) == MOR_OK && got == len &&
              !memcmp(back, text, len), "%s: the 1 MB text decodes back", k ? "smollm" : "gpt2");
        free(back);
        if (k == 0 && ids) {
            thread_job jobs[4];
            pthread_t th[4];
            size_t part = 1 << 17;
            int32_t n_part;
            mor_token *expect = encode(gpt2, text, part, MOR_TOKENIZE_PARSE_SPECIAL, &n_part);
            int started = 0;
            for (int i = 0; i < 4; i++) {
                jobs[i] = (thread_job){ gpt2, text, part, expect, n_part, 0 };
                if (pthread_create(&th[i], NULL, thread_main, &jobs[i]) == 0) started++;
                else break;
            }
            int ok = started == 4;
            for (int i = 0; i < started; i++) { pthread_join(th[i], NULL); ok = ok && jobs[i].ok; }
            CHECK(ok && expect, "4 threads on one tokenizer give the same tokens");
            free(expect);
        }
        free(ids);
    }

    /* One very long word (no pre-token boundary): BPE must not be quadratic. */
    size_t wl = 1 << 18;
    char *word = malloc(wl);
    for (size_t i = 0; i < wl; i++) word[i] = "abcdefghij"[(i * 7 + i / 3) % 10];
    double t0 = check_thread_cpu();
    int small = round_trip(gpt2, word, wl / 4, 0);
    double t1 = check_thread_cpu();
    CHECK(round_trip(gpt2, word, wl, 0) && small, "a single 256 KB word (and 64 KB of it) decodes back");
    double t2 = check_thread_cpu();
    CHECK(t2 - t1 < CHECK_GROWTH_4X * (t1 - t0) + 0.01, "... in %.3f CPU s, 64 KB in %.3f: not quadratic",
          t2 - t1, t1 - t0);
    free(word);
    free(text);
}

/* ------------------------------------------------------------------------ */

int main(void)
{
    (void)check_maxdiff;
    size_t n_cases;
    char *cases = read_file(DATA_DIR "cases.txt", &n_cases);
    CHECK(cases != NULL, "read " DATA_DIR "cases.txt (run from the repository root)");
    if (!cases) return check_done();
    vocab v;
    int ok = gpt2_vocab(&v, cases);
    CHECK(ok && v.n_tok == 50261 && v.n_merge == 50000, "GPT-2 vocabulary: %d tokens, %d merges",
          (int)v.n_tok, (int)v.n_merge);
    if (!ok) { free(cases); return check_done(); }

    tokenizer *gpt2 = NULL, *smollm = NULL;
    mor_status st = load_tokenizer(&v, (int32_t)v.vocab_size, &gpt2);
    CHECK(st == MOR_OK && gpt2, "load gpt2: %s %s", mor_status_str(st), mor_last_error());
    v.pre = "smollm";
    st = load_tokenizer(&v, (int32_t)v.vocab_size, &smollm);
    CHECK(st == MOR_OK && smollm, "load smollm: %s %s", mor_status_str(st), mor_last_error());
    v.pre = "gpt2";

    if (gpt2 && smollm) {
        test_cases(gpt2, smollm, cases);
        test_bytes(gpt2, &v);
        test_bytes(smollm, &v);
        test_api(gpt2, &v);
        test_speed_threads(gpt2, smollm);
    }
    test_public();
    test_corrupt();

    tokenizer_free(gpt2);
    tokenizer_free(smollm);
    vocab_free(&v);
    free(cases);
    return check_done();
}
