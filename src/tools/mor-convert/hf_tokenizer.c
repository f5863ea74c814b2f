/* hf_tokenizer.c - read tokenizer.json (and tokenizer_config.json) into the
 * GGUF tokenizer keys. See hf_tokenizer.h. */
#include "hf_tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "util.h"

void hf_tokenizer_free(hf_tokenizer *t)
{
    if (t->tokens)
        for (size_t i = 0; i < t->n_tokens; i++) free(t->tokens[i]);
    for (size_t i = 0; i < t->n_merges; i++) free(t->merges[i]);
    free(t->tokens);
    free(t->types);
    free(t->merges);
    memset(t, 0, sizeof *t);
    t->bos = t->eos = t->pad = t->unk = -1;
    t->add_bos = -1;
}

static int is_true(const json *v) { return v && v->type == JSON_BOOL && v->boolean; }
static int is_false_or_absent(const json *v) { return !v || v->type == JSON_NULL || (v->type == JSON_BOOL && !v->boolean); }

/* ByteLevel with the GPT-2 regex and no prefix space. */
static int is_plain_byte_level(const json *p)
{
    const json *rx = json_get(p, "use_regex");
    const char *ty = json_as_str(json_get(p, "type"));
    return ty && strcmp(ty, "ByteLevel") == 0 && is_false_or_absent(json_get(p, "add_prefix_space")) &&
           (!rx || is_true(rx));
}

static const char *detect_pre(const json *pre)
{
    const char *ty = json_as_str(json_get(pre, "type"));
    if (!ty) return NULL;
    if (is_plain_byte_level(pre)) return "gpt2";
    if (strcmp(ty, "Sequence") == 0) {
        const json *l = json_get(pre, "pretokenizers");
        const json *a = json_at(l, 0), *b = json_at(l, 1);
        const char *at = json_as_str(json_get(a, "type"));
        if (l && l->n == 2 && at && strcmp(at, "Digits") == 0 && is_true(json_get(a, "individual_digits")) &&
            is_plain_byte_level(b))
            return "smollm";
    }
    return NULL;
}

static int is_str(const json *v, const char *s) { const char *x = json_as_str(v); return x && strcmp(x, s) == 0; }
static int is_type(const json *v, const char *ty) { return is_str(json_get(v, "type"), ty); }

#define U2581 "\xe2\x96\x81"   /* SentencePiece's space */

/* Replace(" " -> "\u2581") */
static int is_space_replace(const json *n)
{
    return is_type(n, "Replace") && is_str(json_get(json_get(n, "pattern"), "String"), " ") &&
           is_str(json_get(n, "content"), U2581);
}

/* A BPE with byte_fallback, SentencePiece-style: spaces become U+2581 either
 * in the normalizer (legacy Llama: Prepend("\u2581") + Replace; Gemma:
 * Replace, with a Split on " " that then never matches) or in a Metaspace
 * pre-tokenizer (Llama since transformers 4.41). Sets the prefix rule and
 * the pre-tokenizer ("default", or "metaspace" for Metaspace's split). */
static int detect_spm(hf_tokenizer *t, const json *norm, const json *pre, char *err, size_t errcap)
{
    t->pre = "default";
    if (norm && norm->type != JSON_NULL) {
        const json *rep = norm, *first = NULL;
        if (is_type(norm, "Sequence")) {
            const json *l = json_get(norm, "normalizers");
            if (!l || l->type != JSON_ARRAY || l->n < 1 || l->n > 2) goto bad;
            rep = json_at(l, l->n - 1);
            first = l->n == 2 ? json_at(l, 0) : NULL;
        }
        if (!is_space_replace(rep)) goto bad;
        if (first && !(is_type(first, "Prepend") && is_str(json_get(first, "prepend"), U2581))) goto bad;
        t->prefix = first ? "prepend" : "never";
        if (pre && pre->type != JSON_NULL &&
            !(is_type(pre, "Split") && is_str(json_get(json_get(pre, "pattern"), "String"), " ") &&
              is_false_or_absent(json_get(pre, "invert"))))
            goto bad;
        return 0;
    }
    if (!is_type(pre, "Metaspace") || !is_str(json_get(pre, "replacement"), U2581)) goto bad;
    const json *scheme = json_get(pre, "prepend_scheme"), *aps = json_get(pre, "add_prefix_space");
    const char *ps = scheme && scheme->type != JSON_NULL ? json_as_str(scheme) : "always";
    if (!ps || (strcmp(ps, "always") && strcmp(ps, "first") && strcmp(ps, "never"))) goto bad;
    if (aps && aps->type == JSON_BOOL && !aps->boolean) {   /* HF: add_prefix_space false means never */
        if (strcmp(ps, "never") && scheme && scheme->type != JSON_NULL) goto bad;
        ps = "never";
    }
    t->prefix = !strcmp(ps, "always") ? "always" : !strcmp(ps, "first") ? "first" : "never";
    if (!is_false_or_absent(json_get(pre, "split")) || !json_get(pre, "split")) t->pre = "metaspace";
    return 0;
bad:
    return cv_fail(err, errcap, "tokenizer.json: a byte_fallback BPE needs spaces as U+2581: a Replace(\" \", \"\u2581\") "
                   "normalizer (after a Prepend(\"\u2581\")) or a Metaspace pre-tokenizer; this one has another");
}

