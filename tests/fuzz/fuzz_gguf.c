/* fuzz_gguf.c - any bytes as a model file: mor_model_load_memory, then (for
 * what loads) the getters, a small context and a decode, and the tokenizer.
 * Loads twice: in full, and vocab-only. A load that fails must leave *out NULL
 * and a message; one that succeeds must give a model every API accepts. */
#include "fuzz.h"
#include "mor.h"

FUZZ_TARGET(gguf)

/* Decode a few tokens when the dimensions are small enough to be quick. */
static void exercise(mor_model *m)
{
    int32_t V = mor_model_n_vocab(m), d = mor_model_n_embd(m), L = mor_model_n_layer(m);
    char buf[64];
    size_t len;
    mor_model_meta_str(m, "general.architecture", buf, sizeof buf, &len);
    mor_model_meta_str(m, "mor.router.capacity", buf, sizeof buf, &len);
    mor_model_meta_str(m, "mor.rope.freq_base", buf, 4, &len);
    if (mor_model_token_bos(m) >= 0 || mor_model_token_eos(m) >= 0) {
        mor_token ids[16];
        int32_t n = 0;
        if (mor_tokenize(m, "Hello <|endoftext|> 42", 22, MOR_TOKENIZE_ADD_BOS | MOR_TOKENIZE_PARSE_SPECIAL,
                         ids, 16, &n) == MOR_OK) {
            FUZZ_ASSERT(n >= 0 && n <= 16, "n = %d", n);
            mor_detokenize(m, ids, n, buf, sizeof buf, &len);
        }
    }
    if (L == 0 || (int64_t)d * mor_model_n_layer(m) > 4096 || d > 256 || V > 65536 ||
        (int64_t)mor_model_n_head(m) * mor_model_head_dim(m) > 1024)
        return;
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = 8; cp.n_batch = 4; cp.n_seq_max = 2;
    mor_context *c = NULL;
    mor_status st = mor_context_create(m, &cp, &c);
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_NOMEM || st == MOR_E_UNSUPPORTED, "context: %d %s", st, mor_last_error());
    if (st) return;
    mor_batch *b = NULL;
    if (mor_batch_create(4, &b) == MOR_OK) {
        mor_batch_add(b, 0, 0, 0, 0);
        mor_batch_add(b, V - 1, 1, 0, 1);
        mor_batch_add(b, V / 2, 0, 1, 1);
        st = mor_decode(c, b);
        FUZZ_ASSERT(st == MOR_OK, "decode on a loaded model: %d %s", st, mor_last_error());
        FUZZ_ASSERT(mor_get_logits(c, 1) && mor_get_logits(c, 2) && !mor_get_logits(c, 0), "logits rows");
        int32_t depth[3];
        FUZZ_ASSERT(mor_router_get_depths(mor_context_router(c), depth, 3) == 3, "depths");
        for (int i = 0; i < 3; i++) FUZZ_ASSERT(depth[i] >= 0 && depth[i] <= mor_model_n_recursion(m), "depth %d", depth[i]);
        mor_batch_free(b);
    }
    mor_context_free(c);
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    uint8_t *img = fuzz_copy(data, size);
    if (!img) return 0;
    int accepted = 0;
    for (int vocab_only = 0; vocab_only < 2; vocab_only++) {
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = vocab_only ? MOR_MODEL_VOCAB_ONLY : 0;
        mor_model *m = (mor_model *)img;   /* must be overwritten */
        mor_status st = mor_model_load_memory(img, size, &mp, &m);
        if (st != MOR_OK) {
            FUZZ_ASSERT(m == NULL && st < 0 && *mor_last_error(), "failed load: %d, out %p", st, (void *)m);
            FUZZ_ASSERT(st == MOR_E_FORMAT || st == MOR_E_UNSUPPORTED || st == MOR_E_NOMEM || st == MOR_E_INVALID_ARG,
                        "status %s", mor_status_str(st));
            continue;
        }
        if (!vocab_only) { accepted = 1; exercise(m); }
        mor_model_free(m);
    }
    free(img);
    return accepted;
}
