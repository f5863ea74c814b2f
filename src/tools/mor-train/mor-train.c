/* mor-train - train a MoR (or recursive, or vanilla Llama) model from a text
 * file, in C, and write it as a GGUF file that libmor loads.
 *
 *   mor-train --data train.txt --val val.txt --vocab vocab.gguf -o model.gguf \
 *       --d 256 --ff 768 --heads 4 --kv-heads 4 --recursions 3 --block 2 --sharing middle_cycle \
 *       --router expert --capacity 1,0.6667,0.3333 --steps 3000 --batch 16 --seq 256 --lr 3e-3
 *
 * The text is tokenized with the vocabulary of --vocab (mor-tok-train);
 * documents are separated by a blank line and each ends with <|endoftext|>.
 * Batches are random windows of the training tokens, drawn from a generator
 * seeded by (seed, step), so a resumed run (--resume: model file + OUT.opt)
 * continues exactly as the uninterrupted one. One progress line is updated
 * in place; each evaluation prints a line: held-out loss (TOPK routing, as
 * trained) and, for expert-choice, the loss and depth histogram under the
 * causal THRESHOLD rule used for generation.
 *
 * Run with --help for every option. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mor.h"
#include "internal.h"
#include "cli.h"
#include "train.h"

typedef struct {
    const char *data, *val, *vocab, *out, *init, *export_f16, *name;
    tr_config c;
    tr_optim_config oc;
    int B, T, threads, eval_every, save_every, resume, quiet, layers, sharing_set, lora_set;
    int64_t eval_tokens;
    double flops_budget;
    uint64_t seed;
    char sharing[32];
} opts;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mor-train --data TRAIN.txt --vocab VOCAB.gguf -o MODEL.gguf [options]\n"
        "data:   --val VAL.txt (held-out text)  --eval-every N (250)  --eval-tokens N (65536; the final\n"
        "        evaluation reads all of VAL)\n"
        "shape:  --d N (256)  --ff N (768)  --heads N (4)  --kv-heads N (=heads)  --head-dim N (d/heads)\n"
        "        --ctx N (context written to the file; default --seq)\n"
        "        --layers L               vanilla Llama of L layers (no sharing)\n"
        "        --recursions N --block K --sharing middle_cycle|cycle\n"
        "                                 N_r recursions of a K-layer shared block (middle_cycle adds\n"
        "                                 a unique first and last layer: L = 2 + N*K)\n"
        "routing: --router none|expert|token (none with recursions = the recursive baseline)\n"
        "        --capacity C0,C1,...     expert-choice capacities (default (N-r)/N)\n"
        "        --alpha A (0.1 expert; 1.0 token softmax)  --aux-coef X (0.001)\n"
        "        --token-func softmax|sigmoid  --bal-coef X (0.1)  --z-coef X (1e-5)  --loss-free\n"
        "        --lora-rank R --lora-alpha A   a LoRA delta per recursion on each projection of the shared\n"
        "                                 block, W + (A/R) B A (R capped at min(in, out); A defaults to R)\n"
        "train:  --steps N (1000)  --batch B (16)  --seq T (256)  --lr X (3e-3)  --min-lr X (lr/10)\n"
        "        --warmup N (100)  --schedule cosine|wsd|constant  --decay-frac F (0.2, wsd)\n"
        "        --wd X (0.1)  --clip X (1.0)  --seed N (1)  --threads N (2)\n"
        "        --flops-budget X         stop once the training FLOPs reach X (e.g. 2e15)\n"
        "files:  --save-every N (500)  --resume (continue from -o and -o.opt)\n"
        "        --init FILE              start from FILE's weights (shape, routers and LoRA deltas from the\n"
        "                                 file; a relaxed model from mor-convert trains its shared weights and\n"
        "                                 its deltas) with a fresh optimizer\n"
        "        --export-f16 FILE        also write an F16 copy (smaller; for shipping)\n"
        "        --name TEXT              general.name\n"
        "        -q                       no progress line\n");
}

/* "C0,C1,...": each a number in (0, 1], kept as a double (2/3 must not round
 * through float: int(c_r * T) depends on it). */
