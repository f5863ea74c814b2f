/* test_train.c - training in float, end to end with the library:
 *  - a model trained by src/tools/mor-train, saved as GGUF and loaded by
 *    mor_model_load_file gives the training forward's logits (1e-4) and
 *    depths under mor_decode, in TOPK and THRESHOLD routing, for vanilla,
 *    recursive, expert-choice (middle-cycle and cycle), token-choice and
 *    LoRA-relaxed models (the deltas written unfolded, FORMAT.md v2);
 *  - relaxed uptraining: a vanilla model made recursive with LoRA deltas of
 *    mixed ranks by the converter (convert_model, as bin/mor-convert) is read
 *    by the trainer with its deltas and gives the library's logits before any
 *    step; trained a few steps (shared weights and deltas), saved and loaded,
 *    the library gives the trainer's logits again; the file reads back bit
 *    for bit and resumes exactly; what the trainer cannot train is refused;
 *  - training learns (a predictable sequence), resumes exactly from a
 *    checkpoint and its optimizer sidecar, and does not depend on threads;
 *  - the learning-rate schedules;
 *  - the BPE trainer's vocabulary loads in the library's tokenizer and
 *    round-trips text. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "convert.h"
#include "layout.h"
#include "relax.h"
#include "mor.h"
#include "train.h"
#include "pretokenize.h"

static char tmpdir[256];

static tr_config small(int router, int n_rec, int K, int mid)
{
    tr_config c;
    tr_config_defaults(&c);
    c.vocab = 50; c.d = 32; c.ff = 48; c.n_head = 4; c.n_kv = 2; c.head_dim = 8; c.ctx = 64;
    c.n_rec = n_rec; c.K = K; c.prelude = c.coda = mid; c.router = router;
    if (router == TR_ROUTER_EXPERT) for (int r = 0; r < n_rec; r++) c.cap[r] = (double)(n_rec - r) / n_rec;
    if (router == TR_ROUTER_TOKEN) c.alpha = 1.0f;
    return c;
}

/* Batches of a noisy counting sequence: t_{i+1} = t_i + 1 mod 40, with a
 * random token now and then; drawn from (seed, step). */
static void batch(int64_t step, int B, int T, int32_t *tok, int32_t *tgt)
{
    uint64_t rng = 99 + (uint64_t)step * 7919;
    for (int b = 0; b < B; b++) {
        int32_t x = (int32_t)(tr_rand_u64(&rng) % 40);
        for (int t = 0; t <= T; t++) {
            int32_t nx = (tr_rand_u64(&rng) % 10 == 0) ? 40 + (int32_t)(tr_rand_u64(&rng) % 10) : (x + 1) % 40;
            if (t < T) { tok[b * T + t] = x; tgt[b * T + t] = nx; }
            x = nx < 40 ? nx : (x + 1) % 40;   /* after a noise token the count goes on */
        }
    }
}

static double train_steps(tr_model *m, tr_optim *o, tr_state *s, int64_t from, int64_t to, int B, int T)
{
    int32_t tok[8 * 64], tgt[8 * 64];
    tr_result r = { 0 };
    for (int64_t st = from; st < to; st++) {
        batch(st, B, T, tok, tgt);
        tr_forward(m, s, tok, tgt, B, T, TR_SELECT_TOPK, 0, &r);
        tr_backward(m, s);
        tr_optim_step(o, m);
        tr_update_bias(m, s);
    }
    return r.ce;
}

