/* mor-run - generate with a MoR model, or dump its numbers for comparison.
 *
 *   mor-run -m MODEL.gguf -p "Once upon a time" -n 64 [--show-depth]
 *   mor-run -m MODEL.gguf --ids 14,148,141 --routing topk --dump-logits L.f32 --dump-routing R.json
 *   mor-run -m MODEL.gguf --ids 14,148,141 -n 8 --greedy --routing topk [--no-cache] --print-ids
 *   mor-run -m VOCAB.gguf --tokenize-file T.txt
 *
 * Run with --help for every option. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mor.h"

typedef struct {
    const char *model, *prompt, *ids, *dump_logits, *dump_routing, *dump_hidden, *tokenize_file;
    int n_predict, greedy, no_cache, print_ids, show_depth, quiet, max_depth, forced, routing_set;
    int routing, kv_mode, n_ctx;
    float thresholds[32];
    int n_thresholds;
    mor_sampler_params sp;
} options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mor-run -m MODEL.gguf [options]\n"
        "  -p, --prompt TEXT        prompt text (needs a model with a tokenizer)\n"
        "  --ids A,B,C              prompt as token ids\n"
        "  -n N                     tokens to generate (default 64 with -p; 0 with --dump-*)\n"
        "  --greedy                 greedy sampling (same as --temp 0)\n"
        "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --repeat-last-n N --seed S\n"
        "  --routing MODE           topk | threshold | forced:N | token (default: the model's own)\n"
        "  --threshold V[,V...]     THRESHOLD-mode thresholds per recursion\n"
        "  --max-depth N            cap every token's recursions at N\n"
        "  --kv recursion|shared    KV caching across recursions (default: the model's)\n"
        "  --ctx N                  KV cells per layer (default: min(train context, 4096))\n"
        "  --no-cache               recompute the whole sequence at every step\n"
        "  --print-ids              print the generated ids on one line\n"
        "  --show-depth             print each generated token with its depth: text[d]\n"
        "  --dump-logits FILE       logits of one forward over the prompt, float32 [T][vocab]\n"
        "  --dump-routing FILE      that forward's routing as JSON {depth, selected}\n"
        "  --dump-hidden FILE       that forward's hidden states, float32 [points][T][n_embd]\n"
        "  --tokenize-file FILE     print the ids of FILE's bytes on one line and exit\n"
        "  -q                       no statistics on stderr\n");
}

static int die(const char *what, mor_status st)
{
    fprintf(stderr, "mor-run: %s: %s (%s)\n", what, mor_last_error(), mor_status_str(st));
    return 1;
}

static int parse_ids(const char *s, mor_token **out, int *n)
{
    int cap = 16, k = 0;
    mor_token *v = malloc(sizeof *v * (size_t)cap);
    while (v && *s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < INT32_MIN || x > INT32_MAX || (*end && *end != ',')) { free(v); return 0; }
        if (k == cap) { mor_token *nv = realloc(v, sizeof *v * (size_t)(cap *= 2)); if (!nv) { free(v); return 0; } v = nv; }
        v[k++] = (mor_token)x;
        s = *end ? end + 1 : end;
    }
    *out = v; *n = k;
    return v != NULL && k > 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = -1; o->kv_mode = MOR_KV_MODEL_DEFAULT;
    MOR_SAMPLER_PARAMS_INIT(&o->sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && (v || (fprintf(stderr, "mor-run: %s needs a value\n", name), 0)) && ++i)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (ARG("-m") || (strcmp(a, "--model") == 0 && v && ++i)) o->model = v;
        else if (ARG("-p") || (strcmp(a, "--prompt") == 0 && v && ++i)) o->prompt = v;
        else if (ARG("--ids")) o->ids = v;
        else if (ARG("-n")) o->n_predict = atoi(v);
        else if (!strcmp(a, "--greedy")) o->greedy = 1;
        else if (ARG("--temp")) o->sp.temperature = (float)atof(v);
        else if (ARG("--top-k")) o->sp.top_k = atoi(v);
        else if (ARG("--top-p")) o->sp.top_p = (float)atof(v);
        else if (ARG("--min-p")) o->sp.min_p = (float)atof(v);
        else if (ARG("--repeat-penalty")) o->sp.repeat_penalty = (float)atof(v);
        else if (ARG("--repeat-last-n")) o->sp.repeat_last_n = atoi(v);
        else if (ARG("--seed")) o->sp.seed = strtoull(v, NULL, 10);
        else if (ARG("--routing")) {
            o->routing_set = 1;
            if (!strcmp(v, "topk")) o->routing = MOR_ROUTE_TOPK;
            else if (!strcmp(v, "threshold")) o->routing = MOR_ROUTE_THRESHOLD;
            else if (!strcmp(v, "token")) o->routing = MOR_ROUTE_TOKEN;
            else if (!strncmp(v, "forced:", 7)) { o->routing = MOR_ROUTE_FORCED; o->forced = atoi(v + 7); }
            else { fprintf(stderr, "mor-run: unknown routing '%s'\n", v); return 0; }
        }
        else if (ARG("--threshold")) {
            for (const char *s = v; *s && o->n_thresholds < 32; ) {
                char *end;
                o->thresholds[o->n_thresholds++] = strtof(s, &end);
                if (end == s) { fprintf(stderr, "mor-run: bad --threshold\n"); return 0; }
                s = *end == ',' ? end + 1 : end;
            }
        }
        else if (ARG("--max-depth")) o->max_depth = atoi(v);
        else if (ARG("--kv")) {
            if (!strcmp(v, "recursion")) o->kv_mode = MOR_KV_RECURSION_WISE;
            else if (!strcmp(v, "shared")) o->kv_mode = MOR_KV_SHARED;
            else { fprintf(stderr, "mor-run: --kv takes recursion or shared\n"); return 0; }
        }
        else if (ARG("--ctx")) o->n_ctx = atoi(v);
        else if (!strcmp(a, "--no-cache")) o->no_cache = 1;
        else if (!strcmp(a, "--print-ids")) o->print_ids = 1;
        else if (!strcmp(a, "--show-depth")) o->show_depth = 1;
        else if (!strcmp(a, "-q")) o->quiet = 1;
        else if (ARG("--dump-logits")) o->dump_logits = v;
        else if (ARG("--dump-routing")) o->dump_routing = v;
        else if (ARG("--dump-hidden")) o->dump_hidden = v;
        else if (ARG("--tokenize-file")) o->tokenize_file = v;
        else { fprintf(stderr, "mor-run: unknown or incomplete option '%s' (see --help)\n", a); return 0; }
#undef ARG
    }
    if (!o->model) { usage(stderr); return 0; }
    if (o->greedy) o->sp.temperature = 0;
    return 1;
}

static int tokenize_file(const mor_model *m, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "mor-run: cannot open %s: %s\n", path, strerror(errno)); return 1; }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) { char *nb = realloc(buf, cap *= 2); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "mor-run: out of memory\n"); return 1; }
    int32_t count = 0;
    mor_status st = mor_tokenize(m, buf, n, MOR_TOKENIZE_PARSE_SPECIAL, NULL, 0, &count);
    mor_token *ids = NULL;
    if (st == MOR_E_BUFFER_TOO_SMALL || st == MOR_OK) {
        ids = malloc(sizeof *ids * (size_t)(count ? count : 1));
        st = ids ? mor_tokenize(m, buf, n, MOR_TOKENIZE_PARSE_SPECIAL, ids, count, &count) : MOR_E_NOMEM;
    }
    free(buf);
    if (st) { free(ids); return die("tokenize", st); }
    for (int32_t i = 0; i < count; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One forward over tokens[0..n) of sequence 0 from position 0 (the cache is
 * cleared first); logits for every row when all_logits, else the last. */
