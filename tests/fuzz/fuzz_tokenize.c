/* fuzz_tokenize.c - arbitrary bytes into mor_tokenize. The first byte picks
 * the tokenizer (bits 0-2, fuzz_vocab.h) and the flags (bit 3: PARSE_SPECIAL,
 * bit 4: ADD_BOS, bit 5: PARSE_USER_DEFINED); the rest is the text. Checks:
 * the ids are in range; decode(encode(x)) == x (BOS rendered first; for a
 * SentencePiece tokenizer when no added token is parsed and x holds no
 * U+2581, which is a space there; NFC(x) for a vocabulary that normalizes,
 * and NFC is idempotent); a buffer one too small gives
 * MOR_E_BUFFER_TOO_SMALL with the same count. */
#include "fuzz_vocab.h"
#include "normalize.h"

FUZZ_TARGET(tokenize)

static mor_model *models[FUZZ_N_VOCABS];

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int v = data[0] & 7;
    const mor_model *m = fuzz_vocab_model(models, v);
    uint32_t flags = (data[0] & 8 ? MOR_TOKENIZE_PARSE_SPECIAL : 0) | (data[0] & 16 ? MOR_TOKENIZE_ADD_BOS : 0) |
                     (data[0] & 32 ? MOR_TOKENIZE_PARSE_USER_DEFINED : 0);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t need = -1;
    mor_status st = mor_tokenize(m, text, len, flags, NULL, 0, &need);
    FUZZ_ASSERT(st == MOR_OK || st == MOR_E_BUFFER_TOO_SMALL, "count: %s %s", mor_status_str(st), mor_last_error());
    /* at most a token per byte, BOS and a SentencePiece prefix */
    FUZZ_ASSERT(need >= 0 && (size_t)need <= (fuzz_vocabs[v].nfc ? 4 * len : len) + 2, "%d tokens for %zu bytes", need,
                len);
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
    if (flags & MOR_TOKENIZE_ADD_BOS) {
        const char *bos = fuzz_vocabs[v].bos;
        FUZZ_ASSERT(n >= 1 && ids[0] == mor_model_token_bos(m), "no BOS first");
        FUZZ_ASSERT(got >= strlen(bos) && !memcmp(back, bos, strlen(bos)), "BOS rendered first");
        /* after BOS, the prefix space is not the first piece's: it stays */
        skip = strlen(bos) + (fuzz_vocabs[v].prefix && len > 0);
    }
    if (fuzz_vocabs[v].nfc) {
        /* NFC first: decode gives NFC(x), and NFC is idempotent (without
         * added tokens: stretches between them are normalized apart) */
        uint8_t *nb = NULL, *nb2 = NULL;
        size_t ncap = 0, ncap2 = 0, nn = 0, nn2 = 0;
        FUZZ_ASSERT(nfc_normalize((const uint8_t *)text, len, &nb, &ncap, &nn) == MOR_OK, "NFC");
        FUZZ_ASSERT(nfc_normalize(nb, nn, &nb2, &ncap2, &nn2) == MOR_OK && nn2 == nn && !memcmp(nb, nb2, nn),
                    "NFC(NFC(x)) != NFC(x)");
        FUZZ_ASSERT(!nfc_quick((const uint8_t *)text, len) || (nn == len && !memcmp(nb, text, len)),
                    "nfc_quick said stable, NFC changed it");
        if (!(flags & (MOR_TOKENIZE_PARSE_SPECIAL | MOR_TOKENIZE_PARSE_USER_DEFINED)))
            FUZZ_ASSERT(got == nn + skip && !memcmp(back + skip, nb, nn), "decode(encode(x)) != NFC(x)");
        free(nb);
        free(nb2);
    } else if (!fuzz_vocabs[v].spm || (!(flags & (MOR_TOKENIZE_PARSE_SPECIAL | MOR_TOKENIZE_PARSE_USER_DEFINED)) &&
                                       !fuzz_has_u2581(text, len))) {
        FUZZ_ASSERT(got == len + skip && !memcmp(back + skip, text, len), "decode(encode(x)) != x (%zu vs %zu bytes)",
                    got, len + skip);
    }
    free(back);
    free(ids);
    return 1;
}
