/* mor-convert - convert a Hugging Face MoR / recursive / Llama checkpoint to
 * a `mor` GGUF file (docs/FORMAT.md), or a tokenizer to a vocab-only GGUF;
 * optionally make a vanilla model recursive with depth-wise LoRA deltas
 * (Relaxed Recursive Transformers, docs/RELAXED.md).
 *
 *   mor-convert DIR -o OUT.gguf [options]
 *   mor-convert MODEL.gguf -o OUT.gguf --num-recursion 2 --sharing cycle --init average --lora-rank 16
 *   mor-convert --vocab-only DIR -o V.gguf [--tokenizer FILE]
 *
 * Errors: one line on stderr, exit code 1. The output is written to a
 * temporary file next to OUT and renamed, so OUT is never left half-written. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "dtype.h"
#include "layout.h"
#include "settings.h"
#include "relax.h"

static const char usage[] =
    "usage: mor-convert DIR -o OUT.gguf [options]\n"
    "       mor-convert MODEL.gguf -o OUT.gguf [options]\n"
    "       mor-convert --vocab-only DIR -o OUT.gguf [--tokenizer FILE]\n"
    "\n"
    "DIR holds config.json and model.safetensors or pytorch_model.bin (model.safetensors\n"
    "is used when both exist, unless --weights says otherwise). MODEL.gguf is a libmor\n"
    "model without routers (e.g. from mor-train) or a llama.cpp Llama (F32/F16/BF16/Q8_0/\n"
    "Q4_0 tensors, no RoPE scaling), read as a plain Llama.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE       the GGUF file to write (required)\n"
    "  --weights FILE          the checkpoint: a path, or a file name inside DIR\n"
    "  --mor-config FILE       the official Hydra config (mor_cfg.yaml) or its JSON form\n"
    "                          (mor_config.json); default DIR/mor_cfg.yaml, then DIR/../mor_cfg.yaml\n"
    "  --tokenizer FILE        tokenizer.json to embed (default DIR/tokenizer.json if present)\n"
    "  --outtype TYPE          auto|f32|f16|bf16 for weight matrices (default auto: as in the\n"
    "                          checkpoint); norms and routers are always f32\n"
    "  --name NAME             general.name\n"
    "  --vocab-only            write only the tokenizer of DIR/tokenizer.json\n"
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
    "  --keep-norms            keep every layer's own RMSNorm weights (then full rank reproduces\n"
    "                          the original exactly; the official code ties them)\n"
    "  --svd exact|fast        exact: Jacobi on the whole residual; fast (default): subspace\n"
    "                          iteration first when the rank is small next to the matrix\n"
    "  --threads N             SVDs in parallel (default 2)\n"
    "Relaxed (PEFT LoRA) checkpoints of the official code (scale alpha/r; override the config):\n"
    "  --lora-alpha A          relaxation.lora.alpha (scale A / r)\n"
    "  --lora-alpha-pattern P  relaxation.lora.alpha_pattern (scale P)\n"
    "  -h, --help\n";

static void die(const char *fmt, const char *a)
{
    fprintf(stderr, "mor-convert: error: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    exit(1);
}

static int parse_enum(const char *const *names, const char *flag, const char *v)
{
    int i = ms_lookup(names, v);
    if (i < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "bad value for %s: '%%s'", flag);
        die(msg, v);
    }
    return i;
}

static double parse_double(const char *flag, const char *v)
{
    char *end;
    double d;
    errno = 0;
    d = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(d)) die("bad number '%s'", v);
    (void)flag;
    return d;
}

static int parse_int(const char *v, int lo, int hi)
{
    char *end;
    long x;
    errno = 0;
    x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi) die("bad integer '%s'", v);
    return (int)x;
}

/* "8" (every projection) or "q=8,k=8,v=8,o=8,gate=16,up=16,down=16" */
static void parse_ranks(const char *v, int *rank)
{
    static const char *const names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    static const int roles[] = {CV_ROLE_ATTN_Q, CV_ROLE_ATTN_K, CV_ROLE_ATTN_V, CV_ROLE_ATTN_OUT,
                                CV_ROLE_FFN_GATE, CV_ROLE_FFN_UP, CV_ROLE_FFN_DOWN};
    if (!strchr(v, '=')) {
        int r = parse_int(v, 0, 1 << 20);
        for (int i = 0; i < 7; i++) rank[roles[i]] = r;
        return;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        int i;
        if (!eq) die("bad --lora-rank item '%s' (want NAME=RANK)", tok);
        *eq = 0;
        for (i = 0; i < 7 && strcmp(tok, names[i]); i++) {}
        if (i == 7) die("bad --lora-rank projection '%s' (q, k, v, o, gate, up, down)", tok);
        rank[roles[i]] = parse_int(eq + 1, 0, 1 << 20);
    }
}

