/* test_convert.c - the converter (src/tools/mor-convert, bin/mor-convert).
 *
 *  - the strict JSON parser: escapes, surrogates, numbers, depth, rejects;
 *  - the YAML subset on a fixture's mor_cfg.yaml and on small documents;
 *  - the MoR settings from mor_cfg.yaml and mor_config.json agree;
 *  - the checkpoint readers on every fixture (.bin and .safetensors hold the
 *    same tensors), and on corrupted copies (truncated at many offsets, random
 *    byte flips): each must be rejected or read, never crash (run under
 *    ASan/UBSan by `make test-sanitize`);
 *  - converting every fixture from both formats gives byte-identical GGUF
 *    files, with the expected layer maps; outtypes; synthetic checkpoints
 *    (plain Llama, recursive baseline, token-choice with an MLP router and
 *    bias, aux routers, untied lm_head, kept even when the config ties it) and
 *    the errors of bad ones;
 *  - tokenizer.json -> tokenizer keys; --vocab-only;
 *  - the command line (when $OUT/bin/mor-convert exists): exit codes and
 *    one-line errors.
 * Run from the repository root. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "checkpoint.h"
#include "convert.h"
#include "dtype.h"
#include "gguf_write.h"
#include "hf_tokenizer.h"
#include "json.h"
#include "settings.h"
#include "pickle.h"
#include "yaml.h"

#define FIX "tests/data/fixtures"

/* What checkpoint.h promises of a loaded checkpoint read from buf[0..n):
 * names sorted and unique, shapes that multiply to numel, nbytes numel
 * elements of a float type, and every tensor's bytes inside the buffer. */
static int ckpt_sound(const checkpoint *c, const uint8_t *buf, size_t n)
{
    for (size_t i = 0; i < c->n; i++) {
        const ckpt_tensor *t = &c->t[i];
        uint64_t numel = 1;
        if (!t->name || t->ndim < 0 || t->ndim > CKPT_MAX_DIMS) return 0;
        for (int d = 0; d < t->ndim; d++) numel *= t->shape[d];
        const uint64_t es = t->dtype == GGML_F32 ? 4 : t->dtype == GGML_F16 || t->dtype == GGML_BF16 ? 2 : 0;
        if (!es || numel != t->numel || t->nbytes != numel * es) return 0;
        if (t->nbytes && (t->data < buf || t->nbytes > n || (size_t)(t->data - buf) > n - t->nbytes)) return 0;
        if (i && strcmp(c->t[i - 1].name, t->name) >= 0) return 0;
    }
    return 1;
}

static const char *const variants[] = {
    "expert_cycle2_alpha1_perturbed", "expert_mc3_bf16_perturbed", "expert_mc3_fix_perturbed",
    "expert_mc3_kvshare_fix_perturbed", "expert_mc3_perturbed", "token_mc3_perturbed",
};
#define N_VARIANTS (sizeof variants / sizeof variants[0])

static char tmpdir[64];

/* ---- helpers -------------------------------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b;
    long len;
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc(len > 0 ? (size_t)len : 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    fclose(f);
    if (b) *n = (size_t)len;
    return b;
}

static uint8_t *file_image(FILE *f, size_t *n)
{
    long len;
    uint8_t *b;
    fflush(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    rewind(f);
    b = malloc(len > 0 ? (size_t)len : 1);
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) { free(b); b = NULL; }
    *n = b ? (size_t)len : 0;
    return b;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static uint32_t rng = 12345;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static char *tmp_path(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* ---- a minimal GGUF reader, to look at what was written ------------------------ */

typedef struct {
    const uint8_t *b;
    size_t n, o;
    int bad;
} rd;

static uint64_t rdn(rd *r, size_t k)
{
    uint64_t v = 0;
    if (r->bad || r->n - r->o < k) { r->bad = 1; return 0; }
    for (size_t i = 0; i < k; i++) v |= (uint64_t)r->b[r->o + i] << (8 * i);
    r->o += k;
    return v;
}

static void rskip_val(rd *r, uint32_t t, int depth)
{
    static const int size[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t > 12 || depth > 2) { r->bad = 1; return; }
    if (t == 8) {
        uint64_t len = rdn(r, 8);
        if (len > r->n - r->o) r->bad = 1;
        else r->o += len;
    } else if (t == 9) {
        uint32_t et = (uint32_t)rdn(r, 4);
        uint64_t cnt = rdn(r, 8);
        for (uint64_t i = 0; i < cnt && !r->bad; i++) rskip_val(r, et, depth + 1);
    } else {
        rdn(r, (size_t)size[t]);
    }
}

#define G_MAX 256
typedef struct {
    int ok;
    uint64_t n_kv, n_t;
    const char *key[G_MAX];
    size_t key_len[G_MAX], val[G_MAX];
    uint32_t type[G_MAX];
    const char *tname[G_MAX];
    size_t tname_len[G_MAX];
    uint32_t ndim[G_MAX], ttype[G_MAX];
    uint64_t dims[G_MAX][4], off[G_MAX];
    size_t data_start;
} ginfo;

static uint64_t type_size(uint32_t t) { return t == 0 ? 4 : (t == 1 || t == 30) ? 2 : 0; }

/* Parse and validate: counts, alignment, every tensor inside the file and
 * not overlapping the next. */
static void g_parse(const uint8_t *b, size_t n, ginfo *g)
{
    rd r = {b, n, 0, 0};
    memset(g, 0, sizeof *g);
    if (n < 24 || memcmp(b, "GGUF", 4) != 0) return;
    r.o = 4;
    if (rdn(&r, 4) != 3) return;
    g->n_t = rdn(&r, 8);
    g->n_kv = rdn(&r, 8);
    if (g->n_t > G_MAX || g->n_kv > G_MAX) return;
    for (uint64_t i = 0; i < g->n_kv && !r.bad; i++) {
        g->key_len[i] = (size_t)rdn(&r, 8);
        if (g->key_len[i] > n - r.o) return;
        g->key[i] = (const char *)b + r.o;
        r.o += g->key_len[i];
        g->type[i] = (uint32_t)rdn(&r, 4);
        g->val[i] = r.o;
        rskip_val(&r, g->type[i], 0);
    }
    for (uint64_t i = 0; i < g->n_t && !r.bad; i++) {
        g->tname_len[i] = (size_t)rdn(&r, 8);
        if (g->tname_len[i] > n - r.o) return;
        g->tname[i] = (const char *)b + r.o;
        r.o += g->tname_len[i];
        g->ndim[i] = (uint32_t)rdn(&r, 4);
        if (g->ndim[i] < 1 || g->ndim[i] > 4) return;
        for (uint32_t d = 0; d < g->ndim[i]; d++) g->dims[i][d] = rdn(&r, 8);
        g->ttype[i] = (uint32_t)rdn(&r, 4);
        g->off[i] = rdn(&r, 8);
    }
    if (r.bad) return;
    g->data_start = (r.o + 31) / 32 * 32;
    for (uint64_t i = 0; i < g->n_t; i++) {
        uint64_t sz = type_size(g->ttype[i]);
        for (uint32_t d = 0; d < g->ndim[i]; d++) sz *= g->dims[i][d];
        if (!sz || g->off[i] % 32 || g->data_start + g->off[i] + sz > n) return;
        if (i + 1 < g->n_t && g->off[i] + sz > g->off[i + 1]) return;
    }
    g->ok = 1;
}

static int g_kv(const ginfo *g, const char *key, uint32_t *type, const uint8_t **val, const uint8_t *b)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->key_len[i] == strlen(key) && memcmp(g->key[i], key, g->key_len[i]) == 0) {
            *type = g->type[i];
            *val = b + g->val[i];
            return 1;
        }
    return 0;
}

static int g_has_tensor(const ginfo *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_t; i++)
        if (g->tname_len[i] == strlen(name) && memcmp(g->tname[i], name, g->tname_len[i]) == 0) return (int)i + 1;
    return 0;
}

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* an int32 array key equals want[0..n) */
static int g_i32_array_is(const ginfo *g, const uint8_t *b, const char *key, const int32_t *want, size_t n)
{
    uint32_t t;
    const uint8_t *v;
    if (!g_kv(g, key, &t, &v, b) || t != 9 || le32(v) != 5 || le32(v + 4) != n || le32(v + 8) != 0) return 0;
    for (size_t i = 0; i < n; i++)
        if ((int32_t)le32(v + 12 + 4 * i) != want[i]) return 0;
    return 1;
}

static int g_u32_is(const ginfo *g, const uint8_t *b, const char *key, uint32_t want)
{
    uint32_t t;
    const uint8_t *v;
    return g_kv(g, key, &t, &v, b) && t == 4 && le32(v) == want;
}

static int g_bool_is(const ginfo *g, const uint8_t *b, const char *key, int want)
{
    uint32_t t;
    const uint8_t *v;
    return g_kv(g, key, &t, &v, b) && t == 7 && v[0] == (want ? 1 : 0);
}

static int g_str_is(const ginfo *g, const uint8_t *b, const char *key, const char *want)
{
    uint32_t t;
    const uint8_t *v;
    return g_kv(g, key, &t, &v, b) && t == 8 && le32(v) == strlen(want) && memcmp(v + 8, want, strlen(want)) == 0;
}

/* ---- JSON --------------------------------------------------------------------- */

static json *jp(const char *s)
{
    char err[256];
    return json_parse(s, strlen(s), err, sizeof err);
}

static int json_rejects(const char *s)
{
    char err[256] = "";
    json *v = json_parse(s, strlen(s), err, sizeof err);
    json_free(v);
    return v == NULL && err[0] != 0;
}

