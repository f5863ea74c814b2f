/* bench_models.h - the random-weight models mor-bench writes (synth_model.h), shared by its modes: the
 * shapes, the weight types, and the file of one (shape, depth, N_r, type, LoRA rank), written when missing
 * and reused when present.
 * Header-only (static functions), included by mor-bench.c and bench_serve.h. */
#ifndef MOR_BENCH_MODELS_H
#define MOR_BENCH_MODELS_H
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "internal.h"
#include "bench_util.h"
#include "synth_model.h"

typedef struct { const char *name; int32_t d, L, H, Hkv, hd, F, V, L_mor; } shape;
static const shape shapes[] = {
    { "135m", 576, 30, 9, 3, 64, 1536, 49152, 29 },    /* SmolLM-135M; MoR: K = (30-2)/3 = 9, 29 layers */
    { "360m", 960, 32, 15, 5, 64, 2560, 49152, 32 },   /* SmolLM-360M; MoR: K = 10 */
    /* the anchor kit's k256 (a Llama shape whose matrices are all whole blocks of 256, so a k-quant
     * file holds k-quants only); MoR: K = 3, 11 layers */
    { "k256", 768, 12, 12, 4, 64, 2048, 32768, 11 },
    /* TinyLlama-1.1B (untied output in the original; tied here, as every synthetic model); MoR: K = 7
     * (20 / 3 rounded), 23 layers; its rows are whole blocks of 256 too */
    { "tl1b", 2048, 22, 32, 4, 64, 5632, 32000, 23 },
};
static const struct { const char *name; uint32_t type; } wtypes[] = {
    { "f32", GGML_F32 }, { "f16", GGML_F16 }, { "bf16", GGML_BF16 }, { "q8_0", GGML_Q8_0 }, { "q4_0", GGML_Q4_0 },
    { "q4_1", GGML_Q4_1 }, { "q5_0", GGML_Q5_0 }, { "q5_1", GGML_Q5_1 }, { "q2_k", GGML_Q2_K }, { "q3_k", GGML_Q3_K },
    { "q4_k", GGML_Q4_K }, { "q5_k", GGML_Q5_K }, { "q6_k", GGML_Q6_K },
    /* llama-quantize's mixes: attn_v and ffn_down in Q6_K in a third of the layers (synth_spec.more_type) */
    { "q4_k_m", GGML_Q4_K }, { "q5_k_m", GGML_Q5_K },
};

/* wtypes' index of a type name, -1 if none. */
static int bench_wtype(const char *name)
{
    for (int i = 0; i < (int)(sizeof wtypes / sizeof *wtypes); i++)
        if (!strcmp(wtypes[i].name, name)) return i;
    return -1;
}

static int file_ok(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

/* The model of shape sh with L unrolled layers, n_rec recursions (1: dense, all L layers stored; else
 * middle-cycle 1 + n_rec x K + 1), weights wtypes[ti], LoRA deltas of rank lora on the shared block (0:
 * none) at DIR/SHAPE-{mor<N_r>[-lora<R>]|dense}-L<L>-TYPE.gguf, written (through DIR/....tmp) when missing.
 * 0 on success; else a message said why. */
static int bench_model_file(const char *dir, const shape *sh, int32_t L, int32_t n_rec, int ti, int32_t lora,
                            char *path, size_t cap)
{
    char arch[32], tmp[1100], err[256] = "";
    if (n_rec > 1 && lora > 0) snprintf(arch, sizeof arch, "mor%d-lora%d", n_rec, lora);
    else if (n_rec > 1) snprintf(arch, sizeof arch, "mor%d", n_rec);
    else snprintf(arch, sizeof arch, "dense");
    snprintf(path, cap, "%s/%s-%s-L%d-%s.gguf", dir, sh->name, arch, L, wtypes[ti].name);
    if (file_ok(path)) return 0;
    synth_spec sp = { sh->d, L, sh->H, sh->Hkv, sh->hd, sh->F, sh->V, 2048, n_rec, wtypes[ti].type, wtypes[ti].type,
                      1234, 0 };
    /* as llama.cpp's Q4_0 file: the tied embedding stays Q8_0; as its k-quant files: Q6_K (rows of 576: Q8_0);
     * matrices whose rows are not whole blocks of 256 in llama-quantize's fallback type (synth_matrix) */
    if (!strcmp(wtypes[ti].name, "q4_k_m") || !strcmp(wtypes[ti].name, "q5_k_m")) sp.more_type = GGML_Q6_K;
    if (sp.type == GGML_Q4_0) sp.embd_type = GGML_Q8_0;
    else if (tensor_block_size(sp.type) > 1 && sp.type != GGML_Q8_0) sp.embd_type = GGML_Q6_K;
    fprintf(stderr, "writing %s ...\n", path);
    const double t0 = bench_now();
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (synth_write_lora(&sp, lora, tmp, err, sizeof err) || rename(tmp, path)) {
        remove(tmp);
        fprintf(stderr, "cannot write %s: %s\n", path, err[0] ? err : "rename failed");
        return -1;
    }
    fprintf(stderr, "wrote %s in %.1f s\n", path, bench_now() - t0);
    return 0;
}
#endif