/* Train a little, save, load with the library, compare a forward. */
static void parity(const char *what, tr_config c, int f16)
{
    enum { B = 4, T = 16 };
    tr_model m;
    tr_optim o;
    tr_optim_config oc;
    tr_optim_defaults(&oc);
    oc.warmup = 2; oc.steps = 10; oc.lr = 1e-2f;
    if (tr_model_init(&m, &c, 3) || tr_optim_init(&o, &oc, m.n_params)) { CHECK(0, "%s: init", what); return; }
    if (c.lora_rank) for (size_t i = 0; i < m.n_params; i++) if (!m.p[i]) m.p[i] = 0.01f * (float)((int)(i % 7) - 3);
    tr_state *s = tr_state_new(&m, B, T);
    train_steps(&m, &o, s, 0, 10, B, T);
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/parity.gguf", tmpdir);
    tr_save_opts so = { 0 };
    so.eos = -1; so.f16 = f16; so.name = what;
    CHECK(tr_save_gguf(&m, path, &so, err, sizeof err) == 0, "%s: saved (%s)", what, err);
    mor_model *lm = NULL;
    mor_status st = mor_model_load_file(path, NULL, &lm);
    CHECK(st == MOR_OK, "%s: the library loads it (%s)", what, st ? mor_last_error() : "ok");
    if (st) { tr_state_free(s); tr_model_free(&m); tr_optim_free(&o); return; }
    CHECK(mor_model_n_layer(lm) == m.L && mor_model_n_recursion(lm) == c.n_rec, "%s: L %d, N_r %d", what, m.L, c.n_rec);
    mor_context *ctx;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 64;
    mor_context_create(lm, &cp, &ctx);
    mor_batch *bt;
    mor_batch_create(64, &bt);
    int32_t tok[T], tgt[T];
    int32_t tmp_tok[B * T], tmp_tgt[B * T];
    batch(1000, B, T, tmp_tok, tmp_tgt);
    memcpy(tok, tmp_tok, sizeof tok); memcpy(tgt, tmp_tgt, sizeof tgt);
    int modes = c.router == TR_ROUTER_EXPERT ? 2 : 1;
    for (int mode = 0; mode < modes; mode++) {
        int sel = mode ? TR_SELECT_THRESHOLD : TR_SELECT_TOPK;
        tr_result r;
        tr_forward(&m, s, tok, tgt, 1, T, sel, 1, &r);
        const float *ref = tr_state_logits(s);
        if (c.router == TR_ROUTER_EXPERT)
            mor_router_set_mode(mor_context_router(ctx), mode ? MOR_ROUTE_THRESHOLD : MOR_ROUTE_TOPK, 0);
        mor_kv_clear(mor_context_kv(ctx));
        mor_batch_clear(bt);
        for (int t = 0; t < T; t++) mor_batch_add(bt, tok[t], t, 0, 1);
        st = mor_decode(ctx, bt);
        double worst = 0;
        for (int t = 0; t < T && !st; t++) {
            double dd = check_maxdiff(mor_get_logits(ctx, t), ref + (size_t)t * c.vocab, c.vocab);
            if (dd > worst) worst = dd;
        }
        int32_t dep[T];
        mor_router_get_depths(mor_context_router(ctx), dep, T);
        int same = !memcmp(dep, tr_state_depth(s), sizeof dep), mixed = 0;
        for (int t = 1; t < T; t++) mixed |= dep[t] != dep[0];
        const char *mname = mode ? "THRESHOLD" : c.router == TR_ROUTER_EXPERT ? "TOPK" : "default";
        CHECK(!st && worst < (f16 ? 0.05 : 1e-4), "%s, %s routing: library logits = training logits (max diff %.2g)",
              what, mname, worst);
        CHECK(same, "%s, %s routing: same depth for every token", what, mname);
        if (c.router != TR_ROUTER_NONE && !mode) CHECK(mixed, "%s: depths vary between tokens", what);
    }
    mor_batch_free(bt);
    mor_context_free(ctx);
    mor_model_free(lm);
    tr_state_free(s);
    tr_model_free(&m);
    tr_optim_free(&o);
    remove(path);
}

static void test_parity(void)
{
    parity("vanilla 3 layers", small(TR_ROUTER_NONE, 1, 3, 0), 0);
    parity("recursive middle-cycle N_r=3", small(TR_ROUTER_NONE, 3, 1, 1), 0);
    parity("MoR expert middle-cycle N_r=3 K=2", small(TR_ROUTER_EXPERT, 3, 2, 1), 0);
    parity("MoR expert cycle N_r=2 K=2", small(TR_ROUTER_EXPERT, 2, 2, 0), 0);
    tr_config c = small(TR_ROUTER_TOKEN, 3, 1, 1);
    c.loss_free = 1; c.bias_rate = 0.01f;
    parity("MoR token-choice softmax + loss-free bias", c, 0);
    c = small(TR_ROUTER_EXPERT, 3, 1, 1);
    c.lora_rank = 4; c.lora_alpha = 8;
    parity("MoR expert + LoRA per recursion", c, 0);
    parity("MoR expert + LoRA per recursion, F16 file (F32 factors)", c, 1);
    parity("MoR expert middle-cycle N_r=3, F16 file", small(TR_ROUTER_EXPERT, 3, 1, 1), 1);
}

