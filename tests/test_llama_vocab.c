/* test_llama_vocab.c - llama.cpp's tokenizer test suites, passed by libmor.
 *
 * tests/data/tokenizer/llama.cpp/ holds llama.cpp's vocabulary files
 * (models/ggml-vocab-NAME.gguf) with their .inp/.out suites, read as its
 * tests/test-tokenizer-0.cpp reads them: the .inp texts separated by
 * "\n__ggml_vocab_test__\n", one line of ids per text in .out. For each
 * vocabulary (SentencePiece "llama-spm" and the byte-level BPE pre-tokenizers
 * gpt-2, starcoder, refact, falcon, mpt, deepseek-coder, deepseek-llm):
 *  - the file loads directly (MOR_MODEL_VOCAB_ONLY on a file whose
 *    architecture is not "mor");
 *  - every suite text gives the suite's ids, tokenized as test-tokenizer-0
 *    does (no BOS, control tokens not parsed, user-defined ones matched:
 *    MOR_TOKENIZE_PARSE_USER_DEFINED), and decodes back to itself;
 *  - so do libmor's extra texts (extra.inp), whose ids llama.cpp's own
 *    test-tokenizer-0 wrote (tests/tokenizer/gen_llamacpp_oracle.py);
 *  - the pieces (mor_token_to_piece) of a text's tokens concatenate to the
 *    text, with the SentencePiece prefix space;
 *  - `mor-convert --vocab-only FILE.gguf` (convert_vocab_only) writes a `mor`
 *    vocab file that tokenizes every text the same.
 * And llama-spm without the dummy prefix (add_space_prefix = false, as Gemma)
 * against llama.cpp on the same file. Reads committed files only. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cputime.h"
#include "convert.h"
#include "gguf.h"
#include "gguf_input.h"
#include "gguf_write.h"
#include "mor.h"

#define DIR "tests/data/tokenizer/llama.cpp/"

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0, k;
    char *p = malloc(cap + 1);
    while (p && (k = fread(p + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            char *q = realloc(p, 2 * cap + 1);
            if (!q) { free(p); p = NULL; break; }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) { p[len] = 0; *n = len; }
    return p;
}

/* One suite: texts and the ids expected for each. */
typedef struct {
    int n;
    char **text;
    size_t *len;
    mor_token **ids;
    int *n_ids;
} suite;

static void suite_free(suite *s)
{
    for (int i = 0; i < s->n; i++) { free(s->text[i]); free(s->ids[i]); }
    free(s->text); free(s->len); free(s->ids); free(s->n_ids);
    memset(s, 0, sizeof *s);
}

/* As test-tokenizer-0.cpp reads an .inp and an .out; 0 on a bad pair. */
static int suite_read(suite *s, const char *inp_path, const char *out_path)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t ni, no;
    char *inp = read_all(inp_path, &ni), *out = read_all(out_path, &no);
    int ok = inp && out;
    memset(s, 0, sizeof *s);
    for (const char *p = inp; ok;) {
        const char *e = strstr(p, sep);
        size_t len = e ? (size_t)(e - p) : strlen(p);
        s->text = realloc(s->text, (size_t)(s->n + 1) * sizeof *s->text);
        s->len = realloc(s->len, (size_t)(s->n + 1) * sizeof *s->len);
        s->text[s->n] = malloc(len + 1);
        memcpy(s->text[s->n], p, len);
        s->text[s->n][len] = 0;
        s->len[s->n++] = len;
        if (!e) break;
        p = e + sizeof sep - 1;
    }
    int n_lines = 0;
    s->ids = calloc((size_t)s->n + 1, sizeof *s->ids);
    s->n_ids = calloc((size_t)s->n + 1, sizeof *s->n_ids);
    for (char *line = out; ok && line && *line; n_lines++) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (n_lines >= s->n) { ok = 0; break; }
        mor_token *ids = malloc((strlen(line) / 2 + 1) * sizeof *ids);
        int k = 0;
        for (char *q = line, *end; *q; q = end) {
            long v = strtol(q, &end, 10);
            if (end == q) { if (*q == ' ' || *q == '\r') { end = q + 1; continue; } ok = 0; break; }
            ids[k++] = (mor_token)v;
        }
        s->ids[n_lines] = ids;
        s->n_ids[n_lines] = k;
        line = nl ? nl + 1 : NULL;
    }
    /* llama.cpp's files end with a separator: the last text is "", its line empty */
    if (ok && n_lines == s->n - 1 && s->len[s->n - 1] == 0) n_lines++;
    ok = ok && n_lines == s->n;
    free(inp);
    free(out);
    return ok;
}

