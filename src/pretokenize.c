/* pretokenize.c - the pre-tokenizers: the regex splits that cut a text into
 * pieces before byte-level BPE, one chain per tokenizer.ggml.pre name.
 *
 * A chain is a list of splits, as in HF's Sequence of Split pre-tokenizers
 * with behaviour "Isolated" (and llama.cpp's list of regexes for a pre name):
 * the first cuts the text, each next one cuts every piece the previous one
 * made, and the text between two matches is a piece too. The GPT-2 regex is
 * matched by hand (gpt2_piece_end); the other splits are written as the
 * regexes of the tokenizers they come from and compiled here, in a subset
 * that covers them:
 *
 *     [P?] C [+ | {n} | {m,n}] [$]       P, C: \s, \p{L|N|P|S|M}, [...] or a character
 *
 * matched leftmost-first and greedy as a backtracking engine does. Classes
 * follow llama.cpp's reading of these regexes (which is what its tests and
 * ours compare against): a code point above U+007F that is White_Space is
 * only ever matched by \s, not by a range that contains it; \p{X} is the
 * Unicode general category (src/unicode.c). */
#include <stdlib.h>
#include <string.h>

#include "pretokenize.h"
#include "status.h"
#include "unicode.h"

/* ------------------------------------------------------------------------ */
/* The GPT-2 regex                                                          */
/* ------------------------------------------------------------------------ */

/* Length and class of the character at s[i] (i < n). */
static size_t char_at(const uint8_t *s, size_t n, size_t i, int *cls)
{
    uint32_t cp;
    size_t len = utf8_decode(s + i, n - i, &cp);
    *cls = unicode_class(cp);
    return len;
}

/* The alternatives are tried in order, as a backtracking regex engine does. */
size_t gpt2_piece_end(const uint8_t *s, size_t n, size_t i)
{
    if (s[i] == '\'' && i + 1 < n) {
        uint8_t c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return i + 2;
        if (i + 2 < n && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                          (c == 'l' && s[i + 2] == 'l')))
            return i + 3;
    }

    /* The three " ?class+" alternatives: the classes are disjoint, so the
     * character after an optional U+0020 picks the one that can match. */
    int cls;
    size_t j = i;
    char_at(s, n, i, &cls);
    if (s[i] == ' ' && i + 1 < n) {
        int next_cls;
        char_at(s, n, i + 1, &next_cls);
        if (next_cls != UC_SPACE) { j = i + 1; cls = next_cls; }
    }
    if (cls != UC_SPACE) {
        while (j < n) {
            int c;
            size_t len = char_at(s, n, j, &c);
            if (c != cls) break;
            j += len;
        }
        return j;
    }

    /* \s+(?!\S): the whole run of white space if it ends the text; before a
     * non-space the engine backs off one character, leaving that space to
     * prefix the next word. A single space before a non-space is \s+. */
    size_t last = i, k = i, count = 0;
    while (k < n) {
        int c;
        size_t len = char_at(s, n, k, &c);
        if (c != UC_SPACE) break;
        last = k;
        k += len;
        count++;
    }
    return (k == n || count == 1) ? k : last;
}

/* ------------------------------------------------------------------------ */
/* The chains                                                               */
/* ------------------------------------------------------------------------ */

#define GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define MAX_RULES 6

/* The CJK ranges of DeepSeek's tokenizers. */
#define DEEPSEEK_CJK "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

static const struct {
    const char *names;                  /* that tokenizer.ggml.pre may give, '|'-separated */
    const char *rule[MAX_RULES];
} chains[] = {
    /* GPT-2, and GPT-NeoX / Pythia / MPT, whose tokenizer llama.cpp names "mpt" */
    { "gpt2|gpt-2|mpt", { GPT2 } },
    /* HF Digits(individual_digits) before ByteLevel: SmolLM, StarCoder, Refact */
    { "smollm|starcoder|refact", { "\\p{N}", GPT2 } },
    /* Falcon: HF Punctuation (Rust's is_ascii_punctuation or \p{P}), ByteLevel,
     * then runs of three digits */
    { "falcon", { "[\\p{P}$+<=>^~|`]+", GPT2, "[0-9]{3}" } },
    { "deepseek-coder", { "[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}" } },
    { "deepseek-llm", {
        "[\r\n]",
        "\\s?["
        "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-Ί"
        "ΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷ"
        "ᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌ"
        "ῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿ"
        "ⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆ"
        "ﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"
        "]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        DEEPSEEK_CJK,
        "\\p{N}+" } },
};

