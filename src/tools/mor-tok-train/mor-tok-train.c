/* mor-tok-train - train a byte-level BPE tokenizer on a text file and write
 * it as a vocab-only `mor` GGUF (tokenizer.ggml.*, docs/FORMAT.md).
 *
 *   mor-tok-train -i build/data/brown-train.txt -o build/brown-vocab.gguf --vocab 4096
 *
 * The result loads with mor_model_load_file(..., MOR_MODEL_VOCAB_ONLY) and is
 * what mor-train --vocab reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "train.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mor-tok-train -i TEXT -o VOCAB.gguf [--vocab N (default 4096)] [-q]\n");
}

int main(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    int vocab = 4096, quiet = 0;
    cli_init("mor-tok-train");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-i")) in = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-o")) out = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--vocab")) vocab = (int)cli_int(a, cli_value(argc, argv, &i), 258, 1000000);
        else if (!strcmp(a, "-q")) quiet = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else cli_usage_error("unknown option '%s'", a);
    }
    if (!in || !out) cli_usage_error("-i TEXT and -o VOCAB.gguf are required");
    if (cli_refuse_overwrite(out, &in, 1)) return 2;
    FILE *f = fopen(in, "rb");
    if (!f) { fprintf(stderr, "mor-tok-train: cannot open %s\n", in); return 1; }
    size_t cap = 1 << 20, n = 0, got;
    char *text = malloc(cap);
    while (text && (got = fread(text + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) { char *t = realloc(text, cap *= 2); if (!t) { free(text); text = NULL; } else text = t; }
    }
    fclose(f);
    if (!text) { fprintf(stderr, "mor-tok-train: out of memory\n"); return 1; }
    clock_t t0 = clock();
    tr_bpe b;
    if (tr_bpe_train(text, n, vocab, &b, !quiet)) { fprintf(stderr, "mor-tok-train: training failed\n"); free(text); return 1; }
    char err[512];
    char *tmp = cli_tmp_path(out);   /* written beside OUT, renamed at the end */
    int rc = tmp ? tr_bpe_save(&b, tmp, err, sizeof err) : (snprintf(err, sizeof err, "out of memory"), -1);
    if (!rc && rename(tmp, out)) { rc = -1; snprintf(err, sizeof err, "cannot rename %s to %s", tmp, out); }
    if (rc && tmp) remove(tmp);
    free(tmp);
    if (rc) cli_error("%s", err);
    else if (!quiet)
        fprintf(stderr, "mor-tok-train: %d tokens (%d merges) from %zu bytes in %.1f s -> %s\n", b.n_tokens,
                b.n_merges, n, (double)(clock() - t0) / CLOCKS_PER_SEC, out);
    tr_bpe_free(&b);
    free(text);
    return rc ? 1 : 0;
}