static void test_learning_resume_threads(void)
{
    enum { B = 8, T = 32 };
    tr_config c = small(TR_ROUTER_EXPERT, 3, 1, 1);
    tr_optim_config oc;
    tr_optim_defaults(&oc);
    oc.warmup = 5; oc.steps = 80; oc.lr = 1e-2f;
    tr_model a, b;
    tr_optim oa, ob;
    tr_model_init(&a, &c, 5);
    tr_optim_init(&oa, &oc, a.n_params);
    tr_state *s = tr_state_new(&a, B, T);
    int32_t tok[B * T], tgt[B * T];
    batch(0, B, T, tok, tgt);
    tr_result r0;
    tr_forward(&a, s, tok, tgt, B, T, TR_SELECT_TOPK, 0, &r0);
    double loss = train_steps(&a, &oa, s, 0, 80, B, T);
    /* 9 targets in 10 are predictable: the floor is about 0.33 nats (the noise's entropy) */
    CHECK(r0.ce > 3.5 && loss < 1.0, "training learns: loss %.3f -> %.3f after 80 steps", r0.ce, loss);
    tr_result r;
    tr_forward(&a, s, tok, tgt, B, T, TR_SELECT_THRESHOLD, 0, &r);
    CHECK(r.ce < loss + 0.5, "THRESHOLD routing (causal) stays close after training with the aux loss: %.3f", r.ce);

    /* resume: 6 steps straight == 3 steps, checkpoint, reload, 3 more */
    tr_model_free(&a); tr_optim_free(&oa);
    oc.steps = 6;
    tr_model_init(&a, &c, 11); tr_optim_init(&oa, &oc, a.n_params);
    train_steps(&a, &oa, s, 0, 6, B, T);
    tr_model_init(&b, &c, 11); tr_optim_init(&ob, &oc, b.n_params);
    tr_state *sb = tr_state_new(&b, B, T);
    train_steps(&b, &ob, sb, 0, 3, B, T);
    char path[512], opath[512], err[256];
    snprintf(path, sizeof path, "%s/resume.gguf", tmpdir);
    snprintf(opath, sizeof opath, "%s/resume.gguf.opt", tmpdir);
    int ok = tr_save_gguf(&b, path, NULL, err, sizeof err) == 0 && tr_save_optim(&ob, &b, opath, err, sizeof err) == 0;
    tr_model_free(&b); tr_optim_free(&ob); tr_state_free(sb);
    tr_model b2;
    tr_optim ob2;
    ok = ok && tr_load_gguf(&b2, path, err, sizeof err) == 0;
    ok = ok && tr_optim_init(&ob2, &oc, b2.n_params) == 0 && tr_load_optim(&ob2, &b2, opath, err, sizeof err) == 0;
    CHECK(ok, "checkpoint and optimizer sidecar written and read back (%s)", ok ? "ok" : err);
    if (ok) {
        CHECK(ob2.step == 3, "the sidecar keeps the step (%lld)", (long long)ob2.step);
        sb = tr_state_new(&b2, B, T);
        train_steps(&b2, &ob2, sb, 3, 6, B, T);
        CHECK(b2.n_params == a.n_params && !memcmp(a.p, b2.p, sizeof(float) * a.n_params),
              "resumed training is bit-identical to the uninterrupted run");
        tr_state_free(sb);
        tr_model_free(&b2); tr_optim_free(&ob2);
    }
    remove(path); remove(opath);

    /* threads: the same gradient, bit for bit */
    memset(a.g, 0, sizeof(float) * a.n_params);
    tr_set_threads(1);
    tr_forward(&a, s, tok, tgt, B, T, TR_SELECT_TOPK, 0, &r);
    tr_backward(&a, s);
    float *g1 = malloc(sizeof(float) * a.n_params);
    memcpy(g1, a.g, sizeof(float) * a.n_params);
    memset(a.g, 0, sizeof(float) * a.n_params);
    tr_set_threads(2);
    tr_result r2;
    tr_forward(&a, s, tok, tgt, B, T, TR_SELECT_TOPK, 0, &r2);
    tr_backward(&a, s);
    tr_set_threads(1);
    CHECK(r.total == r2.total && !memcmp(g1, a.g, sizeof(float) * a.n_params),
          "1 and 2 threads: identical loss and gradient");
    free(g1);
    tr_state_free(s);
    tr_model_free(&a); tr_optim_free(&oa);
}