static void test_json(void)
{
    json *v;
    char deep[1200];

    v = jp("{\"a\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"e\": \"\\u00e9\\u20ac\", \"s\": \"\\ud83d\\ude00\", \"z\": \"a\\u0000b\"}");
    CHECK(v && v->type == JSON_OBJECT && v->n == 4, "json: object with escaped strings parses");
    if (v) {
        CHECK(strcmp(json_get(v, "a")->str, "q\"\\/\b\f\n\r\t") == 0, "json: simple escapes decoded");
        CHECK(strcmp(json_get(v, "e")->str, "\xC3\xA9\xE2\x82\xAC") == 0, "json: \\u escapes to UTF-8");
        CHECK(strcmp(json_get(v, "s")->str, "\xF0\x9F\x98\x80") == 0, "json: surrogate pair to one 4-byte UTF-8 char");
        CHECK(json_get(v, "z")->str_len == 3 && json_get(v, "z")->str[1] == 0, "json: \\u0000 kept, str_len counts it");
        CHECK(json_get(v, "nope") == NULL && json_get(json_get(v, "a"), "x") == NULL, "json_get: missing key, non-object");
    }
    json_free(v);

    v = jp(" [0.1, 0.6666666666666666, 1.0000000000000001e-05, -0, 1E400, 9007199254740993, 3.4028234663852886e+38, "
           "1.401298464324817e-45, true, false, null] ");
    CHECK(v && v->type == JSON_ARRAY && v->n == 11, "json: array of numbers and literals parses");
    if (v) {
        CHECK(json_at(v, 0)->num == 0.1 && json_at(v, 1)->num == 2.0 / 3.0 && json_at(v, 2)->num == 1e-05,
              "json: numbers are the nearest doubles (strtod)");
        CHECK(json_at(v, 3)->num == 0 && signbit(json_at(v, 3)->num), "json: -0 keeps its sign");
        CHECK(isinf(json_at(v, 4)->num), "json: 1E400 overflows to inf, as Python's float()");
        CHECK((float)json_at(v, 6)->num == 3.4028234663852886e+38f && (float)json_at(v, 7)->num == 1.401298464324817e-45f,
              "json: float32 extremes written by Python round-trip exactly");
        CHECK(json_at(v, 8)->type == JSON_BOOL && json_at(v, 8)->boolean == 1 && json_at(v, 9)->boolean == 0 &&
                  json_at(v, 10)->type == JSON_NULL,
              "json: true, false, null");
        CHECK(json_at(v, 11) == NULL && json_at(json_at(v, 0), 0) == NULL, "json_at: out of range, non-array");
    }
    json_free(v);
    /* every float32 written by Python's repr (shortest round-trip digits of the
     * double) comes back as that float */
    {
        int all = 1;
        for (int i = 0; i < 2000; i++) {
            uint32_t u = rnd();
            float f;
            char s[64];
            memcpy(&f, &u, 4);
            if (!isfinite(f)) continue;
            snprintf(s, sizeof s, "%.17g", (double)f);
            v = jp(s);
            if (!v || (float)v->num != f) all = 0;
            json_free(v);
        }
        CHECK(all, "json: 2000 random float32 values round-trip");
    }

    v = jp("{\"k\": 1, \"k\": 2}");
    CHECK(v && json_get(v, "k")->num == 2, "json: duplicate keys kept, json_get returns the last (as Python)");
    json_free(v);

    CHECK(json_rejects(""), "json rejects: empty text");
    CHECK(json_rejects("01"), "json rejects: leading zero");
    CHECK(json_rejects("1."), "json rejects: '1.'");
    CHECK(json_rejects(".5"), "json rejects: '.5'");
    CHECK(json_rejects("+1"), "json rejects: '+1'");
    CHECK(json_rejects("1e"), "json rejects: '1e'");
    CHECK(json_rejects("NaN") && json_rejects("Infinity") && json_rejects("-Infinity"), "json rejects: NaN/Infinity");
    CHECK(json_rejects("[1,]") && json_rejects("{\"a\":1,}"), "json rejects: trailing commas");
    CHECK(json_rejects("[1] x") && json_rejects("{} {}"), "json rejects: trailing characters");
    CHECK(json_rejects("// c\n{}") && json_rejects("{/*c*/}"), "json rejects: comments");
    CHECK(json_rejects("\"abc") && json_rejects("\"a\\"), "json rejects: unterminated string");
    CHECK(json_rejects("\"a\tb\"") && json_rejects("\"a\nb\""), "json rejects: raw control characters in strings");
    CHECK(json_rejects("\"\\x41\"") && json_rejects("\"\\u12\""), "json rejects: bad escapes");
    CHECK(json_rejects("\"\\ud83d\"") && json_rejects("\"\\ude00\"") && json_rejects("\"\\ud83d\\u0041\""),
          "json rejects: lone or mismatched surrogates");
    CHECK(json_rejects("\"\xff\"") && json_rejects("\"\xc0\xaf\"") && json_rejects("\"\xed\xa0\x80\"") &&
              json_rejects("\"\xf4\x90\x80\x80\"") && json_rejects("\"\xe2\x82\""),
          "json rejects: invalid UTF-8 (bad byte, overlong, surrogate, > U+10FFFF, truncated)");
    CHECK(json_rejects("{1: 2}") && json_rejects("{\"a\" 1}") && json_rejects("[1 2]"), "json rejects: bad structure");
    CHECK(json_rejects("tru") && json_rejects("nul") && json_rejects("True"), "json rejects: bad literals");
    v = jp("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    CHECK(v && v->str_len == 9, "json: valid raw UTF-8 accepted");
    json_free(v);

    /* depth: 256 nested arrays parse, 257 do not */
    memset(deep, '[', 256);
    memset(deep + 256, ']', 256);
    deep[512] = 0;
    v = jp(deep);
    CHECK(v != NULL, "json: %d nested arrays parse", JSON_MAX_DEPTH);
    json_free(v);
    memset(deep, '[', 257);
    memset(deep + 257, ']', 257);
    deep[514] = 0;
    CHECK(json_rejects(deep), "json rejects: nesting deeper than %d", JSON_MAX_DEPTH);
    {
        char *huge = malloc(200001);
        memset(huge, '[', 200000);
        huge[200000] = 0;
        CHECK(json_rejects(huge), "json rejects: 200000 open brackets without overflowing the stack");
        free(huge);
    }
}

/* Parse every truncation and many corrupted copies of a JSON/YAML text;
 * returns how many were rejected without a message (0 when every rejection
 * says why, as the converter's errors need). */
static int fuzz_text(const char *text, size_t n, int yaml, int flips)
{
    static const char specials[] = " -:\n\"'[]{},#\\u0123456789e.tfn\t";
    char err[256];
    char *buf = malloc(n + 1);
    int unexplained = 0;
    for (size_t cut = 0; cut < n; cut++) {
        json *v;
        memcpy(buf, text, cut);
        err[0] = '\0';
        v = yaml ? yaml_parse(buf, cut, err, sizeof err) : json_parse(buf, cut, err, sizeof err);
        unexplained += !v && !err[0];
        json_free(v);
    }
    for (int i = 0; i < flips; i++) {
        json *v;
        int k = 1 + (int)(rnd() % 4);
        memcpy(buf, text, n);
        while (k--) {
            size_t at = rnd() % n;
            buf[at] = (rnd() & 1) ? (char)rnd() : specials[rnd() % (sizeof specials - 1)];
        }
        err[0] = '\0';
        v = yaml ? yaml_parse(buf, n, err, sizeof err) : json_parse(buf, n, err, sizeof err);
        unexplained += !v && !err[0];
        json_free(v);
    }
    free(buf);
    return unexplained;
}

/* ---- YAML ------------------------------------------------------------------------- */

static json *yp(const char *s, char *err, size_t cap)
{
    return yaml_parse(s, strlen(s), err, cap);
}

static void test_yaml(void)
{
    char err[256];
    size_t n;
    uint8_t *text = read_all(FIX "/token_mc3_perturbed/mor_cfg.yaml", &n);
    json *v;
    const json *x;

    CHECK(text != NULL, "yaml: read the fixture mor_cfg.yaml");
    if (!text) return;
    v = yaml_parse((const char *)text, n, err, sizeof err);
    CHECK(v && v->type == JSON_OBJECT, "yaml: fixture mor_cfg.yaml parses (%s)", v ? "ok" : err);
    if (v) {
        x = json_get(json_get(v, "recursive"), "num_recursion");
        CHECK(x && x->type == JSON_NUMBER && x->num == 3, "yaml: recursive.num_recursion = 3");
        x = json_get(json_get(v, "recursive"), "sharing");
        CHECK(x && x->type == JSON_STRING && strcmp(x->str, "middle_cycle") == 0, "yaml: recursive.sharing = middle_cycle");
        x = json_get(json_get(v, "recursive"), "base_depth");
        CHECK(x && x->type == JSON_NULL, "yaml: base_depth: null");
        x = json_get(json_get(v, "mor"), "capacity");
        CHECK(x && x->type == JSON_STRING && strcmp(x->str, "1.0,0.6666666666666666,0.3333333333333333") == 0,
              "yaml: capacity is the comma string");
        x = json_get(json_get(v, "mor"), "z_coeff");
        CHECK(x && x->type == JSON_NUMBER && x->num == 1e-05, "yaml: 1.0e-05 is a float");
        x = json_get(json_get(json_get(v, "mor"), "token"), "router_func");
        CHECK(x && json_as_str(x) && strcmp(x->str, "softmax") == 0, "yaml: mor.token.router_func = softmax");
        x = json_get(json_get(json_get(v, "relaxation"), "lora"), "target_modules");
        CHECK(x && x->type == JSON_ARRAY && x->n == 2 && strcmp(x->items[1]->str, "v_proj") == 0,
              "yaml: block list at its key's indentation");
        x = json_get(v, "wandb");
        CHECK(x && x->type == JSON_BOOL && x->boolean == 0, "yaml: false is a bool");
        x = json_get(json_get(v, "evaluation"), "tasks");
        CHECK(x && x->type == JSON_STRING && strstr(x->str, "hellaswag,piqa"), "yaml: a plain scalar with commas is a string");
    }
    json_free(v);
    CHECK(fuzz_text((const char *)text, n, 1, 3000) == 0, "yaml: every truncation and 3000 corrupted copies parse or are rejected with a reason");
    free(text);

    v = yp("# comment\n---\na: 'it''s' # c\nb: \"x\\ty \\u00e9\"\nc: [1, two, 'three', [4]]\nd: {k: v, n: null}\n"
           "e:\n  - x: 1\n    y: 2\n  - - 3\n    - 4\n  -\n    z: ~\nf: a long\n  plain scalar\n  - and more\ng: 0x1F\nh: \"multi\n  line\"\n"
           "'q k': yes\n",
           err, sizeof err);
    CHECK(v != NULL, "yaml: a document with quoting, flow, nested lists (%s)", v ? "ok" : err);
    if (v) {
        CHECK(strcmp(json_get(v, "a")->str, "it's") == 0, "yaml: single-quoted with ''");
        CHECK(strcmp(json_get(v, "b")->str, "x\ty \xc3\xa9") == 0, "yaml: double-quoted escapes");
        x = json_get(v, "c");
        CHECK(x && x->n == 4 && x->items[0]->num == 1 && strcmp(x->items[1]->str, "two") == 0 && x->items[3]->n == 1,
              "yaml: flow sequence");
        x = json_get(v, "d");
        CHECK(x && x->type == JSON_OBJECT && strcmp(json_get(x, "k")->str, "v") == 0 && json_get(x, "n")->type == JSON_NULL,
              "yaml: flow mapping");
        x = json_get(v, "e");
        CHECK(x && x->n == 3 && json_get(x->items[0], "y")->num == 2 && x->items[1]->n == 2 &&
                  json_get(x->items[2], "z")->type == JSON_NULL,
              "yaml: list of mappings, list of lists, item on the next line");
        CHECK(strcmp(json_get(v, "f")->str, "a long plain scalar - and more") == 0, "yaml: plain scalar continued on the next lines");
        CHECK(json_get(v, "g")->type == JSON_STRING, "yaml: 0x1F stays a string");
        CHECK(strcmp(json_get(v, "h")->str, "multi line") == 0, "yaml: quoted scalar over two lines");
        CHECK(json_get(v, "q k")->type == JSON_BOOL, "yaml: quoted key, yes is a bool");
    }
    json_free(v);

    v = yp("", err, sizeof err);
    CHECK(v && v->type == JSON_NULL, "yaml: empty document is null");
    json_free(v);
    {
        static const char *const bad[] = {
            "a:\n\tb: 1\n", "a: &x 1\n", "a: *x\n", "a: !!str 1\n", "a: |\n  text\n", "a: 1\n  b: 2\n",
            "a: 1\n--- \nb: 2\n", "a: [1, 2\n", "a: 'open\n", "a: b: c\n", "- a\nb: 1\n", "%YAML 1.1\n---\na: 1\n",
            "a: \"\\q\"\n",
        };
        int all = 1;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            err[0] = 0;
            v = yp(bad[i], err, sizeof err);
            if (v || !strstr(err, "YAML")) { all = 0; printf("# accepted: %s\n", bad[i]); }
            json_free(v);
        }
        CHECK(all, "yaml: tabs, anchors, aliases, tags, block scalars, bad indentation, multi-docs, open flow/quotes rejected");
    }
    {
        char deepy[64 * 70 + 10];
        size_t k = 0;
        for (int i = 0; i < 70; i++) {
            for (int s = 0; s < i; s++) deepy[k++] = ' ';
            deepy[k++] = 'a';
            deepy[k++] = ':';
            deepy[k++] = '\n';
            if (k > sizeof deepy - 80) break;
        }
        deepy[k] = 0;
        v = yp(deepy, err, sizeof err);
        CHECK(!v, "yaml: nesting deeper than %d is rejected", YAML_MAX_DEPTH);
        json_free(v);
    }
}

