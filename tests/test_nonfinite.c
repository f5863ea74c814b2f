/* test_nonfinite.c - NaN and infinity in weights and logits.
 *
 *  - Loading: a NaN or infinity in a norm or a router is refused always
 *    (MOR_E_FORMAT naming the tensor); in a weight matrix (F32, F16, Q8_0)
 *    only with MOR_MODEL_CHECK_TENSORS, which the tools set by default.
 *  - A model loaded without the check whose embedding row of one token is
 *    NaN (output matrix untied, so only sequences with that token go wrong):
 *    mor_sampler_sample refuses its logits (MOR_E_INVALID_ARG); a server step
 *    in every mode fails naming the request and changes nothing (no token
 *    streamed, the KV cache and router statistics as they were; stepping
 *    again fails the same way); cancelling the request lets the others run
 *    on, to exactly the tokens they get served alone.
 *  - mor-run on such files exits 1 with a message naming the tensor (or,
 *    with --no-check-tensors, the non-finite logits), never prints NUL bytes
 *    and never exits 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"
#include "gguf.h"
#include "mor.h"
#include "quant.h"
#include "serve.h"
#include "gguf_write.h"
#include "synth_model.h"

static char tmpdir[600];

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = sz > 0 ? malloc((size_t)sz) : NULL;
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) { free(b); b = NULL; }
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static int write_all(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(p, 1, n, f) == n;
    return (fclose(f) == 0) && ok;
}

/* A copy of image with element `at` of tensor `name` set to a non-finite
 * value in the tensor's own type (F32: v; F16: NaN or inf bits; Q8_0: the
 * scale of the element's block). */
static unsigned char *poisoned(const unsigned char *img, size_t n, const char *name, int64_t at, float v)
{
    gguf_file *g = NULL;
    if (gguf_parse(img, n, &g)) return NULL;
    const gguf_tensor *t = gguf_find_tensor(g, name);
    unsigned char *out = t ? malloc(n) : NULL;
    if (out) {
        memcpy(out, img, n);
        unsigned char *p = out + (t->data - img);
        uint16_t h = f32_to_f16(v);
        if (t->type == GGML_F32) memcpy(p + 4 * at, &v, 4);
        else if (t->type == GGML_F16) memcpy(p + 2 * at, &h, 2);
        else if (t->type == GGML_Q8_0) memcpy(p + sizeof(block_q8_0) * (size_t)(at / QK), &h, 2);
    }
    gguf_free(g);
    return out;
}

static mor_status load_mem(const unsigned char *img, size_t n, uint32_t flags, mor_model **m)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = flags;
    *m = NULL;
    return mor_model_load_memory(img, n, &mp, m);
}

static void test_load(const unsigned char *img, size_t n, const char *what)
{
    static const struct { const char *name; int64_t at; int always; } cases[] = {
        { "output_norm.weight", 3, 1 }, { "blk.0.attn_norm.weight", 0, 1 }, { "rtr.1.weight", 7, 1 },
        { "blk.0.attn_q.weight", 100, 0 }, { "blk.1.ffn_down.weight", 5, 0 }, { "token_embd.weight", 300, 0 },
    };
    const float bad[2] = { NAN, INFINITY };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int b = 0; b < 2; b++) {
            unsigned char *p = poisoned(img, n, cases[i].name, cases[i].at, b ? -bad[b] : bad[b]);
            if (!p) continue;   /* not in this model */
            mor_model *m;
            mor_status plain = load_mem(p, n, 0, &m);
            mor_model_free(m);
            mor_status checked = load_mem(p, n, MOR_MODEL_CHECK_TENSORS, &m);
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mor_last_error());
            mor_model_free(m);
            if (cases[i].always)
                CHECK(plain == MOR_E_FORMAT && checked == MOR_E_FORMAT && strstr(msg, cases[i].name),
                      "%s: %s in %s refused at load, with or without the check (%s)", what, b ? "-inf" : "NaN",
                      cases[i].name, msg);
            else
                CHECK(plain == MOR_OK && checked == MOR_E_FORMAT && strstr(msg, cases[i].name),
                      "%s: %s in %s: loads without MOR_MODEL_CHECK_TENSORS, refused with it (%s)", what,
                      b ? "-inf" : "NaN", cases[i].name, msg);
            free(p);
        }
    mor_model *m;
    CHECK(load_mem(img, n, MOR_MODEL_CHECK_TENSORS, &m) == MOR_OK, "%s: the clean model passes the check", what);
    mor_model_free(m);
}

