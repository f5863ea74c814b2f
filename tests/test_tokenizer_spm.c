/* test_tokenizer_spm.c - SentencePiece-style tokenizers (tokenizer.ggml.model
 * "llama") on small vocabularies written here, for what llama.cpp's suite
 * (test_llama_vocab.c) does not reach:
 *  - merging by score and by merge rank, ties to the leftmost pair;
 *  - byte fallback, and the unknown token when there are no byte tokens;
 *  - the four prefix-space rules, after special tokens too, and HF
 *    Metaspace's split at every U+2581;
 *  - decoding (U+2581, <0xNN>, control and unused tokens, the dropped prefix
 *    space) and mor_token_to_piece;
 *  - which added tokens each flag matches; add_bos;
 *  - corrupt or unsupported metadata: MOR_E_FORMAT / MOR_E_UNSUPPORTED. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gguf_write.h"
#include "mor.h"

#define SP "\xe2\x96\x81"   /* U+2581 */

/* The vocabulary: <unk>, <s>, </s>, 256 byte tokens (unless no_bytes), then
 * these, in this order. */
static const struct { const char *text; int type; float score; } words[] = {
    { SP, 1, -1 }, { "a", 1, -2 }, { "b", 1, -2 }, { "c", 1, -2 }, { "h", 1, -3 }, { "e", 1, -3 },
    { "l", 1, -3 }, { "o", 1, -3 }, { "x", 1, -3 },
    { "he", 1, -10 }, { "ll", 1, -11 }, { "llo", 1, -12 }, { "hello", 1, -13 }, { SP "h", 1, -14 },
    { SP "hello", 1, -9 }, { "ab", 1, -20 }, { "bc", 1, -20 }, { SP SP, 1, -30 }, { SP "a", 1, -31 },
    { "<u>", 4, 0 }, { "zz", 5, 0 },
    /* with o.cross: a U+2581 inside a token, so merges cross spaces */
    { SP "x", 1, -4 }, { "o" SP "x", 1, -5 },
};
#define N_WORDS (int)(sizeof words / sizeof words[0])

typedef struct {
    int cross;                       /* keep the last two words (else they are left out) */
    int no_bytes, merges, no_scores, nan_score, bad_byte, dup_byte, type_bad, pre_bad;
    int add_space_prefix;            /* -1: key left out */
    const char *prefix_space;        /* mor.tokenizer.prefix_space, or NULL */
    const char *pre;                 /* tokenizer.ggml.pre, or NULL */
    int remove_ws, charsmap, unk_id_bad, drop_unk;
} opts;

static int n_words(const opts *o) { return N_WORDS - (o->cross ? 0 : 2); }
static int n_tokens(const opts *o) { return 3 + (o->no_bytes ? 0 : 256) + n_words(o); }

/* Token id of word i. */
static int wid(const opts *o, int i) { return 3 + (o->no_bytes ? 0 : 256) + i; }

static int find_word(const char *text)
{
    for (int i = 0; i < N_WORDS; i++)
        if (!strcmp(words[i].text, text)) return i;
    return -1;
}