/* The byte of a SentencePiece byte token "<0xNN>", or -1. */
static int byte_token_value(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    if (strlen(s) != 6 || strncmp(s, "<0x", 3) || s[5] != '>') return -1;
    const char *a = strchr(hex, s[3]), *b = strchr(hex, s[4]);
    return a && b && s[3] && s[4] ? (int)((a - hex) * 16 + (b - hex)) : -1;
}

/* HF's post-processor: a TemplateProcessing whose single sequence starts
 * with a special token adds that token (BOS) before each text; one that
 * starts with the text adds none. Other post-processors say nothing. */
static void read_post_processor(hf_tokenizer *t, const json *pp)
{
    if (is_type(pp, "Sequence")) {
        const json *l = json_get(pp, "processors");
        for (size_t i = 0; l && l->type == JSON_ARRAY && i < l->n; i++) read_post_processor(t, json_at(l, i));
        return;
    }
    if (!is_type(pp, "TemplateProcessing")) return;
    const json *single = json_get(pp, "single"), *first = json_at(single, 0);
    if (!first) return;
    const json *sp = json_get(first, "SpecialToken");
    if (sp) {
        int64_t id = hf_tokenizer_find(t, json_as_str(json_get(sp, "id")) ? json_as_str(json_get(sp, "id")) : "");
        if (id >= 0) { t->add_bos = 1; if (t->bos < 0) t->bos = id; }
    } else if (json_get(first, "Sequence")) {
        t->add_bos = 0;
    }
}

static int set_token(hf_tokenizer *t, int64_t id, const char *s, size_t n, int type, char *err, size_t errcap)
{
    if (t->tokens[id]) {
        if (strcmp(t->tokens[id], s) != 0 || strlen(s) != n)
            return cv_fail(err, errcap, "tokenizer.json: id %lld is given to two different tokens", (long long)id);
        if (type != TOKEN_TYPE_NORMAL) t->types[id] = type;
        return 0;
    }
    if (memchr(s, 0, n)) return cv_fail(err, errcap, "tokenizer.json: token %lld contains a NUL byte", (long long)id);
    if (!(t->tokens[id] = cv_strndup(s, n))) return cv_fail(err, errcap, "out of memory");
    t->types[id] = type;
    return 0;
}

static int read_merges(hf_tokenizer *t, const json *m, char *err, size_t errcap)
{
    if (!m || m->type != JSON_ARRAY) return cv_fail(err, errcap, "tokenizer.json: model.merges is missing");
    t->merges = calloc(m->n ? m->n : 1, sizeof *t->merges);
    if (!t->merges) return cv_fail(err, errcap, "out of memory");
    for (size_t i = 0; i < m->n; i++) {
        const json *e = m->items[i];
        char *s;
        if (e->type == JSON_STRING) {
            const char *sp = strchr(e->str, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == e->str || !sp[1] || strlen(e->str) != e->str_len)
                return cv_fail(err, errcap, "tokenizer.json: merge %zu is not \"left right\"", i);
            s = cv_strdup(e->str);
        } else if (e->type == JSON_ARRAY && e->n == 2 && json_as_str(e->items[0]) && json_as_str(e->items[1])) {
            const json *a = e->items[0], *b = e->items[1];
            if (!a->str_len || !b->str_len || strchr(a->str, ' ') || strchr(b->str, ' ') || strlen(a->str) != a->str_len ||
                strlen(b->str) != b->str_len)
                return cv_fail(err, errcap, "tokenizer.json: merge %zu cannot be written as \"left right\"", i);
            s = malloc(a->str_len + b->str_len + 2);
            if (s) {
                memcpy(s, a->str, a->str_len);
                s[a->str_len] = ' ';
                memcpy(s + a->str_len + 1, b->str, b->str_len + 1);
            }
        } else {
            return cv_fail(err, errcap, "tokenizer.json: merge %zu is neither \"a b\" nor [a, b]", i);
        }
        if (!s) return cv_fail(err, errcap, "out of memory");
        t->merges[t->n_merges++] = s;
    }
    return 0;
}