/* ---- MoR settings ------------------------------------------------------------------- */

static int settings_equal(const cv_settings *a, const cv_settings *b)
{
    if (a->type != b->type || a->num_recursion != b->num_recursion || a->sharing != b->sharing ||
        a->n_capacity != b->n_capacity || a->arch != b->arch || a->func != b->func || a->have_alpha != b->have_alpha ||
        a->alpha != b->alpha || a->have_temp != b->have_temp || a->temp != b->temp || a->gating != b->gating ||
        a->kv_shared != b->kv_shared || a->sampling != b->sampling || a->balancing != b->balancing)
        return 0;
    for (int i = 0; i < a->n_capacity; i++)
        if (a->capacity[i] != b->capacity[i]) return 0;
    return 1;
}

static void test_settings(void)
{
    char err[512], path[256];
    cv_settings y, j;
    for (size_t i = 0; i < N_VARIANTS; i++) {
        int ry, rj;
        cv_settings_init(&y);
        cv_settings_init(&j);
        snprintf(path, sizeof path, FIX "/%s/mor_cfg.yaml", variants[i]);
        ry = cv_settings_load(&y, path, err, sizeof err);
        snprintf(path, sizeof path, FIX "/%s/mor_config.json", variants[i]);
        rj = cv_settings_load(&j, path, err, sizeof err);
        CHECK(ry == 0 && rj == 0 && settings_equal(&y, &j), "settings: %s: mor_cfg.yaml and mor_config.json agree", variants[i]);
    }
    cv_settings_init(&y);
    snprintf(path, sizeof path, FIX "/expert_mc3_fix_perturbed/mor_cfg.yaml");
    cv_settings_load(&y, path, err, sizeof err);
    CHECK(y.type == ROUTE_EXPERT && y.num_recursion == 3 && y.sharing == SHARE_MIDDLE_CYCLE && y.n_capacity == 3 &&
              y.capacity[1] == 0.6666666666666666 && y.func == FUNC_SIGMOID && y.alpha == 0.1 && y.arch == ARCH_LINEAR &&
              y.gating == GATE_WEIGHTED && y.sampling == SAMPLE_AUX_LOSS && y.kv_shared == 0,
          "settings: expert_mc3_fix values (expert, 3 x middle_cycle, sigmoid, alpha 0.1, capacities)");
    cv_settings_init(&y);
    cv_settings_load(&y, FIX "/expert_mc3_kvshare_fix_perturbed/mor_cfg.yaml", err, sizeof err);
    CHECK(y.kv_shared == 1, "settings: kv_sharing.enable read");
    {
        static const char dora[] = "recursive:\n  enable: true\nrelaxation:\n  enable: true\n  method: dora\n";
        static const char lora[] = "recursive:\n  enable: true\nrelaxation:\n  enable: true\n  method: lora\n"
                                   "  lora:\n    r: 16\n    alpha: 32\n    target_modules: ['q_proj', 'mlp']\n"
                                   "    rank_pattern: {self_attn: 8, ffn: 4}\n    alpha_pattern: 2.0\n";
        cv_settings_init(&y);
        CHECK(cv_settings_parse(&y, dora, strlen(dora), err, sizeof err) != 0 && strstr(err, "dora"),
              "settings: relaxation.method dora is refused (%s)", err);
        cv_settings_init(&y);
        CHECK(cv_settings_parse(&y, lora, strlen(lora), err, sizeof err) == 0 && y.relax == 1 &&
                  y.relax_method == RELAX_LORA && y.lora_r == 16 && y.have_lora_alpha && y.lora_alpha == 32 &&
                  y.have_lora_alpha_pattern && y.lora_alpha_pattern == 2.0 && y.lora_rank_attn == 8 && y.lora_rank_ffn == 4 &&
                  y.lora_targets == (1u << MS_PROJ_Q | 1u << MS_PROJ_GATE | 1u << MS_PROJ_UP | 1u << MS_PROJ_DOWN),
              "settings: relaxation.lora read (r, alpha, alpha_pattern, rank_pattern, target_modules by substring)");
    }
    {
        static const char s[] = "recursive: {enable: true, num_recursion: 2, sharing: cycle}\n"
                                "mor: {enable: true, type: expert, capacity: 1.0,0.5, router_type: wide_mlp,\n";
        cv_settings_init(&y);
        CHECK(cv_settings_parse(&y, s, strlen(s), err, sizeof err) != 0, "settings: a broken document is an error");
    }
    {
        static const char s[] = "recursive:\n  enable: true\n  num_recursion: 2\n  sharing: cycle\nmor:\n  enable: true\n"
                                "  type: expert\n  capacity: [1.0, 0.5]\n  router_type: wide_mlp\n  expert:\n"
                                "    router_func: null\n    alpha: 1\n    sampling: aux_router\n    gating: additive\n";
        cv_settings_init(&y);
        CHECK(cv_settings_parse(&y, s, strlen(s), err, sizeof err) == 0 && y.arch == ARCH_MLP && y.func == FUNC_NONE &&
                  y.n_capacity == 2 && y.capacity[1] == 0.5 && y.sampling == SAMPLE_AUX_ROUTER && y.gating == GATE_ADDITIVE,
              "settings: wide_mlp = mlp, router_func null = none, capacity list, aux_router, additive");
    }
    cv_settings_init(&y);
    CHECK(cv_settings_parse_capacity(&y, "1.0, 0.75,0.5", err, sizeof err) == 0 && y.n_capacity == 3 && y.capacity[1] == 0.75,
          "settings: capacity string with spaces");
    CHECK(cv_settings_parse_capacity(&y, "1.0,,0.5", err, sizeof err) != 0 && cv_settings_parse_capacity(&y, "1.5", err, sizeof err) != 0 &&
              cv_settings_parse_capacity(&y, "", err, sizeof err) != 0 && cv_settings_parse_capacity(&y, "0.5x", err, sizeof err) != 0,
          "settings: bad capacity strings rejected");
}

/* ---- checkpoint readers ------------------------------------------------------------- */

static int same_tensors(const checkpoint *a, const checkpoint *b)
{
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++) {
        const ckpt_tensor *x = &a->t[i], *y = &b->t[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim || x->nbytes != y->nbytes ||
            memcmp(x->shape, y->shape, sizeof x->shape) || memcmp(x->data, y->data, (size_t)x->nbytes))
            return 0;
    }
    return 1;
}

/* Offset of the pickle inside a torch zip: the first local entry is data.pkl,
 * followed by its data descriptor (torch sets the "sizes follow" flag). */
static size_t pickle_span(const uint8_t *b, size_t n, size_t *len)
{
    size_t start, end;
    if (n < 30 || memcmp(b, "PK\x03\x04", 4)) return 0;
    start = 30 + (size_t)(b[26] | b[27] << 8) + (size_t)(b[28] | b[29] << 8);
    for (end = start; end + 4 <= n && memcmp(b + end, "PK\x07\x08", 4) && memcmp(b + end, "PK\x03\x04", 4); end++) {}
    *len = end - start;
    return start;
}