static void *build(const opts *o, size_t *size)
{
    int n = n_tokens(o);
    char **tok = calloc((size_t)n, sizeof *tok);
    int32_t *type = calloc((size_t)n, sizeof *type);
    float *score = calloc((size_t)n, sizeof *score);
    int k = 0;
    tok[k] = strdup(o->drop_unk ? "<pad>" : "<unk>"); type[k++] = o->drop_unk ? 3 : 2;
    tok[k] = strdup("<s>"); type[k++] = 3;
    tok[k] = strdup("</s>"); type[k++] = 3;
    for (int b = 0; b < 256 && !o->no_bytes; b++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        if (o->bad_byte && b == 7) snprintf(t, sizeof t, "<0x0G>");
        if (o->dup_byte && b == 8) snprintf(t, sizeof t, "<0x%02x>", 7);   /* lower case: also byte 7 */
        tok[k] = strdup(t);
        type[k++] = 6;
    }
    for (int i = 0; i < n_words(o); i++) {
        tok[k] = strdup(words[i].text);
        type[k] = words[i].type;
        score[k++] = words[i].score;
    }
    if (o->type_bad) type[3 + 5] = o->type_bad;
    if (o->nan_score) score[5] = NAN;

    gguf_writer *w = gguf_writer_new();
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)n + 4);   /* padded */
    gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    if (o->pre) gguf_writer_add_str(w, "tokenizer.ggml.pre", o->pre);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (size_t)n);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", type, (size_t)n);
    if (!o->no_scores) gguf_writer_add_arr_f32(w, "tokenizer.ggml.scores", score, (size_t)n);
    if (o->merges) {
        /* every word made of two words, in the order of their scores */
        static const char *const m[] = { SP " hello", "h e", "l l", "ll o", "he llo", SP " h", "a b", "b c",
                                         SP " " SP, SP " a" };
        gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", m, sizeof m / sizeof m[0]);
    }
    gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (o->unk_id_bad) gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)n);
    if (o->add_space_prefix >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", o->add_space_prefix);
    if (o->prefix_space) gguf_writer_add_str(w, "mor.tokenizer.prefix_space", o->prefix_space);
    if (o->remove_ws) gguf_writer_add_bool(w, "tokenizer.ggml.remove_extra_whitespaces", 1);
    if (o->charsmap) { int32_t z[2] = { 0, 0 }; gguf_writer_add_arr_i32(w, "tokenizer.ggml.precompiled_charsmap", z, 2); }

    char err[256];
    FILE *f = tmpfile();
    void *img = NULL;
    if (f && gguf_writer_write(w, f, err, sizeof err) == 0) {
        long sz = ftell(f);
        rewind(f);
        img = malloc((size_t)sz);
        if (img && fread(img, 1, (size_t)sz, f) != (size_t)sz) { free(img); img = NULL; }
        *size = (size_t)sz;
    }
    if (f) fclose(f);
    gguf_writer_free(w);
    for (int i = 0; i < n; i++) free(tok[i]);
    free(tok); free(type); free(score);
    return img;
}

typedef struct { mor_model *m; void *img; } loaded;

static mor_status load(const opts *o, loaded *l)
{
    size_t n = 0;
    l->m = NULL;
    l->img = build(o, &n);
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    return l->img ? mor_model_load_memory(l->img, n, &mp, &l->m) : MOR_E_NOMEM;
}

static void unload(loaded *l) { mor_model_free(l->m); free(l->img); }