static int parse_caps(const char *s, double *cap, int *n)
{
    int k = 0;
    for (const char *p = s; ; ) {
        char item[64];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof item || k == TR_MAX_REC) cli_usage_error("--capacity: bad list '%s'", s);
        memcpy(item, p, len);
        item[len] = 0;
        cap[k++] = cli_double("--capacity", item, 0, 1, 1);
        if (!p[len]) break;
        p += len + 1;
    }
    *n = k;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    tr_config_defaults(&o->c);
    tr_optim_defaults(&o->oc);
    o->c.d = 256; o->c.ff = 768; o->c.n_head = 4; o->c.vocab = 0;
    o->B = 16; o->T = 256; o->threads = 2; o->eval_every = 250; o->save_every = 500; o->eval_tokens = 65536;
    o->seed = 1;
    int kv = 0, hd = 0, ctx = 0, ncap = 0, alpha_set = 0, minlr_set = 0;
    double caps[TR_MAX_REC];
    o->c.n_rec = 1; o->c.K = 0;
    strcpy(o->sharing, "none");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define ARG(name) (!strcmp(a, name) && (v = cli_value(argc, argv, &i)) != NULL)
        if (ARG("--data")) o->data = v;
        else if (ARG("--val")) o->val = v;
        else if (ARG("--vocab")) o->vocab = v;
        else if (ARG("-o")) o->out = v;
        else if (ARG("--init")) o->init = v;
        else if (ARG("--export-f16")) o->export_f16 = v;
        else if (ARG("--name")) o->name = v;
        else if (ARG("--d")) o->c.d = (int)cli_int(a, v, 1, 65536);
        else if (ARG("--ff")) o->c.ff = (int)cli_int(a, v, 1, 1048576);
        else if (ARG("--heads")) o->c.n_head = (int)cli_int(a, v, 1, 1024);
        else if (ARG("--kv-heads")) kv = (int)cli_int(a, v, 1, 1024);
        else if (ARG("--head-dim")) hd = (int)cli_int(a, v, 1, 4096);
        else if (ARG("--ctx")) ctx = (int)cli_int(a, v, 1, 16777216);
        else if (ARG("--layers")) o->layers = (int)cli_int(a, v, 1, 4096);
        else if (ARG("--recursions")) o->c.n_rec = (int)cli_int(a, v, 1, TR_MAX_REC);
        else if (ARG("--block")) o->c.K = (int)cli_int(a, v, 1, 4096);
        else if (ARG("--sharing")) { snprintf(o->sharing, sizeof o->sharing, "%s", v); o->sharing_set = 1; }
        else if (ARG("--router")) {
            static const char *const routers[] = { "none", "expert", "token", NULL };
            static const int values[] = { TR_ROUTER_NONE, TR_ROUTER_EXPERT, TR_ROUTER_TOKEN };
            o->c.router = values[cli_choice(a, v, routers)];
        }
        else if (ARG("--capacity")) { if (parse_caps(v, caps, &ncap)) return -1; }
        else if (ARG("--alpha")) { o->c.alpha = (float)cli_double(a, v, -1e6, 1e6, 0); alpha_set = 1; }
        else if (ARG("--aux-coef")) o->c.aux_coef = (float)cli_double(a, v, 0, 1e6, 0);
        else if (ARG("--token-func")) {
            static const char *const funcs[] = { "softmax", "sigmoid", NULL };
            o->c.func = cli_choice(a, v, funcs) ? TR_FUNC_SIGMOID : TR_FUNC_SOFTMAX;
        }
        else if (ARG("--bal-coef")) o->c.bal_coef = (float)cli_double(a, v, 0, 1e6, 0);
        else if (ARG("--z-coef")) o->c.z_coef = (float)cli_double(a, v, 0, 1e6, 0);
        else if (!strcmp(a, "--loss-free")) o->c.loss_free = 1;
        else if (ARG("--lora-rank")) { o->c.lora_rank = (int)cli_int(a, v, 0, 1 << 16); o->lora_set = 1; }
        else if (ARG("--lora-alpha")) { o->c.lora_alpha = (float)cli_double(a, v, -1e6, 1e6, 0); o->lora_set = 1; }
        else if (ARG("--steps")) o->oc.steps = cli_int(a, v, 1, (long long)1 << 40);
        else if (ARG("--batch")) o->B = (int)cli_int(a, v, 1, 65536);
        else if (ARG("--seq")) o->T = (int)cli_int(a, v, 1, 1048576);
        else if (ARG("--lr")) o->oc.lr = (float)cli_double(a, v, 0, 1e3, 1);
        else if (ARG("--min-lr")) { o->oc.min_lr = (float)cli_double(a, v, 0, 1e3, 0); minlr_set = 1; }
        else if (ARG("--warmup")) o->oc.warmup = cli_int(a, v, 0, (long long)1 << 40);
        else if (ARG("--schedule")) {
            static const char *const scheds[] = { "cosine", "wsd", "constant", NULL };
            static const int values[] = { TR_SCHED_COSINE, TR_SCHED_WSD, TR_SCHED_CONSTANT };
            o->oc.schedule = values[cli_choice(a, v, scheds)];
        }
        else if (ARG("--decay-frac")) o->oc.decay_frac = (float)cli_double(a, v, 0, 1, 0);
        else if (ARG("--wd")) o->oc.wd = (float)cli_double(a, v, 0, 1e3, 0);
        else if (ARG("--clip")) o->oc.clip = (float)cli_double(a, v, 0, 1e6, 0);
        else if (ARG("--seed")) o->seed = cli_u64(a, v);
        else if (ARG("--threads")) o->threads = (int)cli_int(a, v, 1, 256);
        else if (ARG("--eval-every")) o->eval_every = (int)cli_int(a, v, 0, INT32_MAX);
        else if (ARG("--eval-tokens")) o->eval_tokens = cli_int(a, v, 1, (long long)1 << 50);
        else if (ARG("--save-every")) o->save_every = (int)cli_int(a, v, 0, INT32_MAX);
        else if (ARG("--flops-budget")) o->flops_budget = cli_double(a, v, 0, 1e30, 0);
        else if (!strcmp(a, "--resume")) o->resume = 1;
        else if (!strcmp(a, "-q")) o->quiet = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else cli_usage_error("unknown option '%s'", a);
