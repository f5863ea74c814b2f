/* mor-run - generate with a MoR model, or dump its numbers for comparison.
 *
 *   mor-run -m MODEL.gguf -p "Once upon a time" -n 64 [--show-depth]
 *   mor-run -m MODEL.gguf --ids 14,148,141 --routing topk --dump-logits L.f32 --dump-routing R.json
 *   mor-run -m MODEL.gguf --ids 14,148,141 -n 8 --greedy --routing topk [--no-cache] [--kv dense] --print-ids \
 *           --dump-step-logits S.f32
 *   mor-run -m VOCAB.gguf --tokenize-file T.txt
 *
 * Run with --help for every option. Generated text goes to stdout; notes,
 * errors and the statistics go to stderr, each on a line of its own. Exit
 * status: 0 success, 1 an error while running, 2 a bad command line. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mor.h"
#include "chat_prompt.h"
#include "cli.h"
#include "sampling.h"
#include "text.h"

typedef struct {
    const char *model, *prompt, *ids, *dump_logits, *dump_routing, *dump_hidden, *dump_step_logits, *tokenize_file;
    const char *prompt_file;   /* -f: the prompt is this file's bytes ("-": standard input) */
    char       *prompt_buf;    /* -f's bytes, owned (o->prompt points at them) */
    size_t      prompt_len;    /* the prompt's bytes (a file's may hold NULs) */
    int n_predict, no_cache, print_ids, show_depth, quiet, max_depth, routing, forced, routing_set;
    int kv_mode, kv_type, n_ctx, max_pos, n_threads, no_context_shift, n_keep;
    int greedy, temp_set, no_check_tensors, fast_bf16;
    int embedding, no_normalize;   /* --embedding: MOR_POOL_* (0: generate) */
    int speculate, speculate_depth;   /* --speculate N (0: off), --speculate-depth D */
    int exit_mode; float exit_threshold;   /* --exit MODE:T (MOR_EXIT_NONE: off) */
    const char *grammar, *grammar_file;   /* --grammar TEXT, --grammar-file FILE (GBNF) */
    const char *schema, *schema_file;     /* --json-schema TEXT, --json-schema-file FILE */
    char       *grammar_buf;              /* the grammar's bytes when read from a file, owned */
    size_t      grammar_len;
    float thresholds[32];
    int n_thresholds;
    mor_sampler_params sp;
    /* llama.cpp's sampling flags that do not fit mor_sampler_params */
    mor_token bias_id[256];             /* --logit-bias ID(+/-)BIAS */
    float     bias[256];
    int       n_bias, ignore_eos;       /* --ignore-eos: the end-of-text token banned */
    const char *breakers[64];           /* --dry-sequence-breaker (llama.cpp's defaults when none) */
    int       n_breakers, breakers_set;
    int       chat;                     /* --chat: -p/-f is a user message for the chat template */
    const char *system_prompt, *chat_template_file;   /* --system TEXT, --chat-template-file FILE */
} options;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: mor-run -m MODEL.gguf [options]\n"
        "prompt and output:\n"
        "  -p, --prompt TEXT        prompt text (needs a model with a tokenizer; special tokens are\n"
        "                           parsed, no BOS is added)\n"
        "  -f, --file FILE          the prompt text from a file, as is (-f -: standard input)\n"
        "  --ids A,B,C              the prompt as token ids (instead of -p)\n"
        "  --chat                   -p/-f is a user's message: the prompt is the model's chat template\n"
        "                           (Jinja) rendering it, the assistant's turn opened\n"
        "  --system TEXT            --chat: a system message before it\n"
        "  --chat-template-file F   --chat: this Jinja template instead of the model's\n"
        "  -n N                     tokens to generate (default 64 with a prompt, 0 with --dump-*);\n"
        "                           a prompt given as text stops early at the end-of-text token\n"
        "                           (whose text is not printed)\n"
        "  --show-depth             print each generated token with its depth, the recursions of\n"
        "                           the step that produced it (its input's): text[d], as mor-server\n"
        "  --print-ids              print the generated ids on one line instead of text\n"
        "  -q                       no statistics on stderr (the text is printed as without -q)\n"
        "  --embedding POOL         print the prompt's embedding instead of generating: a JSON array\n"
        "                           of n_embd floats, the final norm's outputs pooled (mean | last)\n"
        "                           and scaled to unit length (--no-normalize: not), as mor-server's\n"
        "                           /v1/embeddings (expert-choice models route with thresholds)\n"
        "sampling (the seeded sampler of mor.h: the same model, prompt, flags and seed give the\n"
        "same tokens on every run and machine):\n"
        "  --greedy                 always the most likely token (same as --temp 0)\n"
        "  --temp T                 temperature, >= 0 (default 0.8; 0: greedy)\n"
        "  --top-k K (40, 0 off)  --top-p P (0.95, 1 off)  --min-p P (0.05, 0 off)\n"
        "  --repeat-penalty R (1, off)  --repeat-last-n N (64)  --seed S (0)\n"
        "  llama.cpp's sampling flags, with its meanings (mor.h's mor_sampler_params):\n"
        "  --presence-penalty N (0, off)  --frequency-penalty N (0, off), over --repeat-last-n\n"
        "  --typical P (1, off)  --min-keep N (0)  --top-nsigma N (-1, off)\n"
        "  --xtc-probability P (0, off)  --xtc-threshold T (0.1)\n"
        "  --dynatemp-range R (0, off)  --dynatemp-exp E (1)\n"
        "  --mirostat 0|1|2 (0)  --mirostat-lr ETA (0.1)  --mirostat-ent TAU (5)\n"
        "  --dry-multiplier M (0, off)  --dry-base B (1.75)  --dry-allowed-length N (2)\n"
        "  --dry-penalty-last-n N (64; -1: the context)\n"
        "  --dry-sequence-breaker S  a DRY sequence breaker (repeatable; replaces the defaults \\n : \" *;\n"
        "                           none: no breakers)\n"
        "  --samplers A;B;...       the order of the stages, llama.cpp's names: penalties, dry,\n"
        "                           top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature\n"
        "                           (default: temperature before the truncations, as mor.h says)\n"
        "  --sampling-seq LETTERS   the same as letters: e d s k y p m x t\n"
        "  -l, --logit-bias ID+B    add B to token ID's logit (ID-B subtracts; ID-inf bans); repeatable\n"
        "  --ignore-eos             never end at the end-of-text token: it is banned\n"
        "  --grammar GBNF           constrain the output to a string of a GBNF grammar (llama.cpp's\n"
        "                           grammar language, start rule 'root'); generation ends where the\n"
        "                           grammar ends it\n"
        "  --grammar-file FILE      the same, the grammar read from FILE\n"
        "  --json-schema SCHEMA     constrain the output to JSON valid under a JSON Schema (converted\n"
        "                           to a grammar by mor_json_schema_to_grammar)\n"
        "  --json-schema-file FILE  the same, the schema read from FILE\n"
        "routing (how many recursions each token runs):\n"
        "  --routing MODE           topk | threshold | forced:N | token | default. Default: for\n"
        "                           generation with an expert-choice model, threshold (causal: each\n"
        "                           token's depth is decided by the routers as it is generated); for\n"
        "                           --dump-* and other models, the model's own (topk: the official\n"
        "                           expert-choice, which gives every decoded token all recursions)\n"
        "  --threshold V[,V...]     THRESHOLD-mode thresholds per recursion (default: the model's)\n"
        "  --max-depth N            cap every token's recursions at N (0: no cap)\n"
        "  --exit MODE:T            early exits on top of the routing: learned:Q (Ouro's exit gate:\n"
        "                           a token stops after the first loop where the CDF of its exit\n"
        "                           distribution reaches Q in [0, 1]; 1: full depth), margin:T or\n"
        "                           saturation:T (confidence >= T); none (the default)\n"
        "context and cache:\n"
        "  --ctx N                  KV cells per layer (default: --max-pos if given, else\n"
        "                           min(training context, 4096))\n"
        "  --max-pos N              positions a sequence may reach (default: the model's training\n"
        "                           context, past which RoPE positions were never trained; a larger\n"
        "                           N allows them)\n"
        "  The context holds min(--ctx, --max-pos) tokens. When generation fills it, it shifts, as\n"
        "  llama.cpp does: the first --keep tokens stay, the oldest half of the rest is dropped, and\n"
        "  the cached keys of what remains are re-rotated to their new positions, so generation goes\n"
        "  on for any -n. A prompt longer than the context keeps its first --keep tokens and its end\n"
        "  (a note says so).\n"
        "  --keep N                 tokens at the start that a shift keeps (default 0; -1: the prompt)\n"
        "  --no-context-shift       stop generating when the context is full, and refuse a prompt\n"
        "                           longer than it\n"
        "  --kv recursion|shared|dense\n"
        "                           KV caching across recursions (default: the model's; for a model\n"
        "                           trained with KV sharing, shared: its trained semantics). dense:\n"
        "                           what the official code computes without its KV-sharing cache,\n"
        "                           every recursion over every token with its own K/V: with --no-cache\n"
        "                           its greedy no-cache loop, cached its HF generate() (expert-choice:\n"
        "                           with --routing topk, as the official code routes); the same as the\n"
        "                           default for models without KV sharing (docs/PARITY.md)\n"
        "  --kv-type f32|f16|q8_0   how the cache stores keys and values (default f32)\n"
        "  --fast-bf16              BF16 weights on bfloat16-rounded activations (MOR_CTX_FAST_BF16:\n"
        "                           faster on CPUs with AVX512_BF16 and no AMX; logits move ~1e-2)\n"
        "  --speculate N            self-speculative decoding: draft N tokens per step with the first\n"
        "                           recursions only, verify them in one pass through the deeper ones;\n"
        "                           prints the same tokens as without it (greedy or seeded sampling,\n"
        "                           grammars included; docs/SPECULATIVE.md)\n"
        "  --speculate-depth D      recursions the drafts get (default 1)\n"
        "  --no-cache               recompute the whole sequence from an empty cache at every step\n"
        "                           (top-k routing then ranks the whole sequence each time), with the\n"
        "                           semantics of --kv: the trained ones by default; the official\n"
        "                           use_cache=False loop of a KV-sharing model is --no-cache --kv dense\n"
        "  -t, --threads N          worker threads (default: the online CPUs, at most 8); results\n"
        "                           do not depend on it\n"
        "  --no-check-tensors       do not check every weight for NaN and infinity at load (the norms\n"
        "                           and routers always are)\n"
        "dumps (one forward over the prompt, for comparison with other implementations):\n"
        "  --dump-logits FILE       logits, float32 [T][vocab]\n"
        "  --dump-routing FILE      routing as JSON {depth, selected}\n"
        "  --dump-hidden FILE       hidden states, float32 [points][T][n_embd]\n"
        "  --dump-step-logits FILE  the logits each generated token was picked from (the first: the\n"
        "                           prompt's last row), float32 [n][vocab], in every mode\n"
        "  --tokenize-file FILE     print the ids of FILE's bytes on one line and exit\n"
        "  -h, --help\n");
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* --samplers "a;b;c" (llama.cpp's names) or --sampling-seq "kpt" into sp. */
static void parse_order(options *o, const char *flag, const char *v, int letters)
{
    o->sp.n_samplers = 0;
    if (!*v) cli_usage_error("%s: give at least one stage (temperature with --temp 1 draws from the plain softmax)", flag);
    for (const char *p = v; *p; ) {
        size_t len = letters ? 1 : strcspn(p, ";");
        int st = letters ? sampling_stage_by_char(*p) : sampling_stage_by_name(p, len);
        if (st <= 0)
            cli_usage_error("%s: %s '%.*s'%s", flag, st < 0 ? "llama.cpp's stage" : "no stage", (int)len, p,
                            st < 0 ? " is not supported here" : letters ? " (letters: edskypmxt)" :
                            " (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature)");
        if (o->sp.n_samplers == MOR_SAMPLERS_MAX) cli_usage_error("%s: at most %d stages", flag, MOR_SAMPLERS_MAX);
        o->sp.samplers[o->sp.n_samplers++] = st;
        p += len;
        if (!letters && *p == ';') p++;
    }
}

/* --logit-bias ID+BIAS or ID-BIAS (llama.cpp's form; BIAS may be inf). */
static void parse_bias(options *o, const char *flag, const char *v)
{
    char *end = NULL;
    long long id = strtoll(v, &end, 10);
    if (end == v || (*end != '+' && *end != '-') || id < 0 || id > INT32_MAX)
        cli_usage_error("%s '%s': give TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1, 15043-inf)", flag, v);
    const char sign = *end;
    const char *num = end + 1;
    double b = !strcmp(num, "inf") ? HUGE_VAL : cli_double(flag, num, 0, 1e30, 0);
    if (sign == '+' && b == HUGE_VAL) cli_usage_error("%s '%s': +inf is not a bias (-inf bans)", flag, v);
    if (o->n_bias == 256) cli_usage_error("%s: at most 256 biases", flag);
    o->bias_id[o->n_bias] = (mor_token)id;
    o->bias[o->n_bias++] = (float)(sign == '-' ? -b : b);
}

/* llama.cpp's sampling flags beyond mor-run's first ones: 1 when `a` was one. */
static int parse_sampling_flag(options *o, const char *a, int argc, char **argv, int *i)
{
    static const struct { const char *flag, *alias; size_t off; } reals[] = {
        { "--presence-penalty", NULL, offsetof(mor_sampler_params, presence_penalty) },
        { "--frequency-penalty", NULL, offsetof(mor_sampler_params, frequency_penalty) },
        { "--typical", "--typical-p", offsetof(mor_sampler_params, typical_p) },
        { "--top-nsigma", "--top-n-sigma", offsetof(mor_sampler_params, top_n_sigma) },
        { "--xtc-probability", NULL, offsetof(mor_sampler_params, xtc_probability) },
        { "--xtc-threshold", NULL, offsetof(mor_sampler_params, xtc_threshold) },
        { "--dynatemp-range", NULL, offsetof(mor_sampler_params, dynatemp_range) },
        { "--dynatemp-exp", NULL, offsetof(mor_sampler_params, dynatemp_exponent) },
        { "--mirostat-lr", NULL, offsetof(mor_sampler_params, mirostat_eta) },
        { "--mirostat-ent", NULL, offsetof(mor_sampler_params, mirostat_tau) },
        { "--dry-multiplier", NULL, offsetof(mor_sampler_params, dry_multiplier) },
        { "--dry-base", NULL, offsetof(mor_sampler_params, dry_base) },
    };
    for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
        if (!strcmp(a, reals[k].flag) || (reals[k].alias && !strcmp(a, reals[k].alias))) {
            float v = (float)cli_double(a, cli_value(argc, argv, i), -1e30, 1e30, 0);
            memcpy((char *)&o->sp + reals[k].off, &v, sizeof v);
            return 1;
        }
    if (!strcmp(a, "--min-keep")) o->sp.min_keep = (int32_t)cli_int(a, cli_value(argc, argv, i), 0, 1 << 30);
    else if (!strcmp(a, "--mirostat")) o->sp.mirostat = (int32_t)cli_int(a, cli_value(argc, argv, i), 0, 2);
    else if (!strcmp(a, "--dry-allowed-length"))
        o->sp.dry_allowed_length = (int32_t)cli_int(a, cli_value(argc, argv, i), 0, 1 << 30);
    else if (!strcmp(a, "--dry-penalty-last-n"))   /* -1: the context, set once it is known */
        o->sp.dry_penalty_last_n = (int32_t)cli_int(a, cli_value(argc, argv, i), -1, 1 << 20);
    else if (!strcmp(a, "--dry-sequence-breaker")) {
        const char *v = cli_value(argc, argv, i);
        if (!o->breakers_set) o->n_breakers = 0;
        o->breakers_set = 1;
        if (!strcmp(v, "none")) o->n_breakers = 0;
        else if (o->n_breakers == 64) cli_usage_error("%s: at most 64 breakers", a);
        else o->breakers[o->n_breakers++] = v;
    }
    else if (!strcmp(a, "--samplers")) parse_order(o, a, cli_value(argc, argv, i), 0);
    else if (!strcmp(a, "--sampling-seq") || !strcmp(a, "--sampler-seq")) parse_order(o, a, cli_value(argc, argv, i), 1);
    else if (!strcmp(a, "-l") || !strcmp(a, "--logit-bias")) parse_bias(o, a, cli_value(argc, argv, i));
    else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
    else return 0;
    return 1;
}

static void parse_args(int argc, char **argv, options *o)
{
    static const char *const kv_modes[] = { "recursion", "shared", "dense", NULL };
    static const int kv_mode_values[] = { MOR_KV_RECURSION_WISE, MOR_KV_SHARED, MOR_KV_DENSE };
    static const char *const kv_types[] = { "f32", "f16", "q8_0", NULL };
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    o->kv_mode = MOR_KV_MODEL_DEFAULT;
    o->kv_type = MOR_KV_TYPE_F32;
    o->n_threads = default_threads();
    MOR_SAMPLER_PARAMS_INIT(&o->sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define FLAG(name) (!strcmp(a, name))
#define VALUE() cli_value(argc, argv, &i)
        if (FLAG("-h") || FLAG("--help")) { usage(stdout); exit(0); }
        else if (FLAG("-m") || FLAG("--model")) o->model = VALUE();
        else if (FLAG("-p") || FLAG("--prompt")) {
            o->prompt = VALUE();
            if (!strcmp(o->prompt, "-"))   /* the prompt "-", or standard input? say which */
                cli_usage_error("-p -: ambiguous; read the prompt from standard input with -f -, or give the "
                                "one-character prompt with -f FILE");
        }
        else if (FLAG("-f") || FLAG("--file")) o->prompt_file = VALUE();
        else if (FLAG("--ids")) o->ids = VALUE();
        else if (FLAG("-n")) o->n_predict = (int)cli_int(a, VALUE(), 0, INT32_MAX);
        else if (FLAG("--greedy")) o->greedy = 1;
        else if (FLAG("--chat")) o->chat = 1;
        else if (FLAG("--system") || FLAG("-sys")) o->system_prompt = VALUE();
        else if (FLAG("--chat-template-file")) o->chat_template_file = VALUE();
        else if (FLAG("--temp")) { o->sp.temperature = (float)cli_double(a, VALUE(), 0, 1e6, 0); o->temp_set = 1; }
        else if (FLAG("--top-k")) o->sp.top_k = (int32_t)cli_int(a, VALUE(), 0, INT32_MAX);
        else if (FLAG("--top-p")) o->sp.top_p = (float)cli_double(a, VALUE(), 0, 1, 1);
        else if (FLAG("--min-p")) o->sp.min_p = (float)cli_double(a, VALUE(), 0, 1, 0);
        else if (FLAG("--repeat-penalty")) o->sp.repeat_penalty = (float)cli_double(a, VALUE(), 0, 1e6, 1);
        else if (FLAG("--repeat-last-n")) o->sp.repeat_last_n = (int32_t)cli_int(a, VALUE(), 0, 1 << 20);
        else if (FLAG("--seed")) o->sp.seed = cli_u64(a, VALUE());
        else if (parse_sampling_flag(o, a, argc, argv, &i)) {}
        else if (FLAG("--routing")) {
            static const char *const modes[] = { "default", "topk", "threshold", "token", NULL };
            static const int values[] = { MOR_ROUTE_DEFAULT, MOR_ROUTE_TOPK, MOR_ROUTE_THRESHOLD, MOR_ROUTE_TOKEN };
            const char *v = VALUE();
            o->routing_set = 1;
            if (!strncmp(v, "forced:", 7)) {
                o->routing = MOR_ROUTE_FORCED;
                o->forced = (int)cli_int("--routing forced:N", v + 7, 1, mor_max_recursions());
            } else if (!strcmp(v, "forced")) {
                cli_usage_error("--routing forced needs a depth: forced:N");
            } else {
                o->routing = values[cli_choice(a, v, modes)];
            }
        }
        else if (FLAG("--exit")) cli_exit(a, VALUE(), &o->exit_mode, &o->exit_threshold);
        else if (FLAG("--threshold")) o->n_thresholds = cli_float_list(a, VALUE(), o->thresholds, 32, -1e30, 1e30);
        else if (FLAG("--max-depth")) o->max_depth = (int)cli_int(a, VALUE(), 0, mor_max_recursions());
        else if (FLAG("--kv")) o->kv_mode = kv_mode_values[cli_choice(a, VALUE(), kv_modes)];
        else if (FLAG("--kv-type")) {
            static const int values[] = { MOR_KV_TYPE_F32, MOR_KV_TYPE_F16, MOR_KV_TYPE_Q8_0 };
            o->kv_type = values[cli_choice(a, VALUE(), kv_types)];
        }
        else if (FLAG("--ctx")) o->n_ctx = (int)cli_int(a, VALUE(), 1, 1 << 24);
        else if (FLAG("--max-pos")) o->max_pos = (int)cli_int(a, VALUE(), 1, INT32_MAX - 1);
        else if (FLAG("--keep")) o->n_keep = (int)cli_int(a, VALUE(), -1, INT32_MAX);
        else if (FLAG("--no-context-shift")) o->no_context_shift = 1;
        else if (FLAG("--no-check-tensors")) o->no_check_tensors = 1;
        else if (FLAG("--fast-bf16")) o->fast_bf16 = 1;
        else if (FLAG("-t") || FLAG("--threads")) o->n_threads = (int)cli_int(a, VALUE(), 1, 256);
        else if (FLAG("--no-cache")) o->no_cache = 1;
        else if (FLAG("--speculate")) o->speculate = (int)cli_int(a, VALUE(), 1, 64);
        else if (FLAG("--speculate-depth")) o->speculate_depth = (int)cli_int(a, VALUE(), 1, MOR_MAX_RECURSIONS);
        else if (FLAG("--print-ids")) o->print_ids = 1;
        else if (FLAG("--show-depth")) o->show_depth = 1;
        else if (FLAG("-q")) o->quiet = 1;
        else if (FLAG("--dump-logits")) o->dump_logits = VALUE();
        else if (FLAG("--dump-routing")) o->dump_routing = VALUE();
        else if (FLAG("--dump-hidden")) o->dump_hidden = VALUE();
        else if (FLAG("--dump-step-logits")) o->dump_step_logits = VALUE();
        else if (FLAG("--tokenize-file")) o->tokenize_file = VALUE();
        else if (FLAG("--embedding")) {
            static const char *const pools[] = { "mean", "last", NULL };
            static const int values[] = { MOR_POOL_MEAN, MOR_POOL_LAST };
            o->embedding = values[cli_choice(a, VALUE(), pools)];
        }
        else if (FLAG("--no-normalize")) o->no_normalize = 1;
        else if (FLAG("--grammar")) o->grammar = VALUE();
        else if (FLAG("--grammar-file")) o->grammar_file = VALUE();
        else if (FLAG("--json-schema")) o->schema = VALUE();
        else if (FLAG("--json-schema-file")) o->schema_file = VALUE();
        else cli_usage_error("unknown option '%s'", a);
#undef FLAG
#undef VALUE
    }
    if (!o->model) cli_usage_error("no model given (-m MODEL.gguf)");
    cli_conflict(o->prompt != NULL, "-p", o->ids != NULL, "--ids");
    cli_conflict(o->prompt_file != NULL, "-f", o->prompt || o->ids, o->prompt ? "-p" : "--ids");
    cli_conflict(o->tokenize_file != NULL, "--tokenize-file", o->prompt_file != NULL, "-f");
    cli_conflict(o->show_depth, "--show-depth", o->print_ids, "--print-ids");
    cli_conflict(o->greedy, "--greedy", o->temp_set, "--temp");
    cli_conflict(o->embedding, "--embedding", o->tokenize_file != NULL, "--tokenize-file");
    cli_conflict(o->embedding, "--embedding", o->n_predict > 0, "-n");
    cli_conflict(o->embedding, "--embedding", o->dump_logits || o->dump_routing || o->dump_hidden || o->dump_step_logits,
                 "--dump-*");
    cli_conflict(o->embedding, "--embedding", o->no_cache, "--no-cache");
    cli_conflict(o->speculate > 0, "--speculate", o->no_cache, "--no-cache");
    cli_conflict(o->speculate > 0, "--speculate", o->embedding, "--embedding");
    if (o->speculate_depth && !o->speculate) cli_usage_error("--speculate-depth is for --speculate");
    if (!o->speculate_depth) o->speculate_depth = 1;
    if (o->no_normalize && !o->embedding) cli_usage_error("--no-normalize is for --embedding");
    {
        const char *given[4] = { o->grammar, o->grammar_file, o->schema, o->schema_file };
        const char *names[4] = { "--grammar", "--grammar-file", "--json-schema", "--json-schema-file" };
        for (int a = 0; a < 4; a++)
            for (int b = a + 1; b < 4; b++) cli_conflict(given[a] != NULL, names[a], given[b] != NULL, names[b]);
        for (int a = 0; a < 4; a++) cli_conflict(given[a] != NULL, names[a], o->embedding, "--embedding");
    }
    if (o->grammar) o->grammar_len = strlen(o->grammar);
    cli_conflict(o->tokenize_file != NULL, "--tokenize-file", o->prompt || o->ids, o->prompt ? "-p" : "--ids");
    if (!o->tokenize_file && !o->prompt && !o->prompt_file && !o->ids)
        cli_usage_error("give a prompt (-p TEXT, -f FILE or --ids A,B,C)");
    if (o->prompt) o->prompt_len = strlen(o->prompt);
    if (o->greedy) o->sp.temperature = 0;
    if ((o->system_prompt || o->chat_template_file) && !o->chat) cli_usage_error("--system and --chat-template-file are for --chat");
    cli_conflict(o->chat, "--chat", o->ids != NULL, "--ids");
    cli_conflict(o->chat, "--chat", o->tokenize_file != NULL, "--tokenize-file");
}


/* "A,B,C" into a malloc'd array; every id a whole decimal in [0, n_vocab). */
static mor_token *parse_ids(const char *s, int32_t n_vocab, int *n_out)
{
    int cap = 16, k = 0;
    mor_token *v = malloc(sizeof *v * (size_t)cap);
    for (const char *p = s; v; ) {
        size_t len = strcspn(p, ",");
        char item[32];
        if (len == 0 || len >= sizeof item) { free(v); cli_usage_error("--ids: bad list '%s'", s); }
        memcpy(item, p, len);
        item[len] = 0;
        if (k == cap) {
            mor_token *nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!nv) break;
            v = nv;
        }
        char flag[32];
        snprintf(flag, sizeof flag, "--ids (item %d)", k + 1);
        long long x = cli_int(flag, item, 0, (long long)n_vocab - 1);
        v[k++] = (mor_token)x;
        if (!p[len]) { *n_out = k; return v; }
        p += len + 1;
    }
    free(v);
    cli_error("out of memory");
    return NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- everything a run holds, freed in one place ---- */
typedef struct {
    options o;
    mor_model *model;
    mor_context *ctx;
    mor_batch *batch;
    mor_sampler *sampler;
    mor_grammar *grammar;      /* --grammar: constrains what is generated */
    float *masked;             /* [n_vocab]: the logits under the grammar */
    mor_token *prompt;
    mor_token *seq;            /* the tokens in the context window, positions 0..n_seq-1 */
    int n_prompt, n_seq, cap_seq;
    mor_token *gen;            /* every generated token (--print-ids) */
    int n_gen, cap_gen;
    int n_shifts, n_discarded; /* context shifts so far */
    int32_t *depths;           /* scratch [n_batch] */
    float *steps;              /* --dump-step-logits: [n_predict][n_vocab] */
    int at_line_start;         /* stdout ends with a newline (or is empty) */
} run_state;

/* --speculate: the tokens a step after input t may sample (mor_speculate's
 * n_max), 0 where plain decoding takes t alone: generation stops after it
 * (the grammar ends, or the end-of-text token ends a text or grammar run), or
 * no position is left. The step's tokens never cross the context's end, so
 * a context shift happens where plain decoding would shift. */
static int32_t speculate_room(const run_state *r, const options *o, int32_t left, int32_t limit, mor_token t,
                              mor_token eos)
{
    if (r->grammar && (mor_grammar_state(r->grammar) & MOR_GRAMMAR_MUST_END)) return 0;
    if (eos >= 0 && t == eos && (o->prompt || r->grammar)) return 0;
    const int32_t room = limit - r->n_seq;
    return left < room ? left : room;
}

static void run_free(run_state *r)
{
    free(r->o.prompt_buf);
    free(r->o.grammar_buf);
    mor_grammar_free(r->grammar);
    free(r->masked);
    free(r->prompt); free(r->seq); free(r->gen); free(r->depths); free(r->steps);
    mor_sampler_free(r->sampler);
    mor_batch_free(r->batch);
    mor_context_free(r->ctx);
    mor_model_free(r->model);
}

/* The logit bias (--logit-bias, --ignore-eos's ban of the end-of-text
 * token) and, with DRY on, its breakers (--dry-sequence-breaker, else
 * llama.cpp's defaults) as token sequences of this vocabulary. */
static mor_status sampler_extras(run_state *r, const options *o)
{
    mor_token ids[257];
    float bias[257];
    int n = o->n_bias;
    memcpy(ids, o->bias_id, sizeof *ids * (size_t)n);
    memcpy(bias, o->bias, sizeof *bias * (size_t)n);
    const mor_token eos = mor_model_token_eos(r->model);
    if (o->ignore_eos && eos >= 0) { ids[n] = eos; bias[n++] = -HUGE_VALF; }
    for (int i = 0; i < n; i++)
        if (ids[i] >= mor_model_n_vocab(r->model))
            cli_usage_error("--logit-bias: token %d is not in the vocabulary (%d tokens)", (int)ids[i],
                            (int)mor_model_n_vocab(r->model));
    mor_status st = mor_sampler_set_logit_bias(r->sampler, ids, bias, n);
    char tmp[8];
    const int has_tok = mor_model_meta_str(r->model, "tokenizer.ggml.model", tmp, sizeof tmp, NULL) == MOR_OK;
    if (st || o->sp.dry_multiplier == 0.0f || (!has_tok && !o->n_breakers)) return st;
    if (!has_tok) cli_usage_error("--dry-sequence-breaker needs a model with a tokenizer");
    const char *const *strs = o->breakers_set ? o->breakers : SAMPLING_DRY_DEFAULT_BREAKERS;
    const int nb = o->breakers_set ? o->n_breakers : 4;
    size_t lens[64];
    for (int i = 0; i < nb; i++) lens[i] = strlen(strs[i]);
    mor_token *toks = NULL;
    int32_t *seq_lens = NULL, n_seq = 0;
    if (!(st = sampling_dry_breakers(r->model, strs, lens, nb, &toks, &seq_lens, &n_seq)))
        st = mor_sampler_set_dry_breakers(r->sampler, toks, seq_lens, n_seq);
    free(toks);
    free(seq_lens);
    return st;
}

/* Library errors: the failing step and mor_last_error(), escaped. */
static int lib_error(run_state *r, const char *what, mor_status st)
{
    if (r && !r->at_line_start) { fputc('\n', stdout); r->at_line_start = 1; }
    return cli_error("%s: %s (%s)", what, mor_last_error(), mor_status_str(st));
}

/* A whole file ("-": standard input) into a malloc'd buffer; NULL after
 * printing why. */
static char *read_all(const char *path, size_t *len)
{
    int is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) { cli_error("cannot open %s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) { char *nb = realloc(buf, cap *= 2); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    int read_err = ferror(f);
    if (!is_stdin) fclose(f);
    if (!buf) { cli_error("out of memory"); return NULL; }
    if (read_err) { free(buf); cli_error("cannot read %s", is_stdin ? "standard input" : path); return NULL; }
    *len = n;
    return buf;
}

/* --chat: the prompt becomes the chat template's rendering of it; 0 or 1. */
static int chat_turn(run_state *r, int *add_bos)
{
    options *o = &r->o;
    size_t tl = 0, n = 0;
    char *tmpl = o->chat_template_file ? read_all(o->chat_template_file, &tl) : NULL, *text = NULL;
    if (o->chat_template_file && !tmpl) return 1;   /* read_all said why */
    int rc = chat_prompt_render(r->model, tmpl, tl, o->system_prompt, o->prompt, o->prompt_len, &text, &n, add_bos);
    free(tmpl);
    if (rc) return rc;
    free(o->prompt_buf);
    o->prompt_buf = text;
    o->prompt = text;
    o->prompt_len = n;
    return 0;
}

static int tokenize_file(const mor_model *m, const char *path)
{
    size_t n = 0;
    char *buf = read_all(path, &n);
    if (!buf) return 1;
    int32_t count = 0;
    mor_token *ids = NULL;
    mor_status st = text_tokenize(m, buf, n, MOR_TOKENIZE_PARSE_SPECIAL, &ids, &count);
    free(buf);
    if (st) return lib_error(NULL, "tokenize", st);
    for (int32_t i = 0; i < count; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    return 0;
}

/* One forward over tokens[0..n) of sequence 0 from position 0 (the cache is
 * cleared first); logits for every row when all_logits, else the last. */
static mor_status forward_all(run_state *r, const mor_token *tokens, int n, int all_logits)
{
    mor_kv_clear(mor_context_kv(r->ctx));
    mor_batch_clear(r->batch);
    for (int i = 0; i < n; i++) {
        mor_status st = mor_batch_add(r->batch, tokens[i], i, 0, all_logits || i == n - 1);
        if (st) return st;
    }
    return mor_decode(r->ctx, r->batch);
}

static int write_floats(const char *path, const float *const *rows, int n_rows, size_t row_len)
{
    char *tmp;
    FILE *f = cli_out_open(path, &tmp);
    if (!f) return 0;
    int ok = 1;
    for (int i = 0; i < n_rows && ok; i++) ok = rows[i] && fwrite(rows[i], sizeof(float), row_len, f) == row_len;
    return cli_out_close(f, &tmp, path, ok);
}

static int write_routing(run_state *r, int n)
{
    const mor_model *m = r->model;
    int32_t *depth = malloc(sizeof *depth * (size_t)n);
    char *tmp;
    FILE *f = depth ? cli_out_open(r->o.dump_routing, &tmp) : NULL;
    if (!f) { free(depth); if (!depth) cli_error("out of memory"); return 0; }
    mor_router_get_depths(mor_context_router(r->ctx), depth, n);
    fprintf(f, "{\"depth\": [");
    for (int i = 0; i < n; i++) fprintf(f, i ? ", %d" : "%d", depth[i]);
    fprintf(f, "], \"selected\": [");
    for (int rec = 0; rec < mor_model_n_recursion(m); rec++) {
        fprintf(f, rec ? ", [" : "[");
        for (int i = 0, k = 0; i < n; i++) if (depth[i] > rec) fprintf(f, k++ ? ", %d" : "%d", i);
        fprintf(f, "]");
    }
    fprintf(f, "]}\n");
    free(depth);
    return cli_out_close(f, &tmp, r->o.dump_routing, !ferror(f));
}

static int dump(run_state *r, int n)
{
    const mor_model *m = r->model;
    int nb = mor_model_n_boundaries(m);
    const float **rows = malloc(sizeof *rows * (size_t)n * (size_t)(nb + 1));
    if (!rows) return cli_error("out of memory"), 0;
    int ok = 1;
    if (r->o.dump_logits) {
        for (int i = 0; i < n; i++) rows[i] = mor_get_logits(r->ctx, i);
        ok = write_floats(r->o.dump_logits, rows, n, (size_t)mor_model_n_vocab(m));
    }
    if (ok && r->o.dump_hidden) {
        for (int b = 0; b < nb; b++)
            for (int i = 0; i < n; i++) rows[b * n + i] = mor_get_hidden(r->ctx, b, i);
        ok = write_floats(r->o.dump_hidden, rows, nb * n, (size_t)mor_model_n_embd(m));
    }
    free((void *)rows);
    return ok && (!r->o.dump_routing || write_routing(r, n));
}

/* --embedding: the prompt's pooled embedding as one JSON array line. */
static int print_embedding(run_state *r)
{
    const int32_t d = mor_model_n_embd(r->model);
    float *e = malloc(sizeof *e * (size_t)d);
    if (!e) return cli_error("out of memory");
    mor_status st = mor_embeddings_seq(r->ctx, 0, r->o.embedding, r->o.no_normalize ? 0 : MOR_EMBD_NORMALIZE, e, d);
    if (st) { free(e); return lib_error(NULL, "pooling the embedding", st); }
    for (int32_t j = 0; j < d; j++) printf("%s%.9g", j ? ", " : "[", e[j]);
    printf("]\n");
    free(e);
    return fflush(stdout) ? cli_error("writing the embedding failed") : 0;
}

static void put_text(run_state *r, const char *s, size_t len)
{
    if (!len) return;
    fwrite(s, 1, len, stdout);
    r->at_line_start = s[len - 1] == '\n';
}

static void print_piece(run_state *r, mor_token t, int depth)
{
    char buf[256], num[32];
    size_t len = 0;
    if (mor_token_to_piece(r->model, t, buf, sizeof buf, &len) == MOR_OK) put_text(r, buf, len);
    else put_text(r, num, (size_t)snprintf(num, sizeof num, "<%d>", t));
    if (r->o.show_depth) put_text(r, num, (size_t)snprintf(num, sizeof num, "[%d]", depth));
    fflush(stdout);
}

static int push(mor_token **v, int *n, int *cap, mor_token t)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 1024;
        mor_token *nv = realloc(*v, sizeof *nv * (size_t)nc);
        if (!nv) return 0;
        *v = nv; *cap = nc;
    }
    (*v)[(*n)++] = t;
    return 1;
}

/* The context is full: keep the first n_keep tokens, drop half of the rest,
 * and move what remains down (mor_kv_seq_add re-rotates its cached keys). */
static mor_status context_shift(run_state *r, int n_keep)
{
    const int n_discard = (r->n_seq - n_keep) / 2;
    if (!r->o.no_cache) {
        mor_kv_cache *kv = mor_context_kv(r->ctx);
        mor_status st = mor_kv_seq_rm(kv, 0, n_keep, n_keep + n_discard);
        if (!st) st = mor_kv_seq_add(kv, 0, n_keep + n_discard, -1, -n_discard);
        if (st) return st;
    }
    memmove(r->seq + n_keep, r->seq + n_keep + n_discard, sizeof *r->seq * (size_t)(r->n_seq - n_keep - n_discard));
    r->n_seq -= n_discard;
    r->n_shifts++;
    r->n_discarded += n_discard;
    return MOR_OK;
}

static const char *mode_name(int32_t mode)
{
    switch (mode) {
    case MOR_ROUTE_TOPK: return "topk";
    case MOR_ROUTE_THRESHOLD: return "threshold";
    case MOR_ROUTE_FORCED: return "forced";
    case MOR_ROUTE_TOKEN: return "token";
    default: return "all recursions";
    }
}

/* The routing line of the statistics: which mode ran, and why. */
static void print_routing(run_state *r, int chosen)
{
    const mor_model *m = r->model;
    mor_router *rt = mor_context_router(r->ctx);
    int32_t mode = mor_router_get_mode(rt), nr = mor_model_n_recursion(m);
    fprintf(stderr, "routing: %s", mode_name(mode));
    if (mode == MOR_ROUTE_THRESHOLD) {
        fprintf(stderr, " (thresholds");
        for (int i = 0; i < nr; i++) fprintf(stderr, "%s%g", i ? "," : " ", (double)mor_router_get_threshold(rt, i));
        fprintf(stderr, ")");
    }
    if (mode == MOR_ROUTE_FORCED) fprintf(stderr, ":%d", r->o.forced);
    if (chosen) fprintf(stderr, ", causal, chosen for generation with an expert-choice model (--routing topk: the "
                        "official expert-choice)");
    else if (!r->o.routing_set) fprintf(stderr, ", the model's own");
    fprintf(stderr, "\n");
}

int main(int argc, char **argv)
{
    cli_init("mor-run");
    run_state R;
    memset(&R, 0, sizeof R);
    R.at_line_start = 1;
    options *o = &R.o;
    parse_args(argc, argv, o);
    {
        const char *inputs[] = { o->model, o->tokenize_file, o->prompt_file, o->grammar_file, o->schema_file };
        const char *outs[] = { o->dump_logits, o->dump_routing, o->dump_hidden, o->dump_step_logits };
        for (int i = 0; i < 4; i++)
            if (outs[i] && cli_refuse_overwrite(outs[i], inputs, 5)) return 2;
    }
    if (o->prompt_file) {
        if (!(o->prompt_buf = read_all(o->prompt_file, &o->prompt_len))) return 1;
        o->prompt = o->prompt_buf;
    }
    if (o->grammar_file) {
        if (!(o->grammar_buf = read_all(o->grammar_file, &o->grammar_len))) { free(o->prompt_buf); return 1; }
        o->grammar = o->grammar_buf;
    }
    if (o->schema || o->schema_file) {   /* the schema's grammar */
        size_t slen = o->schema ? strlen(o->schema) : 0, glen = 0;
        char *sbuf = o->schema_file ? read_all(o->schema_file, &slen) : NULL;
        const char *text = o->schema_file ? sbuf : o->schema;
        const char *flag = o->schema_file ? "--json-schema-file" : "--json-schema";
        mor_status st = text ? mor_json_schema_to_grammar(text, slen, NULL, 0, &glen) : MOR_E_IO;
        if (st == MOR_E_BUFFER_TOO_SMALL && (o->grammar_buf = malloc(glen + 1)))
            st = mor_json_schema_to_grammar(text, slen, o->grammar_buf, glen, &glen);
        free(sbuf);
        if (!text) { free(o->prompt_buf); return 1; }   /* read_all said why */
        if (st) {
            free(o->prompt_buf); free(o->grammar_buf);
            return st == MOR_E_BUFFER_TOO_SMALL ? cli_error("out of memory") : lib_error(NULL, flag, st);
        }
        o->grammar = o->grammar_buf;
        o->grammar_len = glen;
    }

    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    if (o->tokenize_file) mp.flags |= MOR_MODEL_VOCAB_ONLY;
    else if (!o->no_check_tensors) mp.flags |= MOR_MODEL_CHECK_TENSORS;
    mor_status st = mor_model_load_file(o->model, &mp, &R.model);
    if (st) return lib_error(NULL, "loading the model", st);
    if (o->tokenize_file) { int rc = tokenize_file(R.model, o->tokenize_file); run_free(&R); return rc; }
    mor_model *model = R.model;
    const int32_t n_vocab = mor_model_n_vocab(model), nr = mor_model_n_recursion(model);
    if (o->n_thresholds > nr) {
        run_free(&R);
        cli_usage_error("--threshold: %d values for a model of %d recursions", o->n_thresholds, nr);
    }

    if (o->ids) {
        R.prompt = parse_ids(o->ids, n_vocab, &R.n_prompt);
        if (!R.prompt) { run_free(&R); return 1; }
    } else {
        /* BOS where the model's texts start with it (SentencePiece models) */
        int add_bos = mor_model_add_bos(model) != 0;
        if (o->chat && chat_turn(&R, &add_bos)) { run_free(&R); return 1; }
        const uint32_t tf = MOR_TOKENIZE_PARSE_SPECIAL | (add_bos ? MOR_TOKENIZE_ADD_BOS : 0);
        if ((st = text_tokenize(model, o->prompt, o->prompt_len, tf, &R.prompt, &R.n_prompt))) {
            run_free(&R);
            return st == MOR_E_NOMEM ? cli_error("out of memory") : lib_error(NULL, "tokenizing the prompt", st);
        }
    }
    if (R.n_prompt == 0) { run_free(&R); cli_usage_error("the prompt has no tokens"); }
    const int dumping = o->dump_logits || o->dump_routing || o->dump_hidden;
    const int n_predict = o->n_predict >= 0 ? o->n_predict : (dumping || o->embedding ? 0 : 64);

    /* The window: cells (n_ctx) and the position limit (max_pos). */
    const int32_t n_train = mor_model_n_ctx_train(model);
    const int32_t max_pos = o->max_pos > 0 ? o->max_pos : n_train;
    int32_t n_ctx = o->n_ctx > 0 ? o->n_ctx : o->max_pos > 0 ? o->max_pos : (n_train < 4096 ? n_train : 4096);
    if (o->n_ctx > max_pos && o->max_pos == 0)
        cli_note("--ctx %d is past the model's training context (%d): positions stay below %d; --max-pos %d "
                 "allows positions past it", o->n_ctx, n_train, n_train, o->n_ctx);
    const int32_t limit = n_ctx < max_pos ? n_ctx : max_pos;   /* tokens a sequence can hold */
    /* what raises the limit: past the training context only --max-pos does */
    const char *raise = limit == max_pos ? (o->max_pos ? "--max-pos N" :
                                            "--max-pos N, which allows positions past the training context,")
                                         : "--ctx N";
    const char *what = limit == max_pos && !o->max_pos ? ", the model's training context" : "";
    const int shifting = !o->no_context_shift && !dumping && !o->embedding;
    int n_keep = o->n_keep < 0 || o->n_keep > R.n_prompt ? R.n_prompt : o->n_keep;
    if (shifting && n_predict > 0 && n_keep > limit - 2) {
        run_free(&R);
        cli_usage_error("--keep: keeping %d tokens leaves nothing to drop in a context of %d positions", n_keep, limit);
    }
    if (R.n_prompt > limit) {
        int n = R.n_prompt;
        if (!shifting) {
            run_free(&R);
            return cli_error("the prompt has %d tokens, more than the context holds (%d positions%s); raise it "
                             "with %s%s", n, limit, what, raise,
                             dumping ? "" : ", or drop --no-context-shift to keep its start and its end");
        }
        /* llama.cpp's rule (mor_prompt_truncate, the library's server's too): the first n_keep
         * tokens, then its end; n_keep <= limit - 2 was checked above */
        R.n_prompt = mor_prompt_truncate(R.prompt, n, limit, n_keep);
        if (R.n_prompt < 0) { run_free(&R); return lib_error(NULL, "truncating the prompt", R.n_prompt); }
        cli_note("the prompt has %d tokens, more than the context holds (%d positions%s): kept its first %d and "
                 "its last %d tokens (--no-context-shift refuses such a prompt; %s raises the context)", n, limit,
                 what, n_keep, R.n_prompt - n_keep, raise);
    }

    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)n_ctx;
    cp.max_pos = max_pos;
    cp.n_batch = (uint32_t)(o->no_cache ? limit : R.n_prompt);
    if (o->speculate && cp.n_batch < (uint32_t)o->speculate + 1) cp.n_batch = (uint32_t)o->speculate + 1;
    cp.kv_mode = o->kv_mode;
    cp.kv_type = o->kv_type;
    cp.n_threads = o->n_threads;
    cp.n_outputs = dumping || o->speculate ? cp.n_batch : 1;   /* generation reads the last row's logits only */
    if (o->dump_hidden || o->embedding) cp.flags |= MOR_CTX_CAPTURE_HIDDEN;
    if (o->fast_bf16) cp.flags |= MOR_CTX_FAST_BF16;
    if ((st = mor_context_create(model, &cp, &R.ctx))) { run_free(&R); return lib_error(NULL, "creating the context", st); }
    mor_router *router = mor_context_router(R.ctx);
    /* Generation with an expert-choice model defaults to its causal mode:
     * under TOPK every token decoded alone runs all recursions. */
    int chosen = !o->routing_set && !dumping && (n_predict > 0 || o->embedding) &&
                 mor_model_router_type(model) == MOR_ROUTER_TYPE_EXPERT;
    if (chosen) { o->routing = MOR_ROUTE_THRESHOLD; }
    if ((o->routing_set || chosen) && (st = mor_router_set_mode(router, o->routing, o->forced))) {
        run_free(&R);
        return lib_error(NULL, "--routing", st);
    }
    if (o->exit_mode != MOR_EXIT_NONE && (st = mor_router_set_exit(router, o->exit_mode, o->exit_threshold))) {
        run_free(&R);
        return lib_error(NULL, "--exit", st);
    }
    for (int i = 0; i < o->n_thresholds; i++)
        if ((st = mor_router_set_threshold(router, i, o->thresholds[i]))) { run_free(&R); return lib_error(NULL, "--threshold", st); }
    if (o->max_depth && (st = mor_router_set_max_depth(router, o->max_depth))) {
        run_free(&R);
        return lib_error(NULL, "--max-depth", st);
    }
    R.depths = malloc(sizeof *R.depths * cp.n_batch);
    if (o->dump_step_logits) R.steps = malloc(sizeof *R.steps * (size_t)n_vocab * (size_t)(n_predict ? n_predict : 1));
    if (!R.depths || (o->dump_step_logits && !R.steps)) { run_free(&R); return cli_error("out of memory"); }
    if ((st = mor_batch_create((int32_t)cp.n_batch, &R.batch))) { run_free(&R); return lib_error(NULL, "creating a batch", st); }
    if (o->sp.dry_penalty_last_n < 0) o->sp.dry_penalty_last_n = limit;   /* llama.cpp's -1: the context */
    if ((st = mor_sampler_create(&o->sp, &R.sampler))) { run_free(&R); return lib_error(NULL, "creating the sampler", st); }
    if ((st = sampler_extras(&R, o))) { run_free(&R); return lib_error(NULL, "--logit-bias or --dry-sequence-breaker", st); }
    if (o->grammar) {
        if ((st = mor_grammar_create(model, o->grammar, o->grammar_len, NULL, NULL, 0, &R.grammar))) {
            run_free(&R);
            return lib_error(NULL, o->schema ? "--json-schema" : o->schema_file ? "--json-schema-file" :
                             o->grammar_file ? "--grammar-file" : "--grammar", st);
        }
        if (!(R.masked = malloc(sizeof *R.masked * (size_t)n_vocab))) { run_free(&R); return cli_error("out of memory"); }
    }
    for (int i = 0; i < R.n_prompt; i++) {
        mor_sampler_accept(R.sampler, R.prompt[i]);
        if (!push(&R.seq, &R.n_seq, &R.cap_seq, R.prompt[i])) { run_free(&R); return cli_error("out of memory"); }
    }

    double t0 = now_s();
    if ((st = forward_all(&R, R.prompt, R.n_prompt, dumping))) { run_free(&R); return lib_error(NULL, "decoding the prompt", st); }
    double t_prompt = now_s() - t0;
    if (dumping && !dump(&R, R.n_prompt)) { run_free(&R); return 1; }
    if (o->embedding) { int erc = print_embedding(&R); run_free(&R); return erc; }
    if (!o->print_ids && n_predict > 0 && o->prompt && !o->chat) { put_text(&R, o->prompt, o->prompt_len); fflush(stdout); }

    int rc = 0, n_gen = 0, stopped_at_limit = 0, ended_at_eos = 0, grammar_ended = 0;
    uint64_t hist[17] = { 0 };
    const mor_token eos = mor_model_token_eos(model);
    double t1 = now_s();
    const float *logits = mor_get_logits(R.ctx, R.n_prompt - 1);
    /* A token's depth is that of the step that produced it: the recursions
     * its input (the token before it) ran, as mor-server reports it; the
     * first one's is the last prompt token's. */
    int32_t made = 0;
    if (mor_router_get_depths(router, R.depths, R.n_prompt) == R.n_prompt) made = R.depths[R.n_prompt - 1];
    /* --speculate: the tokens the last mor_speculate step sampled, taken by
     * the next iterations in order (spec_q[spec_i] next); each but the last
     * was decoded by that step as its row spec_i + 1 */
    int32_t spec_n = 0, spec_i = 0;
    uint64_t spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
    mor_token *spec_q = o->speculate ? malloc(sizeof *spec_q * (size_t)(o->speculate + 1)) : NULL;
    if (o->speculate && !spec_q) { run_free(&R); return cli_error("out of memory"); }
    while (n_gen < n_predict) {
        const int queued = spec_i < spec_n;
        if (!queued && R.n_seq >= limit) {   /* no position left for the next token */
            if (!shifting) { stopped_at_limit = 1; break; }
            if ((st = context_shift(&R, n_keep))) { rc = lib_error(&R, "shifting the context", st); break; }
            if (R.n_shifts == 1) {
                if (!R.at_line_start) { fputc('\n', stdout); R.at_line_start = 1; }
                fflush(stdout);
                cli_note("the context is full (%d positions%s): shifting it (the first %d tokens stay, the oldest "
                         "%d of the rest are dropped; --no-context-shift stops instead, %s raises the context)",
                         limit, what, n_keep, R.n_discarded, raise);
            }
        }
        mor_token t;
        if (R.steps) memcpy(R.steps + (size_t)n_gen * n_vocab, logits, sizeof *R.steps * (size_t)n_vocab);
        const float *from = logits;
        if (queued) {
            t = spec_q[spec_i];   /* sampled (and accepted by the grammar) by the step */
        } else if (R.grammar) {
            if (mor_grammar_state(R.grammar) & MOR_GRAMMAR_MUST_END) { grammar_ended = 1; break; }
            memcpy(R.masked, logits, sizeof *R.masked * (size_t)n_vocab);
            if ((st = mor_grammar_apply(R.grammar, R.masked, n_vocab))) { rc = lib_error(&R, "the grammar", st); break; }
            from = R.masked;
        }
        if (!queued && (st = mor_sampler_sample(R.sampler, from, n_vocab, &t))) { rc = lib_error(&R, "sampling", st); break; }
        if (!queued && R.grammar && (st = mor_grammar_accept(R.grammar, t))) { rc = lib_error(&R, "the grammar", st); break; }
        if (!push(&R.seq, &R.n_seq, &R.cap_seq, t) || !push(&R.gen, &R.n_gen, &R.cap_gen, t)) {
            rc = cli_error("out of memory");
            break;
        }
        n_gen++;
        int32_t depth = 0, room = 0;   /* room: what a speculative step may sample (speculate_room) */
        if (o->no_cache) {
            if ((st = forward_all(&R, R.seq, R.n_seq, 0))) { rc = lib_error(&R, "decoding", st); break; }
            mor_router_get_depths(router, R.depths, R.n_seq);
            depth = R.depths[R.n_seq - 1];
            logits = mor_get_logits(R.ctx, R.n_seq - 1);
        } else if (spec_i + 1 < spec_n) {   /* decoded by the last speculative step */
            spec_i++;
            depth = R.depths[spec_i];
            logits = mor_get_logits(R.ctx, spec_i);
        } else if ((room = o->speculate ? speculate_room(&R, o, n_predict - n_gen, limit, t, eos) : 0) >= 1) {
            int32_t n_out = 0, acc = 0;
            if ((st = mor_speculate(R.ctx, 0, t, R.n_seq - 1, o->speculate, o->speculate_depth, R.sampler, R.grammar,
                                    spec_q, room, &n_out, &acc))) { rc = lib_error(&R, "speculative decoding", st); break; }
            spec_steps++;
            spec_drafted += (uint64_t)(o->speculate < room - 1 ? o->speculate : room - 1);
            spec_accepted += (uint64_t)acc;
            mor_router_get_depths(router, R.depths, n_out ? n_out : 1);
            depth = R.depths[0];
            logits = mor_get_logits(R.ctx, 0);   /* out[0]'s (when n_out is 0, sampling it says why) */
            spec_n = n_out; spec_i = 0;
        } else {
            spec_n = spec_i = 0;
            mor_batch_clear(R.batch);
            mor_batch_add(R.batch, t, R.n_seq - 1, 0, 1);
            if ((st = mor_decode(R.ctx, R.batch))) { rc = lib_error(&R, "decoding", st); break; }
            mor_router_get_depths(router, &depth, 1);
            logits = mor_get_logits(R.ctx, 0);
        }
        const int32_t produced = made;
        made = depth;
        hist[produced < 16 ? produced : 16]++;
        /* the end-of-text token ends a text prompt's generation; like the
         * server, it is counted and listed by --print-ids, its text not shown */
        int at_eos = eos >= 0 && t == eos && (o->prompt || R.grammar);
        if (!o->print_ids && !at_eos) print_piece(&R, t, produced);
        if (at_eos) { ended_at_eos = 1; break; }
    }
    double t_gen = now_s() - t1;
    if (R.steps && !rc) {   /* the logits of the n_gen steps taken */
        const float **rows = malloc(sizeof *rows * (size_t)(n_gen ? n_gen : 1));
        for (int i = 0; rows && i < n_gen; i++) rows[i] = R.steps + (size_t)i * n_vocab;
        if (!rows) rc = cli_error("out of memory");
        else if (!write_floats(o->dump_step_logits, rows, n_gen, (size_t)n_vocab)) rc = 1;
        free((void *)rows);
    }
    if (o->print_ids) {
        for (int i = 0; i < R.n_gen; i++) printf(i ? " %d" : "%d", R.gen[i]);
        printf("\n");
        R.at_line_start = 1;
    }
    if (!R.at_line_start) { fputc('\n', stdout); R.at_line_start = 1; }
    fflush(stdout);
    if (stopped_at_limit && !rc)
        cli_note("the context is full (%d positions%s): stopped after %d generated tokens (--no-context-shift); "
                 "raise it with %s", limit, what, n_gen, raise);
    if (!o->quiet && !rc) {
        fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tok/s); generated: %d tokens in %.3f s (%.1f tok/s)%s\n",
                R.n_prompt, t_prompt, R.n_prompt / (t_prompt > 0 ? t_prompt : 1e-9), n_gen, t_gen,
                n_gen / (t_gen > 0 ? t_gen : 1e-9), ended_at_eos ? "; stopped at the end-of-text token" :
                grammar_ended ? "; the grammar ended the output" : "");
        if (o->speculate && spec_steps)
            fprintf(stderr, "speculation: %d drafts per step at depth %d: %llu steps, %llu drafted, %llu accepted "
                    "(%.1f%%), %.2f tokens per step\n", o->speculate, o->speculate_depth,
                    (unsigned long long)spec_steps, (unsigned long long)spec_drafted,
                    (unsigned long long)spec_accepted, spec_drafted ? 100.0 * (double)spec_accepted / (double)spec_drafted : 0.0,
                    (double)n_gen / (double)spec_steps);
        if (n_gen) {
            double sum = 0;
            for (int d = 0; d <= 16; d++) sum += (double)d * (double)hist[d];
            fprintf(stderr, "depth: mean %.2f over %d generated tokens; histogram", sum / n_gen, n_gen);
            for (int d = 0; d <= nr; d++) fprintf(stderr, " %d:%llu", d, (unsigned long long)hist[d]);
            fprintf(stderr, "\n");
        }
        print_routing(&R, chosen);
        if (R.n_shifts)
            fprintf(stderr, "context: %d positions, shifted %d times (the first %d tokens kept, %d tokens dropped "
                    "in all)\n", limit, R.n_shifts, n_keep, R.n_discarded);
        uint64_t alloc = 0, used = 0;
        mor_kv_cache *kv = mor_context_kv(R.ctx);
        mor_kv_bytes(kv, MOR_KV_ALL, &alloc, &used);
        fprintf(stderr, "KV cache: %llu bytes in use of %llu allocated", (unsigned long long)used,
                (unsigned long long)alloc);
        for (int rr = 0; rr < nr; rr++) {
            mor_kv_bytes(kv, rr, NULL, &used);
            fprintf(stderr, "%s recursion %d: %llu", rr ? "," : ";", rr, (unsigned long long)used);
        }
        fprintf(stderr, "\n");
    }
    free(spec_q);
    run_free(&R);
    return rc;
}