static void test_readers(void)
{
    char err[512], path[256];
    for (size_t i = 0; i < N_VARIANTS; i++) {
        checkpoint a, b;
        int ra, rb;
        snprintf(path, sizeof path, FIX "/%s/hf_bin/pytorch_model.bin", variants[i]);
        ra = ckpt_open(&a, path, err, sizeof err);
        snprintf(path, sizeof path, FIX "/%s/hf_safetensors/model.safetensors", variants[i]);
        rb = ckpt_open(&b, path, err, sizeof err);
        CHECK(ra == 0 && rb == 0 && a.format == CKPT_TORCH && b.format == CKPT_SAFETENSORS && a.n > 50 && same_tensors(&a, &b),
              "readers: %s: .bin and .safetensors hold the same %zu tensors", variants[i], a.n);
        if (ra == 0) ckpt_free(&a);
        if (rb == 0) ckpt_free(&b);
    }

    /* corrupted copies of the fp32 middle-cycle fixture, both formats */
    {
        size_t n;
        uint8_t *orig = read_all(FIX "/expert_mc3_fix_perturbed/hf_safetensors/model.safetensors", &n), *buf;
        size_t hlen = orig ? (size_t)(orig[0] | orig[1] << 8 | orig[2] << 16) + 8 : 0;
        int all_rejected = 1, accepted = 0;
        checkpoint c;
        buf = malloc(n ? n : 1);
        for (size_t cut = 0; orig && cut < n; cut += cut < hlen + 64 ? 1 : 997) {
            memcpy(buf, orig, cut);
            if (ckpt_parse(&c, buf, cut, err, sizeof err) == 0) { all_rejected = 0; ckpt_free(&c); }
        }
        CHECK(orig && all_rejected, "safetensors: every truncation (each byte of the header, then every 997th) is rejected");
        /* each corrupted copy is rejected with a reason or read into tensors that keep checkpoint.h's promises */
        int unexplained = 0, broken = 0;
        for (int k = 0; orig && k < 1500; k++) {
            memcpy(buf, orig, n);
            for (int f = 1 + (int)(rnd() % 3); f--;) {
                size_t at = k < 1200 ? rnd() % hlen : rnd() % n;
                buf[at] = (uint8_t)rnd();
            }
            err[0] = '\0';
            if (ckpt_parse(&c, buf, n, err, sizeof err) == 0) { accepted++; broken += !ckpt_sound(&c, buf, n); ckpt_free(&c); }
            else unexplained += err[0] == '\0';
        }
        CHECK(orig && !unexplained && !broken, "safetensors: 1500 corrupted copies: %d read, all sound (%d not), the rest "
              "rejected with a reason (%d without)", accepted, broken, unexplained);
        {
            /* a dtype the converter does not take */
            const char *h = "{\"x\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
            uint8_t f[256] = {0};
            size_t hl = strlen(h);
            f[0] = (uint8_t)hl;
            memcpy(f + 8, h, hl);
            CHECK(ckpt_parse(&c, f, 8 + hl + 8, err, sizeof err) != 0 && strstr(err, "I64"), "safetensors: I64 rejected (%s)", err);
            h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}";
            hl = strlen(h);
            f[0] = (uint8_t)hl;
            memcpy(f + 8, h, hl);
            CHECK(ckpt_parse(&c, f, 8 + hl + 8, err, sizeof err) != 0, "safetensors: byte length != shape x dtype rejected (%s)", err);
            h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
            hl = strlen(h);
            f[0] = (uint8_t)hl;
            memcpy(f + 8, h, hl);
            CHECK(ckpt_parse(&c, f, 8 + hl + 8, err, sizeof err) != 0 && strstr(err, "twice"), "safetensors: duplicate names rejected");
        }
        if (orig) CHECK(fuzz_text((const char *)orig + 8, hlen - 8, 0, 2000) == 0, "json: every truncation and 2000 corruptions of a safetensors header parse or are rejected with a reason");
        free(buf);
        free(orig);
    }
    {
        size_t n, plen = 0, pstart;
        uint8_t *orig = read_all(FIX "/expert_mc3_fix_perturbed/hf_bin/pytorch_model.bin", &n), *buf;
        int all_rejected = 1, accepted = 0;
        checkpoint c;
        pk_state_dict sd;
        buf = malloc(n ? n : 1);
        for (size_t cut = 0; orig && cut < n; cut += cut + 2000 > n ? 1 : 613) {
            memcpy(buf, orig, cut);
            if (ckpt_parse(&c, buf, cut, err, sizeof err) == 0) { all_rejected = 0; ckpt_free(&c); }
        }
        CHECK(orig && all_rejected, "torch zip: every truncation (every 613th byte, then each of the last 2000) is rejected");
        int unexplained = 0, broken = 0;
        for (int k = 0; orig && k < 400; k++) {
            memcpy(buf, orig, n);
            for (int f = 1 + (int)(rnd() % 3); f--;) {
                size_t at = k < 200 ? n - 1 - rnd() % 8000 : rnd() % n;   /* the directory, or anywhere */
                buf[at] = (uint8_t)rnd();
            }
            err[0] = '\0';
            if (ckpt_parse(&c, buf, n, err, sizeof err) == 0) { accepted++; broken += !ckpt_sound(&c, buf, n); ckpt_free(&c); }
            else unexplained += err[0] == '\0';
        }
        CHECK(orig && !unexplained && !broken, "torch zip: 400 corrupted copies: %d read, all sound (%d not), the rest "
              "rejected with a reason (%d without)", accepted, broken, unexplained);
        if (orig) {
            /* a flipped data byte is caught by the CRC */
            memcpy(buf, orig, n);
            buf[n / 2] ^= 0x40;
            CHECK(ckpt_parse(&c, buf, n, err, sizeof err) != 0 && strstr(err, "CRC"), "torch zip: corrupt data fails its CRC (%s)", err);
        }
        pstart = orig ? pickle_span(orig, n, &plen) : 0;
        CHECK(pstart && plen > 1000, "torch zip: found data.pkl (%zu bytes)", plen);
        if (pstart) {
            int ok = pickle_load_state_dict(orig + pstart, plen, &sd, err, sizeof err) == 0;
            CHECK(ok && sd.n == 78 && sd.t[0].ndim == 2 && sd.t[0].shape[0] == 256, "pickle: the state dict has 78 tensors");
            if (ok) pk_state_dict_free(&sd);
            accepted = 0;
            for (size_t cut = 0; cut < plen; cut++)
                if (pickle_load_state_dict(orig + pstart, cut, &sd, err, sizeof err) == 0) { accepted++; pk_state_dict_free(&sd); }
            CHECK(accepted == 0, "pickle: every truncation is rejected");
            /* A corrupted pickle is either rejected with a reason or read
             * into tensors that keep pickle.h's promises (the converter
             * trusts them to index the storages). */
            unexplained = broken = accepted = 0;
            for (int k = 0; k < 5000; k++) {
                memcpy(buf, orig + pstart, plen);
                for (int f = 1 + (int)(rnd() % 3); f--;) buf[rnd() % plen] = (uint8_t)rnd();
                err[0] = '\0';
                if (pickle_load_state_dict(buf, plen, &sd, err, sizeof err) != 0) {
                    unexplained += strncmp(err, "pickle: ", 8) != 0;
                    continue;
                }
                accepted++;
                for (size_t i = 0; i < sd.n; i++) {
                    const pk_tensor *t = &sd.t[i];
                    uint64_t numel = 1;
                    for (int d = 0; d < t->ndim && d < CKPT_MAX_DIMS; d++) numel *= t->shape[d];
                    broken += !t->name || !t->storage_key || t->ndim < 0 || t->ndim > CKPT_MAX_DIMS ||
                              numel != t->numel || (t->numel && t->offset + t->numel > t->storage_numel) ||
                              (t->dtype != GGML_F32 && t->dtype != GGML_F16 && t->dtype != GGML_BF16);
                }
                pk_state_dict_free(&sd);
            }
            CHECK(unexplained == 0 && broken == 0,
                  "pickle: 5000 corrupted pickles: %d read, all with sound tensors (%d not), the rest rejected with a reason (%d without)",
                  accepted, broken, unexplained);
        }
        free(buf);
        free(orig);
    }
    {
        /* hand-made pickles */
        static const uint8_t evil[] = "\x80\x02" "cos\nsystem\n" "X\x02\x00\x00\x00ls" "\x85R.";
        static const uint8_t noncontig[] =
            "\x80\x02}(X\x01\x00\x00\x00w" "ctorch._utils\n_rebuild_tensor_v2\n"
            "((X\x07\x00\x00\x00storage" "ctorch\nFloatStorage\n" "X\x01\x00\x00\x00" "0" "X\x03\x00\x00\x00" "cpu" "K\x06tQ"
            "K\x00K\x02K\x03\x86K\x01K\x02\x86\x89" "ccollections\nOrderedDict\n)RtRu.";
        static const uint8_t contig[] =
            "\x80\x02}(X\x01\x00\x00\x00w" "ctorch._utils\n_rebuild_tensor_v2\n"
            "((X\x07\x00\x00\x00storage" "ctorch\nBFloat16Storage\n" "X\x01\x00\x00\x00" "0" "X\x03\x00\x00\x00" "cpu" "K\x06tQ"
            "K\x00K\x02K\x03\x86K\x03K\x01\x86\x89" "ccollections\nOrderedDict\n)RtRu.";
        pk_state_dict sd;
        CHECK(pickle_load_state_dict(evil, sizeof evil - 1, &sd, err, sizeof err) != 0 && strstr(err, "os.system"),
              "pickle: a GLOBAL outside the whitelist is refused, never called (%s)", err);
        CHECK(pickle_load_state_dict(noncontig, sizeof noncontig - 1, &sd, err, sizeof err) != 0 && strstr(err, "contiguous"),
              "pickle: a non-contiguous tensor is refused (%s)", err);
        if (CHECK(pickle_load_state_dict(contig, sizeof contig - 1, &sd, err, sizeof err) == 0 && sd.n == 1 &&
                      sd.t[0].dtype == GGML_BF16 && sd.t[0].shape[1] == 3 && strcmp(sd.t[0].storage_key, "0") == 0,
                  "pickle: a hand-made bf16 state dict"))
            pk_state_dict_free(&sd);
    }
    {
        /* ZIP64 records (central-directory extra fields, ZIP64 end record) and
         * a compressed entry, written by Python's zipfile */
        checkpoint c;
        int rc = ckpt_open(&c, "tests/data/convert/torch_zip64.bin", err, sizeof err);
        uint16_t want[6] = {0x3f80, 0x3f81, 0x3f82, 0x3f83, 0x3f84, 0x3f85};
        CHECK(rc == 0 && c.n == 1 && c.t[0].dtype == GGML_BF16 && c.t[0].ndim == 2 && c.t[0].shape[0] == 2 &&
                  c.t[0].shape[1] == 3 && c.t[0].nbytes == 12 && memcmp(c.t[0].data, want, 12) == 0,
              "torch zip: a ZIP64 archive is read (%s)", rc ? err : "ok");
        if (rc == 0) ckpt_free(&c);
        rc = ckpt_open(&c, "tests/data/convert/torch_deflated.bin", err, sizeof err);
        CHECK(rc != 0 && strstr(err, "compressed"), "torch zip: a compressed entry is refused clearly (%s)", err);
        if (rc == 0) ckpt_free(&c);
    }
    {
        checkpoint c;
        static const uint8_t legacy[] = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
        CHECK(ckpt_parse(&c, legacy, sizeof legacy - 1, err, sizeof err) != 0 && strstr(err, "legacy"),
              "checkpoint: legacy torch format refused clearly (%s)", err);
    }
}

/* ---- the GGUF writer ------------------------------------------------------------------ */