#undef ARG
    }
    if (!o->data || !o->vocab || !o->out) cli_usage_error("--data, --vocab and -o are required");
    if (o->lora_set && (o->init || o->resume)) {
        fprintf(stderr, "mor-train: with --init and --resume the LoRA deltas come from the file (no --lora-rank/--lora-alpha)\n");
        return -1;
    }
    tr_config *c = &o->c;
    c->n_kv = kv > 0 ? kv : c->n_head;
    c->head_dim = hd > 0 ? hd : (c->n_head ? c->d / c->n_head : 0);
    c->ctx = ctx > 0 ? ctx : o->T;
    if (o->layers > 0) {   /* vanilla */
        c->n_rec = 1; c->K = o->layers; c->prelude = c->coda = 0;
        if (c->router != TR_ROUTER_NONE) { fprintf(stderr, "mor-train: --layers is a model without routers\n"); return -1; }
    } else {
        if (c->K < 1) c->K = 1;
        if (!o->sharing_set) strcpy(o->sharing, c->n_rec > 1 ? "middle_cycle" : "none");
        int mid = !strcmp(o->sharing, "middle_cycle");
        if (!mid && strcmp(o->sharing, "cycle") && strcmp(o->sharing, "none")) {
            fprintf(stderr, "mor-train: sharing must be middle_cycle or cycle\n");
            return -1;
        }
        c->prelude = c->coda = mid;
    }
    if (c->router == TR_ROUTER_TOKEN && !alpha_set) c->alpha = c->func == TR_FUNC_SOFTMAX ? 1.0f : 0.1f;
    for (int r = 0; r < c->n_rec; r++) c->cap[r] = (double)(c->n_rec - r) / c->n_rec;
    if (ncap) {
        if (ncap != c->n_rec) { fprintf(stderr, "mor-train: --capacity needs %d values\n", c->n_rec); return -1; }
        for (int r = 0; r < ncap; r++) c->cap[r] = caps[r];
    }
    if (c->lora_rank > 0 && c->lora_alpha == 0) c->lora_alpha = (float)c->lora_rank;
    if (!minlr_set) o->oc.min_lr = o->oc.lr / 10;
    return 0;
}