static mor_token *encode(const mor_model *m, const char *s, size_t len, uint32_t flags, int32_t *n)
{
    int32_t need = 0;
    mor_status st = mor_tokenize(m, s, len, flags, NULL, 0, &need);
    if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL) return NULL;
    mor_token *ids = malloc(((size_t)need + 1) * sizeof *ids);
    if (mor_tokenize(m, s, len, flags, ids, need, n) != MOR_OK) { free(ids); return NULL; }
    return ids;
}

static int same_ids(const mor_token *a, int32_t na, const mor_token *b, int32_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static int contains(const char *s, size_t n, const char *what)
{
    size_t k = strlen(what);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, what, k)) return 1;
    return 0;
}

/* Does every byte of the text have a token in m? (Byte-level vocabularies
 * may lack a few, which are dropped, as HF and llama.cpp drop them.) */
static int bytes_covered(const mor_model *m, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] >= 0x80) continue;
        int32_t k = -1;
        mor_tokenize(m, s + i, 1, 0, NULL, 0, &k);
        if (k == 0) return 0;
    }
    return 1;
}

/* Run a suite: ids as expected, and (where it can) the text back. */
static void run_suite(const mor_model *m, const char *name, const char *what, const suite *s, int spm)
{
    int bad = 0, bad_back = 0, n_back = 0, bad_pieces = 0;
    for (int i = 0; i < s->n; i++) {
        int32_t n = 0;
        mor_token *ids = encode(m, s->text[i], s->len[i], MOR_TOKENIZE_PARSE_USER_DEFINED, &n);
        if (!ids || !same_ids(ids, n, s->ids[i], s->n_ids[i])) {
            if (bad++ < 3) CHECK(0, "%s %s: case %d \"%.40s\": %d tokens, expected %d", name, what, i, s->text[i],
                                 ids ? (int)n : -1, s->n_ids[i]);
            free(ids);
            continue;
        }
        /* Decoding gives the text back, unless a SentencePiece text holds
         * U+2581 (it is a space there) or a byte has no token. */
        if (!(spm && contains(s->text[i], s->len[i], "\xe2\x96\x81")) && bytes_covered(m, s->text[i], s->len[i])) {
            char *back = malloc(s->len[i] + 16);
            size_t len = 0;
            n_back++;
            if (mor_detokenize(m, ids, n, back, s->len[i] + 16, &len) != MOR_OK || len != s->len[i] ||
                memcmp(back, s->text[i], len))
                if (bad_back++ < 3) CHECK(0, "%s %s: case %d \"%.40s\" decodes back", name, what, i, s->text[i]);
            free(back);
        }
        /* The pieces of the tokens, concatenated, are what mor_detokenize
         * gives, with the one prefix space it drops (SentencePiece only). */
        size_t cap = 4 * s->len[i] + 16, pos = 0, dlen = 0;
        char *cat = malloc(cap), *dec = malloc(cap);
        for (int32_t k = 0; k < n && pos != SIZE_MAX; k++) {
            size_t len = 0;
            pos = mor_token_to_piece(m, ids[k], cat + pos, cap - pos, &len) == MOR_OK ? pos + len : SIZE_MAX;
        }
        int ok = pos != SIZE_MAX && mor_detokenize(m, ids, n, dec, cap, &dlen) == MOR_OK;
        ok = ok && ((pos == dlen && !memcmp(cat, dec, dlen)) ||
                    (spm && pos == dlen + 1 && cat[0] == ' ' && !memcmp(cat + 1, dec, dlen)));
        bad_pieces += !ok;
        free(cat);
        free(dec);
        free(ids);
    }
    CHECK(bad == 0, "%s %s: %d of %d texts give llama.cpp's ids", name, what, s->n - bad, s->n);
    CHECK(bad_back == 0, "%s %s: %d of %d texts decode back", name, what, n_back - bad_back, n_back);
    CHECK(bad_pieces == 0, "%s %s: token pieces concatenate; mor_detokenize drops at most the prefix space", name,
          what);
}

/* The file, in memory. */
static mor_model *load_memory(const void *p, size_t n)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    mor_model *m = NULL;
    return mor_model_load_memory(p, n, &mp, &m) == MOR_OK ? m : NULL;
}

/* Write what w holds into memory. */
static void *write_memory(gguf_writer *w, size_t *n)
{
    char err[256];
    FILE *f = tmpfile();
    void *p = NULL;
    if (f && gguf_writer_write(w, f, err, sizeof err) == 0) {
        long sz = ftell(f);
        rewind(f);
        p = malloc(sz > 0 ? (size_t)sz : 1);
        if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) { free(p); p = NULL; }
        *n = (size_t)sz;
    }
    if (f) fclose(f);
    return p;
}

