/* mor-quantize - re-type the weight matrices of a `mor` GGUF file:
 *
 *   mor-quantize IN.gguf OUT.gguf TYPE [--embd-type TYPE] [--drift N]
 *
 * TYPE is a single type (below) or one of llama-quantize's k-quant mixes:
 * q2_k_mix (llama-quantize's Q2_K), q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m,
 * q5_k_s, q5_k_m, q6_k_mix (its Q6_K). A mix stores most matrices in its
 * base type and bumps the sensitive ones as llama-quantize does without an
 * importance matrix (pick_mix below): attn_v and ffn_down of the first and
 * last eighth of the layers and every third one between (use_more_bits) in
 * Q6_K for q4_k_m / q5_k_m; attn_v in Q5_K for the first two under q3_k_m,
 * ffn_down Q5_K for the first sixteenth and Q4_K else; attn_output Q4_K under
 * q3_k_m, Q3_K under q2_k_mix; the output matrix (or a tied embedding) in
 * Q6_K (Q8_0 where its rows are not whole blocks), an untied embedding in
 * the base type. Layers are counted in the file's order, as llama-quantize
 * counts them; a MoR file's shared block counts once.
 *
 * TYPE is f32, f16, bf16 or one of ggml's quants: q8_0, q4_0, q4_1, q5_0,
 * q5_1, q2_k, q3_k, q4_k, q5_k, q6_k. Every layer matrix becomes TYPE, in
 * ggml's block layout (what llama-quantize writes from the same floats
 * without an importance matrix); a matrix whose rows are not whole blocks of
 * 256 falls back as llama-quantize's does (q2_k, q3_k -> q4_0, q4_k -> q5_0,
 * q5_k -> q5_1, q6_k -> q8_0), else to f16. Norms, routers and LoRA factors
 * stay F32. The embedding (and an untied output matrix) becomes --embd-type,
 * by default TYPE, except for q4_0, where it is q8_0 as llama.cpp's Q4_0
 * files keep it, and the other 2-5 bit types, where it is q6_k as in
 * llama.cpp's k-quant files (the output projection is the most sensitive
 * matrix). Keys are copied unchanged.
 * --drift N then loads both files and reports, over N random tokens (or the
 * model's own text when it has a tokenizer), the mean KL divergence and
 * top-1 agreement of OUT's logits against IN's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "mor.h"
#include "cli.h"
#include "drift.h"
#include "gguf_write.h"

static int parse_type(const char *s, uint32_t *t)
{
    static const struct { const char *n; uint32_t t; } types[] = {
        { "f32", GGML_F32 }, { "f16", GGML_F16 }, { "bf16", GGML_BF16 }, { "q8_0", GGML_Q8_0 }, { "q4_0", GGML_Q4_0 },
        { "q4_1", GGML_Q4_1 }, { "q5_0", GGML_Q5_0 }, { "q5_1", GGML_Q5_1 }, { "q2_k", GGML_Q2_K },
        { "q3_k", GGML_Q3_K }, { "q4_k", GGML_Q4_K }, { "q5_k", GGML_Q5_K }, { "q6_k", GGML_Q6_K },
    };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(s, types[i].n)) { *t = types[i].t; return 1; }
    return 0;
}

/* llama-quantize's k-quant mixes (its "ftypes"): the base type, and the
 * rules of pick_mix. */
enum { MIX_NONE, MIX_Q2_K, MIX_Q3_K_S, MIX_Q3_K_M, MIX_Q3_K_L, MIX_Q4_K_S, MIX_Q4_K_M, MIX_Q5_K_S, MIX_Q5_K_M, MIX_Q6_K };

static int parse_mix(const char *s, int *mix, uint32_t *base)
{
    static const struct { const char *n; int mix; uint32_t base; } mixes[] = {
        { "q2_k_mix", MIX_Q2_K, GGML_Q2_K }, { "q3_k_s", MIX_Q3_K_S, GGML_Q3_K }, { "q3_k_m", MIX_Q3_K_M, GGML_Q3_K },
        { "q3_k_l", MIX_Q3_K_L, GGML_Q3_K }, { "q4_k_s", MIX_Q4_K_S, GGML_Q4_K }, { "q4_k_m", MIX_Q4_K_M, GGML_Q4_K },
        { "q5_k_s", MIX_Q5_K_S, GGML_Q5_K }, { "q5_k_m", MIX_Q5_K_M, GGML_Q5_K }, { "q6_k_mix", MIX_Q6_K, GGML_Q6_K },
    };
    for (size_t i = 0; i < sizeof mixes / sizeof *mixes; i++)
        if (!strcmp(s, mixes[i].n)) { *mix = mixes[i].mix; *base = mixes[i].base; return 1; }
    return 0;
}