/* ---- data ---- */

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, len = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) { char *b = realloc(buf, (cap *= 2) + 1); if (!b) { free(buf); buf = NULL; } else buf = b; }
    }
    fclose(f);
    if (buf) { buf[len] = 0; *n = len; }
    return buf;
}

/* Tokens of a text file: each document (blank-line separated) then EOS. */
static int32_t *tokenize_file(const mor_model *vm, const char *path, int64_t *n_out)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) { fprintf(stderr, "mor-train: cannot read %s\n", path); return NULL; }
    mor_token eos = mor_model_token_eos(vm);
    int64_t cap = (int64_t)len + 16, n = 0;
    int32_t *toks = malloc(sizeof *toks * (size_t)cap);
    size_t i = 0;
    while (toks && i < len) {
        char *end = strstr(text + i, "\n\n");
        size_t e = end ? (size_t)(end - text) + 1 : len;   /* keep the paragraph's own newline */
        int32_t got = 0;
        if (e > i) {
            mor_status st = mor_tokenize(vm, text + i, e - i, 0, toks + n, (int32_t)(cap - n), &got);
            if (st) { fprintf(stderr, "mor-train: tokenize: %s\n", mor_last_error()); free(toks); toks = NULL; break; }
            n += got;
            if (eos >= 0) toks[n++] = eos;
        }
        i = end ? e + 1 : len;
        while (i < len && text[i] == '\n') i++;
    }
    free(text);
    *n_out = n;
    return toks;
}

/* ---- evaluation ---- */

typedef struct { double ce, ce_thr, acc; int64_t hist[TR_MAX_REC + 1], n; } eval_t;

static void evaluate(const tr_model *m, tr_state *s, const int32_t *val, int64_t n_val, int B, int T,
                     int64_t max_tokens, eval_t *e)
{
    memset(e, 0, sizeof *e);
    int32_t *tok = malloc(sizeof *tok * (size_t)B * T), *tgt = malloc(sizeof *tgt * (size_t)B * T);
    int64_t windows = (n_val - 1) / T;
    if (windows * T > max_tokens) windows = max_tokens / T;
    double sum = 0, sum_thr = 0, acc = 0;
    int64_t done = 0, batches = 0;
    for (int64_t w0 = 0; w0 < windows; w0 += B) {
        int b = (int)(windows - w0 < B ? windows - w0 : B);
        for (int i = 0; i < b; i++)
            for (int t = 0; t < T; t++) {
                tok[i * T + t] = val[(w0 + i) * T + t];
                tgt[i * T + t] = val[(w0 + i) * T + t + 1];
            }
        tr_result r;
        tr_forward(m, s, tok, tgt, b, T, TR_SELECT_TOPK, 0, &r);
        sum += r.ce * b * T;
        acc += r.router_acc;
        if (m->c.router == TR_ROUTER_EXPERT) {
            tr_forward(m, s, tok, tgt, b, T, TR_SELECT_THRESHOLD, 0, &r);
            sum_thr += r.ce * b * T;
        }
        for (int d = 0; d <= TR_MAX_REC; d++) e->hist[d] += r.n_depth[d];
        done += (int64_t)b * T;
        batches++;
    }
    e->n = done;
    e->ce = done ? sum / done : NAN;
    e->ce_thr = done ? sum_thr / done : NAN;
    e->acc = batches ? acc / batches : NAN;
    free(tok); free(tgt);
}

static void hist_str(char *buf, size_t cap, const int64_t *h, int n_rec)
{
    int64_t tot = 0;
    for (int d = 0; d <= n_rec; d++) tot += h[d];
    size_t k = 0;
    for (int d = 0; d <= n_rec && k < cap; d++) {
        if (d == 0 && h[0] == 0) continue;
        k += (size_t)snprintf(buf + k, cap - k, "%s%d:%.0f%%", k ? " " : "", d, tot ? 100.0 * h[d] / tot : 0.0);
    }
    if (!k && cap) buf[0] = 0;
}

/* ---- tokenizer metadata for the model file ---- */

typedef struct { char **tokens, **merges; int32_t *types; int32_t n_tok, n_merges, eos; void *buf; } vocab_t;