static void test_writer(void)
{
    gguf_writer *w = gguf_writer_new();
    float a[3] = {1, 2, 3};
    uint16_t h[5] = {1, 2, 3, 4, 5};
    uint64_t d1[1] = {3}, d2[2] = {5, 1};
    const char *strs[2] = {"x", ""};
    int32_t arr[2] = {-1, 7};
    char err[256];
    FILE *f = tmpfile();
    size_t n;
    uint8_t *img;
    ginfo g;
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "u", 7);
    gguf_writer_add_arr_i32(w, "arr", arr, 2);
    gguf_writer_add_arr_str(w, "strs", strs, 2);
    gguf_writer_add_bool(w, "b", 1);
    gguf_writer_add_tensor(w, "a", GGML_F32, 1, d1, a, 12);
    gguf_writer_add_tensor(w, "h", GGML_F16, 2, d2, h, 10);
    CHECK(f && gguf_writer_write(w, f, err, sizeof err) == 0, "writer: writes");
    img = file_image(f, &n);
    g_parse(img, n, &g);
    CHECK(g.ok && g.n_kv == 5 && g.n_t == 2 && g.data_start % 32 == 0 && g.off[1] == 32 &&
              g_i32_array_is(&g, img, "arr", arr, 2) && g_u32_is(&g, img, "u", 7) && g_bool_is(&g, img, "b", 1) &&
              memcmp(img + g.data_start + 32, h, 10) == 0 && n == g.data_start + 64,
          "writer: header, 32-byte aligned offsets, padding, values read back");
    free(img);
    fclose(f);
    gguf_writer_add_u32(w, "u", 8);
    f = tmpfile();
    CHECK(gguf_writer_write(w, f, err, sizeof err) != 0 && strstr(err, "twice"), "writer: a duplicate key is an error (%s)", err);
    fclose(f);
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "a", GGML_F32, 1, d1, a, 8);
    f = tmpfile();
    CHECK(gguf_writer_write(w, f, err, sizeof err) != 0, "writer: a byte count that does not match the dims is an error");
    fclose(f);
    gguf_writer_free(w);
}

/* ---- conversion of the fixtures -------------------------------------------------------- */

static uint8_t *convert_dir(const char *dir, const char *mor_config, int outtype, char *err, size_t errcap, size_t *n)
{
    convert_opts o;
    FILE *f = tmpfile();
    uint8_t *img = NULL;
    convert_opts_init(&o);
    o.dir = dir;
    o.mor_config = mor_config;
    o.outtype = outtype;
    *n = 0;
    if (!f) return NULL;
    if (convert_model(&o, f, NULL, 0, err, errcap) == 0) img = file_image(f, n);
    fclose(f);
    return img;
}

static void test_convert_fixtures(void)
{
    char err[512], dir[256];
    static const int32_t map_mc[8] = {0, 1, 2, 1, 2, 1, 2, 3}, untied[8] = {0, 1, 2, 3, 4, 5, 6, 7}, map_cy[6] = {0, 1, 2, 0, 1, 2};
    for (size_t i = 0; i < N_VARIANTS; i++) {
        size_t nb, ns, nj;
        uint8_t *ib, *is, *ij;
        ginfo g;
        const char *v = variants[i];
        /* the variants saved by the older official code (53d0fee) have attention untied */
        int cycle = strstr(v, "cycle2") != NULL, untied_attn = strcmp(v, "expert_mc3_perturbed") == 0 ||
                                                             strcmp(v, "expert_mc3_bf16_perturbed") == 0 || cycle;
        int L = cycle ? 6 : 8;
        snprintf(dir, sizeof dir, FIX "/%s/hf_bin", v);
        ib = convert_dir(dir, NULL, OUTTYPE_AUTO, err, sizeof err, &nb);
        CHECK(ib != NULL, "convert: %s from pytorch_model.bin (%s)", v, ib ? "ok" : err);
        snprintf(dir, sizeof dir, FIX "/%s/hf_safetensors", v);
        is = convert_dir(dir, NULL, OUTTYPE_AUTO, err, sizeof err, &ns);
        CHECK(is != NULL, "convert: %s from model.safetensors (%s)", v, is ? "ok" : err);
        CHECK(ib && is && nb == ns && memcmp(ib, is, nb) == 0, "convert: %s: both formats give byte-identical GGUF files", v);
        snprintf(dir, sizeof dir, FIX "/%s/mor_config.json", v);
        {
            char d2[256];
            snprintf(d2, sizeof d2, FIX "/%s/hf_safetensors", v);
            ij = convert_dir(d2, dir, OUTTYPE_AUTO, err, sizeof err, &nj);
        }
        CHECK(ij && is && nj == ns && memcmp(ij, is, ns) == 0, "convert: %s: --mor-config mor_config.json gives the same file", v);
        if (is) {
            g_parse(is, ns, &g);
            CHECK(g.ok, "convert: %s: the GGUF is well formed (offsets aligned, in the file)", v);
            CHECK(g_str_is(&g, is, "general.architecture", "mor") && g_u32_is(&g, is, "mor.format_version", 1) &&
                      g_u32_is(&g, is, "mor.vocab_size", 256) && g_u32_is(&g, is, "mor.embedding_length", 64) &&
                      g_u32_is(&g, is, "mor.attention.head_count_kv", 2) && g_u32_is(&g, is, "mor.attention.key_length", 16),
                  "convert: %s: dimensions", v);
            if (cycle)
                CHECK(g_i32_array_is(&g, is, "mor.layer_map", map_cy, 6) && g_u32_is(&g, is, "mor.recursion.count", 2) &&
                          g_u32_is(&g, is, "mor.recursion.base_depth", 3) && g_u32_is(&g, is, "mor.recursion.prelude", 0) &&
                          g_str_is(&g, is, "mor.recursion.sharing", "cycle"),
                      "convert: %s: cycle map [0,1,2,0,1,2], N_r 2, K 3, no prelude", v);
            else
                CHECK(g_i32_array_is(&g, is, "mor.layer_map", map_mc, 8) && g_u32_is(&g, is, "mor.recursion.count", 3) &&
                          g_u32_is(&g, is, "mor.recursion.base_depth", 2) && g_u32_is(&g, is, "mor.recursion.prelude", 1) &&
                          g_u32_is(&g, is, "mor.recursion.coda", 1),
                      "convert: %s: middle-cycle map [0,1,2,1,2,1,2,3]", v);
            if (untied_attn)
                CHECK(g_i32_array_is(&g, is, "mor.layer_map.attn_q", untied, (size_t)L) &&
                          g_i32_array_is(&g, is, "mor.layer_map.attn_output", untied, (size_t)L) &&
                          !g_kv(&g, "mor.layer_map.ffn_down", &(uint32_t){0}, &(const uint8_t *){NULL}, is) &&
                          !g_kv(&g, "mor.layer_map.attn_norm", &(uint32_t){0}, &(const uint8_t *){NULL}, is) &&
                          g_bool_is(&g, is, "mor.attention.tied_across_recursions", 0) &&
                          g_has_tensor(&g, cycle ? "blk.5.attn_q.weight" : "blk.7.attn_q.weight") &&
                          !g_has_tensor(&g, cycle ? "blk.3.ffn_up.weight" : "blk.4.ffn_up.weight"),
                      "convert: %s: untied attention gets per-role maps [0..L-1], FFN and norms keep the shared map", v);
            else
                CHECK(g_bool_is(&g, is, "mor.attention.tied_across_recursions", 1) && !g_kv(&g, "mor.layer_map.attn_q", &(uint32_t){0}, &(const uint8_t *){NULL}, is) &&
                          !g_has_tensor(&g, cycle ? "blk.3.attn_q.weight" : "blk.4.attn_q.weight"),
                      "convert: %s: tied attention, one map, %d stored blocks", v, cycle ? 3 : 4);
            CHECK(!g_has_tensor(&g, "output.weight") && g_has_tensor(&g, "token_embd.weight") && g_has_tensor(&g, "output_norm.weight"),
                  "convert: %s: lm_head equal to the embedding is not stored", v);
            if (strstr(v, "token"))
                CHECK(g_str_is(&g, is, "mor.router.type", "token") && g_str_is(&g, is, "mor.router.func", "softmax") &&
                          g_has_tensor(&g, "rtr.weight") && g.dims[g_has_tensor(&g, "rtr.weight") - 1][1] == 3,
                      "convert: %s: token-choice router [d, 3]", v);
            else
                CHECK(g_str_is(&g, is, "mor.router.type", "expert") && g_str_is(&g, is, "mor.router.func", "sigmoid") &&
                          g_has_tensor(&g, cycle ? "rtr.1.weight" : "rtr.2.weight") && g_str_is(&g, is, "mor.router.sampling", "aux_loss"),
                      "convert: %s: expert-choice routers, one per recursion", v);
            CHECK(g_bool_is(&g, is, "mor.kv.shared", strstr(v, "kvshare") != NULL), "convert: %s: mor.kv.shared", v);
            if (strstr(v, "bf16")) {
                int t = g_has_tensor(&g, "blk.0.ffn_up.weight"), nt = g_has_tensor(&g, "blk.0.ffn_norm.weight"),
                    rt = g_has_tensor(&g, "rtr.0.weight");
                CHECK(t && g.ttype[t - 1] == GGML_BF16 && nt && g.ttype[nt - 1] == GGML_F32 && rt && g.ttype[rt - 1] == GGML_F32,
                      "convert: %s: --outtype auto keeps BF16 matrices, norms and routers F32", v);
            }
        }
        free(ib);
        free(is);
        free(ij);
    }

    /* outtypes */
    {
        size_t n32, n16, nbf, nb;
        uint8_t *f32 = convert_dir(FIX "/expert_mc3_bf16_perturbed/hf_bin", NULL, GGML_F32, err, sizeof err, &n32);
        uint8_t *bf = convert_dir(FIX "/expert_mc3_bf16_perturbed/hf_bin", NULL, OUTTYPE_AUTO, err, sizeof err, &nb);
        uint8_t *f16 = convert_dir(FIX "/expert_mc3_fix_perturbed/hf_bin", NULL, GGML_F16, err, sizeof err, &n16);
        uint8_t *b16 = convert_dir(FIX "/expert_mc3_fix_perturbed/hf_safetensors", NULL, GGML_BF16, err, sizeof err, &nbf);
        ginfo g32, gb, g16, gbf;
        if (f32 && bf && f16 && b16) {
            int i32, ib, same = 1;
            g_parse(f32, n32, &g32);
            g_parse(bf, nb, &gb);
            g_parse(f16, n16, &g16);
            g_parse(b16, nbf, &gbf);
            i32 = g_has_tensor(&g32, "blk.1.ffn_gate.weight");
            ib = g_has_tensor(&gb, "blk.1.ffn_gate.weight");
            CHECK(g32.ok && gb.ok && i32 && ib && g32.ttype[i32 - 1] == GGML_F32, "convert: --outtype f32 of a bf16 checkpoint");
            for (int k = 0; i32 && ib && k < 64 * 128; k++) {
                uint16_t hb;
                float fv;
                memcpy(&hb, bf + gb.data_start + gb.off[ib - 1] + 2 * k, 2);
                memcpy(&fv, f32 + g32.data_start + g32.off[i32 - 1] + 4 * k, 4);
                if (bf16_to_f32(hb) != fv) same = 0;
            }
            CHECK(same, "convert: bf16 -> f32 widening is exact");
            i32 = g_has_tensor(&g16, "blk.3.ffn_down.weight");
            CHECK(g16.ok && i32 && g16.ttype[i32 - 1] == GGML_F16 && g_has_tensor(&g16, "blk.0.attn_norm.weight") &&
                      g16.ttype[g_has_tensor(&g16, "blk.0.attn_norm.weight") - 1] == GGML_F32,
                  "convert: --outtype f16: matrices F16, norms F32");
            i32 = g_has_tensor(&gbf, "token_embd.weight");
            CHECK(gbf.ok && i32 && gbf.ttype[i32 - 1] == GGML_BF16 && g_i32_array_is(&gbf, b16, "mor.layer_map", map_mc, 8),
                  "convert: --outtype bf16: embedding BF16, still 4 blocks");
        } else {
            CHECK(0, "convert: outtypes (%s)", err);
        }
        free(f32);
        free(bf);
        free(f16);
        free(b16);
    }
}