static mor_status forward_all(mor_context *ctx, mor_batch *b, const mor_token *tokens, int n, int all_logits)
{
    mor_kv_clear(mor_context_kv(ctx));
    mor_batch_clear(b);
    for (int i = 0; i < n; i++) {
        mor_status st = mor_batch_add(b, tokens[i], i, 0, all_logits || i == n - 1);
        if (st) return st;
    }
    return mor_decode(ctx, b);
}

static int write_floats(const char *path, const float *const *rows, int n_rows, size_t row_len)
{
    FILE *f = fopen(path, "wb");
    if (!f) { fprintf(stderr, "mor-run: cannot write %s: %s\n", path, strerror(errno)); return 0; }
    for (int i = 0; i < n_rows; i++)
        if (!rows[i] || fwrite(rows[i], sizeof(float), row_len, f) != row_len) { fclose(f); return 0; }
    return fclose(f) == 0;
}

static int dump(mor_context *ctx, const options *o, int n)
{
    const mor_model *m = mor_context_model(ctx);
    const float **rows = malloc(sizeof *rows * (size_t)n * (size_t)(mor_model_n_boundaries(m) + 1));
    if (!rows) return 0;
    int ok = 1;
    if (o->dump_logits) {
        for (int i = 0; i < n; i++) rows[i] = mor_get_logits(ctx, i);
        ok = ok && write_floats(o->dump_logits, rows, n, (size_t)mor_model_n_vocab(m));
    }
    if (o->dump_hidden) {
        int nb = mor_model_n_boundaries(m);
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < n; i++) rows[b * n + i] = mor_get_hidden(ctx, b, i);
        ok = ok && write_floats(o->dump_hidden, rows, nb * n, (size_t)mor_model_n_embd(m));
    }
    free((void *)rows);
    if (ok && o->dump_routing) {
        int32_t *depth = malloc(sizeof *depth * (size_t)n);
        FILE *f = fopen(o->dump_routing, "w");
        if (!depth || !f) { free(depth); if (f) fclose(f); return 0; }
        mor_router_get_depths(mor_context_router(ctx), depth, n);
        fprintf(f, "{\"depth\": [");
        for (int i = 0; i < n; i++) fprintf(f, i ? ", %d" : "%d", depth[i]);
        fprintf(f, "], \"selected\": [");
        for (int r = 0; r < mor_model_n_recursion(m); r++) {
            fprintf(f, r ? ", [" : "[");
            for (int i = 0, k = 0; i < n; i++) if (depth[i] > r) fprintf(f, k++ ? ", %d" : "%d", i);
            fprintf(f, "]");
        }
        fprintf(f, "]}\n");
        free(depth);
        ok = fclose(f) == 0;
    }
    if (!ok) fprintf(stderr, "mor-run: writing a dump failed\n");
    return ok;
}