static int load_vocab_meta(const char *path, vocab_t *v)
{
    memset(v, 0, sizeof *v);
    size_t n;
    v->buf = read_file(path, &n);
    gguf_file *g = NULL;
    if (!v->buf || gguf_parse(v->buf, n, &g)) return -1;
    const gguf_kv *tk, *mk;
    if (gguf_get_arr_str(g, "tokenizer.ggml.tokens", &tk) || gguf_get_arr_str(g, "tokenizer.ggml.merges", &mk)) {
        gguf_free(g);
        return -1;
    }
    v->n_tok = (int32_t)tk->arr_n; v->n_merges = (int32_t)mk->arr_n;
    v->tokens = calloc((size_t)v->n_tok, sizeof(char *));
    v->merges = calloc((size_t)v->n_merges + 1, sizeof(char *));
    v->types = calloc((size_t)v->n_tok, sizeof(int32_t));
    for (int32_t i = 0; i < v->n_tok; i++) v->tokens[i] = strndup(tk->strs[i].p, tk->strs[i].n);
    for (int32_t i = 0; i < v->n_merges; i++) v->merges[i] = strndup(mk->strs[i].p, mk->strs[i].n);
    gguf_get_arr_i32(g, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n_tok);
    uint32_t eos;
    v->eos = gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos) ? -1 : (int32_t)eos;
    gguf_free(g);
    return 0;
}

static void free_vocab_meta(vocab_t *v)
{
    for (int32_t i = 0; i < v->n_tok; i++) free(v->tokens[i]);
    for (int32_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens); free(v->merges); free(v->types); free(v->buf);
}

static int save_all(const opts *o, const tr_model *m, const tr_optim *opt, const vocab_t *voc)
{
    char err[512], path[4096];
    tr_save_opts so = { (const char *const *)voc->tokens, voc->types, voc->n_tok,
                        (const char *const *)voc->merges, voc->n_merges, voc->eos, o->name, 0 };
    if (tr_save_gguf(m, o->out, &so, err, sizeof err)) { fprintf(stderr, "\nmor-train: %s\n", err); return -1; }
    snprintf(path, sizeof path, "%s.opt", o->out);
    if (tr_save_optim(opt, m, path, err, sizeof err)) { fprintf(stderr, "\nmor-train: %s\n", err); return -1; }
    if (o->export_f16) {
        so.f16 = 1;
        if (tr_save_gguf(m, o->export_f16, &so, err, sizeof err)) { fprintf(stderr, "\nmor-train: %s\n", err); return -1; }
    }
    return 0;
}

/* "1h02m", "3m05s", "12s" for the time the remaining steps should take at
 * the pace so far (or the FLOPs budget, when it ends the run first). */