/* The synthetic MoR with an untied output matrix, as a file image. */
static unsigned char *untied_model(const char *path, uint32_t type, size_t *n)
{
    synth_spec sp = { 64, 5, 4, 2, 16, 128, 256, 128, 3, type, type, 21, 0 };
    if (synth_write(&sp, path)) return NULL;
    size_t sz;
    unsigned char *img = read_all(path, &sz);
    gguf_file *g = NULL;
    if (!img || gguf_parse(img, sz, &g)) { free(img); return NULL; }
    gguf_writer *b = gguf_writer_new();
    if (!b) { gguf_free(g); free(img); return NULL; }
    int fb;
    gguf_writer_add_retyped(b, g, type, type, &fb);
    const gguf_tensor *e = gguf_find_tensor(g, "token_embd.weight");
    void *copy = malloc((size_t)e->nbytes);
    if (copy) memcpy(copy, e->data, (size_t)e->nbytes);
    gguf_writer_add_matrix(b, "output.weight", e->type, e->ne[0], e->ne[1], copy, (size_t)e->nbytes, 1);
    /* the key count stays right: output.weight is a tensor, not a key */
    int rc = gguf_writer_write_file(b, path, NULL, 0);
    gguf_writer_free(b);
    gguf_free(g);
    free(img);
    return rc ? NULL : read_all(path, n);
}

enum { POISON = 77, NREQ = 3, GEN = 6 };

/* Serve the requests (prompt r: tokens 10+r.., request 1 holds POISON when
 * poison) in mode; with poison, check the failed steps change nothing, then
 * cancel request 1. Writes each request's tokens into out[r]. */