static int parse_doc(hf_tokenizer *t, const json *root, char *err, size_t errcap)
{
    const json *model = json_get(root, "model"), *vocab = json_get(model, "vocab"), *added = json_get(root, "added_tokens");
    const json *norm = json_get(root, "normalizer"), *v;
    const char *ty = json_as_str(json_get(model, "type"));
    int64_t max_id = -1, id;
    size_t n_entries;

    if (root->type != JSON_OBJECT || !model) return cv_fail(err, errcap, "tokenizer.json: no \"model\"");
    if (!ty || strcmp(ty, "BPE") != 0)
        return cv_fail(err, errcap, "tokenizer.json: model type '%.40s' is not supported (byte-level BPE only)", ty ? ty : "?");
    const int spm = is_true(json_get(model, "byte_fallback"));
    if (is_true(json_get(model, "ignore_merges"))) return cv_fail(err, errcap, "tokenizer.json: ignore_merges is not supported");
    v = json_get(model, "continuing_subword_prefix");
    if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && !v->str_len))
        return cv_fail(err, errcap, "tokenizer.json: continuing_subword_prefix is not supported");
    v = json_get(model, "end_of_word_suffix");
    if (v && v->type != JSON_NULL && !(v->type == JSON_STRING && !v->str_len))
        return cv_fail(err, errcap, "tokenizer.json: end_of_word_suffix is not supported");
    if (spm) {
        t->model = "llama";
        if (detect_spm(t, norm, json_get(root, "pre_tokenizer"), err, errcap)) return -1;
    } else {
        t->model = "gpt2";
        if (is_type(norm, "NFC")) t->normalizer = "nfc";   /* GPT-NeoX / Pythia */
        else if (norm && norm->type != JSON_NULL)
            return cv_fail(err, errcap, "tokenizer.json: of the normalizers, only NFC is supported with a byte-level BPE");
        t->pre = detect_pre(json_get(root, "pre_tokenizer"));
        if (!t->pre)
            return cv_fail(err, errcap, "tokenizer.json: unsupported pre_tokenizer (supported: ByteLevel, or Digits + ByteLevel)");
    }
    if (!vocab || vocab->type != JSON_OBJECT) return cv_fail(err, errcap, "tokenizer.json: model.vocab is not an object");
    if (added && added->type != JSON_ARRAY) return cv_fail(err, errcap, "tokenizer.json: added_tokens is not a list");

    /* ids: every id below max_id must be used; with n entries, max_id < n */
    n_entries = vocab->n + (added ? added->n : 0);
    for (size_t i = 0; i < vocab->n; i++) {
        if (!json_as_int(vocab->items[i], 0, INT32_MAX - 1, &id))
            return cv_fail(err, errcap, "tokenizer.json: bad id for token '%.60s'", vocab->keys[i]);
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; added && i < added->n; i++) {
        if (!json_as_int(json_get(added->items[i], "id"), 0, INT32_MAX - 1, &id) || !json_as_str(json_get(added->items[i], "content")))
            return cv_fail(err, errcap, "tokenizer.json: added token %zu needs an id and a content", i);
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) return cv_fail(err, errcap, "tokenizer.json: empty vocabulary");
    if ((uint64_t)max_id >= n_entries) return cv_fail(err, errcap, "tokenizer.json: token ids have gaps (largest id %lld)", (long long)max_id);
    t->n_tokens = (size_t)max_id + 1;
    t->tokens = calloc(t->n_tokens, sizeof *t->tokens);
    t->types = calloc(t->n_tokens, sizeof *t->types);
    if (!t->tokens || !t->types) return cv_fail(err, errcap, "out of memory");
    for (size_t i = 0; i < vocab->n; i++) {
        json_as_int(vocab->items[i], 0, INT32_MAX - 1, &id);
        if (set_token(t, id, vocab->keys[i], strlen(vocab->keys[i]), TOKEN_TYPE_NORMAL, err, errcap)) return -1;
    }
    for (size_t i = 0; added && i < added->n; i++) {
        const json *a = added->items[i], *c = json_get(a, "content");
        json_as_int(json_get(a, "id"), 0, INT32_MAX - 1, &id);
        if (set_token(t, id, c->str, c->str_len, is_true(json_get(a, "special")) ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_USER_DEFINED,
                      err, errcap))
            return -1;
    }
    for (size_t i = 0; i < t->n_tokens; i++)
        if (!t->tokens[i]) return cv_fail(err, errcap, "tokenizer.json: token id %zu is not used (gap in the ids)", i);
    if (spm) {
        /* byte_fallback's <0xNN> tokens (all 256 of them), and the unknown token */
        int n_byte = 0;
        for (size_t i = 0; i < t->n_tokens; i++)
            if (t->types[i] == TOKEN_TYPE_NORMAL && byte_token_value(t->tokens[i]) >= 0) {
                t->types[i] = TOKEN_TYPE_BYTE;
                n_byte++;
            }
        if (n_byte != 256)
            return cv_fail(err, errcap, "tokenizer.json: byte_fallback with %d of the 256 tokens <0x00>..<0xFF>", n_byte);
        const char *unk = json_as_str(json_get(model, "unk_token"));
        if (unk && (t->unk = hf_tokenizer_find(t, unk)) < 0)
            return cv_fail(err, errcap, "tokenizer.json: unk_token '%.60s' is not in the vocabulary", unk);
        if (t->unk >= 0) t->types[t->unk] = TOKEN_TYPE_UNKNOWN;
    }
    read_post_processor(t, json_get(root, "post_processor"));
    return read_merges(t, json_get(model, "merges"), err, errcap);
}