typedef struct {
    int      mix;
    uint32_t base, embd;            /* embd: --embd-type, or 0 for the mix's rule */
    int      tied, gqa;             /* no output.weight; n_head / n_head_kv */
    int      n_attn_v, i_attn_v, n_ffn_down, i_ffn_down;
} mix_state;

/* The first and last eighth of n and every third between (llama-quantize's use_more_bits). */
static int more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int name_ends(const char *name, const char *suffix)
{
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && !strcmp(name + n - k, suffix);
}

static uint32_t pick_mix(const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, void *user)
{
    mix_state *m = user;
    if (gguf_retype_keeps(name, n_dims)) return type;
    const int mx = m->mix;
    const int output = !strcmp(name, "output.weight"), embd = !strcmp(name, "token_embd.weight");
    if (output || (embd && m->tied)) {
        if (m->embd) return m->embd;
        return ne[0] % 256 ? GGML_Q8_0 : GGML_Q6_K;
    }
    if (embd) return m->embd ? m->embd : m->base;
    uint32_t t = m->base;
    if (name_ends(name, ".attn_v.weight")) {
        const int i = m->i_attn_v++, n = m->n_attn_v;
        if (mx == MIX_Q2_K) t = m->gqa >= 4 ? GGML_Q4_K : GGML_Q3_K;
        else if (mx == MIX_Q3_K_M) t = i < 2 ? GGML_Q5_K : GGML_Q4_K;
        else if (mx == MIX_Q3_K_L) t = GGML_Q5_K;
        else if ((mx == MIX_Q4_K_M || mx == MIX_Q5_K_M) && more_bits(i, n)) t = GGML_Q6_K;
        else if (mx == MIX_Q4_K_S && i < 4) t = GGML_Q5_K;
    } else if (name_ends(name, ".ffn_down.weight")) {
        const int i = m->i_ffn_down++, n = m->n_ffn_down;
        if (mx == MIX_Q2_K) t = GGML_Q3_K;
        else if (mx == MIX_Q3_K_M) t = i < n / 16 ? GGML_Q5_K : GGML_Q4_K;
        else if (mx == MIX_Q3_K_L) t = GGML_Q5_K;
        else if ((mx == MIX_Q4_K_M || mx == MIX_Q5_K_M) && more_bits(i, n)) t = GGML_Q6_K;
        else if (mx == MIX_Q4_K_S && i < n / 8) t = GGML_Q5_K;
    } else if (name_ends(name, ".attn_output.weight")) {
        if (mx == MIX_Q2_K) t = GGML_Q3_K;
        else if (mx == MIX_Q3_K_M) t = GGML_Q4_K;
        else if (mx == MIX_Q3_K_L) t = GGML_Q5_K;
    }
    return t;
}

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) || ftell(f) <= 0) { fclose(f); return NULL; }
    long n = ftell(f);
    rewind(f);
    void *buf = malloc((size_t)n);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mor-quantize IN.gguf OUT.gguf TYPE [--embd-type TYPE] [--drift N]\n"
               "  TYPE: f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k (every matrix),\n"
               "        or a llama-quantize mix: q2_k_mix|q3_k_s|q3_k_m|q3_k_l|q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k_mix\n"
               "  --embd-type TYPE  the embedding's (and untied output's) type (default TYPE; q8_0 for q4_0,\n"
               "                    q6_k for the other types of 2-5 bits)\n"
               "  --drift N         then compare OUT's logits with IN's over N tokens (KL, top-1)\n"
               "  --no-check-tensors  do not check every weight of IN for NaN and infinity\n");
}

