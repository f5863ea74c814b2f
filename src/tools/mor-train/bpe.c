/* bpe.c - train a byte-level BPE tokenizer (GPT-2 style) and write it as the
 * tokenizer.ggml.* metadata of docs/FORMAT.md, which src/tokenizer.c loads.
 *
 * The text is cut with GPT-2's pre-tokenizer regex (gpt2_piece_end in
 * src/pretokenize.c, the matcher the library's tokenizer uses); each distinct piece is counted once with its
 * frequency. Starting from the 256 byte tokens, the most frequent adjacent
 * pair over all pieces is merged (ties: the smaller pair of ids), the pair
 * counts are updated only for the pieces that changed, until the vocabulary
 * is full. A merge whose text is already a token reuses that token, as HF's
 * trainer does. <|endoftext|> is added last, as a control token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"
#include "gguf_write.h"
#include "internal.h"

/* ---- hash tables ---- */

static uint64_t hash64(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdu; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53u; x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3u;
    return hash64(h);
}

typedef struct { uint64_t *key; int64_t *val; size_t cap, n; } pairmap;   /* key+1; 0 = empty */

static int pm_grow(pairmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1 << 16;
    uint64_t *k = calloc(cap, sizeof *k);
    int64_t *v = calloc(cap, sizeof *v);
    if (!k || !v) { free(k); free(v); return -1; }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->key[i]) continue;
        size_t h = hash64(m->key[i]) & (cap - 1);
        while (k[h]) h = (h + 1) & (cap - 1);
        k[h] = m->key[i]; v[h] = m->val[i];
    }
    free(m->key); free(m->val);
    m->key = k; m->val = v; m->cap = cap;
    return 0;
}

static int pm_add(pairmap *m, uint32_t a, uint32_t b, int64_t delta)
{
    if (2 * (m->n + 1) > m->cap && pm_grow(m)) return -1;
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    size_t h = hash64(key) & (m->cap - 1);
    while (m->key[h] && m->key[h] != key) h = (h + 1) & (m->cap - 1);
    if (!m->key[h]) { m->key[h] = key; m->val[h] = 0; m->n++; }
    m->val[h] += delta;
    return 0;
}

/* ---- training ---- */

typedef struct { uint32_t *sym; int32_t len; int64_t count; } word;

static uint32_t byte_cp(uint8_t b)
{
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 0x100 + 67;
    return b;
}

static char *byte_text(uint8_t b)
{
    char *s = malloc(3);
    if (!s) return NULL;
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) { s[0] = (char)cp; s[1] = 0; }
    else { s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); s[2] = 0; }
    return s;
}

void tr_bpe_free(tr_bpe *b)
{
    if (!b) return;
    for (int32_t i = 0; i < b->n_tokens; i++) free(b->tokens[i]);
    for (int32_t i = 0; i < b->n_merges; i++) free(b->merges[i]);
    free(b->tokens); free(b->types); free(b->merges);
    memset(b, 0, sizeof *b);
}

/* token text -> id, open addressing over the token list */
typedef struct { int32_t *slot; size_t cap; } textmap;

static int32_t tm_find(const textmap *t, char *const *tokens, const char *s)
{
    size_t h = hash_bytes((const uint8_t *)s, strlen(s)) & (t->cap - 1);
    for (; t->slot[h]; h = (h + 1) & (t->cap - 1))
        if (!strcmp(tokens[t->slot[h] - 1], s)) return t->slot[h] - 1;
    return -1;
}

static void tm_put(textmap *t, const char *s, int32_t id)
{
    size_t h = hash_bytes((const uint8_t *)s, strlen(s)) & (t->cap - 1);
    while (t->slot[h]) h = (h + 1) & (t->cap - 1);
    t->slot[h] = id + 1;
}

