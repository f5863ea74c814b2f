/* fuzz_hf_tokenizer.c - any bytes as a tokenizer.json (the converter's
 * reader, src/tools/mor-convert/hf_tokenizer.c): byte-level BPE and SentencePiece-style
 * BPE with byte_fallback. What it accepts is written as GGUF tokenizer keys,
 * as mor-convert does, and loaded by libmor (vocab-only); a tokenizer that
 * loads must round-trip text (that starts without a space and holds no
 * U+2581) through tokenize/detokenize, where its vocabulary has a token for
 * every byte of it. */
#include "fuzz.h"
#include "gguf_write.h"
#include "hf_tokenizer.h"
#include "mor.h"

FUZZ_TARGET(hf_tokenizer)

static void load_in_libmor(const hf_tokenizer *t)
{
    gguf_writer *w = gguf_writer_new();
    char *img = NULL, err[256];
    size_t n = 0;
    FILE *f = open_memstream(&img, &n);
    if (!w || !f) { gguf_writer_free(w); if (f) fclose(f); free(img); return; }
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)t->n_tokens);
    hf_tokenizer_write(t, w);
    int rc = gguf_writer_write(w, f, err, sizeof err);
    fclose(f);
    gguf_writer_free(w);
    if (rc == 0) {
        mor_model_params mp;
        MOR_MODEL_PARAMS_INIT(&mp);
        mp.flags = MOR_MODEL_VOCAB_ONLY;
        mor_model *m = NULL;
        if (mor_model_load_memory(img, n, &mp, &m) == MOR_OK) {
            static const char text[] = "Hello, world! 123 \xc3\xa9\xff";
            mor_token ids[64];
            int32_t k = 0;
            char back[64];
            size_t len = 0;
            mor_status st = mor_tokenize(m, text, sizeof text - 1, 0, ids, 64, &k);
            FUZZ_ASSERT(st == MOR_OK, "tokenize: %s", mor_last_error());
            st = mor_detokenize(m, ids, k, back, sizeof back, &len);
            FUZZ_ASSERT(st == MOR_OK, "detokenize: %s", mor_last_error());
            /* a byte-level vocabulary may lack a byte's token: that byte is dropped */
            int covered = 1;
            for (size_t i = 0; i < sizeof text - 1; i++) {
                int32_t n1 = 0;
                mor_tokenize(m, text + i, 1, 0, NULL, 0, &n1);
                covered &= n1 > 0;
            }
            if (covered) FUZZ_ASSERT(len == sizeof text - 1 && !memcmp(back, text, len), "round trip");
            mor_model_free(m);
        }
    }
    free(img);
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    char *text = (char *)fuzz_copy(data, size);
    char err[256] = "";
    hf_tokenizer t;
    if (!text) return 0;
    int ok = hf_tokenizer_parse(&t, text, size, err, sizeof err) == 0;
    FUZZ_ASSERT(ok || err[0], "a failure without a message");
    if (ok) {
        for (size_t i = 0; i < t.n_tokens; i++) FUZZ_ASSERT(t.tokens[i], "token %zu missing", i);
        if (t.n_tokens) FUZZ_ASSERT(hf_tokenizer_find(&t, t.tokens[0]) >= 0, "find token 0");
        load_in_libmor(&t);
        hf_tokenizer_free(&t);
    }
    free(text);
    return ok;
}