/* ---- synthetic checkpoints ------------------------------------------------------------- */

/* dims of the synthetic models: d 8, F 16, H 2, H_kv 1, hd 4, V 16 */
enum { SD = 8, SF = 16, SV = 16 };

typedef struct {
    char name[96];
    int ndim;
    uint64_t shape[2];
    uint32_t seed;   /* equal seeds, equal values (tied) */
} st_entry;

typedef struct {
    st_entry e[256];
    int n;
} st_list;

static void st_add(st_list *l, const char *name, int ndim, uint64_t a, uint64_t b, uint32_t seed)
{
    st_entry *e = &l->e[l->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->ndim = ndim;
    e->shape[0] = a;
    e->shape[1] = b;
    e->seed = seed;
}

static void st_layer(st_list *l, const char *prefix, uint32_t seed)
{
    char n[96];
    static const char *const roles[9] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                         "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                         "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
    static const uint64_t shp[9][3] = {{1, SD, 0}, {2, 8, SD}, {2, 4, SD}, {2, 4, SD}, {2, SD, 8},
                                       {1, SD, 0}, {2, SF, SD}, {2, SF, SD}, {2, SD, SF}};
    for (int r = 0; r < 9; r++) {
        snprintf(n, sizeof n, "%s%s", prefix, roles[r]);
        st_add(l, n, (int)shp[r][0], shp[r][1], shp[r][2], seed * 16 + (uint32_t)r);
    }
}

static float val_of(uint32_t seed, uint64_t i)
{
    uint32_t x = seed * 2654435761u ^ (uint32_t)i * 40503u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    return (float)((int)(x % 2001) - 1000) / 1000.0f;
}

/* Write dir/model.safetensors (F32) and dir/config.json. */
static int write_model(const char *dir, const st_list *l, int n_layers, const char *extra_config)
{
    char path[256], head[32768];
    size_t hl = 0;
    uint64_t off = 0;
    FILE *f;
    mkdir(dir, 0755);
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < l->n; i++) {
        uint64_t numel = l->e[i].shape[0] * (l->e[i].ndim == 2 ? l->e[i].shape[1] : 1);
        if (l->e[i].ndim == 2)
            hl += (size_t)snprintf(head + hl, sizeof head - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%llu,%llu],\"data_offsets\":[%llu,%llu]}",
                                   l->e[i].name, (unsigned long long)l->e[i].shape[0], (unsigned long long)l->e[i].shape[1],
                                   (unsigned long long)off, (unsigned long long)(off + 4 * numel));
        else
            hl += (size_t)snprintf(head + hl, sizeof head - hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
                                   l->e[i].name, (unsigned long long)l->e[i].shape[0], (unsigned long long)off,
                                   (unsigned long long)(off + 4 * numel));
        off += 4 * numel;
    }
    hl += (size_t)snprintf(head + hl, sizeof head - hl, "}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    if (!f) return -1;
    for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, f);
    fwrite(head, 1, hl, f);
    for (int i = 0; i < l->n; i++) {
        uint64_t numel = l->e[i].shape[0] * (l->e[i].ndim == 2 ? l->e[i].shape[1] : 1);
        for (uint64_t k = 0; k < numel; k++) {
            float v = val_of(l->e[i].seed, k);
            fwrite(&v, 4, 1, f);
        }
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(head, sizeof head,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 4, \"num_hidden_layers\": %d, "
             "\"vocab_size\": %d, \"rms_norm_eps\": 1e-06, \"rope_theta\": 100000.0, \"max_position_embeddings\": 64, "
             "\"bos_token_id\": 0, \"eos_token_id\": [2, 1]%s}",
             SD, SF, n_layers, SV, extra_config ? extra_config : ", \"tie_word_embeddings\": true");
    return write_text(path, head);
}

static uint8_t *convert_opts_img(const convert_opts *o, char *err, size_t errcap, size_t *n)
{
    FILE *f = tmpfile();
    uint8_t *img = NULL;
    *n = 0;
    if (f && convert_model(o, f, NULL, 0, err, errcap) == 0) img = file_image(f, n);
    if (f) fclose(f);
    return img;
}

static void rm_model(const char *dir)
{
    char p[256];
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

static void test_synthetic(void)
{
    char err[512], pre[96];
    const char *dir = tmp_path("m");
    st_list l;
    convert_opts o;
    uint8_t *img;
    size_t n;
    ginfo g;

    /* a plain Llama: 4 unique layers, tied embeddings, no MoR config */
    l.n = 0;
    st_add(&l, "model.embed_tokens.weight", 2, SV, SD, 1);
    st_add(&l, "model.norm.weight", 1, SD, 0, 2);
    for (int i = 0; i < 4; i++) {
        snprintf(pre, sizeof pre, "model.layers.%d.", i);
        st_layer(&l, pre, 10 + (uint32_t)i);
    }
    write_model(dir, &l, 4, NULL);
    convert_opts_init(&o);
    o.dir = dir;
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(img != NULL, "synthetic: plain Llama converts (%s)", img ? "ok" : err);
    if (img) {
        static const int32_t id4[4] = {0, 1, 2, 3};
        g_parse(img, n, &g);
        CHECK(g.ok && g_i32_array_is(&g, img, "mor.layer_map", id4, 4) && g_u32_is(&g, img, "mor.recursion.count", 1) &&
                  g_u32_is(&g, img, "mor.recursion.base_depth", 4) && g_u32_is(&g, img, "mor.recursion.prelude", 0) &&
                  g_str_is(&g, img, "mor.router.type", "none") && g_str_is(&g, img, "mor.recursion.sharing", "none") &&
                  !g_kv(&g, "mor.router.arch", &(uint32_t){0}, &(const uint8_t *){NULL}, img) && !g_has_tensor(&g, "output.weight") &&
                  g_u32_is(&g, img, "mor.context_length", 64),
              "synthetic: plain Llama: identity map, N_r 1, K L, router none, tied head");
    }
    free(img);

    /* the same with a distinct lm_head and tie_word_embeddings false */
    st_add(&l, "lm_head.weight", 2, SV, SD, 3);
    write_model(dir, &l, 4, ", \"tie_word_embeddings\": false");
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) g_parse(img, n, &g);
    CHECK(img && g.ok && g_has_tensor(&g, "output.weight"), "synthetic: an untied lm_head is written as output.weight");
    free(img);
    /* tie_word_embeddings true but a different lm_head (the official recursive
     * baseline trains it untied): kept as output.weight, with a note */
    write_model(dir, &l, 4, NULL);
    char note[512] = "x";
    o.note = note; o.notecap = sizeof note;
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) g_parse(img, n, &g);
    CHECK(img && g.ok && g_has_tensor(&g, "output.weight") && strstr(note, "tie_word_embeddings"),
          "synthetic: lm_head != embedding with tied embeddings is kept as output.weight, noted (%s)", img ? note : err);
    free(img);
    o.tie_lm_head = 1;   /* stock transformers tying */
    note[0] = 'x';
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) g_parse(img, n, &g);
    CHECK(img && g.ok && !g_has_tensor(&g, "output.weight") && !note[0],
          "synthetic: with tie_lm_head the same checkpoint is tied, no note (%s)", img ? note : err);
    free(img);
    o.tie_lm_head = 0; o.note = NULL; o.notecap = 0;
    l.n--;
    write_model(dir, &l, 4, ", \"tie_word_embeddings\": false");
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "lm_head"), "synthetic: no lm_head and untied embeddings is refused (%s)", err);
    free(img);
    write_model(dir, &l, 5, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "num_hidden_layers"), "synthetic: config layer count != checkpoint is refused (%s)", err);
    free(img);

    /* the recursive baseline: layers 2,3 are copies of 0,1 (cycle, N_r 2) */
    l.n = 2;
    for (int i = 0; i < 4; i++) {
        snprintf(pre, sizeof pre, "model.layers.%d.", i);
        st_layer(&l, pre, 10 + (uint32_t)(i % 2));
    }
    write_model(dir, &l, 4, NULL);
    o.flags.num_recursion = 2;
    o.flags.sharing = SHARE_CYCLE;
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) {
        static const int32_t cyc[4] = {0, 1, 0, 1};
        g_parse(img, n, &g);
        CHECK(g.ok && g_i32_array_is(&g, img, "mor.layer_map", cyc, 4) && g_u32_is(&g, img, "mor.recursion.count", 2) &&
                  g_u32_is(&g, img, "mor.recursion.base_depth", 2) && g_str_is(&g, img, "mor.recursion.sharing", "cycle") &&
                  g_str_is(&g, img, "mor.router.type", "none") && !g_has_tensor(&g, "blk.2.ffn_up.weight"),
              "synthetic: recursive baseline (--num-recursion 2 --sharing cycle): map [0,1,0,1]");
    } else {
        CHECK(0, "synthetic: recursive baseline converts (%s)", err);
    }
    free(img);
    o.flags.sharing = SHARE_MIDDLE_CYCLE;
    o.flags.num_recursion = 3;
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "cannot be"), "synthetic: 4 layers cannot be middle_cycle-shared over 3 recursions (%s)", err);
    free(img);
    cv_settings_init(&o.flags);

    /* token-choice, cycle sharing, MLP router, loss-free bias */
    l.n = 2;
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 2; j++) {
            snprintf(pre, sizeof pre, "model.layers.0.block_list.%d.%d.", r, j);
            st_layer(&l, pre, 10 + (uint32_t)j);
        }
    st_add(&l, "model.layers.0.mor_router.router.0.weight", 2, 2 * SD, SD, 5);
    st_add(&l, "model.layers.0.mor_router.router.2.weight", 2, 2, 2 * SD, 6);
    st_add(&l, "model.layers.0.router_bias", 1, 2, 0, 7);
    write_model(dir, &l, 4, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "--mor-config"), "synthetic: a MoR checkpoint without MoR settings asks for them (%s)", err);
    free(img);
    o.flags.func = FUNC_SOFTMAX;
    o.flags.have_alpha = 1;
    o.flags.alpha = 1.0;
    o.flags.balancing = BAL_LOSS_FREE;
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) {
        static const int32_t cyc[4] = {0, 1, 0, 1};
        const uint8_t *v;
        uint32_t t;
        int fc2;
        g_parse(img, n, &g);
        fc2 = g_has_tensor(&g, "rtr.fc2.weight");
        CHECK(g.ok && g_i32_array_is(&g, img, "mor.layer_map", cyc, 4) && g_str_is(&g, img, "mor.router.type", "token") &&
                  g_str_is(&g, img, "mor.router.arch", "mlp") && g_str_is(&g, img, "mor.recursion.sharing", "cycle") &&
                  g_has_tensor(&g, "rtr.fc1.weight") && fc2 && g.dims[fc2 - 1][0] == 2 * SD && g.dims[fc2 - 1][1] == 2 &&
                  g_has_tensor(&g, "rtr.bias") && g_kv(&g, "mor.router.capacity", &t, &v, img) && t == 9 && le32(v) == 12 &&
                  le32(v + 4) == 2,
              "synthetic: token-choice cycle: MLP router fc1/fc2 [2d, N_r], rtr.bias, capacity float64[2]");
        if (g_kv(&g, "mor.router.capacity", &t, &v, img)) {
            double c1;
            memcpy(&c1, v + 12 + 8, 8);
            CHECK(c1 == 0.5, "synthetic: default capacity (N_r - r) / N_r");
        }
    } else {
        CHECK(0, "synthetic: token-choice converts (%s)", err);
    }
    free(img);
    o.flags.type = ROUTE_EXPERT;
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "token-choice"), "synthetic: --mor-type expert on a token-choice checkpoint is refused (%s)", err);
    free(img);
    cv_settings_init(&o.flags);

    /* expert-choice, middle-cycle, with aux routers, attention untied in recursion 1 */
    l.n = 2;
    st_layer(&l, "model.layers.0.", 20);
    for (int r = 0; r < 2; r++) {
        for (int j = 0; j < 2; j++) {
            snprintf(pre, sizeof pre, "model.layers.%d.block.%d.", 1 + r, j);
            st_layer(&l, pre, 30 + (uint32_t)j);
            if (r == 1) l.e[l.n - 8].seed += 1000;   /* a different q_proj */
        }
        snprintf(pre, sizeof pre, "model.layers.%d.mor_router.router.weight", 1 + r);
        st_add(&l, pre, 2, 1, SD, 40 + (uint32_t)r);
        snprintf(pre, sizeof pre, "model.layers.%d.mlp_router.router.weight", 1 + r);
        st_add(&l, pre, 2, 1, SD, 50 + (uint32_t)r);
    }
    st_layer(&l, "model.layers.3.", 60);
    write_model(dir, &l, 6, NULL);
    o.flags.func = FUNC_SIGMOID;
    o.flags.have_alpha = 1;
    o.flags.alpha = 0.1;
    img = convert_opts_img(&o, err, sizeof err, &n);
    if (img) {
        static const int32_t mc[6] = {0, 1, 2, 1, 2, 3}, q[6] = {0, 1, 2, 3, 4, 5};
        g_parse(img, n, &g);
        CHECK(g.ok && g_i32_array_is(&g, img, "mor.layer_map", mc, 6) && g_i32_array_is(&g, img, "mor.layer_map.attn_q", q, 6) &&
                  !g_kv(&g, "mor.layer_map.attn_k", &(uint32_t){0}, &(const uint8_t *){NULL}, img) &&
                  g_bool_is(&g, img, "mor.attention.tied_across_recursions", 0) && g_has_tensor(&g, "rtr_aux.1.weight") &&
                  g_str_is(&g, img, "mor.router.sampling", "aux_router"),
              "synthetic: expert middle-cycle: per-role map only for the untied q_proj; aux routers -> rtr_aux.R");
    } else {
        CHECK(0, "synthetic: expert-choice with aux routers converts (%s)", err);
    }
    free(img);
    o.flags.func = FUNC_SOFTMAX;
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "softmax"), "synthetic: expert-choice with softmax is refused (%s)", err);
    free(img);
    o.flags.func = FUNC_SIGMOID;
    o.flags.num_recursion = 3;
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "num_recursion"), "synthetic: --num-recursion disagreeing with the keys is refused (%s)", err);
    free(img);
    o.flags.num_recursion = 0;

    /* bad checkpoints */
    st_add(&l, "model.layers.0.self_attn.rotary_emb.inv_freq", 1, 2, 0, 1);
    write_model(dir, &l, 6, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(img != NULL, "synthetic: rotary_emb.inv_freq buffers are ignored (%s)", img ? "ok" : err);
    free(img);
    l.n--;
    st_add(&l, "model.layers.0.mlp.extra.weight", 1, 2, 0, 1);
    write_model(dir, &l, 6, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "model.layers.0.mlp.extra.weight"), "synthetic: a key outside the grammar is named (%s)", err);
    free(img);
    l.n--;
    st_add(&l, "model.layers.0.self_attn.q_proj.lora_A.default.weight", 2, 2, SD, 1);
    write_model(dir, &l, 6, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "lora_B"), "synthetic: a lora_A without its lora_B is refused (%s)", err);
    free(img);
    l.n--;
    l.e[3].shape[0] = 7;   /* model.layers.0.self_attn.q_proj */
    write_model(dir, &l, 6, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "should have shape"), "synthetic: a wrong shape is refused (%s)", err);
    free(img);
    l.e[3].shape[0] = 8;
    {   /* drop model.layers.2.block.1.mlp.down_proj (overwrite it with the last entry) */
        int last = l.n - 1;
        l.e[last - 11] = l.e[last];
        l.n = last;
    }
    write_model(dir, &l, 6, NULL);
    img = convert_opts_img(&o, err, sizeof err, &n);
    CHECK(!img && strstr(err, "missing"), "synthetic: a missing tensor is named (%s)", err);
    free(img);
    rm_model(dir);
}