int tr_bpe_train(const char *text, size_t len, int32_t vocab_size, tr_bpe *out, int verbose)
{
    memset(out, 0, sizeof *out);
    if (vocab_size < 257) return -1;
    const uint8_t *s = (const uint8_t *)text;
    /* distinct pieces and their counts */
    size_t wcap = 1 << 16, nw = 0;
    word *words = calloc(wcap, sizeof *words);
    int32_t *wslot = calloc(2 * wcap, sizeof *wslot);   /* index + 1 */
    const uint8_t **wtext = calloc(wcap, sizeof *wtext);
    size_t *wlen = calloc(wcap, sizeof *wlen);
    pairmap pm = { 0 };
    textmap tm = { 0 };
    int rc = -1;
    if (!words || !wslot || !wtext || !wlen) goto done;
    for (size_t i = 0; i < len;) {
        size_t e = gpt2_piece_end(s, len, i), n = e - i;
        size_t h = hash_bytes(s + i, n) & (2 * wcap - 1);
        for (; wslot[h]; h = (h + 1) & (2 * wcap - 1)) {
            size_t w = (size_t)wslot[h] - 1;
            if (wlen[w] == n && !memcmp(wtext[w], s + i, n)) break;
        }
        if (wslot[h]) words[wslot[h] - 1].count++;
        else {
            if (nw + 1 > wcap / 2 * 1) {   /* grow and rehash */
                size_t nc = wcap * 2;
                word *w2 = realloc(words, nc * sizeof *w2);
                if (w2) words = w2;
                const uint8_t **t2 = realloc(wtext, nc * sizeof *t2);
                if (t2) wtext = t2;
                size_t *l2 = realloc(wlen, nc * sizeof *l2);
                if (l2) wlen = l2;
                int32_t *s2 = calloc(2 * nc, sizeof *s2);
                if (!w2 || !t2 || !l2 || !s2) { free(s2); goto done; }
                free(wslot); wslot = s2; wcap = nc;
                for (size_t w = 0; w < nw; w++) {
                    size_t hh = hash_bytes(wtext[w], wlen[w]) & (2 * wcap - 1);
                    while (wslot[hh]) hh = (hh + 1) & (2 * wcap - 1);
                    wslot[hh] = (int32_t)w + 1;
                }
                h = hash_bytes(s + i, n) & (2 * wcap - 1);
                while (wslot[h]) h = (h + 1) & (2 * wcap - 1);
            }
            word *w = &words[nw];
            w->sym = malloc(n * sizeof *w->sym);
            if (!w->sym) goto done;
            for (size_t k = 0; k < n; k++) w->sym[k] = s[i + k];
            w->len = (int32_t)n; w->count = 1;
            wtext[nw] = s + i; wlen[nw] = n;
            wslot[h] = (int32_t)++nw;
        }
        i = e;
    }
    /* vocabulary: the 256 bytes, id = byte value */
    out->tokens = calloc((size_t)vocab_size, sizeof *out->tokens);
    out->types = calloc((size_t)vocab_size, sizeof *out->types);
    int32_t mcap = vocab_size * 2;
    out->merges = calloc((size_t)mcap, sizeof *out->merges);
    tm.cap = 1;
    while (tm.cap < (size_t)vocab_size * 4) tm.cap <<= 1;
    tm.slot = calloc(tm.cap, sizeof *tm.slot);
    if (!out->tokens || !out->types || !out->merges || !tm.slot) goto done;
    for (int b = 0; b < 256; b++) {
        if (!(out->tokens[b] = byte_text((uint8_t)b))) goto done;
        out->types[b] = 1;
        tm_put(&tm, out->tokens[b], b);
    }
    out->n_tokens = 256;
    for (size_t w = 0; w < nw; w++)
        for (int32_t k = 0; k + 1 < words[w].len; k++)
            if (pm_add(&pm, words[w].sym[k], words[w].sym[k + 1], words[w].count)) goto done;

    while (out->n_tokens < vocab_size - 1) {
        /* the most frequent pair; ties to the smaller key */
        int64_t best = 1;
        uint64_t bkey = 0;
        for (size_t i = 0; i < pm.cap; i++)
            if (pm.key[i] && (pm.val[i] > best || (pm.val[i] == best && best > 1 && pm.key[i] < bkey))) {
                best = pm.val[i]; bkey = pm.key[i];
            }
        if (!bkey) break;   /* nothing occurs twice: no merge is worth learning */
        uint32_t a = (uint32_t)((bkey - 1) >> 32), b = (uint32_t)(bkey - 1);
        size_t la = strlen(out->tokens[a]), lb = strlen(out->tokens[b]);
        char *cat = malloc(la + lb + 1), *mer = malloc(la + lb + 2);
        if (!cat || !mer) { free(cat); free(mer); goto done; }
        memcpy(cat, out->tokens[a], la); memcpy(cat + la, out->tokens[b], lb + 1);
        memcpy(mer, out->tokens[a], la); mer[la] = ' '; memcpy(mer + la + 1, out->tokens[b], lb + 1);
        int32_t c = tm_find(&tm, out->tokens, cat);
        if (c < 0) {
            c = out->n_tokens++;
            out->tokens[c] = cat; out->types[c] = 1;
            tm_put(&tm, cat, c);
        } else free(cat);
        if (out->n_merges == mcap) {
            char **m2 = realloc(out->merges, sizeof *m2 * (size_t)(mcap *= 2));
            if (!m2) { free(mer); goto done; }
            out->merges = m2;
        }
        out->merges[out->n_merges++] = mer;
        /* apply it in every piece that has the pair, updating the counts */
        for (size_t w = 0; w < nw; w++) {
            word *wd = &words[w];
            int found = 0;
            for (int32_t k = 0; k + 1 < wd->len; k++) if (wd->sym[k] == a && wd->sym[k + 1] == b) { found = 1; break; }
            if (!found) continue;
            for (int32_t k = 0; k + 1 < wd->len; k++) pm_add(&pm, wd->sym[k], wd->sym[k + 1], -wd->count);
            int32_t o = 0;
            for (int32_t k = 0; k < wd->len;) {
                if (k + 1 < wd->len && wd->sym[k] == a && wd->sym[k + 1] == b) { wd->sym[o++] = (uint32_t)c; k += 2; }
                else wd->sym[o++] = wd->sym[k++];
            }
            wd->len = o;
            for (int32_t k = 0; k + 1 < wd->len; k++)
                if (pm_add(&pm, wd->sym[k], wd->sym[k + 1], wd->count)) goto done;
        }
        if (verbose && out->n_merges % 256 == 0)
            fprintf(stderr, "\rbpe: %d merges, %d tokens", out->n_merges, out->n_tokens);
    }
    if (verbose) fprintf(stderr, "\rbpe: %d merges, %d tokens\n", out->n_merges, out->n_tokens);
    out->eos = out->n_tokens;
    if (!(out->tokens[out->eos] = strdup("<|endoftext|>"))) goto done;
    out->types[out->eos] = 3;
    out->n_tokens++;
    rc = 0;
done:
    for (size_t w = 0; w < nw; w++) free(words[w].sym);
    free(words); free(wslot); free(wtext); free(wlen);
    free(pm.key); free(pm.val); free(tm.slot);
    if (rc) tr_bpe_free(out);
    return rc;
}

int tr_bpe_save(const tr_bpe *b, const char *path, char *err, size_t errcap)
{
    gguf_writer *w = gguf_writer_new();
    if (!w) { snprintf(err, errcap, "out of memory"); return -1; }
    gguf_writer_add_str(w, "general.architecture", "mor");
    gguf_writer_add_u32(w, "mor.format_version", 1);
    gguf_writer_add_u32(w, "mor.vocab_size", (uint32_t)b->n_tokens);
    gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_add_str(w, "tokenizer.ggml.pre", "gpt2");
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)b->tokens, (size_t)b->n_tokens);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", b->types, (size_t)b->n_tokens);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)b->merges, (size_t)b->n_merges);
    gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)b->eos);
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (!f) snprintf(err, errcap, "cannot create %s", path);
    else {
        char werr[256] = "";
        rc = gguf_writer_write(w, f, werr, sizeof werr);
        if (fclose(f) != 0) rc = -1;
        if (rc) snprintf(err, errcap, "cannot write %s: %s", path, werr);
    }
    gguf_writer_free(w);
    return rc ? -1 : 0;
}
