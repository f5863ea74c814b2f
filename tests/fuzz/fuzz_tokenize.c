/* fuzz_tokenize.c - arbitrary bytes into mor_tokenize. The first byte picks
 * the tokenizer (bit 0: pre "gpt2" or "smollm", from tests/fuzz/models/) and
 * the flags (bit 1: PARSE_SPECIAL, bit 2: ADD_BOS); the rest is the text.
 * Checks: the ids are in range; decode(encode(x)) == x (BOS rendered first);
 * a buffer one too small gives MOR_E_BUFFER_TOO_SMALL with the same count. */
#include "fuzz_vocab.h"

FUZZ_TARGET(tokenize)

static mor_model *models[2];

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const mor_model *m = fuzz_vocab_model(models, data[0] & 1);
    uint32_t flags = (data[0] & 2 ? MOR_TOKENIZE_PARSE_SPECIAL : 0) | (data[0] & 4 ? MOR_TOKENIZE_ADD_BOS : 0);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t need = -1;
    mor_status st = mor_tokenize(m, text, len, flags, NULL, 0, &need);
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_BUFFER_TOO_SMALL, "count: %s %s", mor_status_str(st), mor_last_error());
    FUZZ_ASSERT(need >= 0 && (size_t)need <= len + 1, "%d tokens for %zu bytes", need, len);
    FUZZ_ASSERT((st == MOR_OK) == (need == 0), "status %s with %d tokens", mor_status_str(st), need);
    mor_token *ids = malloc(sizeof *ids * (size_t)(need + 1));
    int32_t n = -1;
    if (!ids) return 0;
    st = mor_tokenize(m, text, len, flags, ids, need, &n);
    FUZZ_ASSERT(st == MOR_OK && n == need, "encode: %s, %d vs %d", mor_status_str(st), n, need);
    for (int32_t i = 0; i < n; i++) FUZZ_ASSERT(ids[i] >= 0 && ids[i] < mor_model_n_vocab(m), "id %d", ids[i]);
    if (n > 0) {
        int32_t n2 = -1;
        st = mor_tokenize(m, text, len, flags, ids, n - 1, &n2);
        FUZZ_ASSERT(st == MOR_E_BUFFER_TOO_SMALL && n2 == n, "cap %d: %s, %d", n - 1, mor_status_str(st), n2);
        st = mor_tokenize(m, text, len, flags, ids, need, &n);   /* the short call may have scribbled */
        FUZZ_ASSERT(st == MOR_OK && n == need, "encode again");
    }
    size_t blen = 0;
    st = mor_detokenize(m, ids, n, NULL, 0, &blen);
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_BUFFER_TOO_SMALL, "detokenize size: %s", mor_status_str(st));
    char *back = malloc(blen + 1);
    size_t got = 0;
    st = back ? mor_detokenize(m, ids, n, back, blen, &got) : MOR_E_NOMEM;
    FUZZ_ASSERT(st == MOR_OK && got == blen, "detokenize: %s", mor_status_str(st));
    size_t skip = 0;
    if (flags & MOR_TOKENIZE_ADD_BOS) {   /* "<|endoftext|>" is BOS in both models */
        FUZZ_ASSERT(n >= 1 && ids[0] == mor_model_token_bos(m), "no BOS first");
        skip = 13;
    }
    FUZZ_ASSERT(got == len + skip && !memcmp(back + skip, text, len), "decode(encode(x)) != x (%zu vs %zu bytes)",
                got, len + skip);
    free(back);
    free(ids);
    return 1;
}