static void test_schedule(void)
{
    tr_optim_config oc;
    tr_optim_defaults(&oc);
    oc.lr = 1.0f; oc.min_lr = 0.1f; oc.warmup = 10; oc.steps = 110;
    CHECK(fabsf(tr_lr_at(&oc, 0) - 0.1f) < 1e-6 && fabsf(tr_lr_at(&oc, 9) - 1.0f) < 1e-6, "warmup is linear to lr");
    CHECK(fabsf(tr_lr_at(&oc, 60) - 0.55f) < 1e-5 && fabsf(tr_lr_at(&oc, 110) - 0.1f) < 1e-6,
          "cosine: half-way %.3f, end %.3f", tr_lr_at(&oc, 60), tr_lr_at(&oc, 110));
    oc.schedule = TR_SCHED_WSD; oc.decay_frac = 0.2f;
    CHECK(tr_lr_at(&oc, 80) == 1.0f && fabsf(tr_lr_at(&oc, 99) - 0.55f) < 1e-5 && fabsf(tr_lr_at(&oc, 110) - 0.1f) < 1e-6,
          "WSD: stable %.2f, mid-decay %.3f, end %.3f", tr_lr_at(&oc, 80), tr_lr_at(&oc, 99), tr_lr_at(&oc, 110));
}

static void test_bpe(void)
{
    const char *base = "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!\n"
                       "She said \"hello\" to the other foxes, and they're all quite happy in 1961.\n";
    size_t bl = strlen(base), n = bl * 40;
    char *text = malloc(n + 1);
    for (size_t i = 0; i < 40; i++) memcpy(text + i * bl, base, bl);
    text[n] = 0;
    tr_bpe b;
    CHECK(tr_bpe_train(text, n, 320, &b, 0) == 0, "BPE trains");
    CHECK(b.n_tokens == 320 && b.n_merges >= 320 - 257 && b.eos == 319 && b.types[319] == 3,
          "320 tokens: 256 bytes, %d merges, <|endoftext|> last as a control token", b.n_merges);
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/vocab.gguf", tmpdir);
    CHECK(tr_bpe_save(&b, path, err, sizeof err) == 0, "vocab-only GGUF written");
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    mor_model *vm = NULL;
    mor_status st = mor_model_load_file(path, &mp, &vm);
    CHECK(st == MOR_OK, "the library's tokenizer loads it (%s)", st ? mor_last_error() : "ok");
    if (vm) {
        int32_t ids[4096], nt = 0;
        st = mor_tokenize(vm, base, bl, 0, ids, 4096, &nt);
        char back[4096];
        size_t bn = 0;
        mor_detokenize(vm, ids, nt, back, sizeof back, &bn);
        CHECK(!st && bn == bl && !memcmp(back, base, bl), "encode then decode gives the text back");
        CHECK(nt > 0 && nt * 2 < (int)bl, "merges compress: %d tokens for %zu bytes", nt, bl);
        /* a frequent word is one token */
        int32_t one[8], n1 = 0;
        mor_tokenize(vm, " fox", 4, 0, one, 8, &n1);
        CHECK(n1 == 1, "\" fox\" is a single token");
        mor_tokenize(vm, "<|endoftext|>", 13, MOR_TOKENIZE_PARSE_SPECIAL, one, 8, &n1);
        CHECK(n1 == 1 && one[0] == b.eos && mor_model_token_eos(vm) == b.eos, "<|endoftext|> is the EOS token");
        const char *odd = "\xff\xfe zebra 12345 \xce\xbb";
        mor_tokenize(vm, odd, strlen(odd), 0, ids, 4096, &nt);
        mor_detokenize(vm, ids, nt, back, sizeof back, &bn);
        CHECK(bn == strlen(odd) && !memcmp(back, odd, bn), "unseen bytes and invalid UTF-8 round-trip");
        mor_model_free(vm);
    }
    /* the piece splitter agrees with GPT-2's regex on a few cases */
    const char *s = "I'm  here's 42x  ";
    size_t ends[16], k = 0;
    for (size_t i = 0; i < strlen(s); i = ends[k++]) ends[k] = gpt2_piece_end((const uint8_t *)s, strlen(s), i);
    /* "I" "'m" " " " here" "'s" " 42" "x" "  " */
    size_t want[] = { 1, 3, 4, 9, 11, 14, 15, 17 };
    CHECK(k == 8 && !memcmp(ends, want, sizeof want), "GPT-2 pre-tokenizer pieces");
    tr_bpe_free(&b);
    free(text);
    remove(path);
}

