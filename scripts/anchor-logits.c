/* anchor-logits.c - llama.cpp's logits of one forward pass of fixed ids, for
 * comparing libmor's with them on the same file (docs/PERFORMANCE.md, the
 * k-quants). Not part of the build: compiled against the anchor kit's
 * llama.cpp build (shared/anchor), e.g.
 *
 *   L=build/anchor/llama.cpp
 *   cc -O2 -I$L/include -I$L/ggml/include scripts/anchor-logits.c -L$L/build/bin -lllama -lggml \
 *      -Wl,-rpath,$L/build/bin -o build/anchor-logits
 *   build/anchor-logits MODEL.gguf 1,2562,24833,... OUT.f32
 *
 * One batch of all ids at positions 0.., F32 K and V caches, flash attention
 * off, logits of every position written as float32 [T][vocab] (the layout of
 * mor-run --dump-logits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: anchor-logits MODEL.gguf ID,ID,... OUT.f32\n"); return 2; }
    llama_token ids[4096];
    int n = 0;
    for (char *p = argv[2]; *p && n < 4096; ) {
        ids[n++] = (llama_token)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) { fprintf(stderr, "cannot make a context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(c, b)) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *f = fopen(argv[3], "wb");
    for (int i = 0; f && i < n; i++) fwrite(llama_get_logits_ith(c, i), sizeof(float), (size_t)V, f);
    if (!f || fclose(f)) { fprintf(stderr, "cannot write %s\n", argv[3]); return 1; }
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    return 0;
}
