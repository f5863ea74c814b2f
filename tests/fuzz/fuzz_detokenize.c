/* fuzz_detokenize.c - arbitrary token ids into mor_detokenize. The first byte
 * picks the tokenizer (bits 0-2, fuzz_vocab.h) and the buffer size (the other
 * bits, x 8); the rest is int32 ids. Checks: out-of-range ids give
 * MOR_E_OUT_OF_RANGE, a small buffer gives the size needed and a call with
 * that size succeeds with the same bytes, which tokenize back to text that
 * detokenizes the same (byte-level BPE, special tokens parsed), or to that
 * text with its U+2581 as spaces (SentencePiece, plain text), or to its NFC
 * (a vocabulary that normalizes); the pieces of
 * the ids (mor_token_to_piece) concatenate to the text, but for the one
 * prefix space mor_detokenize drops. */
#include "fuzz_vocab.h"
#include "normalize.h"

FUZZ_TARGET(detokenize)

static mor_model *models[FUZZ_N_VOCABS];

static int fuzz_run(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int v = data[0] & 7;
    const mor_model *m = fuzz_vocab_model(models, v);
    size_t cap = (size_t)(data[0] >> 3) * 8;
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
    /* the pieces, concatenated */
    char *cat = malloc(len + 2);
    size_t pos = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t pl = 0;
        st = mor_token_to_piece(m, ids[i], cat + pos, len + 1 - pos, &pl);
        FUZZ_ASSERT(st == MOR_OK, "piece %d: %s", ids[i], mor_status_str(st));
        pos += pl;
    }
    FUZZ_ASSERT((pos == len && !memcmp(cat, full, len)) ||
                (fuzz_vocabs[v].prefix && pos == len + 1 && cat[0] == ' ' && !memcmp(cat + 1, full, len)),
                "pieces (%zu bytes) vs detokenize (%zu)", pos, len);
    free(cat);
    /* the bytes tokenize to ids that give the same bytes (SentencePiece:
     * U+2581 is a space, and stretches after added tokens get a prefix, so
     * plain text only) */
    const uint32_t flags = fuzz_vocabs[v].spm ? 0 : MOR_TOKENIZE_PARSE_SPECIAL;
    char *want = malloc(len + 1);
    size_t wlen = 0;
    for (size_t i = 0; i < len; i++) {
        if (fuzz_vocabs[v].spm && i + 3 <= len && !memcmp(full + i, "\xe2\x96\x81", 3)) { want[wlen++] = ' '; i += 2; }
        else want[wlen++] = full[i];
    }
    if (fuzz_vocabs[v].nfc) {   /* and its NFC (the specials of these vocabularies end with '>': no mark joins them) */
        uint8_t *nb = NULL;
        size_t ncap = 0;
        FUZZ_ASSERT(nfc_normalize((const uint8_t *)full, len, &nb, &ncap, &wlen) == MOR_OK, "NFC");
        free(want);
        want = (char *)nb;
    }
    int32_t k = 0;
    mor_tokenize(m, full, len, flags, NULL, 0, &k);
    mor_token *ids2 = malloc(sizeof *ids2 * (size_t)(k + 1));
    st = mor_tokenize(m, full, len, flags, ids2, k, &k);
    FUZZ_ASSERT(st == MOR_OK, "re-tokenize: %s", mor_status_str(st));
    char *again = malloc(wlen + 1);
    st = mor_detokenize(m, ids2, k, again, wlen, &len2);
    FUZZ_ASSERT(st == MOR_OK && len2 == wlen && !memcmp(again, want, wlen), "re-detokenize");
    free(want); free(again); free(ids2); free(full); free(buf); free(ids);
    return 1;
}