/* ---- relaxed uptraining ---- */

/* Max |library - trainer| over the logits of one sequence of T tokens, the
 * library's model loaded with flags (0 or MOR_MODEL_FOLD_LORA); < 0 when the
 * library cannot load or decode it. */
static double lib_vs_trainer(const char *path, uint32_t flags, tr_model *m, const int32_t *tok, int T)
{
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = flags;
    mor_model *lm = NULL;
    if (mor_model_load_file(path, &mp, &lm)) { printf("# %s: %s\n", path, mor_last_error()); return -1; }
    mor_context *ctx = NULL;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 64; cp.n_batch = 64;
    mor_batch *bt = NULL;
    double worst = -1;
    tr_state *s = tr_state_new(m, 1, T);
    if (s && !mor_context_create(lm, &cp, &ctx) && !mor_batch_create(64, &bt)) {
        tr_result r;
        tr_forward(m, s, tok, NULL, 1, T, TR_SELECT_TOPK, 1, &r);
        for (int t = 0; t < T; t++) mor_batch_add(bt, tok[t], t, 0, 1);
        if (!mor_decode(ctx, bt)) {
            worst = 0;
            for (int t = 0; t < T; t++) {
                double d = check_maxdiff(mor_get_logits(ctx, t), tr_state_logits(s) + (size_t)t * m->c.vocab, m->c.vocab);
                if (d > worst) worst = d;
            }
        }
    }
    mor_batch_free(bt);
    mor_context_free(ctx);
    mor_model_free(lm);
    tr_state_free(s);
    return worst;
}

/* bin/mor-convert VANILLA -o OUT --num-recursion 2 --sharing S --init I --lora-rank RANKS [--keep-norms] */
static int convert_relaxed(const char *vanilla, const char *out, int sharing, int init, const int *ranks, int keep_norms)
{
    convert_opts co;
    convert_opts_init(&co);
    co.dir = vanilla;
    co.init = init;
    co.keep_norms = keep_norms;
    co.flags.num_recursion = 2;
    co.flags.sharing = sharing;
    for (int r = 0; r < CV_ROLE_COUNT; r++) co.lora_rank[r] = ranks[r];
    FILE *f = fopen(out, "wb");
    char err[512] = "";
    int rc = f ? convert_model(&co, f, NULL, 0, err, sizeof err) : -1;
    if (f && fclose(f)) rc = -1;
    if (rc) printf("# convert %s: %s\n", out, err);
    return rc;
}

/* Replace the bytes `from` by `to` (same length) once in the file at path. */
static int patch_file(const char *path, const char *from, const char *to)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f), k = strlen(from);
    fclose(f);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(buf + i, from, k)) {
            memcpy(buf + i, to, k);
            f = fopen(path, "wb");
            if (!f) return -1;
            size_t w = fwrite(buf, 1, n, f);
            return fclose(f) || w != n ? -1 : 0;
        }
    return -1;
}