static int serve(mor_model *m, int32_t mode, int poison, mor_token out[NREQ][GEN], const char *what)
{
    mor_server_params sp;
    MOR_SERVER_PARAMS_INIT(&sp);
    sp.mode = mode; sp.n_slots = 4; sp.n_ctx = 128;
    mor_server *s = NULL;
    if (!CHECK(mor_server_create(m, &sp, &s) == MOR_OK, "%s: server", what)) return 0;
    mor_router_set_mode(mor_server_router(s), MOR_ROUTE_THRESHOLD, 0);
    mor_sampler_params smp;
    MOR_SAMPLER_PARAMS_INIT(&smp);
    smp.temperature = 0;
    mor_request_id id[NREQ];
    for (int r = 0; r < NREQ; r++) {
        mor_token p[4] = { (mor_token)(10 + r), (mor_token)(20 + r), (mor_token)(30 + r), (mor_token)(40 + r) };
        if (poison && r == 1) p[2] = POISON;
        mor_server_submit(s, p, 4, &smp, GEN, NULL, 0, &id[r]);
    }
    int ok = 1;
    if (poison) {
        /* step until the poisoned request's logits come up (SERIAL: after request 0) */
        mor_status st1 = MOR_OK;
        for (int k = 0; k < 100 && st1 == MOR_OK; k++) {
            mor_kv_cache *kv = mor_context_kv(serve_context(s));
            int64_t cells = mor_kv_n_cells_used(kv, MOR_KV_ALL);
            int32_t before = 0, after = 0, n_out = 0;
            for (int r = 0; r < NREQ; r++) { mor_server_get_tokens(s, id[r], NULL, NULL, 0, &n_out); before += n_out; }
            mor_router_stats r0 = { sizeof r0, 0, 0, { 0 } }, r1 = { sizeof r1, 0, 0, { 0 } };
            mor_router_get_stats(mor_server_router(s), &r0);
            st1 = mor_server_step(s, NULL);
            if (st1 == MOR_OK) continue;
            char msg[512];
            snprintf(msg, sizeof msg, "%s", mor_last_error());
            mor_status st2 = mor_server_step(s, NULL);
            for (int r = 0; r < NREQ; r++) { mor_server_get_tokens(s, id[r], NULL, NULL, 0, &n_out); after += n_out; }
            mor_router_get_stats(mor_server_router(s), &r1);
            char want[32];
            snprintf(want, sizeof want, "request %d", id[1]);
            ok = CHECK(st1 == MOR_E_INVALID_ARG && st2 == MOR_E_INVALID_ARG && strstr(msg, want) && strstr(msg, "NaN") &&
                           after == before && mor_kv_n_cells_used(kv, MOR_KV_ALL) == cells && r1.n_tokens == r0.n_tokens,
                       "%s: the step with the NaN request fails and changes nothing, twice (%s)", what, msg);
        }
        ok = ok && CHECK(st1 != MOR_OK, "%s: a step failed", what);
        ok = ok && CHECK(mor_server_cancel(s, id[1]) == MOR_OK, "%s: cancel the request", what);
    }
    ok = ok && CHECK(mor_server_run(s) == MOR_OK, "%s: the others run on (%s)", what, mor_last_error());
    for (int r = 0; r < NREQ; r++) {
        int32_t n = 0;
        memset(out[r], 0xff, sizeof out[r]);
        mor_server_get_tokens(s, id[r], out[r], NULL, GEN, &n);
    }
    mor_server_free(s);
    return ok;
}

static void test_poisoned_embedding(const unsigned char *img, size_t n)
{
    unsigned char *p = poisoned(img, n, "token_embd.weight", (int64_t)POISON * 64 + 5, NAN);
    mor_model *m = NULL;
    if (!CHECK(p && load_mem(p, n, 0, &m) == MOR_OK, "NaN embedding row: loads without the check")) { free(p); return; }
    /* mor_decode + the sampler */
    mor_context *c = NULL;
    mor_batch *b = NULL;
    mor_sampler *smp = NULL;
    mor_context_create(m, NULL, &c);
    mor_batch_create(8, &b);
    mor_sampler_create(NULL, &smp);
    mor_token prompt[3] = { 5, POISON, 9 }, t = -5;
    for (int i = 0; i < 3; i++) mor_batch_add(b, prompt[i], i, 0, i == 2);
    if (CHECK(c && mor_decode(c, b) == MOR_OK, "NaN embedding row: the decode itself succeeds")) {
        const float *l = mor_get_logits(c, 2);
        CHECK(l && isnan(l[0]), "the logits are NaN");
        mor_status st = mor_sampler_sample(smp, l, mor_model_n_vocab(m), &t);
        CHECK(st == MOR_E_INVALID_ARG && t == -5, "mor_sampler_sample refuses them: %s (%s)", mor_status_str(st),
              mor_last_error());
    }
    mor_sampler_free(smp);
    mor_batch_free(b);
    mor_context_free(c);

    static const int32_t modes[] = { MOR_SERVE_SERIAL, MOR_SERVE_SEQUENCE, MOR_SERVE_DEPTHWISE };
    static const char *const names[] = { "SERIAL", "SEQUENCE", "DEPTHWISE" };
    mor_model *clean = NULL;
    load_mem(img, n, 0, &clean);
    for (int k = 0; k < 3; k++) {
        mor_token got[NREQ][GEN], ref[NREQ][GEN];
        char what[64];
        snprintf(what, sizeof what, "server %s", names[k]);
        if (!serve(m, modes[k], 1, got, what) || !serve(clean, modes[k], 0, ref, what)) continue;
        CHECK(!memcmp(got[0], ref[0], sizeof got[0]) && !memcmp(got[2], ref[2], sizeof got[2]),
              "%s: after the cancel, the other requests' tokens are those they get without it", what);
    }
    mor_model_free(clean);
    mor_model_free(m);
    free(p);
}

