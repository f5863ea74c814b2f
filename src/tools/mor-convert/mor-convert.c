/* mor-convert - convert a Hugging Face MoR / recursive / Llama checkpoint, or
 * one of a Gemma, Gemma 2 or GPT-NeoX (Pythia) model, to a `mor` GGUF file (docs/FORMAT.md), or a tokenizer to a vocab-only GGUF;
 * optionally make a vanilla model recursive with depth-wise LoRA deltas
 * (Relaxed Recursive Transformers, docs/RELAXED.md).
 *
 *   mor-convert DIR -o OUT.gguf [options]
 *   mor-convert MODEL.gguf -o OUT.gguf --num-recursion 2 --sharing cycle --init average --lora-rank 16
 *   mor-convert --vocab-only DIR -o V.gguf [--tokenizer FILE]
 *   mor-convert --vocab-only FILE.gguf -o V.gguf
 *
 * Errors: one line on stderr, exit code 1 (2 for a bad command line). The
 * output is written to a temporary file next to OUT and renamed, so OUT is
 * never left half-written, and it is never one of the input files. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "convert.h"
#include "dtype.h"
#include "layout.h"
#include "settings.h"
#include "relax.h"
#include "cli.h"

static const char usage[] =
    "usage: mor-convert DIR -o OUT.gguf [options]\n"
    "       mor-convert MODEL.gguf -o OUT.gguf [options]\n"
    "       mor-convert --vocab-only DIR -o OUT.gguf [--tokenizer FILE]\n"
    "       mor-convert --vocab-only FILE.gguf -o OUT.gguf\n"
    "\n"
    "DIR holds config.json and model.safetensors or pytorch_model.bin (model.safetensors\n"
    "is used when both exist, unless --weights says otherwise), of a LlamaForCausalLM\n"
    "(TinyLlama, SmolLM), MoRLlamaForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM or\n"
    "GPTNeoXForCausalLM (Pythia). MODEL.gguf is a libmor model without routers (e.g. from\n"
    "mor-train) or a llama.cpp file of architecture llama, gemma, gemma2 or gptneox\n"
    "(F32/F16/BF16, or ggml's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and k-quants Q2_K .. Q6_K; no RoPE\n"
    "scaling). A plain conversion keeps each quantized matrix in its type, byte for byte (a\n"
    "Q4_K_M file stays Q4_K_M); --init (a relaxed recursive model) and --outtype read them\n"
    "dequantized, and mor-quantize re-quantizes the result.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE       the GGUF file to write (required)\n"
    "  --weights FILE          the checkpoint: a path, or a file name inside DIR\n"
    "  --mor-config FILE       the official Hydra config (mor_cfg.yaml) or its JSON form\n"
    "                          (mor_config.json); default DIR/mor_cfg.yaml, then DIR/../mor_cfg.yaml\n"
    "  --tokenizer FILE        tokenizer.json to embed (default DIR/tokenizer.json if present)\n"
    "  --outtype TYPE          auto|f32|f16|bf16 for weight matrices (default auto: as in the\n"
    "                          checkpoint or file); norms and routers are always f32\n"
    "  --name NAME             general.name\n"
    "  --vocab-only            write only the tokenizer: of DIR/tokenizer.json, or of a GGUF file\n"
    "                          (a llama.cpp vocab or model file: its tokenizer.ggml.* keys)\n"
    "  --tie-lm-head           tie the output matrix to the embedding when config.json says\n"
    "                          tie_word_embeddings, as transformers' from_pretrained does (default:\n"
    "                          a saved lm_head.weight that differs from the embedding is kept, as\n"
    "                          the official code trains recursive baselines; one equal to it is\n"
    "                          stored tied)\n"
    "MoR settings (override the config file):\n"
    "  --mor-type expert|token|none     --num-recursion N     --base-depth K\n"
    "  --sharing cycle|middle_cycle|sequence|middle_sequence\n"
    "  --capacity C0,C1,...             --router-type linear|mlp\n"
    "  --router-func sigmoid|tanh|softmax|none                --alpha X   --temp X\n"
    "  --gating weighted|additive       --sampling aux_loss|aux_router\n"
    "  --kv-sharing 0|1                 --bias-balancing (token-choice loss-free bias)\n"
    "Relaxed recursive conversion of a vanilla model (with --num-recursion N --sharing S):\n"
    "  --init stepwise|average|lower|upper   how the shared block is made from the layers\n"
    "  --lora-rank R | q=R,k=R,v=R,o=R,gate=R,up=R,down=R\n"
    "                          a LoRA delta per looped layer and projection, the truncated SVD\n"
    "                          of what tying lost (0 or omitted: not relaxed; capped at min(in, out))\n"
    "  --keep-norms            keep every layer's own norm weights and biases (then full rank\n"
    "                          reproduces the original exactly; the official code ties them)\n"
    "  --svd exact|fast        exact: Jacobi on the whole residual; fast (default): subspace\n"
    "                          iteration first when the rank is small next to the matrix\n"
    "  --threads N             SVDs in parallel (default 2)\n"
    "Relaxed (PEFT LoRA) checkpoints of the official code (scale alpha/r; override the config):\n"
    "  --lora-alpha A          relaxation.lora.alpha (scale A / r)\n"
    "  --lora-alpha-pattern P  relaxation.lora.alpha_pattern (scale P)\n"
    "  -h, --help\n";

/* A runtime error: one escaped line, exit 1 (bad command lines exit 2 in cli.c). */
static void die(const char *fmt, const char *a)
{
    char msg[1200];
    snprintf(msg, sizeof msg, fmt, a);
    cli_error("error: %s", msg);
    exit(1);
}

