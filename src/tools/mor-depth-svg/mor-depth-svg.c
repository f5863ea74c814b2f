/* mor-depth-svg - draw the depth each token of a text gets, as an SVG.
 *
 *   mor-depth-svg -m models/brown-mor.gguf -f paragraph.txt -o docs/depth.svg [--routing threshold|topk]
 *
 * The text is tokenized with the model's tokenizer and decoded in one batch
 * (public API only); each token is drawn as a box whose shade is the number
 * of recursions it ran, and the depth histogram is printed to stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mor.h"
#include "cli.h"
#include "text.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mor-depth-svg -m MODEL.gguf (-f TEXT_FILE | -p TEXT) -o OUT.svg\n"
               "                     [--routing threshold|topk] [--title TEXT] [--width PX] [--no-check-tensors]\n");
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *b = malloc(cap + 1);
    while (b && (got = fread(b + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) { char *t = realloc(b, (cap *= 2) + 1); if (!t) { free(b); b = NULL; } else b = t; }
    }
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* XML-escaped text of one token; a newline is drawn as U+21B5. Returns the
 * number of characters it takes on screen. */
static int token_xml(const char *p, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    int chars = 0;
    for (size_t i = 0; i < n && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        const char *rep = NULL;
        if (c == '&') rep = "&amp;";
        else if (c == '<') rep = "&lt;";
        else if (c == '>') rep = "&gt;";
        else if (c == '"') rep = "&quot;";
        else if (c == '\n') rep = "\xe2\x86\xb5";
        else if (c < 0x20) rep = " ";
        if (rep) { size_t l = strlen(rep); memcpy(out + k, rep, l); k += l; chars++; }
        else { out[k++] = (char)c; if ((c & 0xC0) != 0x80) chars++; }
    }
    out[k] = 0;
    return chars;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *prompt = NULL, *out = NULL, *title = NULL;
    int routing = MOR_ROUTE_THRESHOLD, width = 900, check_tensors = 1;
    static const char *const modes[] = { "threshold", "topk", NULL };
    cli_init("mor-depth-svg");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-f")) file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-p")) prompt = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-o")) out = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--title")) title = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--width")) width = (int)cli_int(a, cli_value(argc, argv, &i), 200, 100000);
        else if (!strcmp(a, "--routing"))
            routing = cli_choice(a, cli_value(argc, argv, &i), modes) ? MOR_ROUTE_TOPK : MOR_ROUTE_THRESHOLD;
        else if (!strcmp(a, "--no-check-tensors")) check_tensors = 0;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else cli_usage_error("unknown option '%s'", a);
    }
    if (!model || !out) cli_usage_error("-m MODEL.gguf and -o OUT.svg are required");
    if (!file && !prompt) cli_usage_error("give the text (-f TEXT_FILE or -p TEXT)");
    cli_conflict(file != NULL, "-f", prompt != NULL, "-p");
    {
        const char *inputs[] = { model, file };
        if (cli_refuse_overwrite(out, inputs, 2)) return 2;
    }
    char *text = file ? read_file(file) : strdup(prompt);
    if (!text) { fprintf(stderr, "mor-depth-svg: cannot read %s\n", file); return 1; }
    size_t tl = strlen(text);
    while (tl && (text[tl - 1] == '\n' || text[tl - 1] == ' ')) text[--tl] = 0;

    mor_model *m;
    mor_model_params mp;
    MOR_MODEL_PARAMS_INIT(&mp);
    if (check_tensors) mp.flags |= MOR_MODEL_CHECK_TENSORS;
    mor_status st = mor_model_load_file(model, &mp, &m);
    if (st) { fprintf(stderr, "mor-depth-svg: %s\n", mor_last_error()); return 1; }
    int32_t n = 0;
    mor_token *toks = NULL;
    st = text_tokenize(m, text, tl, 0, &toks, &n);
    int32_t *depth = st ? NULL : malloc(sizeof *depth * (size_t)(n + 1));
    if (!depth) { fprintf(stderr, "mor-depth-svg: tokenizing failed: %s\n", st ? mor_last_error() : "out of memory"); return 1; }
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = (uint32_t)n + 8; cp.n_batch = (uint32_t)n; cp.n_threads = 2;
    cp.max_pos = -1;   /* a picture of a whole paragraph, even past the training context */
    mor_context *ctx;
    mor_batch *b;
    if (mor_context_create(m, &cp, &ctx) || mor_batch_create(n, &b)) { fprintf(stderr, "mor-depth-svg: %s\n", mor_last_error()); return 1; }
    if (mor_model_router_type(m) == MOR_ROUTER_TYPE_EXPERT) mor_router_set_mode(mor_context_router(ctx), routing, 0);
    for (int32_t i = 0; i < n; i++) mor_batch_add(b, toks[i], i, 0, i == n - 1);
    if ((st = mor_decode(ctx, b))) { fprintf(stderr, "mor-depth-svg: %s\n", mor_last_error()); return 1; }
    mor_router_get_depths(mor_context_router(ctx), depth, n);
    int nr = mor_model_n_recursion(m);
    int64_t hist[17] = { 0 };
    for (int32_t i = 0; i < n; i++) hist[depth[i] < 16 ? depth[i] : 16]++;

    /* layout: monospace cells of 0.6em at 14 px, wrapped at the width */
    const double cw = 8.4, lh = 26, x0 = 16, top = 64;
    char *tmp;
    FILE *f = cli_out_open(out, &tmp);
    if (!f) return 1;
    /* first pass for the height */
    double x = x0;
    int lines = 1;
    char buf[512], xml[2048];
    for (int32_t i = 0; i < n; i++) {
        size_t bl = 0;
        mor_token_to_piece(m, toks[i], buf, sizeof buf, &bl);
        int w = token_xml(buf, bl, xml, sizeof xml);
        if (x + w * cw > width - x0) { x = x0; lines++; }
        x += w * cw + 2;
        if (bl && buf[bl - 1] == '\n') { x = x0; lines++; }
    }
    int height = (int)(top + lines * lh + 56);
    static const char *const shade[] = { "#ffffff", "#deebf7", "#9ecae1", "#4292c6", "#08519c", "#08306b" };
    static const char *const ink[] = { "#000", "#000", "#000", "#fff", "#fff", "#fff" };
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" font-size=\"14\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    char ttl[600];
    token_xml(title ? title : model, strlen(title ? title : model), ttl, sizeof ttl);
    fprintf(f, "<text x=\"%g\" y=\"26\" font-size=\"15\" font-weight=\"bold\">%s</text>\n", x0, ttl);
    fprintf(f, "<text x=\"%g\" y=\"46\" font-size=\"12\" fill=\"#444\">%d tokens, %s routing; shade = recursions run "
               "(depth); written by bin/mor-depth-svg</text>\n", x0, n, routing == MOR_ROUTE_TOPK ? "TOPK" : "THRESHOLD");
    x = x0;
    double y = top;
    for (int32_t i = 0; i < n; i++) {
        size_t bl = 0;
        mor_token_to_piece(m, toks[i], buf, sizeof buf, &bl);
        int w = token_xml(buf, bl, xml, sizeof xml);
        if (x + w * cw > width - x0) { x = x0; y += lh; }
        int d = depth[i] < 5 ? depth[i] : 5;
        fprintf(f, "<g><title>token %d: depth %d</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"20\" rx=\"3\" "
                   "fill=\"%s\" stroke=\"#bbb\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" "
                   "xml:space=\"preserve\">%s</text></g>\n",
                i, depth[i], x, y, w * cw, shade[d], x, y + 15, ink[d], xml);
        x += w * cw + 2;
        if (bl && buf[bl - 1] == '\n') { x = x0; y += lh; }
    }
    /* legend */
    y += lh + 16;
    x = x0;
    for (int d = 1; d <= nr && d <= 5; d++) {
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\" stroke=\"#999\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">depth %d: %lld tokens (%.0f%%)</text>\n",
                x, y, shade[d], x + 24, y + 12, d, (long long)hist[d], n ? 100.0 * hist[d] / n : 0.0);
        x += 200;
    }
    fprintf(f, "</svg>\n");
    if (!cli_out_close(f, &tmp, out, !ferror(f))) return 1;
    printf("depth histogram over %d tokens:", n);
    for (int d = 0; d <= nr; d++) printf(" %d:%lld", d, (long long)hist[d]);
    printf("\n");
    mor_batch_free(b);
    mor_context_free(ctx);
    mor_model_free(m);
    free(toks); free(depth); free(text);
    return 0;
}
