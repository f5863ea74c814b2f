/* fuzz_detokenize.c - arbitrary token ids into mor_detokenize. The first byte
 * picks the tokenizer (bit 0) and the buffer size (the other bits, x 4); the
 * rest is int32 ids. Checks: out-of-range ids give MOR_E_OUT_OF_RANGE, a
 * small buffer gives the size needed and a call with that size succeeds with
 * the same bytes, which tokenize back to text that detokenizes the same. */
#include "fuzz_vocab.h"

FUZZ_TARGET(detokenize)

static mor_model *models[2];

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const mor_model *m = fuzz_vocab_model(models, data[0] & 1);
    size_t cap = (size_t)(data[0] >> 1) * 4;
    int32_t n = (int32_t)((size - 1) / 4);
    mor_token *ids = malloc(sizeof *ids * (size_t)(n + 1));
    if (!ids) return 0;
    memcpy(ids, data + 1, sizeof *ids * (size_t)n);
    int in_range = 1;
    for (int32_t i = 0; i < n; i++) in_range &= ids[i] >= 0 && ids[i] < mor_model_n_vocab(m);
    char *buf = malloc(cap + 1);
    size_t len = (size_t)-1;
    mor_status st = mor_detokenize(m, ids, n, buf, cap, &len);
    if (!in_range) {
        FUZZ_ASSERT(st == MOR_E_OUT_OF_RANGE, "bad id: %s", mor_status_str(st));
        free(buf); free(ids);
        return 0;
    }
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_BUFFER_TOO_SMALL, "%s %s", mor_status_str(st), mor_last_error());
    FUZZ_ASSERT((st == MOR_OK) == (len <= cap), "len %zu, cap %zu, %s", len, cap, mor_status_str(st));
    char *full = malloc(len + 1);
    size_t len2 = 0;
    st = mor_detokenize(m, ids, n, full, len, &len2);
    FUZZ_ASSERT(st == MOR_OK && len2 == len, "with the size it asked for: %s", mor_status_str(st));
    if (len <= cap) FUZZ_ASSERT(!memcmp(buf, full, len), "same bytes");
    /* the bytes tokenize (specials parsed) to ids that give the same bytes */
    int32_t k = 0;
    mor_tokenize(m, full, len, MOR_TOKENIZE_PARSE_SPECIAL, NULL, 0, &k);
    mor_token *ids2 = malloc(sizeof *ids2 * (size_t)(k + 1));
    st = mor_tokenize(m, full, len, MOR_TOKENIZE_PARSE_SPECIAL, ids2, k, &k);
    FUZZ_ASSERT(st == MOR_OK, "re-tokenize: %s", mor_status_str(st));
    char *again = malloc(len + 1);
    st = mor_detokenize(m, ids2, k, again, len, &len2);
    FUZZ_ASSERT(st == MOR_OK && len2 == len && !memcmp(again, full, len), "re-detokenize");
    free(again); free(ids2); free(full); free(buf); free(ids);
    return 1;
}