const char *pretok_names(void)
{
    return "gpt2, gpt-2, mpt, smollm, starcoder, refact, falcon, deepseek-coder, deepseek-llm";
}

/* A set of code points: the ASCII ones by bit, the others by their
 * properties and by ranges. */
typedef struct {
    uint32_t ascii[4];
    unsigned props;         /* UF_* */
    uint32_t *ranges;       /* [lo, hi] pairs, all above U+007F */
    size_t n_ranges;
} pt_class;

typedef struct {
    int gpt2;               /* the GPT-2 regex; nothing else is used */
    int has_prefix;         /* prefix? */
    int at_end;             /* ...$ */
    pt_class prefix, body;
    size_t min, max;        /* repetitions of body */
} pt_rule;

struct pretok {
    int n_rules;
    pt_rule rule[MAX_RULES];
};

static int in_class(const pt_class *c, uint32_t cp)
{
    if (cp < 0x80) return (int)((c->ascii[cp >> 5] >> (cp & 31)) & 1);
    unsigned f = unicode_flags(cp);
    if (f & UF_SPACE) return (c->props & UF_SPACE) != 0;
    if (f & c->props) return 1;
    for (size_t i = 0; i < c->n_ranges; i++)
        if (cp >= c->ranges[2 * i] && cp <= c->ranges[2 * i + 1]) return 1;
    return 0;
}

/* ---- compiling -------------------------------------------------------- */

static void add_ascii(pt_class *c, uint32_t lo, uint32_t hi)
{
    for (uint32_t b = lo; b <= hi && b < 0x80; b++) c->ascii[b >> 5] |= 1u << (b & 31);
}

static mor_status add_range(pt_class *c, uint32_t lo, uint32_t hi)
{
    if (lo < 0x80) add_ascii(c, lo, hi);
    if (hi < 0x80) return MOR_OK;
    if (lo < 0x80) lo = 0x80;
    uint32_t *r = realloc(c->ranges, (c->n_ranges + 1) * 2 * sizeof *r);
    if (!r) return err_set(MOR_E_NOMEM, "out of memory making a pre-tokenizer");
    c->ranges = r;
    r[2 * c->n_ranges] = lo;
    r[2 * c->n_ranges + 1] = hi;
    c->n_ranges++;
    return MOR_OK;
}

/* \s or \p{X}: the properties, and the ASCII characters that have them. */
static void add_props(pt_class *c, unsigned props)
{
    c->props |= props;
    for (uint32_t b = 0; b < 0x80; b++)
        if (unicode_flags(b) & props) c->ascii[b >> 5] |= 1u << (b & 31);
}

/* Patterns are ours (the table above): a malformed one is a bug, reported
 * as MOR_E_INTERNAL rather than trusted. */
static mor_status bad_pattern(const char *pat)
{
    return err_set(MOR_E_INTERNAL, "pre-tokenizer pattern \"%.40s\" is not in the supported subset", pat);
}