/* Tokenize and compare with the expected ids, -1-terminated. */
static int toks_are(const mor_model *m, const char *text, uint32_t flags, const int *want)
{
    mor_token got[64];
    int32_t n = -1;
    if (mor_tokenize(m, text, strlen(text), flags, got, 64, &n) != MOR_OK) return 0;
    int k = 0;
    while (want[k] >= 0) k++;
    if (n != k) return 0;
    for (int i = 0; i < k; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static int decodes_to(const mor_model *m, const int *ids, int n, const char *want)
{
    char buf[128];
    size_t len = 0;
    return mor_detokenize(m, ids, n, buf, sizeof buf, &len) == MOR_OK && len == strlen(want) && !memcmp(buf, want, len);
}

#define W(s) wid(&o, find_word(s))

static void test_merging(int merges)
{
    opts o = { 0 };
    o.add_space_prefix = -1;
    o.merges = merges;
    loaded l;
    const char *how = merges ? "by rank" : "by score";
    if (!CHECK(load(&o, &l) == MOR_OK, "%s: loads (%s)", how, mor_last_error())) return;
    const mor_model *m = l.m;
    CHECK(mor_model_add_bos(m) == 1, "%s: add_bos defaults to 1 for SentencePiece", how);
    /* "hello" -> "\u2581hello": the prefix space is prepended */
    CHECK(toks_are(m, "hello", 0, (int[]){ W(SP "hello"), -1 }), "%s: hello -> [\\u2581hello]", how);
    CHECK(toks_are(m, " hello", 0, (int[]){ W(SP), W(SP "hello"), -1 }), "%s: \" hello\" -> [\\u2581, \\u2581hello]", how);
    /* "\u2581abc": ab and bc tie by score (-20), ab is leftmost; by rank ab
     * (6) comes before bc (7) and \u2581a (9): [\u2581, ab, c] either way */
    CHECK(toks_are(m, "abc", 0, (int[]){ W(SP), W("ab"), W("c"), -1 }), "%s: abc -> [\u2581, ab, c]", how);
    /* a character outside the vocabulary: its bytes */
    CHECK(toks_are(m, "\xc3\xa9", 0, (int[]){ W(SP), 3 + 0xC3, 3 + 0xA9, -1 }), "%s: e-acute -> \\u2581 <0xC3> <0xA9>",
          how);
    int ids[3] = { W(SP "hello"), 3 + 0xC3, 3 + 0xA9 };
    CHECK(decodes_to(m, ids, 3, "hello\xc3\xa9"), "%s: decodes, prefix space dropped, bytes joined", how);
    char piece[16];
    size_t pl = 0;
    CHECK(mor_token_to_piece(m, ids[0], piece, sizeof piece, &pl) == MOR_OK && pl == 6 && !memcmp(piece, " hello", 6),
          "%s: the piece of \\u2581hello keeps its space", how);
    CHECK(mor_token_to_piece(m, ids[0], piece, 3, &pl) == MOR_E_BUFFER_TOO_SMALL && pl == 6,
          "%s: a piece too long for the buffer: the size needed", how);
    CHECK(mor_token_to_piece(m, n_tokens(&o) + 4, piece, sizeof piece, &pl) == MOR_E_OUT_OF_RANGE &&
          mor_token_to_piece(m, -1, piece, sizeof piece, &pl) == MOR_E_OUT_OF_RANGE, "%s: piece of a bad id", how);
    CHECK(mor_token_to_piece(m, n_tokens(&o) + 1, piece, sizeof piece, &pl) == MOR_OK && pl == 0,
          "%s: the piece of a padding id is empty", how);
    /* control tokens render as their text; unused ones as nothing */
    int c[4] = { 1, W("zz"), W(SP "hello"), 2 };
    CHECK(decodes_to(m, c, 4, "<s> hello</s>"), "%s: <s> zz(unused) \\u2581hello </s> -> \"<s> hello</s>\"", how);
    /* added tokens by flag */
    CHECK(toks_are(m, "<u>", 0, (int[]){ W(SP), 3 + '<', 3 + 'u', 3 + '>', -1 }),
          "%s: <u> without flags: plain text (bytes)", how);
    CHECK(toks_are(m, "<u>", MOR_TOKENIZE_PARSE_USER_DEFINED, (int[]){ W("<u>"), -1 }) &&
          toks_are(m, "<u>", MOR_TOKENIZE_PARSE_SPECIAL, (int[]){ W("<u>"), -1 }),
          "%s: <u> (user-defined) with PARSE_USER_DEFINED or PARSE_SPECIAL", how);
    CHECK(toks_are(m, "<s>hello", MOR_TOKENIZE_PARSE_USER_DEFINED,
                   (int[]){ W(SP), 3 + '<', 3 + 's', 3 + '>', W("hello"), -1 }),
          "%s: <s> (control) not with PARSE_USER_DEFINED", how);
    /* the prefix after a special token, and ADD_BOS */
    CHECK(toks_are(m, "<s>hello", MOR_TOKENIZE_PARSE_SPECIAL, (int[]){ 1, W(SP "hello"), -1 }),
          "%s: <s>hello -> <s>, \\u2581hello (a prefix after the special)", how);
    CHECK(toks_are(m, "hello", MOR_TOKENIZE_ADD_BOS, (int[]){ 1, W(SP "hello"), -1 }), "%s: ADD_BOS", how);
    CHECK(toks_are(m, "", 0, (int[]){ -1 }) && toks_are(m, "", MOR_TOKENIZE_ADD_BOS, (int[]){ 1, -1 }),
          "%s: empty text: nothing, or BOS", how);
    unload(&l);
}

static void test_prefix_rules(void)
{
    /* Whether a U+2581 is put before "hello", before " hello" (which has its
     * own space) and before "hello" after <s> (PARSE_SPECIAL). */
    static const struct { const char *rule; int plain, space, after_special; } r[] = {
        { "prepend", 1, 1, 1 }, { "always", 1, 0, 1 }, { "first", 1, 0, 0 }, { "never", 0, 0, 0 },
    };
    for (int i = 0; i < 4; i++) {
        opts o = { 0 };
        o.add_space_prefix = -1;
        o.prefix_space = r[i].rule;
        loaded l;
        if (!CHECK(load(&o, &l) == MOR_OK, "prefix %s: loads (%s)", r[i].rule, mor_last_error())) continue;
        /* with a prefix "hello" is [\u2581hello], without it [hello] */
        int hello[2] = { r[i].plain ? W(SP "hello") : W("hello"), -1 };
        int space[3] = { r[i].space ? W(SP) : W(SP "hello"), r[i].space ? W(SP "hello") : -1, -1 };
        int after[3] = { 1, r[i].after_special ? W(SP "hello") : W("hello"), -1 };
        CHECK(toks_are(l.m, "hello", 0, hello), "prefix %s: hello", r[i].rule);
        CHECK(toks_are(l.m, " hello", 0, space), "prefix %s: \" hello\"", r[i].rule);
        CHECK(toks_are(l.m, "<s>hello", MOR_TOKENIZE_PARSE_SPECIAL, after), "prefix %s: <s>hello", r[i].rule);
        /* decoding drops the one prefix space unless the rule is never */
        int one = W(SP "hello");
        CHECK(decodes_to(l.m, &one, 1, strcmp(r[i].rule, "never") ? "hello" : " hello"), "prefix %s: decode",
              r[i].rule);
        unload(&l);
    }
    /* the llama.cpp key alone */
    opts o = { 0 };
    o.add_space_prefix = 0;
    loaded l;
    if (CHECK(load(&o, &l) == MOR_OK, "add_space_prefix = false loads")) {
        CHECK(toks_are(l.m, "hello", 0, (int[]){ W("hello"), -1 }), "add_space_prefix = false: no prefix");
        unload(&l);
    }
}

static void test_split_and_unknown(void)
{
    /* HF Metaspace split: each U+2581 starts a piece, so "\u2581\u2581" (two
     * spaces) cannot form across pieces */
    opts o = { 0 };
    o.add_space_prefix = -1;
    o.merges = 1;
    o.pre = "metaspace";
    loaded l;
    if (CHECK(load(&o, &l) == MOR_OK, "metaspace split: loads (%s)", mor_last_error())) {
        CHECK(toks_are(l.m, " a", 0, (int[]){ W(SP), W(SP "a"), -1 }), "metaspace split: \" a\" -> \\u2581 | \\u2581a");
        unload(&l);
    }
    o.pre = NULL;
    if (CHECK(load(&o, &l) == MOR_OK, "no split: loads")) {
        CHECK(toks_are(l.m, " a", 0, (int[]){ W(SP SP), W("a"), -1 }), "no split: \" a\" -> \\u2581\\u2581, a");
        unload(&l);
    }
    /* no byte tokens: a character outside the vocabulary is the unknown token */
    opts u = { 0 };
    u.add_space_prefix = -1;
    u.no_bytes = 1;
    if (CHECK(load(&u, &l) == MOR_OK, "no byte tokens, an unknown token: loads (%s)", mor_last_error())) {
        CHECK(toks_are(l.m, "a\xc3\xa9" "b", 0, (int[]){ wid(&u, find_word(SP "a")), 0, wid(&u, find_word("b")), -1 }),
              "no byte tokens: a, e-acute, b -> \\u2581a <unk> b");
        unload(&l);
    }
}

/* A token with a U+2581 after another character: merges cross the start of
 * a run of spaces, so the text is not cut there (cut_at_spaces off). */
static void test_crossing(void)
{
    opts o = { 0 };
    o.add_space_prefix = -1;
    o.cross = 1;
    loaded l;
    if (!CHECK(load(&o, &l) == MOR_OK, "a vocabulary with o\\u2581x loads (%s)", mor_last_error())) return;
    /* \u2581hello\u2581x: \u2581x (-4), then o\u2581x (-5) before he (-10) */
    CHECK(toks_are(l.m, "hello x", 0, (int[]){ W(SP), W("he"), W("ll"), W("o" SP "x"), -1 }),
          "merges cross a space: hello x -> [\\u2581, he, ll, o\\u2581x]");
    unload(&l);
}

static void expect(const opts *o, mor_status want, const char *what)
{
    loaded l;
    mor_status st = load(o, &l);
    CHECK(st == want && !l.m, "%s: %s (%s)", what, mor_status_str(want), mor_last_error());
    unload(&l);
}

static void test_corrupt(void)
{
    opts base = { 0 }, o;
    base.add_space_prefix = -1;
    o = base; o.no_scores = 1;  expect(&o, MOR_E_FORMAT, "scores missing");
    o = base; o.nan_score = 1;  expect(&o, MOR_E_FORMAT, "a NaN score");
    o = base; o.bad_byte = 1;   expect(&o, MOR_E_FORMAT, "a byte token that is not <0xNN>");
    o = base; o.dup_byte = 1;   expect(&o, MOR_E_FORMAT, "two tokens for one byte (and one missing)");
    o = base; o.type_bad = 7;   expect(&o, MOR_E_FORMAT, "token type 7");
    o = base; o.type_bad = 1;   expect(&o, MOR_E_FORMAT, "255 byte tokens");
    o = base; o.pre = "llama3"; expect(&o, MOR_E_FORMAT, "pre llama3 for a llama tokenizer");
    o = base; o.prefix_space = "sometimes"; expect(&o, MOR_E_FORMAT, "prefix_space sometimes");
    o = base; o.prefix_space = "never"; o.add_space_prefix = 1; expect(&o, MOR_E_FORMAT, "prefix never, add_space_prefix");
    o = base; o.prefix_space = "first"; o.add_space_prefix = 0; expect(&o, MOR_E_FORMAT, "prefix first, no add_space_prefix");
    o = base; o.remove_ws = 1;  expect(&o, MOR_E_UNSUPPORTED, "remove_extra_whitespaces");
    o = base; o.charsmap = 1;   expect(&o, MOR_E_UNSUPPORTED, "precompiled_charsmap");
    o = base; o.unk_id_bad = 1; expect(&o, MOR_E_FORMAT, "unknown_token_id out of range");
    o = base; o.no_bytes = 1; o.drop_unk = 1; expect(&o, MOR_E_FORMAT, "no byte tokens and no unknown token");
    o = base; o.prefix_space = "first"; o.add_space_prefix = 1;
    loaded l;
    CHECK(load(&o, &l) == MOR_OK, "prefix first with add_space_prefix true: loads");
    unload(&l);
}

int main(void)
{
    (void)check_maxdiff;
    test_merging(0);
    test_merging(1);
    test_prefix_rules();
    test_split_and_unknown();
    test_crossing();
    test_corrupt();
    return check_done();
}