/* ---- tokenizer ------------------------------------------------------------------------ */

static int tok_rejects(const char *text, const char *what)
{
    hf_tokenizer t;
    char err[256] = "";
    int rc = hf_tokenizer_parse(&t, text, strlen(text), err, sizeof err);
    if (rc == 0) hf_tokenizer_free(&t);
    return rc != 0 && strstr(err, what) != NULL;
}

/* A SentencePiece-style tokenizer.json (BPE with byte_fallback): <unk> <s>
 * </s>, the 256 byte tokens, a few pieces; normalizer, pre-tokenizer and
 * post-processor as given (JSON text, or "null"). */
static char *spm_json(const char *normalizer, const char *pre, const char *post, int n_bytes, const char *unk)
{
    size_t cap = 1 << 15, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
                          "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
                          "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"model\":{\"type\":\"BPE\","
                          "\"byte_fallback\":true,\"unk_token\":%s,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2",
                          normalizer, pre, post, unk);
    for (int b = 0; b < n_bytes; b++) n += (size_t)snprintf(s + n, cap - n, ",\"<0x%02X>\":%d", b, 3 + b);
    n += (size_t)snprintf(s + n, cap - n, ",\"\u2581\":%d,\"a\":%d,\"\u2581a\":%d},\"merges\":[\"\u2581 a\"]}}",
                          3 + n_bytes, 4 + n_bytes, 5 + n_bytes);
    return s;
}