int hf_tokenizer_parse(hf_tokenizer *t, const char *text, size_t len, char *err, size_t errcap)
{
    json *root = json_parse(text, len, err, errcap);
    int rc;
    memset(t, 0, sizeof *t);
    t->bos = t->eos = t->pad = t->unk = -1;
    t->add_bos = -1;
    if (!root) return cv_prefix(err, errcap, "tokenizer.json");
    rc = parse_doc(t, root, err, errcap);
    json_free(root);
    if (rc) hf_tokenizer_free(t);
    return rc;
}

int hf_tokenizer_load(hf_tokenizer *t, const char *path, char *err, size_t errcap)
{
    cv_file f;
    int rc;
    if (cv_file_open(&f, path, err, errcap)) return -1;
    rc = hf_tokenizer_parse(t, (const char *)f.data, f.size, err, errcap);
    cv_file_close(&f);
    return rc;
}

int64_t hf_tokenizer_find(const hf_tokenizer *t, const char *text)
{
    for (size_t i = 0; i < t->n_tokens; i++)
        if (strcmp(t->tokens[i], text) == 0) return (int64_t)i;
    return -1;
}

/* A special token of tokenizer_config.json: "text" or {"content": "text"}. */
static int config_token(const hf_tokenizer *t, const json *v, const char *name, int64_t *out, char *err, size_t errcap)
{
    const char *s;
    if (*out >= 0 || !v || v->type == JSON_NULL) return 0;
    if (v->type == JSON_OBJECT) v = json_get(v, "content");
    s = json_as_str(v);
    if (!s) return cv_fail(err, errcap, "tokenizer_config.json: %s is not a token", name);
    *out = hf_tokenizer_find(t, s);
    if (*out < 0) return cv_fail(err, errcap, "tokenizer_config.json: %s '%.60s' is not in the vocabulary", name, s);
    return 0;
}

int hf_tokenizer_read_config(hf_tokenizer *t, const char *path, char *err, size_t errcap)
{
    cv_file f;
    json *root;
    const json *ab;
    int rc = -1;
    if (!cv_file_exists(path)) return 0;
    if (cv_file_open(&f, path, err, errcap)) return -1;
    root = json_parse((const char *)f.data, f.size, err, errcap);
    cv_file_close(&f);
    if (!root) return cv_prefix(err, errcap, "tokenizer_config.json");
    if (root->type != JSON_OBJECT) { cv_fail(err, errcap, "tokenizer_config.json is not an object"); goto done; }
    if (config_token(t, json_get(root, "bos_token"), "bos_token", &t->bos, err, errcap) ||
        config_token(t, json_get(root, "eos_token"), "eos_token", &t->eos, err, errcap) ||
        config_token(t, json_get(root, "pad_token"), "pad_token", &t->pad, err, errcap))
        goto done;
    ab = json_get(root, "add_bos_token");   /* the config says last: it overrides the post-processor */
    if (ab && ab->type == JSON_BOOL) t->add_bos = ab->boolean;
    rc = 0;
done:
    json_free(root);
    return rc;
}

void hf_tokenizer_write(const hf_tokenizer *t, gguf_writer *w)
{
    gguf_writer_add_str(w, "tokenizer.ggml.model", t->model);
    gguf_writer_add_str(w, "tokenizer.ggml.pre", t->pre);
    if (t->prefix) gguf_writer_add_str(w, "mor.tokenizer.prefix_space", t->prefix);
    if (t->normalizer) gguf_writer_add_str(w, "mor.tokenizer.normalizer", t->normalizer);
    if (t->unk >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)t->tokens, t->n_tokens);
    gguf_writer_add_arr_i32(w, "tokenizer.ggml.token_type", t->types, t->n_tokens);
    gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)t->merges, t->n_merges);
    if (t->bos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos);
    if (t->eos >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos);
    if (t->pad >= 0) gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)t->pad);
    if (t->add_bos >= 0) gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
}