static int parse_enum(const char *const *names, const char *flag, const char *v)
{
    int i = ms_lookup(names, v);
    if (i < 0) {
        char list[256];
        size_t k = 0;
        for (int j = 0; names[j] && k < sizeof list; j++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", j ? "|" : "", names[j]);
        cli_usage_error("%s: expected %s, got '%s'", flag, list, v);
    }
    return i;
}

static double parse_double(const char *flag, const char *v) { return cli_double(flag, v, -1e300, 1e300, 0); }

static int parse_int(const char *flag, const char *v, int lo, int hi) { return (int)cli_int(flag, v, lo, hi); }

/* "8" (every projection) or "q=8,k=8,v=8,o=8,gate=16,up=16,down=16" */
static void parse_ranks(const char *v, int *rank)
{
    static const char *const names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    static const int roles[] = {CV_ROLE_ATTN_Q, CV_ROLE_ATTN_K, CV_ROLE_ATTN_V, CV_ROLE_ATTN_OUT,
                                CV_ROLE_FFN_GATE, CV_ROLE_FFN_UP, CV_ROLE_FFN_DOWN};
    if (!strchr(v, '=')) {
        int r = parse_int("--lora-rank", v, 0, 1 << 20);
        for (int i = 0; i < 7; i++) rank[roles[i]] = r;
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        int i;
        if (!eq) cli_usage_error("--lora-rank: bad item '%s' (want NAME=RANK)", tok);
        *eq = 0;
        for (i = 0; i < 7 && strcmp(tok, names[i]); i++) {}
        if (i == 7) cli_usage_error("--lora-rank: bad projection '%s' (q, k, v, o, gate, up, down)", tok);
        rank[roles[i]] = parse_int("--lora-rank", eq + 1, 0, 1 << 20);
    }
}

/* Progress on a terminal (stderr), redrawn in place at most every 1/10 s:
 * SVDs done, tensors written. Never into a file or a pipe. */
typedef struct { char what[32]; double last; int shown; } progress_line;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void show_progress(const char *what, int64_t done, int64_t total, void *ud)
{
    progress_line *p = ud;
    double t = now_s();
    int fresh = strcmp(p->what, what) != 0;
    if (!fresh && done < total && t - p->last < 0.1) return;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->last = t;
    p->shown = 1;
    fprintf(stderr, "\rmor-convert: %s %lld/%lld (%.0f%%)   ", what, (long long)done, (long long)total,
            total ? 100.0 * (double)done / (double)total : 100.0);
    fflush(stderr);
}

static void end_progress(progress_line *p)
{
    if (p->shown) fprintf(stderr, "\r%60s\r", "");   /* the line, cleared */
    p->shown = 0;
}

/* Every file the conversion may read: the named ones, and in a checkpoint
 * directory its configs, tokenizer files and weights (shards included), and
 * the Hydra config beside it. The output must be none of them. */
static int refuses_output(const char *out, const char *dir, const convert_opts *o)
{
    const char *named[] = { dir, o->weights, o->mor_config, o->tokenizer };
    if (cli_refuse_overwrite(out, named, 4)) return 1;
    char path[4096];
    if (o->weights) {
        snprintf(path, sizeof path, "%s/%s", dir, o->weights);
        const char *p = path;
        if (cli_refuse_overwrite(out, &p, 1)) return 1;
    }
    static const char *const beside[] = { "../mor_cfg.yaml", "../mor_config.json" };
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, beside[i]);
        const char *p = path;
        if (cli_refuse_overwrite(out, &p, 1)) return 1;
    }
    DIR *d = opendir(dir);
    if (!d) return 0;   /* a file (GGUF input): checked above */
    int refused = 0;
    for (struct dirent *e; !refused && (e = readdir(d)); ) {
        static const char *const ext[] = { ".safetensors", ".bin", ".json", ".yaml", ".yml", ".model" };
        size_t n = strlen(e->d_name);
        for (int i = 0; i < 6 && !refused; i++) {
            size_t k = strlen(ext[i]);
            if (n <= k || strcmp(e->d_name + n - k, ext[i])) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            const char *p = path;
            refused = cli_refuse_overwrite(out, &p, 1);
        }
    }
    closedir(d);
    return refused;
}