/* mor-run on broken files: exit 1 with a message, no NUL bytes, never 0. */
static void test_mor_run(const unsigned char *img, size_t n, const char *model_name)
{
    const char *out = getenv("OUT");
    char exe[700];
    snprintf(exe, sizeof exe, "%s/bin/mor-run", out && *out ? out : ".");
    if (access(exe, X_OK)) { printf("# %s not built: mor-run checks skipped\n", exe); return; }
    static const struct { const char *tensor; const char *flags; const char *want; } cases[] = {
        { "output_norm.weight", "", "output_norm.weight" },
        { "blk.0.attn_q.weight", "", "blk.0.attn_q.weight" },
        { "blk.0.attn_q.weight", "--no-check-tensors", "NaN" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[800], so[800], se[800], cmd[4000];
        snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
        snprintf(so, sizeof so, "%s/out.txt", tmpdir);
        snprintf(se, sizeof se, "%s/err.txt", tmpdir);
        unsigned char *p = poisoned(img, n, cases[i].tensor, 0, NAN);
        if (!p || !write_all(path, p, n)) { free(p); CHECK(0, "write %s", path); continue; }
        free(p);
        snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p 'The jury said' -n 8 %s >'%s' 2>'%s'", exe, path, cases[i].flags, so,
                 se);
        int st = system(cmd);
        size_t no = 0, ne = 0;
        unsigned char *o = read_all(so, &no), *e = read_all(se, &ne);
        int nul = 0;
        for (size_t k = 0; k < no; k++) nul |= o[k] == 0;
        char msg[600] = "";
        if (e) snprintf(msg, sizeof msg, "%.*s", (int)(ne < 500 ? ne : 500), (const char *)e);
        for (char *q = msg; *q; q++) if (*q == '\n') *q = ' ';
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && !nul && strstr(msg, cases[i].want),
              "mor-run on %s with NaN in %s %s: exit 1, no NUL bytes, says '%s' (%s)", model_name, cases[i].tensor,
              cases[i].flags, cases[i].want, msg);
        free(o); free(e);
        remove(path); remove(so); remove(se);
    }
}

int main(void)
{
    const char *out = getenv("OUT");
    snprintf(tmpdir, sizeof tmpdir, "%s/build/tmp/nonfinite.%d", out && *out ? out : ".", (int)getpid());
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", tmpdir);
    if (!CHECK(system(cmd) == 0, "scratch directory")) return check_done();

    size_t n = 0;
    unsigned char *brown = read_all("models/brown-mor.gguf", &n);
    if (CHECK(brown != NULL, "the bundled model (F16 matrices, F32 norms and routers)")) {
        test_load(brown, n, "brown-mor (F16)");
        test_mor_run(brown, n, "brown-mor");
    }
    free(brown);
    static const uint32_t types[] = { GGML_F32, GGML_Q8_0 };
    char path[800];
    snprintf(path, sizeof path, "%s/untied.gguf", tmpdir);
    for (int i = 0; i < 2; i++) {
        size_t sz = 0;
        unsigned char *img = untied_model(path, types[i], &sz);
        if (!CHECK(img != NULL, "synthetic untied MoR (%s)", i ? "Q8_0" : "F32")) continue;
        test_load(img, sz, i ? "synthetic Q8_0" : "synthetic F32");
        if (i == 0) test_poisoned_embedding(img, sz);
        free(img);
    }
    remove(path);
    rmdir(tmpdir);
    return check_done();
}