static void relaxed_case(const char *what, const char *vanilla, int sharing, int init)
{
    enum { B = 4, T = 16 };
    char path[512], out[512], opath[512], err[256];
    /* mixed ranks: v at full rank (min(32, 16)), gate not relaxed */
    const int ranks[CV_ROLE_COUNT] = { 0, 4, 2, 16, 3, 0, 0, 5, 6 };
    snprintf(path, sizeof path, "%s/relaxed.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/relaxed-up.gguf", tmpdir);
    snprintf(opath, sizeof opath, "%s/relaxed-up.gguf.opt", tmpdir);
    if (!CHECK(convert_relaxed(vanilla, path, sharing, init, ranks, 0) == 0, "%s: converted", what)) return;
    tr_model m;
    if (!CHECK(tr_load_gguf(&m, path, err, sizeof err) == 0, "%s: the trainer reads the relaxed file (%s)", what,
               err)) return;
    int layout_ok = m.c.n_rec == 2 && m.lora_rmax == 16, n_delta = 0;
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < m.c.K; j++)
            for (int role = 0; role < TR_NROLE; role++) {
                layout_ok &= m.lora.rank[r][j][role] == ranks[role];
                n_delta += m.lora.rank[r][j][role] > 0;
            }
    for (int role = 0; role < TR_NROLE; role++) layout_ok &= !ranks[role] || m.lora.scale[role] == 1.0f;
    CHECK(layout_ok, "%s: %d deltas per looped layer and projection with the file's ranks (q 4, k 2, v 16, o 3, "
          "gate none, up 5, down 6) and scale 1", what, n_delta);
    int32_t tok[B * T], tgt[B * T];
    batch(500, B, T, tok, tgt);
    double d0 = lib_vs_trainer(path, 0, &m, tok, T), d0f = lib_vs_trainer(path, MOR_MODEL_FOLD_LORA, &m, tok, T);
    CHECK(d0 >= 0 && d0 < 2e-5 && d0f >= 0 && d0f < 2e-5,
          "%s: before any step the trainer's logits are the library's (max diff %.2g unfolded, %.2g folded)", what,
          d0, d0f);

    /* a few steps: the shared weights and the deltas both move */
    tr_optim_config oc;
    tr_optim_defaults(&oc);
    oc.warmup = 1; oc.steps = 6; oc.lr = 1e-2f;
    tr_optim o;
    float *p0 = malloc(sizeof(float) * m.n_params);
    memcpy(p0, m.p, sizeof(float) * m.n_params);
    tr_optim_init(&o, &oc, m.n_params);
    tr_state *s = tr_state_new(&m, B, T);
    train_steps(&m, &o, s, 0, 3, B, T);
    int moved_w = 0, moved_a = 0, moved_b = 0;
    for (int i = 0; i < m.n_t; i++) {
        const tr_tensor *t = &m.t[i];
        int moved = memcmp(p0 + t->off, m.p + t->off, sizeof(float) * (size_t)(t->rows * t->cols)) != 0;
        if (t->rec < 0 && t->layer_role >= 0) moved_w += moved;
        else if (t->rec >= 0 && t->name[strlen(t->name) - 1] == 'a') moved_a += moved;
        else if (t->rec >= 0) moved_b += moved;
    }
    CHECK(moved_w == 9 * m.n_blocks && moved_a == n_delta && moved_b == n_delta,
          "%s: training moves every shared weight (%d) and both factors of every delta (%d, %d)", what, moved_w,
          moved_a, moved_b);
    int ok = tr_save_gguf(&m, out, NULL, err, sizeof err) == 0 && tr_save_optim(&o, &m, opath, err, sizeof err) == 0;
    CHECK(ok, "%s: saved after 3 steps (%s)", what, ok ? "ok" : err);
    double d1 = lib_vs_trainer(out, 0, &m, tok, T), d1f = lib_vs_trainer(out, MOR_MODEL_FOLD_LORA, &m, tok, T);
    CHECK(d1 >= 0 && d1 < 2e-5 && d1f >= 0 && d1f < 2e-5,
          "%s: after 3 steps the library gives the trainer's logits from the saved file (max diff %.2g unfolded, "
          "%.2g folded)", what, d1, d1f);

    /* read back bit for bit; resumes as the uninterrupted run */
    tr_model m2;
    tr_optim o2;
    ok = tr_load_gguf(&m2, out, err, sizeof err) == 0;
    CHECK(ok && m2.n_params == m.n_params && !memcmp(m2.p, m.p, sizeof(float) * m.n_params) &&
          !memcmp(&m2.lora, &m.lora, sizeof m.lora),
          "%s: the saved file reads back with the same deltas, bit for bit (%s)", what, ok ? "ok" : err);
    if (ok) {
        ok = tr_optim_init(&o2, &oc, m2.n_params) == 0 && tr_load_optim(&o2, &m2, opath, err, sizeof err) == 0;
        tr_state *s2 = tr_state_new(&m2, B, T);
        train_steps(&m, &o, s, 3, 6, B, T);
        if (ok && s2) train_steps(&m2, &o2, s2, 3, 6, B, T);
        CHECK(ok && !memcmp(m2.p, m.p, sizeof(float) * m.n_params),
              "%s: resumed from the file and its sidecar, 3 more steps are bit-identical", what);
        tr_state_free(s2);
        tr_optim_free(&o2);
        tr_model_free(&m2);
    }
    free(p0);
    tr_state_free(s);
    tr_optim_free(&o);
    tr_model_free(&m);
    remove(path); remove(out); remove(opath);
}