static void test_vocab(const char *name, int spm, int add_bos)
{
    char path[200], inp[256], out[256];
    snprintf(path, sizeof path, DIR "ggml-vocab-%s.gguf", name);
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    mor_model *m = NULL;
    mor_status st = mor_model_load_file(path, &mp, &m);
    if (!CHECK(st == MOR_OK && m, "%s: the llama.cpp file loads vocab-only%s%s", name, m ? "" : ": ",
               m ? "" : mor_last_error()))
        return;
    CHECK(mor_model_add_bos(m) == add_bos, "%s: add_bos %d", name, add_bos);

    suite s = { 0 }, x = { 0 };
    snprintf(inp, sizeof inp, "%s.inp", path);
    snprintf(out, sizeof out, "%s.out", path);
    int have_s = suite_read(&s, inp, out);
    have_s = CHECK(have_s && s.n > 30, "%s: llama.cpp's suite read (%d texts)", name, s.n);
    snprintf(out, sizeof out, "%s.extra.out", path);
    int have_x = suite_read(&x, DIR "extra.inp", out);
    have_x = CHECK(have_x && x.n > 40, "%s: the extra suite read (%d texts)", name, x.n);
    if (have_s) run_suite(m, name, "suite", &s, spm);
    if (have_x) run_suite(m, name, "extra", &x, spm);

    /* The same through mor-convert --vocab-only FILE.gguf. */
    FILE *f = tmpfile();
    char err[512] = "", summary[256] = "";
    int rc = f ? convert_vocab_only(path, NULL, f, summary, sizeof summary, err, sizeof err) : -1;
    void *img = NULL;
    size_t n_img = 0;
    if (rc == 0) {
        long sz = ftell(f);
        rewind(f);
        img = malloc((size_t)sz);
        n_img = img && fread(img, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : 0;
    }
    if (f) fclose(f);
    mor_model *c = n_img ? load_memory(img, n_img) : NULL;
    CHECK(c && mor_model_n_vocab(c) == mor_model_n_vocab(m), "%s: convert_vocab_only writes a vocab file (%s%s)", name,
          summary, err);
    if (c) {
        char arch[16] = "";
        CHECK(mor_model_meta_str(c, "general.architecture", arch, sizeof arch, NULL) == MOR_OK && !strcmp(arch, "mor"),
              "%s: ... of architecture mor", name);
        int same = 1;
        for (int k = 0; k < 2; k++) {
            const suite *q = k ? &x : &s;
            if (!(k ? have_x : have_s)) continue;
            for (int i = 0; i < q->n && same; i++) {
                int32_t na = 0, nb = 0;
                mor_token *a = encode(m, q->text[i], q->len[i], MOR_TOKENIZE_PARSE_USER_DEFINED, &na);
                mor_token *b = encode(c, q->text[i], q->len[i], MOR_TOKENIZE_PARSE_USER_DEFINED, &nb);
                same = a && b && same_ids(a, na, b, nb);
                free(a);
                free(b);
            }
        }
        CHECK(same, "%s: the converted file tokenizes every text the same", name);
        CHECK(mor_model_add_bos(c) == add_bos && mor_model_token_bos(c) == mor_model_token_bos(m) &&
              mor_model_token_eos(c) == mor_model_token_eos(m), "%s: ... with the same BOS, EOS, add_bos", name);
    }
    mor_model_free(c);
    free(img);

    /* GPT-NeoX's added tokens (runs of spaces) are user-defined: without
     * MOR_TOKENIZE_PARSE_USER_DEFINED they are not matched. */
    if (!strcmp(name, "mpt") && have_s) {
        int differ = 0;
        for (int i = 0; i < s.n; i++) {
            int32_t na = 0, nb = 0;
            mor_token *a = encode(m, s.text[i], s.len[i], 0, &na);
            mor_token *b = encode(m, s.text[i], s.len[i], MOR_TOKENIZE_PARSE_SPECIAL, &nb);
            differ += a && !same_ids(a, na, s.ids[i], s.n_ids[i]) && contains(s.text[i], s.len[i], "  ");
            differ -= b && !same_ids(b, nb, s.ids[i], s.n_ids[i]);   /* PARSE_SPECIAL implies user-defined */
            free(a);
            free(b);
        }
        CHECK(differ > 0, "mpt: %d texts with runs of spaces tokenize otherwise without PARSE_USER_DEFINED", differ);
    }
    /* About 256 KB of the suites' texts in one call, well under a second
     * without sanitizers (a SentencePiece text is cut only where no merge can
     * cross, at the start of each run of spaces) */
    if (have_s && have_x) {
        size_t cap = (1 << 18) + 4096, len = 0;
        char *big = malloc(cap);
        for (int i = 0; len < (1u << 18); i = (i + 1) % (s.n + x.n)) {
            const suite *q = i < s.n ? &s : &x;
            int k = i < s.n ? i : i - s.n;
            if (len + q->len[k] + 1 > cap) break;
            memcpy(big + len, q->text[k], q->len[k]);
            len += q->len[k];
            big[len++] = ' ';
        }
        /* linear work: CPU time of a quarter (cut at a space) against the
         * whole (tests/check.h), not a wall-clock bound */
        size_t quarter = len / 4;
        while (quarter > 0 && big[quarter - 1] != ' ') quarter--;
        int32_t n = 0, n4 = 0;
        double t0 = check_thread_cpu();
        mor_status qs = mor_tokenize(m, big, quarter, 0, NULL, 0, &n4);
        double t1 = check_thread_cpu();
        mor_status bs = mor_tokenize(m, big, len, 0, NULL, 0, &n);
        double t2 = check_thread_cpu();
        CHECK(bs == MOR_E_BUFFER_TOO_SMALL && qs == MOR_E_BUFFER_TOO_SMALL &&
              t2 - t1 < CHECK_GROWTH_4X * (t1 - t0) + 0.01,
              "%s: %.0f KB -> %d tokens in %.3f CPU s, a quarter in %.3f: linear", name, len / 1024.0,
              (int)n, t2 - t1, t1 - t0);
        free(big);
    }
    if (have_s) suite_free(&s);
    if (have_x) suite_free(&x);
    mor_model_free(m);
}

/* llama-spm with tokenizer.ggml.add_space_prefix = false (no dummy prefix,
 * as Gemma's), written here from the file's keys, against llama.cpp on a
 * file with the same keys. */
static void test_no_prefix(void)
{
    size_t n;
    char *file = read_all(DIR "ggml-vocab-llama-spm.gguf", &n);
    gguf_file *g = NULL;
    if (!CHECK(file && gguf_parse(file, n, &g) == MOR_OK, "llama-spm parsed")) { free(file); return; }
    gguf_writer *w = gguf_writer_new();
    gguf_input gi;
    char err[256];
    memset(&gi, 0, sizeof gi);
    gi.g = g;
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", 32000);
    int rc = gguf_input_copy_keys(&gi, w, 0, err, sizeof err);
    gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    size_t n_img = 0;
    void *img = rc == 0 ? write_memory(w, &n_img) : NULL;
    gguf_writer_free(w);
    gguf_free(g);
    free(file);
    mor_model *m = img ? load_memory(img, n_img) : NULL;
    suite x;
    if (CHECK(m, "llama-spm without the prefix space loads") &&
        CHECK(suite_read(&x, DIR "extra.inp", DIR "llama-spm-noprefix.extra.out"), "its llama.cpp suite read")) {
        run_suite(m, "llama-spm-noprefix", "extra", &x, 1);
        int32_t k = 0;
        mor_token t[8];
        CHECK(mor_tokenize(m, " Hello", 6, 0, t, 8, &k) == MOR_OK && k == 1 && t[0] == 15043,
              "no prefix: \" Hello\" is the one token \"\\u2581Hello\"");
        suite_free(&x);
    }
    mor_model_free(m);
    free(img);
}

int main(void)
{
    (void)check_maxdiff;
    static const struct { const char *name; int spm, add_bos; } v[] = {
        { "llama-spm", 1, 1 }, { "gpt-2", 0, 0 }, { "starcoder", 0, 0 }, { "refact", 0, 0 }, { "falcon", 0, 0 },
        { "mpt", 0, 0 }, { "deepseek-coder", 0, 1 }, { "deepseek-llm", 0, 1 },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) test_vocab(v[i].name, v[i].spm, v[i].add_bos);
    test_no_prefix();

    /* A non-mor architecture needs MOR_MODEL_VOCAB_ONLY. */
    mor_model *m = NULL;
    mor_status st = mor_model_load_file(DIR "ggml-vocab-gpt-2.gguf", NULL, &m);
    CHECK(st == MOR_E_FORMAT && !m && strstr(mor_last_error(), "gpt2"),
          "a llama.cpp file without VOCAB_ONLY: MOR_E_FORMAT naming its architecture (%s)", mor_last_error());
    return check_done();
}