static void print_piece(const mor_model *m, mor_token t, int depth, int show_depth)
{
    char buf[256];
    size_t len = 0;
    if (mor_detokenize(m, &t, 1, buf, sizeof buf, &len) == MOR_OK) fwrite(buf, 1, len, stdout);
    else printf("<%d>", t);
    if (show_depth) printf("[%d]", depth);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    options o;
    if (!parse_args(argc, argv, &o)) return 2;
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    if (o.tokenize_file) mp.flags |= MOR_MODEL_VOCAB_ONLY;
    mor_model *model = NULL;
    mor_status st = mor_model_load_file(o.model, &mp, &model);
    if (st) return die("loading the model", st);
    if (o.tokenize_file) { int rc = tokenize_file(model, o.tokenize_file); mor_model_free(model); return rc; }

    mor_token *prompt = NULL;
    int n_prompt = 0;
    if (o.ids) {
        if (!parse_ids(o.ids, &prompt, &n_prompt)) { fprintf(stderr, "mor-run: bad --ids list\n"); return 2; }
    } else if (o.prompt) {
        int32_t cnt = 0;
        size_t len = strlen(o.prompt);
        st = mor_tokenize(model, o.prompt, len, MOR_TOKENIZE_PARSE_SPECIAL, NULL, 0, &cnt);
        if (st && st != MOR_E_BUFFER_TOO_SMALL) return die("tokenizing the prompt", st);
        prompt = malloc(sizeof *prompt * (size_t)(cnt ? cnt : 1));
        if (!prompt || (st = mor_tokenize(model, o.prompt, len, MOR_TOKENIZE_PARSE_SPECIAL, prompt, cnt, &cnt)))
            return die("tokenizing the prompt", st);
        n_prompt = cnt;
    }
    if (n_prompt == 0) { fprintf(stderr, "mor-run: give a prompt (-p TEXT or --ids A,B,C)\n"); return 2; }
    int dumping = o.dump_logits || o.dump_routing || o.dump_hidden;
    int n_predict = o.n_predict >= 0 ? o.n_predict : (dumping ? 0 : 64);
    int total = n_prompt + n_predict;

    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_batch = (uint32_t)(total > 512 ? total : 512);
    cp.n_ctx = (uint32_t)(o.n_ctx > 0 ? o.n_ctx : 0);
    if (cp.n_ctx == 0 && (int64_t)total > mor_model_n_ctx_train(model)) cp.n_ctx = (uint32_t)total;
    cp.kv_mode = o.kv_mode;
    if (o.dump_hidden) cp.flags |= MOR_CTX_CAPTURE_HIDDEN;
    mor_context *ctx = NULL;
    if ((st = mor_context_create(model, &cp, &ctx))) return die("creating the context", st);
    mor_router *router = mor_context_router(ctx);
    if (o.routing_set && (st = mor_router_set_mode(router, o.routing, o.forced))) return die("--routing", st);
    for (int r = 0; r < o.n_thresholds; r++)
        if ((st = mor_router_set_threshold(router, r, o.thresholds[r]))) return die("--threshold", st);
    if (o.max_depth && (st = mor_router_set_max_depth(router, o.max_depth))) return die("--max-depth", st);
    mor_batch *batch = NULL;
    mor_sampler *sampler = NULL;
    if ((st = mor_batch_create((int32_t)cp.n_batch, &batch))) return die("creating a batch", st);
    if ((st = mor_sampler_create(&o.sp, &sampler))) return die("creating the sampler", st);

    int rc = 0;
    mor_token *seq = malloc(sizeof *seq * (size_t)total);
    if (!seq) { fprintf(stderr, "mor-run: out of memory\n"); return 1; }
    memcpy(seq, prompt, sizeof *seq * (size_t)n_prompt);
    for (int i = 0; i < n_prompt; i++) mor_sampler_accept(sampler, prompt[i]);

    double t0 = now_s();
    if ((st = forward_all(ctx, batch, seq, n_prompt, dumping))) return die("decoding the prompt", st);
    double t_prompt = now_s() - t0;
    if (dumping && !dump(ctx, &o, n_prompt)) return 1;
    if (!o.print_ids && !o.quiet && n_predict > 0 && o.prompt) { fputs(o.prompt, stdout); fflush(stdout); }

    mor_router_reset_stats(router);
    int n = n_prompt, n_gen = 0;
    double t1 = now_s();
    const float *logits = mor_get_logits(ctx, n_prompt - 1);
    while (n_gen < n_predict) {
        mor_token t;
        if ((st = mor_sampler_sample(sampler, logits, mor_model_n_vocab(model), &t))) { rc = die("sampling", st); break; }
        seq[n++] = t;
        n_gen++;
        if (o.no_cache) {
            if ((st = forward_all(ctx, batch, seq, n, 0))) { rc = die("decoding", st); break; }
        } else {
            mor_batch_clear(batch);
            mor_batch_add(batch, t, n - 1, 0, 1);
            if ((st = mor_decode(ctx, batch))) { rc = die("decoding", st); break; }
        }
        int32_t depth = 0;
        mor_router_get_depths(router, &depth, 1);   /* no-cache: row 0's; cached: the new token's */
        if (!o.no_cache && !o.print_ids) print_piece(model, t, depth, o.show_depth);
        else if (!o.print_ids) print_piece(model, t, -1, 0);
        logits = mor_get_logits(ctx, o.no_cache ? n - 1 : 0);
        if (mor_model_token_eos(model) >= 0 && t == mor_model_token_eos(model) && !o.print_ids && !o.ids) break;
    }
    double t_gen = now_s() - t1;
    if (o.print_ids) {
        for (int i = n_prompt; i < n; i++) printf(i > n_prompt ? " %d" : "%d", seq[i]);
        printf("\n");
    } else if (n_gen) {
        printf("\n");
    }
    if (!o.quiet && !rc) {
        mor_router_stats rs = { sizeof rs, 0, 0, { 0 } };
        mor_router_get_stats(router, &rs);
        uint64_t alloc = 0, used = 0;
        mor_kv_bytes(mor_context_kv(ctx), MOR_KV_ALL, &alloc, &used);
        fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s)\n",
                n_prompt, t_prompt, n_prompt / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
                n_gen / (t_gen > 0 ? t_gen : 1e-9));
        if (rs.n_tokens) {
            fprintf(stderr, "depth: mean %.2f over %llu generated tokens; histogram", rs.mean_depth,
                    (unsigned long long)rs.n_tokens);
            for (int d = 0; d <= mor_model_n_recursion(model); d++)
                fprintf(stderr, " %d:%llu", d, (unsigned long long)rs.n_at_depth[d]);
            fprintf(stderr, "\n");
        }
        fprintf(stderr, "KV cache: %llu bytes in use of %llu allocated", (unsigned long long)used,
                (unsigned long long)alloc);
        for (int r = 0; r < mor_model_n_recursion(model); r++) {
            mor_kv_bytes(mor_context_kv(ctx), r, NULL, &used);
            fprintf(stderr, "%s recursion %d: %llu", r ? "," : ";", r, (unsigned long long)used);
        }
        fprintf(stderr, "\n");
    }
    free(seq); free(prompt);
    mor_sampler_free(sampler);
    mor_batch_free(batch);
    mor_context_free(ctx);
    mor_model_free(model);
    return rc;
}