/* An escape at *p (after the backslash): a class property, or a character. */
static int parse_escape(const char **p, unsigned *props, uint32_t *cp)
{
    const char *s = *p;
    *props = 0;
    if (*s == 's') { *props = UF_SPACE; *p = s + 1; return 1; }
    if (*s == 'p' && s[1] == '{' && s[2] && s[3] == '}') {
        switch (s[2]) {
        case 'L': *props = UF_LETTER; break;
        case 'N': *props = UF_NUMBER; break;
        case 'P': *props = UF_PUNCT; break;
        case 'S': *props = UF_SYMBOL; break;
        case 'M': *props = UF_MARK; break;
        default: return 0;
        }
        *p = s + 4;
        return 1;
    }
    if (*s == 'r') *cp = '\r';
    else if (*s == 'n') *cp = '\n';
    else if (*s == 't') *cp = '\t';
    else if (*s && ((unsigned char)*s < 0x80) && !((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z') &&
             !(*s >= '0' && *s <= '9')) *cp = (unsigned char)*s;   /* \$, \\, \- ... */
    else return 0;
    *p = s + 1;
    return 1;
}

/* One character of the pattern (UTF-8) at *p. */
static int parse_char(const char **p, uint32_t *cp)
{
    const uint8_t *s = (const uint8_t *)*p;
    size_t n = strnlen(*p, 4);
    if (!n) return 0;
    size_t len = utf8_decode(s, n, cp);
    if (*cp == UTF8_INVALID) return 0;
    *p += len;
    return 1;
}

/* A class atom at *p: \s, \p{X}, [...] or one character. */
static mor_status parse_atom(const char *pat, const char **p, pt_class *c)
{
    unsigned props;
    uint32_t lo, hi;
    mor_status st;
    if (**p == '\\') {
        ++*p;
        if (!parse_escape(p, &props, &lo)) return bad_pattern(pat);
        if (props) { add_props(c, props); return MOR_OK; }
        return add_range(c, lo, lo);
    }
    if (**p != '[') {
        if (strchr("?+*{}()|$^.]", **p) || !parse_char(p, &lo)) return bad_pattern(pat);
        return add_range(c, lo, lo);
    }
    ++*p;
    if (**p == '^' || **p == ']') return bad_pattern(pat);
    while (**p != ']') {
        if (**p == '\\') {
            ++*p;
            if (!parse_escape(p, &props, &lo)) return bad_pattern(pat);
            if (props) { add_props(c, props); continue; }
        } else if (!parse_char(p, &lo)) {
            return bad_pattern(pat);
        }
        hi = lo;
        if (**p == '-' && (*p)[1] != ']') {
            ++*p;
            if (**p == '\\') {
                ++*p;
                if (!parse_escape(p, &props, &hi) || props) return bad_pattern(pat);
            } else if (!parse_char(p, &hi)) {
                return bad_pattern(pat);
            }
            if (hi < lo) return bad_pattern(pat);
        }
        if ((st = add_range(c, lo, hi)) != MOR_OK) return st;
    }
    ++*p;
    return MOR_OK;
}

static size_t parse_count(const char **p)
{
    size_t v = 0;
    while (**p >= '0' && **p <= '9') v = v * 10 + (size_t)(*(*p)++ - '0');
    return v;
}

static mor_status compile(const char *pat, pt_rule *r)
{
    mor_status st;
    const char *p = pat;
    if (strcmp(pat, GPT2) == 0) { r->gpt2 = 1; return MOR_OK; }
    if ((st = parse_atom(pat, &p, &r->body)) != MOR_OK) return st;
    if (*p == '?') {   /* that was the prefix */
        r->prefix = r->body;
        memset(&r->body, 0, sizeof r->body);
        r->has_prefix = 1;
        p++;
        if ((st = parse_atom(pat, &p, &r->body)) != MOR_OK) return st;
    }
    r->min = r->max = 1;
    if (*p == '+') {
        r->max = SIZE_MAX;
        p++;
    } else if (*p == '{') {
        p++;
        r->min = r->max = parse_count(&p);
        if (*p == ',') { p++; r->max = parse_count(&p); }
        if (*p++ != '}' || r->min == 0 || r->max < r->min) return bad_pattern(pat);
    }
    if (*p == '$') {
        r->at_end = 1;
        p++;
        if (r->has_prefix || r->max != SIZE_MAX) return bad_pattern(pat);
    }
    return *p ? bad_pattern(pat) : MOR_OK;
}

void pretok_free(pretok *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_rules; i++) {
        free(p->rule[i].prefix.ranges);
        free(p->rule[i].body.ranges);
    }
    free(p);
}

static int name_in(const char *names, const char *name, size_t n)
{
    for (const char *s = names; *s;) {
        const char *e = strchr(s, '|');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && memcmp(s, name, n) == 0) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

mor_status pretok_new(const char *name, size_t n, pretok **out)
{
    *out = NULL;
    for (size_t k = 0; k < sizeof chains / sizeof chains[0]; k++) {
        if (!name_in(chains[k].names, name, n)) continue;
        pretok *p = calloc(1, sizeof *p);
        if (!p) return err_set(MOR_E_NOMEM, "out of memory making a pre-tokenizer");
        for (int i = 0; i < MAX_RULES && chains[k].rule[i]; i++) {
            p->n_rules = i + 1;
            mor_status st = compile(chains[k].rule[i], &p->rule[i]);
            if (st != MOR_OK) { pretok_free(p); return st; }
        }
        *out = p;
        return MOR_OK;
    }
    return MOR_OK;
}

/* ---- running ---------------------------------------------------------- */

/* The code point at s[i] (i < n) and its length. */
static size_t cp_at(const uint8_t *s, size_t n, size_t i, uint32_t *cp)
{
    return utf8_decode(s + i, n - i, cp);
}

/* End of the longest run of at most max characters of c from s[i], and the
 * count in *k. */
static size_t run_end(const pt_class *c, const uint8_t *s, size_t n, size_t i, size_t max, size_t *k)
{
    *k = 0;
    while (i < n && *k < max) {
        uint32_t cp;
        size_t len = cp_at(s, n, i, &cp);
        if (!in_class(c, cp)) break;
        i += len;
        ++*k;
    }
    return i;
}

/* End of the match that starts at s[i] within s[0..n), or i if none. */
static size_t match_at(const pt_rule *r, const uint8_t *s, size_t n, size_t i)
{
    size_t k, e;
    if (r->has_prefix) {
        uint32_t cp;
        size_t len = cp_at(s, n, i, &cp);
        if (in_class(&r->prefix, cp)) {
            e = run_end(&r->body, s, n, i + len, r->max, &k);
            if (k >= r->min) return e;
        }
    }
    e = run_end(&r->body, s, n, i, r->max, &k);
    return k >= r->min ? e : i;
}

static mor_status split(const pretok *p, int ri, const uint8_t *s, size_t a, size_t b,
                        piece_fn fn, void *ctx);

/* Rule ri on s[a..b): each match and each stretch between matches goes on to
 * rule ri + 1. */
static mor_status split_rule(const pretok *p, int ri, const uint8_t *s, size_t a, size_t b,
                             piece_fn fn, void *ctx)
{
    const pt_rule *r = &p->rule[ri];
    mor_status st;
    if (r->gpt2) {
        for (size_t i = a, e; i < b; i = e) {
            e = gpt2_piece_end(s, b, i);
            if ((st = split(p, ri + 1, s, i, e, fn, ctx)) != MOR_OK) return st;
        }
        return MOR_OK;
    }
    if (r->at_end) {
        /* C+$: the run of C that ends the piece, the leftmost start there is */
        size_t t = b;
        for (size_t i = a; i < b;) {
            uint32_t cp;
            size_t len = cp_at(s, b, i, &cp);
            if (!in_class(&r->body, cp)) t = b;
            else if (t == b) t = i;
            i += len;
        }
        if (t > a && (st = split(p, ri + 1, s, a, t, fn, ctx)) != MOR_OK) return st;
        return t < b ? split(p, ri + 1, s, t, b, fn, ctx) : MOR_OK;
    }
    size_t gap = a;
    for (size_t i = a; i < b;) {
        size_t e = match_at(r, s, b, i);
        if (e > i) {
            if (gap < i && (st = split(p, ri + 1, s, gap, i, fn, ctx)) != MOR_OK) return st;
            if ((st = split(p, ri + 1, s, i, e, fn, ctx)) != MOR_OK) return st;
            i = gap = e;
        } else {
            uint32_t cp;
            i += cp_at(s, b, i, &cp);
        }
    }
    return gap < b ? split(p, ri + 1, s, gap, b, fn, ctx) : MOR_OK;
}

static mor_status split(const pretok *p, int ri, const uint8_t *s, size_t a, size_t b,
                        piece_fn fn, void *ctx)
{
    if (ri == p->n_rules) return fn(ctx, s + a, b - a);
    return split_rule(p, ri, s, a, b, fn, ctx);
}

mor_status pretok_run(const pretok *p, const uint8_t *s, size_t n, piece_fn fn, void *ctx)
{
    return n ? split(p, 0, s, 0, n, fn, ctx) : MOR_OK;
}