int main(int argc, char **argv)
{
    convert_opts o;
    const char *out = NULL, *dir = NULL;
    int vocab_only = 0, rc;
    char err[1024] = "", summary[512] = "", note[512] = "", *tmp;
    FILE *f;

    cli_init("mor-convert");
    convert_opts_init(&o);
    o.threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        /* flags that take a value */
        static const char *const valued[] = {
            "-o", "--output", "--weights", "--mor-config", "--tokenizer", "--outtype", "--name", "--mor-type",
            "--num-recursion", "--base-depth", "--sharing", "--capacity", "--router-type", "--router-func", "--alpha",
            "--temp", "--gating", "--sampling", "--kv-sharing", "--init", "--lora-rank", "--svd", "--threads",
            "--lora-alpha", "--lora-alpha-pattern", NULL};
        const char *v = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (strcmp(a, "--vocab-only") == 0) { vocab_only = 1; continue; }
        if (strcmp(a, "--bias-balancing") == 0) { o.flags.balancing = BAL_LOSS_FREE; continue; }
        if (strcmp(a, "--keep-norms") == 0) { o.keep_norms = 1; continue; }
        if (strcmp(a, "--tie-lm-head") == 0) { o.tie_lm_head = 1; continue; }
        for (int k = 0; valued[k]; k++)
            if (strcmp(a, valued[k]) == 0) {
                v = cli_value(argc, argv, &i);
                break;
            }
        if (!v) {
            if (a[0] == '-' && a[1]) cli_usage_error("unknown option '%s'", a);
            if (dir) cli_usage_error("more than one model directory ('%s')", a);
            dir = a;
            continue;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = v;
        else if (!strcmp(a, "--weights")) o.weights = v;
        else if (!strcmp(a, "--mor-config")) o.mor_config = v;
        else if (!strcmp(a, "--tokenizer")) o.tokenizer = v;
        else if (!strcmp(a, "--name")) o.name = v;
        else if (!strcmp(a, "--outtype")) {
            static const char *const types[] = {"auto", "f32", "f16", "bf16", NULL};
            static const int values[] = {OUTTYPE_AUTO, GGML_F32, GGML_F16, GGML_BF16};
            o.outtype = values[parse_enum(types, a, v)];
        } else if (!strcmp(a, "--mor-type")) o.flags.type = parse_enum(ms_route_names, a, v);
        else if (!strcmp(a, "--num-recursion")) o.flags.num_recursion = parse_int(a, v, 1, 64);
        else if (!strcmp(a, "--base-depth")) o.flags.base_depth = parse_int(a, v, 1, 4096);
        else if (!strcmp(a, "--sharing")) o.flags.sharing = parse_enum(ms_sharing_names, a, v);
        else if (!strcmp(a, "--capacity")) {
            if (cv_settings_parse_capacity(&o.flags, v, err, sizeof err)) cli_usage_error("--capacity: %s", err);
        } else if (!strcmp(a, "--router-type")) {
            o.flags.arch = strcmp(v, "wide_mlp") == 0 ? ARCH_MLP : parse_enum(ms_arch_names, a, v);
        } else if (!strcmp(a, "--router-func")) o.flags.func = parse_enum(ms_func_names, a, v);
        else if (!strcmp(a, "--alpha")) { o.flags.alpha = parse_double(a, v); o.flags.have_alpha = 1; }
        else if (!strcmp(a, "--temp")) { o.flags.temp = parse_double(a, v); o.flags.have_temp = 1; }
        else if (!strcmp(a, "--gating")) o.flags.gating = parse_enum(ms_gating_names, a, v);
        else if (!strcmp(a, "--sampling")) o.flags.sampling = parse_enum(ms_sampling_names, a, v);
        else if (!strcmp(a, "--kv-sharing")) o.flags.kv_shared = parse_int(a, v, 0, 1);
        else if (!strcmp(a, "--init")) o.init = parse_enum(relax_init_names, a, v);
        else if (!strcmp(a, "--lora-rank")) parse_ranks(v, o.lora_rank);
        else if (!strcmp(a, "--svd")) {
            static const char *const modes[] = {"fast", "exact", NULL};
            o.svd_exact = parse_enum(modes, a, v);
        } else if (!strcmp(a, "--threads")) o.threads = parse_int(a, v, 1, 64);
        else if (!strcmp(a, "--lora-alpha")) {
            o.flags.lora_alpha = parse_double(a, v);
            o.flags.have_lora_alpha = 1;
        } else if (!strcmp(a, "--lora-alpha-pattern")) {
            o.flags.lora_alpha_pattern = parse_double(a, v);
            o.flags.have_lora_alpha_pattern = 1;
        }
    }
    if (!dir) cli_usage_error("no model directory given");
    if (!out) cli_usage_error("no output file given (-o OUT.gguf)");

    if (refuses_output(out, dir, &o)) return 2;
    f = cli_out_open(out, &tmp);
    if (!f) return 1;
    o.dir = dir;
    progress_line pl;
    memset(&pl, 0, sizeof pl);
    if (cli_isatty(stderr)) { o.progress = show_progress; o.progress_ud = &pl; }
    o.note = note; o.notecap = sizeof note;
    if (vocab_only) rc = convert_vocab_only(dir, o.tokenizer, f, summary, sizeof summary, err, sizeof err);
    else rc = convert_model(&o, f, summary, sizeof summary, err, sizeof err);
    end_progress(&pl);
    if (rc != 0) {
        cli_out_close(f, &tmp, out, 0);
        die("%s", err);
    }
    if (!cli_out_close(f, &tmp, out, 1)) return 1;
    if (note[0]) cli_note("%s", note);
    printf("mor-convert: wrote %s (%s)\n", out, summary);
    return 0;
}