int main(int argc, char **argv)
{
    convert_opts o;
    const char *out = NULL, *dir = NULL;
    int vocab_only = 0, rc;
    char err[1024] = "", summary[512] = "", note[512] = "", *tmp;
    FILE *f;

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
                if (i + 1 >= argc) die("%s needs a value", a);
                v = argv[++i];
                break;
            }
        if (!v) {
            if (a[0] == '-' && a[1]) die("unknown option '%s' (see --help)", a);
            if (dir) die("more than one model directory ('%s')", a);
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
            static const int values[] = {OUTTYPE_AUTO, CV_F32, CV_F16, CV_BF16};
            o.outtype = values[parse_enum(types, a, v)];
        } else if (!strcmp(a, "--mor-type")) o.flags.type = parse_enum(ms_route_names, a, v);
        else if (!strcmp(a, "--num-recursion")) o.flags.num_recursion = parse_int(v, 1, 64);
        else if (!strcmp(a, "--base-depth")) o.flags.base_depth = parse_int(v, 1, 4096);
        else if (!strcmp(a, "--sharing")) o.flags.sharing = parse_enum(ms_sharing_names, a, v);
        else if (!strcmp(a, "--capacity")) {
            if (cv_settings_parse_capacity(&o.flags, v, err, sizeof err)) die("%s", err);
        } else if (!strcmp(a, "--router-type")) {
            o.flags.arch = strcmp(v, "wide_mlp") == 0 ? ARCH_MLP : parse_enum(ms_arch_names, a, v);
        } else if (!strcmp(a, "--router-func")) o.flags.func = parse_enum(ms_func_names, a, v);
        else if (!strcmp(a, "--alpha")) { o.flags.alpha = parse_double(a, v); o.flags.have_alpha = 1; }
        else if (!strcmp(a, "--temp")) { o.flags.temp = parse_double(a, v); o.flags.have_temp = 1; }
        else if (!strcmp(a, "--gating")) o.flags.gating = parse_enum(ms_gating_names, a, v);
        else if (!strcmp(a, "--sampling")) o.flags.sampling = parse_enum(ms_sampling_names, a, v);
        else if (!strcmp(a, "--kv-sharing")) o.flags.kv_shared = parse_int(v, 0, 1);
        else if (!strcmp(a, "--init")) o.init = parse_enum(relax_init_names, a, v);
        else if (!strcmp(a, "--lora-rank")) parse_ranks(v, o.lora_rank);
        else if (!strcmp(a, "--svd")) {
            static const char *const modes[] = {"fast", "exact", NULL};
            o.svd_exact = parse_enum(modes, a, v);
        } else if (!strcmp(a, "--threads")) o.threads = parse_int(v, 1, 64);
        else if (!strcmp(a, "--lora-alpha")) {
            o.flags.lora_alpha = parse_double(a, v);
            o.flags.have_lora_alpha = 1;
        } else if (!strcmp(a, "--lora-alpha-pattern")) {
            o.flags.lora_alpha_pattern = parse_double(a, v);
            o.flags.have_lora_alpha_pattern = 1;
        }
    }
    if (!dir) die("%s", "no model directory given (see --help)");
    if (!out) die("%s", "no output file given (-o OUT.gguf)");

    tmp = malloc(strlen(out) + 6);
    if (!tmp) die("%s", "out of memory");
    sprintf(tmp, "%s.part", out);
    f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, sizeof err, "cannot create %s: %s", tmp, strerror(errno));
        die("%s", err);
    }
    o.dir = dir;
    o.note = note; o.notecap = sizeof note;
    if (vocab_only) rc = convert_vocab_only(dir, o.tokenizer, f, summary, sizeof summary, err, sizeof err);
    else rc = convert_model(&o, f, summary, sizeof summary, err, sizeof err);
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        snprintf(err, sizeof err, "cannot write %s", tmp);
    }
    if (rc == 0 && rename(tmp, out) != 0) {
        rc = -1;
        snprintf(err, sizeof err, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
    }
    if (rc != 0) {
        remove(tmp);
        free(tmp);
        die("%s", err);
    }
    free(tmp);
    if (note[0]) fprintf(stderr, "mor-convert: note: %s\n", note);
    printf("mor-convert: wrote %s (%s)\n", out, summary);
    return 0;
}
