/* simple.c - the smallest complete libmor program: load, decode, sample.
 *
 *   bin/example-simple MODEL.gguf "Once upon a time" [n_tokens]
 *   bin/example-simple MODEL.gguf --ids 14,148,141  [n_tokens]   (models without a tokenizer)
 *
 * Prints the continuation, each token followed by the number of recursions
 * (the depth) the router gave it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mor.h"

static int fail(const char *what, mor_status st)
{
    fprintf(stderr, "%s: %s: %s\n", what, mor_status_str(st), mor_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL.gguf PROMPT|--ids A,B,.. [n]\n", argv[0]); return 2; }
    int use_ids = strcmp(argv[2], "--ids") == 0;
    const char *prompt = argv[use_ids ? 3 : 2];
    int n_predict = argc > 3 + use_ids ? atoi(argv[3 + use_ids]) : 32;
    if (!prompt) return 2;

    mor_model *model;
    mor_status st = mor_model_load_file(argv[1], NULL, &model);
    if (st) return fail("load", st);

    mor_token tokens[512];
    int32_t n = 0;
    if (use_ids) {                       /* "14,148,141" */
        for (char *s = (char *)prompt; *s && n < 512; s += *s == ',') tokens[n++] = (mor_token)strtol(s, &s, 10);
    } else if ((st = mor_tokenize(model, prompt, strlen(prompt), mor_model_add_bos(model) ? MOR_TOKENIZE_ADD_BOS : 0,
                                  tokens, 512, &n))) {
        return fail("tokenize", st);
    }

    mor_context *ctx;
    if ((st = mor_context_create(model, NULL, &ctx))) return fail("context", st);
    /* The official top-k routing gives a lone decoded token every recursion;
     * threshold routing is causal and lets each token's depth vary. */
    if (mor_model_router_type(model) == MOR_ROUTER_TYPE_EXPERT)
        mor_router_set_mode(mor_context_router(ctx), MOR_ROUTE_THRESHOLD, 0);
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);        /* temperature 0.8, top-k 40, top-p 0.95, min-p 0.05 */
    sp.seed = 42;
    mor_sampler *sampler;
    mor_batch *batch;
    if ((st = mor_sampler_create(&sp, &sampler)) || (st = mor_batch_create(512, &batch))) return fail("setup", st);

    for (int32_t i = 0; i < n; i++)      /* the prompt in one batch; logits for its last token */
        mor_batch_add(batch, tokens[i], i, 0, i == n - 1);
    if ((st = mor_decode(ctx, batch))) return fail("decode", st);
    printf("%s", use_ids ? "" : prompt);
    for (int32_t pos = n; pos < n + n_predict; pos++) {
        mor_token next;
        const float *logits = mor_get_logits(ctx, mor_batch_size(batch) - 1);
        if ((st = mor_sampler_sample(sampler, logits, mor_model_n_vocab(model), &next))) return fail("sample", st);
        if (next == mor_model_token_eos(model)) break;
        char piece[64];
        size_t len = 0;
        if (mor_token_to_piece(model, next, piece, sizeof piece, &len) == MOR_OK) fwrite(piece, 1, len, stdout);
        else printf(" %d", next);
        mor_batch_clear(batch);          /* feed it back: one token at its position */
        mor_batch_add(batch, next, pos, 0, 1);
        if ((st = mor_decode(ctx, batch))) return fail("decode", st);
        int32_t depth = 0;               /* how many recursions the router gave it */
        mor_router_get_depths(mor_context_router(ctx), &depth, 1);
        printf("[%d]", depth);
        fflush(stdout);
    }
    printf("\n");
    mor_batch_free(batch);
    mor_sampler_free(sampler);
    mor_context_free(ctx);
    mor_model_free(model);
    return 0;
}