int main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *ts = NULL, *es = NULL;
    int drift_n = 0, check_tensors = 1;
    cli_init("mor-quantize");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--embd-type")) es = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--drift")) drift_n = (int)cli_int(a, cli_value(argc, argv, &i), 0, 1 << 24);
        else if (!strcmp(a, "--no-check-tensors")) check_tensors = 0;
        else if (a[0] == '-' && a[1]) cli_usage_error("unknown option '%s'", a);
        else if (!in) in = a;
        else if (!out) out = a;
        else if (!ts) ts = a;
        else cli_usage_error("one input, one output and one type, got '%s' too", a);
    }
    uint32_t type, embd;
    int mix = MIX_NONE;
    if (!in || !out || !ts) cli_usage_error("mor-quantize IN.gguf OUT.gguf TYPE");
    if (!parse_mix(ts, &mix, &type) && !parse_type(ts, &type)) cli_usage_error("TYPE: expected f32|f16|bf16 or a quant (q8_0, q4_k, ...; see --help), got '%s'", ts);
    if (es && !parse_type(es, &embd)) cli_usage_error("--embd-type: expected f32|f16|bf16 or a quant (q8_0, q4_k, ...; see --help), got '%s'", es);
    if (cli_refuse_overwrite(out, &in, 1)) return 2;
    const int low_bits = type != GGML_Q4_0 && type != GGML_Q8_0 && type != GGML_Q6_K && tensor_block_size(type) > 1;
    if (!es) embd = type == GGML_Q4_0 ? GGML_Q8_0 : low_bits ? GGML_Q6_K : type;
    size_t size;
    void *buf = read_file(in, &size);
    if (!buf) { fprintf(stderr, "mor-quantize: cannot read %s\n", in); return 1; }
    gguf_file *g = NULL;
    if (gguf_parse(buf, size, &g)) { fprintf(stderr, "mor-quantize: %s: %s\n", in, mor_last_error()); free(buf); return 1; }
    /* the input must be a model libmor loads, so the output is one too */
    mor_model *check = NULL;
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    if (check_tensors) mp.flags |= MOR_MODEL_CHECK_TENSORS;
    if (mor_model_load_memory(buf, size, &mp, &check)) {
        fprintf(stderr, "mor-quantize: %s: %s\n", in, mor_last_error());
        gguf_free(g); free(buf); return 1;
    }
    mix_state ms = { mix, type, es ? embd : 0, 1, 1, 0, 0, 0, 0 };
    ms.gqa = mor_model_n_head_kv(check) > 0 ? mor_model_n_head(check) / mor_model_n_head_kv(check) : 1;
    mor_model_free(check);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)g->tensors[i].name.n, g->tensors[i].name.p);
        ms.tied &= strcmp(name, "output.weight") != 0;
        ms.n_attn_v += name_ends(name, ".attn_v.weight");
        ms.n_ffn_down += name_ends(name, ".ffn_down.weight");
    }
    int quantized_in = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        quantized_in |= tensor_block_size(g->tensors[i].type) > 1;
    if (quantized_in && type != GGML_F32)
        fprintf(stderr, "mor-quantize: note: %s is already quantized; re-quantizing loses precision twice\n", in);
    gguf_writer *b = gguf_writer_new();
    if (!b) { gguf_free(g); free(buf); return cli_error("out of memory"); }
    int fallback = 0;
    if (mix) gguf_writer_add_retyped_fn(b, g, pick_mix, &ms, &fallback);
    else gguf_writer_add_retyped(b, g, type, embd, &fallback);
    /* into a temporary file beside OUT, renamed at the end: OUT is never half-written */
    char *tmp = cli_tmp_path(out);
    int rc = tmp ? gguf_writer_write_file(b, tmp, NULL, 0) : -1;
    if (!rc && rename(tmp, out)) rc = -1;
    if (rc && tmp) remove(tmp);
    free(tmp);
    const uint64_t bytes = gguf_writer_data_bytes(b);
    gguf_writer_free(b);
    gguf_free(g);
    free(buf);
    if (rc) return cli_error("cannot write %s", out);
    mor_model *mo = NULL;
    if (mor_model_load_file(out, NULL, &mo)) {
        fprintf(stderr, "mor-quantize: the output does not load: %s\n", mor_last_error());
        return 1;
    }
    if (mix) printf("%s: %s (llama-quantize's mix of %s and bumps), %.1f MB of tensors", out, ts, tensor_type_name(type),
                    bytes / 1e6);
    else printf("%s: %s, embedding %s, %.1f MB of tensors", out, ts,
                es ? es : (embd == type ? ts : embd == GGML_Q8_0 ? "q8_0" : "q6_k"), bytes / 1e6);
    if (fallback) printf(" (%d matrices with rows that are not whole blocks: in llama-quantize's fallback type or f16)", fallback);
    printf("\n");
    if (drift_n > 0) {
        mor_model *mi = NULL;
        if (mor_model_load_file(in, NULL, &mi)) { fprintf(stderr, "%s\n", mor_last_error()); mor_model_free(mo); return 1; }
        drift_result d;
        if (drift_measure(mi, mo, drift_n, 7, &d)) { fprintf(stderr, "drift: %s\n", mor_last_error()); rc = 1; }
        else printf("drift over %d tokens (%s): mean KL %.3g nats (max %.3g), top-1 agreement %.4f, mean depth %.3f vs %.3f\n",
                    d.n, d.text ? "model's tokenizer, sample text" : "random tokens", d.mean_kl, d.max_kl,
                    d.top1, d.depth_a, d.depth_b);
        mor_model_free(mi);
    }
    mor_model_free(mo);
    return rc;
}
