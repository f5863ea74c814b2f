/* llama_logits.c - llama.cpp's logits for fixed token ids (a peer of
 * libmor, built and run by tests/peer/run.sh against a llama.cpp build;
 * not part of libmor or of make test).
 *
 *   llama_logits MODEL.gguf 1,17,42,...
 * prints one line per position: the n_vocab logits after that token, each
 * "%.9g", from one llama_decode of the whole sequence on one thread, with
 * an F32 KV cache and without flash attention.
 *
 *   llama_logits MODEL.gguf 1,17,42,... N
 * prints instead, on one line, the N token ids greedy decoding gives after
 * the sequence (the first from its last logits, then one llama_decode per
 * token through the KV cache; the first maximum wins a tie). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... [N]\n", argv[0]); return 2; }
    const int n_gen = argc == 4 ? atoi(argv[3]) : 0;
    llama_token ids[512];
    int n = 0;
    for (char *p = argv[2]; *p && n < 512;) {
        ids[n++] = (llama_token)strtol(p, &p, 10);
        if (*p == ',') p++;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = cp.n_ubatch = 64;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.swa_full = true;
    /* F32 throughout: llama.cpp's default KV cache is F16 */
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot make a context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int g = 0, at = n - 1; g < n_gen; g++, at = 0) {
        const float *l = llama_get_logits_ith(ctx, at);
        int best = 0;
        for (int v = 1; v < nv; v++)
            if (l[v] > l[best]) best = v;
        printf("%s%d", g ? " " : "", best);
        b.token[0] = best;
        b.pos[0] = n + g;
        b.n_tokens = 1;
        if (g + 1 < n_gen && llama_decode(ctx, b)) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    }
    if (n_gen) printf("\n");
    for (int i = 0; i < n && !n_gen; i++) {
        const float *l = llama_get_logits_ith(ctx, i);
        for (int v = 0; v < nv; v++) printf("%s%.9g", v ? " " : "", l[v]);
        printf("\n");
    }
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