/* The rules the SentencePiece-style reader takes from a tokenizer.json. */
static void test_spm_tokenizer_json(void)
{
    static const char rep[] = "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}";
    char legacy[256], meta_old[] = "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"add_prefix_space\":true}";
    char split[] = "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\",\"invert\":false}";
    char tp[] = "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
                "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]}";
    snprintf(legacy, sizeof legacy, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\u2581\"},%s]}",
             rep);
    const struct {
        const char *norm, *pre, *prefix, *pre_name;
    } ok[] = {
        { legacy, "null", "prepend", "default" },
        { rep, "null", "never", "default" },
        { rep, split, "never", "default" },
        { "null", meta_old, "always", "metaspace" },
        { "null", "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\",\"split\":false}",
          "first", "default" },
        { "null", "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"add_prefix_space\":false,\"split\":true}",
          "never", "metaspace" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char *j = spm_json(ok[i].norm, ok[i].pre, i == 0 ? tp : "null", 256, "\"<unk>\"");
        hf_tokenizer t;
        char err[256] = "";
        int rc = hf_tokenizer_parse(&t, j, strlen(j), err, sizeof err);
        CHECK(rc == 0 && !strcmp(t.model, "llama") && t.prefix && !strcmp(t.prefix, ok[i].prefix) &&
                  !strcmp(t.pre, ok[i].pre_name),
              "tokenizer.json %zu: model llama, prefix %s, pre %s (%s)", i, ok[i].prefix, ok[i].pre_name, err);
        if (rc == 0) {
            CHECK(t.types[0] == TOKEN_TYPE_UNKNOWN && t.unk == 0 && t.types[1] == TOKEN_TYPE_CONTROL &&
                      t.types[3] == TOKEN_TYPE_BYTE && t.types[258] == TOKEN_TYPE_BYTE && t.types[259] == TOKEN_TYPE_NORMAL,
                  "tokenizer.json %zu: unknown, control, byte and normal types", i);
            if (i == 0) CHECK(t.add_bos == 1 && t.bos == 1, "tokenizer.json: TemplateProcessing <s> $A: BOS <s>, add_bos");
            else CHECK(t.add_bos == -1 && t.bos == -1, "tokenizer.json %zu: no post-processor, no BOS", i);
            hf_tokenizer_free(&t);
        }
        free(j);
    }
    const struct { const char *norm, *pre; int n_bytes; const char *unk, *what; } bad[] = {
        { "{\"type\":\"Lowercase\"}", "null", 256, "\"<unk>\"", "U+2581" },
        { "null", "null", 256, "\"<unk>\"", "U+2581" },
        { "null", "{\"type\":\"ByteLevel\"}", 256, "\"<unk>\"", "U+2581" },
        { rep, "{\"type\":\"Whitespace\"}", 256, "\"<unk>\"", "U+2581" },
        { "null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", 256, "\"<unk>\"", "U+2581" },
        { "null", "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"sometimes\"}", 256,
          "\"<unk>\"", "U+2581" },
        { "null", "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"add_prefix_space\":false,"
          "\"prepend_scheme\":\"always\"}", 256, "\"<unk>\"", "U+2581" },
        { rep, "null", 255, "\"<unk>\"", "255 of the 256" },
        { rep, "null", 256, "\"<nope>\"", "unk_token" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *j = spm_json(bad[i].norm, bad[i].pre, "null", bad[i].n_bytes, bad[i].unk);
        CHECK(tok_rejects(j, bad[i].what), "tokenizer.json: refused (%s), case %zu", bad[i].what, i);
        free(j);
    }
}

static void test_tokenizer(void)
{
    char err[512];
    hf_tokenizer t;
    FILE *f;
    int rc = hf_tokenizer_load(&t, "tests/data/convert/tok_smollm/tokenizer.json", err, sizeof err);
    CHECK(rc == 0, "tokenizer: the SmolLM-style tokenizer.json loads (%s)", rc ? err : "ok");
    if (rc == 0) {
        CHECK(t.n_tokens == 265 && strcmp(t.pre, "smollm") == 0 && t.n_merges == 5 && strcmp(t.merges[2], "Ġt he") == 0 &&
                  strcmp(t.merges[4], "e r") == 0,
              "tokenizer: 265 tokens, pre smollm, merges from strings and pairs");
        CHECK(t.types[0] == TOKEN_TYPE_CONTROL && t.types[2] == TOKEN_TYPE_CONTROL && t.types[3] == TOKEN_TYPE_NORMAL &&
                  t.types[264] == TOKEN_TYPE_USER_DEFINED && strcmp(t.tokens[264], "<custom>") == 0 &&
                  strcmp(t.tokens[3], "!") == 0 && strcmp(t.tokens[261], "Ġthe") == 0,
              "tokenizer: token types (special 3, normal 1, added 4) and texts by id");
        hf_tokenizer_free(&t);
    }
    CHECK(tok_rejects("{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "Unigram"), "tokenizer: non-BPE refused");
    CHECK(tok_rejects("{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "pre_tokenizer"),
          "tokenizer: an unsupported pre-tokenizer refused");
    CHECK(tok_rejects("{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]}}",
                      "gap"),
          "tokenizer: gaps in ids refused");
    CHECK(tok_rejects("{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true},"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "pre_tokenizer"),
          "tokenizer: ByteLevel with add_prefix_space refused");
    CHECK(tok_rejects("{\"normalizer\":{\"type\":\"NFKC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "normalizer"),
          "tokenizer: normalizers other than NFC refused");
    {
        static const char nfc[] = "{\"normalizer\":{\"type\":\"NFC\"},\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                                  "\"add_prefix_space\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}";
        char e2[256] = "";
        hf_tokenizer tn;
        int rn = hf_tokenizer_parse(&tn, nfc, sizeof nfc - 1, e2, sizeof e2);
        CHECK(rn == 0 && tn.normalizer && !strcmp(tn.normalizer, "nfc") && !strcmp(tn.model, "gpt2"),
              "tokenizer: the NFC normalizer (GPT-NeoX) is kept (%s)", e2);
        if (rn == 0) hf_tokenizer_free(&tn);
    }
    CHECK(tok_rejects("{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"ab\"]}}",
                      "merge"),
          "tokenizer: a merge without a space refused");
    {
        static const char gpt2[] = "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                                   "\"trim_offsets\":true,\"use_regex\":true},\"added_tokens\":[{\"id\":2,\"content\":\"<e>\",\"special\":true}],"
                                   "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",\"b\"]]}}";
        rc = hf_tokenizer_parse(&t, gpt2, strlen(gpt2), err, sizeof err);
        CHECK(rc == 0 && strcmp(t.pre, "gpt2") == 0 && t.n_tokens == 3 && t.types[2] == TOKEN_TYPE_CONTROL &&
                  strcmp(t.merges[0], "a b") == 0,
              "tokenizer: a lone ByteLevel is pre gpt2; added token fills its id");
        if (rc == 0) hf_tokenizer_free(&t);
    }
    {
        size_t n;
        uint8_t *text = read_all("tests/data/convert/tok_smollm/tokenizer.json", &n);
        if (text) CHECK(fuzz_text((const char *)text, n, 0, 1000) == 0, "json: every truncation and 1000 corruptions of tokenizer.json parse or are rejected with a reason");
        free(text);
    }

    /* vocab-only: bos/eos from tokenizer_config.json (there is no config.json) */
    f = tmpfile();
    rc = f ? convert_vocab_only("tests/data/convert/tok_smollm", NULL, f, NULL, 0, err, sizeof err) : -1;
    CHECK(rc == 0, "vocab-only: converts (%s)", rc ? err : "ok");
    if (rc == 0) {
        size_t n;
        uint8_t *img = file_image(f, &n);
        ginfo g;
        g_parse(img, n, &g);
        CHECK(g.ok && g.n_t == 0 && g_str_is(&g, img, "general.architecture", "mor") && g_u32_is(&g, img, "mor.format_version", 1) &&
                  g_u32_is(&g, img, "mor.vocab_size", 265) && g_str_is(&g, img, "tokenizer.ggml.model", "gpt2") &&
                  g_str_is(&g, img, "tokenizer.ggml.pre", "smollm") && g_u32_is(&g, img, "tokenizer.ggml.bos_token_id", 0) &&
                  g_u32_is(&g, img, "tokenizer.ggml.eos_token_id", 2) &&
                  !g_kv(&g, "tokenizer.ggml.add_bos_token", &(uint32_t){0}, &(const uint8_t *){NULL}, img),
              "vocab-only: keys (architecture, vocab_size 265, model gpt2, pre smollm, bos 0, eos 2), no tensors");
        free(img);
    }
    if (f) fclose(f);

    /* a model directory with a tokenizer: ids from config.json win */
    {
        const char *dir = tmp_path("tk");
        st_list l;
        convert_opts o;
        size_t n;
        uint8_t *img, *tj;
        char pre[64];
        l.n = 0;
        st_add(&l, "model.embed_tokens.weight", 2, SV, SD, 1);
        st_add(&l, "model.norm.weight", 1, SD, 0, 2);
        for (int i = 0; i < 2; i++) {
            snprintf(pre, sizeof pre, "model.layers.%d.", i);
            st_layer(&l, pre, 10 + (uint32_t)i);
        }
        write_model(dir, &l, 2, NULL);
        convert_opts_init(&o);
        o.dir = dir;
        o.tokenizer = "tests/data/convert/tok_smollm/tokenizer.json";
        img = convert_opts_img(&o, err, sizeof err, &n);
        CHECK(!img && strstr(err, "265 tokens"), "tokenizer: more tokens than the model's vocabulary is refused (%s)", err);
        free(img);
        tj = read_all("tests/data/convert/tok_smollm/tokenizer.json", &n);
        if (tj) {
            /* cut the vocabulary down to the 16 ids the synthetic model has */
            static const char small[] = "{\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                                        "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2},\"merges\":[\"a b\"]}}";
            write_text(tmp_path("tk/tokenizer.json"), small);
            o.tokenizer = NULL;
            img = convert_opts_img(&o, err, sizeof err, &n);
            if (img) {
                ginfo g;
                g_parse(img, n, &g);
                CHECK(g.ok && g_str_is(&g, img, "tokenizer.ggml.pre", "gpt2") && g_u32_is(&g, img, "tokenizer.ggml.eos_token_id", 2) &&
                          g_u32_is(&g, img, "tokenizer.ggml.bos_token_id", 0) && g_u32_is(&g, img, "mor.vocab_size", SV),
                      "tokenizer: DIR/tokenizer.json is embedded; eos from config.json's list");
            } else {
                CHECK(0, "tokenizer: DIR/tokenizer.json is embedded (%s)", err);
            }
            free(img);
        }
        free(tj);
        rm_model(dir);
    }
}

/* ---- the command line ------------------------------------------------------------------ */

static int run_cli(const char *exe, const char *args, char *out, size_t cap)
{
    char cmd[2048];
    const char *log = tmp_path("cli.log");
    size_t n;
    uint8_t *b;
    int st;
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", exe, args, log);
    st = system(cmd);
    b = read_all(log, &n);
    out[0] = 0;
    if (b) {
        size_t k = n < cap - 1 ? n : cap - 1;
        memcpy(out, b, k);
        out[k] = 0;
        if (k && out[k - 1] == '\n') out[k - 1] = 0;   /* for the messages; one_line() checks it */
        free(b);
    }
    remove(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* one line (its newline was stripped by run_cli) starting with the tool's name */
static int one_line(const char *s)
{
    return *s && !strchr(s, '\n') && strncmp(s, "mor-convert: ", 13) == 0;
}

static void test_cli(void)
{
    char exe[512], out[4096], args[1024];
    const char *o = getenv("OUT");
    char gguf[256];
    int rc;
    snprintf(gguf, sizeof gguf, "%s", tmp_path("cli.gguf"));
    snprintf(exe, sizeof exe, "%s/bin/mor-convert", o && *o ? o : ".");
    if (access(exe, X_OK) != 0) {
        printf("# %s not built: command-line checks skipped\n", exe);
        return;
    }
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin -o %s", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "wrote"), "cli: DIR -o OUT converts with DIR/../mor_cfg.yaml (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed -o %s", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 1 && one_line(out), "cli: a directory without config.json: exit 1, one line (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin -o %s --alpha abc", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 2 && one_line(out), "cli: a bad number: exit 2, one line (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin -o %s --mor-type token", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 1 && one_line(out), "cli: --mor-type token on an expert checkpoint: exit 1, one line (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin -o %s --frobnicate", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 2 && one_line(out), "cli: an unknown option: exit 2, one line (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin -o %s --weights %s/README.md", gguf, FIX);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 1 && one_line(out), "cli: --weights on a non-checkpoint: exit 1, one line (%s)", out);
    snprintf(args, sizeof args, FIX "/expert_mc3_fix_perturbed/hf_bin");
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 2 && one_line(out), "cli: no -o: exit 2, one line (%s)", out);
    snprintf(args, sizeof args, "--vocab-only tests/data/convert/tok_smollm -o %s", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "265 tokens"), "cli: --vocab-only (%s)", out);
    snprintf(args, sizeof args, FIX "/token_mc3_perturbed/hf_safetensors -o %s --outtype bf16 --capacity 1,0.5,0.25 "
                                    "--router-func sigmoid --alpha 0.1 --temp 2 --gating additive --kv-sharing 1", gguf);
    rc = run_cli(exe, args, out, sizeof out);
    if (CHECK(rc == 0, "cli: MoR flags override the config (%s)", out)) {
        size_t n;
        uint8_t *img = read_all(gguf, &n);
        ginfo g;
        const uint8_t *v;
        uint32_t t;
        float temp = 0;
        g_parse(img, n, &g);
        if (g_kv(&g, "mor.router.temp", &t, &v, img)) memcpy(&temp, v, 4);
        CHECK(g.ok && g_str_is(&g, img, "mor.router.func", "sigmoid") && g_str_is(&g, img, "mor.router.gating", "additive") &&
                  g_bool_is(&g, img, "mor.kv.shared", 1) && temp == 2.0f,
              "cli: the file has the overridden settings");
        free(img);
    }
    remove(gguf);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mor_test_convert_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("FAIL - cannot create a temporary directory\n");
        return 1;
    }
    test_json();
    test_yaml();
    test_settings();
    test_readers();
    test_writer();
    test_convert_fixtures();
    test_synthetic();
    test_tokenizer();
    test_spm_tokenizer_json();
    test_cli();
    rmdir(tmp_path("tk"));
    rmdir(tmpdir);
    return check_done();
}