static void test_relaxed(void)
{
    enum { B = 4, T = 16 };
    char vanilla[512], path[512], err[256];
    snprintf(vanilla, sizeof vanilla, "%s/vanilla.gguf", tmpdir);
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    /* a vanilla 4-layer model, trained a little so that its layers differ */
    tr_config c = small(TR_ROUTER_NONE, 1, 4, 0);
    tr_model v;
    tr_optim_config oc;
    tr_optim_defaults(&oc);
    oc.warmup = 2; oc.steps = 10; oc.lr = 1e-2f;
    tr_optim o;
    if (tr_model_init(&v, &c, 21) || tr_optim_init(&o, &oc, v.n_params)) { CHECK(0, "vanilla init"); return; }
    tr_state *s = tr_state_new(&v, B, T);
    train_steps(&v, &o, s, 0, 10, B, T);
    CHECK(tr_save_gguf(&v, vanilla, NULL, err, sizeof err) == 0, "vanilla 4-layer model saved (%s)", err);
    tr_state_free(s);
    tr_optim_free(&o);
    tr_model_free(&v);

    relaxed_case("relaxed cycle 2 x 2, Average init", vanilla, SHARE_CYCLE, INIT_AVERAGE);
    relaxed_case("relaxed middle-cycle 1 + 2 x 1 + 1, Stepwise init", vanilla, SHARE_MIDDLE_CYCLE, INIT_STEPWISE);

    /* what the trainer cannot train is refused, with the reason */
    const int r4[CV_ROLE_COUNT] = { 0, 4, 4, 4, 4, 0, 4, 4, 4 }, r23[CV_ROLE_COUNT] = { 0, 0, 2, 3, 0, 0, 0, 0, 0 };
    tr_model m;
    int rc = convert_relaxed(vanilla, path, SHARE_SEQUENCE, INIT_AVERAGE, r4, 0) == 0 &&
             tr_load_gguf(&m, path, err, sizeof err) != 0 && strstr(err, "layer_map");
    CHECK(rc, "sequence sharing is refused (%s)", err);
    rc = convert_relaxed(vanilla, path, SHARE_CYCLE, INIT_AVERAGE, r4, 1) == 0 &&
         tr_load_gguf(&m, path, err, sizeof err) != 0 && strstr(err, "its own layer map");
    CHECK(rc, "per-layer norms (--keep-norms) are refused (%s)", err);
    /* k has rank 2 and v rank 3 (both [32 -> 16]): swapping the names of their b factors pairs ranks 2 and 3 */
    rc = convert_relaxed(vanilla, path, SHARE_CYCLE, INIT_AVERAGE, r23, 0) == 0 &&
         patch_file(path, "lora.1.attn_k.b", "lora.1.attn_T.b") == 0 &&
         patch_file(path, "lora.1.attn_v.b", "lora.1.attn_k.b") == 0 &&
         patch_file(path, "lora.1.attn_T.b", "lora.1.attn_v.b") == 0 &&
         tr_load_gguf(&m, path, err, sizeof err) != 0 && strstr(err, "a has rank 2 but b has 3");
    CHECK(rc, "factors of different ranks are refused (%s)", err);
    rc = convert_relaxed(vanilla, path, SHARE_CYCLE, INIT_AVERAGE, r23, 0) == 0 &&
         patch_file(path, "lora.1.attn_k.b", "lora.1.attn_k.c") == 0 &&
         tr_load_gguf(&m, path, err, sizeof err) != 0 && strstr(err, "lora.1.attn_k.c");
    CHECK(rc, "a tensor that is not lora.<layer>.<projection>.<a|b> is refused (%s)", err);
    /* middle-cycle: layer 0 is the unique first layer; move layer 1's k delta onto it */
    rc = convert_relaxed(vanilla, path, SHARE_MIDDLE_CYCLE, INIT_AVERAGE, r23, 0) == 0 &&
         patch_file(path, "lora.1.attn_k.a", "lora.0.attn_k.a") == 0 &&
         patch_file(path, "lora.1.attn_k.b", "lora.0.attn_k.b") == 0 &&
         tr_load_gguf(&m, path, err, sizeof err) != 0 && strstr(err, "unique layer 0");
    CHECK(rc, "a delta on a unique (prelude) layer is refused (%s)", err);
    remove(path);
    remove(vanilla);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mor-test-train-%d", (int)getpid());
    char cmd[300];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", tmpdir);
    if (system(cmd) != 0) return 1;
    test_schedule();
    test_bpe();
    test_parity();
    test_relaxed();
    test_learning_resume_threads();
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    tr_set_threads(1);
    return check_done();
}