static void eta_str(char *buf, size_t cap, double elapsed, double done, double left, double left_by_flops)
{
    if (left_by_flops >= 0 && left_by_flops < left) left = left_by_flops;
    double s = done > 0 ? elapsed / done * left : 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    opts o;
    cli_init("mor-train");
    if (parse_args(argc, argv, &o)) return 2;
    {   /* no output may be an input (with --resume, -o is the checkpoint read and rewritten) */
        const char *inputs[] = { o.data, o.val, o.vocab, o.init, o.resume ? NULL : o.out };
        if ((o.export_f16 && cli_refuse_overwrite(o.export_f16, inputs, 5)) ||
            (!o.resume && cli_refuse_overwrite(o.out, inputs, 4)))
            return 2;
    }
    tr_set_threads(o.threads);

    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    mp.flags = MOR_MODEL_VOCAB_ONLY;
    mor_model *vm;
    if (mor_model_load_file(o.vocab, &mp, &vm)) { fprintf(stderr, "mor-train: %s\n", mor_last_error()); return 1; }
    vocab_t voc;
    if (load_vocab_meta(o.vocab, &voc)) { fprintf(stderr, "mor-train: cannot read the tokenizer of %s\n", o.vocab); return 1; }
    o.c.vocab = mor_model_n_vocab(vm);
    int64_t n_train = 0, n_val = 0;
    double t0 = now();
    int32_t *train = tokenize_file(vm, o.data, &n_train), *val = NULL;
    if (!train) return 1;
    if (o.val && !(val = tokenize_file(vm, o.val, &n_val))) return 1;
    mor_model_free(vm);
    if (n_train < o.T + 2) { fprintf(stderr, "mor-train: %s has only %lld tokens\n", o.data, (long long)n_train); return 1; }
    fprintf(stderr, "mor-train: %lld training tokens, %lld held-out, vocab %d (tokenized in %.1f s)\n",
            (long long)n_train, (long long)n_val, o.c.vocab, now() - t0);

    tr_model m;
    char err[512];
    const char *from = o.resume ? o.out : o.init;
    if (from) {
        if (tr_load_gguf(&m, from, err, sizeof err)) { fprintf(stderr, "mor-train: %s\n", err); return 1; }
        o.c = m.c;
    } else {
        const char *bad = tr_config_check(&o.c);
        if (bad || tr_model_init(&m, &o.c, o.seed)) { fprintf(stderr, "mor-train: %s\n", bad ? bad : "out of memory"); return 1; }
    }
    tr_optim opt;
    if (tr_optim_init(&opt, &o.oc, m.n_params)) { fprintf(stderr, "mor-train: out of memory\n"); return 1; }
    if (o.resume) {
        char path[4096];
        snprintf(path, sizeof path, "%s.opt", o.out);
        if (tr_load_optim(&opt, &m, path, err, sizeof err)) { fprintf(stderr, "mor-train: %s\n", err); return 1; }
    }
    tr_state *s = tr_state_new(&m, o.B, o.T);
    if (!s) { fprintf(stderr, "mor-train: cannot allocate activations for batch %d x %d\n", o.B, o.T); return 1; }
    const tr_config *c = &m.c;
    static const char *const rname[] = { "none", "expert", "token" };
    fprintf(stderr, "mor-train: %zu parameters; d %d ff %d heads %d/%d hd %d; L %d = %d + %d x %d + %d; router %s;"
            " batch %d x %d; %lld steps, lr %g %s, %d threads\n",
            m.n_params, c->d, c->ff, c->n_head, c->n_kv, c->head_dim, m.L, c->prelude, c->n_rec, c->K, c->coda,
            rname[c->router], o.B, o.T, (long long)o.oc.steps, o.oc.lr,
            o.oc.schedule == TR_SCHED_WSD ? "wsd" : o.oc.schedule == TR_SCHED_CONSTANT ? "constant" : "cosine",
            tr_threads());

    if (m.lora_rmax) {
        int n = 0, rmin = m.lora_rmax;
        size_t np = 0;
        for (int i = 0; i < m.n_t; i++)
            if (m.t[i].rec >= 0) np += (size_t)(m.t[i].rows * m.t[i].cols);
        for (int r = 0; r < c->n_rec; r++)
            for (int j = 0; j < c->K; j++)
                for (int role = 0; role < TR_NROLE; role++)
                    if (m.lora.rank[r][j][role]) { n++; if (m.lora.rank[r][j][role] < rmin) rmin = m.lora.rank[r][j][role]; }
        fprintf(stderr, "mor-train: LoRA: %d deltas of rank %d..%d (%zu parameters), trained with the shared weights\n",
                n, rmin, m.lora_rmax, np);
    }
    int32_t *tok = malloc(sizeof *tok * (size_t)o.B * o.T), *tgt = malloc(sizeof *tgt * (size_t)o.B * o.T);
    double flops = 0, t_start = now(), tok_done = 0, loss_ema = NAN;
    int64_t hist[TR_MAX_REC + 1] = { 0 };
    eval_t ev = { 0 };
    int stop = 0;
    const int64_t first_step = opt.step;
    /* training FLOPs = 3 x forward (the backward costs two forwards) */
    for (int64_t step = opt.step; step < o.oc.steps && !stop; step++) {
        uint64_t rng = o.seed * 0x9E3779B97F4A7C15u ^ (uint64_t)(step + 1) * 0xD1B54A32D192ED03u;
        for (int b = 0; b < o.B; b++) {
            int64_t st = (int64_t)(tr_rand_u64(&rng) % (uint64_t)(n_train - o.T - 1));
            for (int t = 0; t < o.T; t++) { tok[b * o.T + t] = train[st + t]; tgt[b * o.T + t] = train[st + t + 1]; }
        }
        tr_result r;
        tr_forward(&m, s, tok, tgt, o.B, o.T, TR_SELECT_TOPK, 0, &r);
        tr_backward(&m, s);
        double gnorm = tr_optim_step(&opt, &m);
        tr_update_bias(&m, s);
        flops += 3 * r.flops;
        tok_done += (double)o.B * o.T;
        loss_ema = isnan(loss_ema) ? r.ce : 0.95 * loss_ema + 0.05 * r.ce;
        for (int d = 0; d <= TR_MAX_REC; d++) hist[d] += r.n_depth[d];
        if (o.flops_budget > 0 && flops >= o.flops_budget) stop = 1;
        int last = step + 1 == o.oc.steps || stop;
        double el = now() - t_start;
        if (!o.quiet) {
            char h[128];
            hist_str(h, sizeof h, hist, c->n_rec);
            char eta[32];
            eta_str(eta, sizeof eta, el, (double)(step + 1 - first_step), (double)(o.oc.steps - step - 1),
                    o.flops_budget > 0 ? (o.flops_budget - flops) / (flops > 0 ? flops / (step + 1 - first_step) : 1)
                                       : -1);
            fprintf(stderr, "\rstep %lld/%lld  loss %.3f  lr %.2e  |g| %.2f  %.0f tok/s  %.1f TFLOP  ETA %s  depth %s   ",
                    (long long)step + 1, (long long)o.oc.steps, loss_ema, tr_lr_at(&o.oc, step), gnorm,
                    tok_done / el, flops / 1e12, eta, h);
            if (c->router == TR_ROUTER_EXPERT) fprintf(stderr, "rtr-acc %.3f ", r.router_acc);
            fflush(stderr);
        }
        if (val && n_val > o.T + 1 && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last)) {
            /* the last evaluation reads the whole held-out text */
            evaluate(&m, s, val, n_val, o.B, o.T, last ? INT64_MAX : o.eval_tokens, &ev);
            char h[128];
            hist_str(h, sizeof h, ev.hist, c->n_rec);
            fprintf(stderr, "\n  eval step %lld: held-out loss %.4f (ppl %.1f) over %lld tokens", (long long)step + 1,
                    ev.ce, exp(ev.ce), (long long)ev.n);
            if (c->router == TR_ROUTER_EXPERT)
                fprintf(stderr, "; THRESHOLD routing %.4f, depth %s, router agrees with top-k %.3f", ev.ce_thr, h, ev.acc);
            else if (c->router == TR_ROUTER_TOKEN)
                fprintf(stderr, "; depth %s", h);
            fprintf(stderr, "; %.1f TFLOP, %.0f s\n", flops / 1e12, el);
            memset(hist, 0, sizeof hist);
        }
        if ((o.save_every > 0 && (step + 1) % o.save_every == 0) || last)
            if (save_all(&o, &m, &opt, &voc)) return 1;
    }
    double el = now() - t_start;
    fprintf(stderr, "\nmor-train: done: %lld steps, %.0f tokens, %.3g training FLOPs, %.0f s (%.0f tok/s)",
            (long long)opt.step, tok_done, flops, el, tok_done / (el > 0 ? el : 1));
    if (ev.n) fprintf(stderr, "; final held-out loss %.4f", ev.ce);
    fprintf(stderr, "\n");
    /* one machine-readable line for scripts and docs */
    printf("RESULT steps=%lld tokens=%.0f train_flops=%.4g seconds=%.0f", (long long)opt.step, tok_done, flops, el);
    if (ev.n) {   /* only when there was held-out text to evaluate */
        printf(" heldout_loss=%.4f", ev.ce);
        if (c->router == TR_ROUTER_EXPERT) printf(" heldout_loss_threshold=%.4f", ev.ce_thr);
    }
    printf("\n");
    free(tok); free(tgt); free(train); free(val);
    tr_state_free(s);
    tr_optim_free(&opt);
    tr_model_free(&m);
    free_vocab_meta(&voc);
    tr_set_threads(1);
    return 0;
}
