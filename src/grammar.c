/* grammar.c - grammar-constrained sampling (mor_grammar in mor.h): which
 * tokens can continue the output so that it stays a prefix of a string of
 * the grammar.
 *
 * The matcher is a set of pushdown stacks, as in llama.cpp's grammar
 * sampler (written anew here). A stack is the list of places, innermost
 * first, where matching goes on: the top one is a character class still to
 * match, the others the elements after each rule reference being matched.
 * Stacks are nodes (pos, parent) interned in a pool, so that equal stacks
 * are equal ids (the set of stacks needs no comparison of lists) and stacks
 * share their tails. Reading a code point keeps the stacks whose top class
 * matches it and "settles" each: moves past the class, pops finished rules,
 * expands references into their alternatives, until every stack has a class
 * on top again (or is empty: the string so far is a whole string of the
 * grammar).
 *
 * Masking a vocabulary: tokens are byte strings, kept sorted, so that the
 * tokens sharing their first k bytes are a run of the sorted order. A walk
 * down those runs (a trie walk without a trie) reads each distinct prefix
 * once: a byte that completes a UTF-8 character advances the stacks, and a
 * prefix no stack survives drops its whole run at once. A token may end
 * inside a character (byte-fallback or byte-level tokens): it is allowed
 * when some stack's class holds a character that starts with those bytes,
 * and the partial character carries over to the next token.
 *
 * Memory is planned at creation: a pool of GM_NODES nodes and sets of at
 * most GM_SET ids. A prefix that would need more (nesting or ambiguity
 * beyond that) is treated as not allowed, so accepting a token that masking
 * allowed never runs out, and a call never allocates. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "model.h"
#include "status.h"
#include "tokenizer.h"

#define GM_NODES   (1 << 15)   /* stack nodes (pos, parent)              */
#define GM_BUCKETS (1 << 16)   /* hash buckets of the node pool          */
#define GM_SCRATCH (1 << 15)   /* ids of the sets of one masking walk    */
#define GM_SET     (1 << 12)   /* stacks of one set, the same bound everywhere */
#define GM_SETTLE  (1 << 20)   /* settle steps per code point: ambiguity bound */
#define GM_WORK    (1 << 24)   /* settle steps per mask or token: time bound */
#define GM_VISIT   (1 << 14)   /* (pos, parent) pairs settled in one advance */
#define GM_DEPTH   4096        /* nested expansions within one settle     */
#define GM_MAX_PIECE 1024      /* longer tokens are never allowed         */
#define GM_MEMO    8           /* advances shared by siblings, per trie node */
#define GM_CACHE   8           /* masks kept, by state                    */
#define GM_KEY     256         /* int32s of a state's key at most         */
#define GM_TRIGGERS 16         /* trigger words of a lazy grammar at most */
#define GM_TRIGGER  64         /* bytes of a trigger word at most         */

typedef struct { int32_t pos, parent, next; } gnode;
typedef struct { int32_t pos, parent; uint32_t gen; } gvisit;

/* The matching state over a grammar, without a vocabulary. */
typedef struct {
    const grammar_rules *g;
    gnode    *node;
    int32_t   n_node;     /* nodes in use; the first n_keep belong to `cur` */
    int32_t   n_keep;
    int32_t  *bucket;     /* [GM_BUCKETS] chain heads, -1 empty */
    uint32_t *mark;       /* [GM_NODES] set membership, by generation */
    uint32_t  gen;
    int64_t   steps;      /* settle steps of the current code point */
    int64_t   work;       /* settle steps of the current mask or token */
    int       overflow;   /* a bound was hit: the prefix is treated as dead */
    int       exhausted;  /* GM_WORK was hit: the answer is incomplete */
    gvisit   *visit;      /* [GM_VISIT] pairs settled in this advance, */
    uint32_t  vgen;       /* by generation                             */
    int32_t  *cur;        /* the stacks now (top node ids) */
    int32_t   n_cur;
    int       can_end;    /* the output so far is a whole string of the grammar */
    uint32_t  u_cp;       /* a character begun by the last token: its bits, */
    int       u_need;     /* the bytes still to come,                       */
    int       u_len;      /* and its full length in bytes (0: none)         */
    int32_t  *scratch;    /* [GM_SCRATCH] */
    int32_t  *remap;      /* [GM_NODES] new ids while committing */
} gm;

typedef struct { int32_t *v; int32_t n, cap; int can_end; } gset;

struct mor_grammar {
    grammar_rules *g;
    gm         m;
    int32_t    n_vocab;
    char      *bytes;     /* pieces of the text tokens */
    uint32_t  *off;       /* [n_vocab + 1] */
    int32_t   *ord;       /* text tokens sorted by their bytes */
    int32_t    n_ord;
    mor_token *end;       /* end-of-generation tokens */
    int32_t    n_end;
    uint8_t   *ok;        /* [n_vocab] scratch of mor_grammar_apply */
    int        ended;     /* an end token was accepted */
    int64_t    n_out;     /* bytes accepted, for messages */
    /* Masks of recent states: generation keeps coming back to a state
     * (inside a string, free text), whose mask is then a copy. A state's key
     * is its stacks as position lists (node ids are renumbered), its partial
     * character and whether it can end. */
    int32_t    key[GM_KEY + 8], n_key;       /* the current state's, by state_key */
    struct { int32_t key[GM_KEY + 8], n_key; uint64_t used; uint8_t *bits; int32_t k; } cache[GM_CACHE];
    uint64_t   clock;
    /* Lazy (mor_grammar_set_triggers): free output until a trigger word,
     * then the grammar from the word's first byte. */
    char      *words;               /* the words, back to back; NULL: not lazy */
    int32_t    word_off[GM_TRIGGERS + 1], n_words;
    int32_t   *cand, n_cand;        /* text tokens that can complete a word */
    int        triggered;
    char       tail[GM_TRIGGER];    /* the output's longest suffix that begins a word */
    int32_t    n_tail;
    char       probe[GM_TRIGGER + GM_MAX_PIECE];   /* the tail and a token's piece */
};

/* ---- the node pool ---- */

static uint32_t node_hash(int32_t pos, int32_t parent)
{
    uint32_t h = (uint32_t)pos * 0x9E3779B1u ^ ((uint32_t)parent + 0x7F4A7C15u) * 0x85EBCA77u;
    return (h ^ (h >> 15)) & (GM_BUCKETS - 1);
}

static int32_t intern(gm *m, int32_t pos, int32_t parent)
{
    uint32_t h = node_hash(pos, parent);
    for (int32_t i = m->bucket[h]; i >= 0; i = m->node[i].next)
        if (m->node[i].pos == pos && m->node[i].parent == parent) return i;
    if (m->n_node == GM_NODES) { m->overflow = 1; return -1; }
    int32_t i = m->n_node++;
    m->node[i] = (gnode){ pos, parent, m->bucket[h] };
    m->mark[i] = 0;
    m->bucket[h] = i;
    return i;
}

/* Forget the nodes made after the first n (newest first: each is then the
 * head of its chain). */
static void rollback(gm *m, int32_t n)
{
    while (m->n_node > n) {
        const gnode *d = &m->node[--m->n_node];
        m->bucket[node_hash(d->pos, d->parent)] = d->next;
    }
}

static void next_gen(gm *m)
{
    if (++m->gen == 0) { memset(m->mark, 0, sizeof *m->mark * GM_NODES); m->gen = 1; }
}

/* ---- settling and advancing ---- */

static int chars_match(const grammar_rules *g, const gel *e, uint32_t c)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    int in = 0;
    for (int32_t i = 0; i < e->n && !in; i++) in = c >= r[2 * i] && c <= r[2 * i + 1];
    return in != e->neg;
}

/* Some code point in [lo, hi] matches the class. */
static int chars_meet(const grammar_rules *g, const gel *e, uint32_t lo, uint32_t hi)
{
    const uint32_t *r = g->ranges + 2 * (size_t)e->a;
    if (!e->neg) {
        for (int32_t i = 0; i < e->n; i++)
            if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return 1;
        return 0;
    }
    /* negated: [lo, hi] is not wholly covered by the ranges (ranges may
     * overlap and come in any order: walk lo up through them) */
    for (int moved = 1; moved && lo <= hi;) {
        moved = 0;
        for (int32_t i = 0; i < e->n; i++)
            if (r[2 * i] <= lo && r[2 * i + 1] >= lo) {
                if (r[2 * i + 1] >= hi) return 0;
                lo = r[2 * i + 1] + 1;
                moved = 1;
            }
    }
    return 1;
}

static void set_add(gm *m, gset *out, int32_t id)
{
    if (m->mark[id] == m->gen) return;
    m->mark[id] = m->gen;
    if (out->n == out->cap) { m->overflow = 1; return; }
    out->v[out->n++] = id;
}

/* A new set of settled pairs (for one advance or reset). */
static void next_visit(gm *m)
{
    if (++m->vgen == 0) { memset(m->visit, 0, sizeof *m->visit * GM_VISIT); m->vgen = 1; }
}

/* Settling depends on (pos, parent) alone, and adds to the one set of an
 * advance: a pair met again adds nothing. 1 if (pos, parent) was settled
 * already, else records it. Without this, nested nullable rules (x{0,50}
 * with x nullable) settle every stack through each level below it: work
 * quadratic per character. A crowded table forgets (slower, still right). */
static int visited(gm *m, int32_t pos, int32_t parent)
{
    uint32_t h = node_hash(pos, parent) & (GM_VISIT - 1);
    for (int k = 0; k < 8; k++, h = (h + 1) & (GM_VISIT - 1)) {
        gvisit *v = &m->visit[h];
        if (v->gen != m->vgen) { *v = (gvisit){ pos, parent, m->vgen }; return 0; }
        if (v->pos == pos && v->parent == parent) return 1;
    }
    return 0;
}

/* Continue a stack at element pos with the frames below it at `parent`
 * until it has a character class on top (added to out), or is empty. */
static void settle(gm *m, int32_t pos, int32_t parent, gset *out, int depth)
{
    const grammar_rules *g = m->g;
    for (;;) {
        if (m->overflow) return;
        if (++m->work > GM_WORK) { m->overflow = m->exhausted = 1; return; }
        if (++m->steps > GM_SETTLE || depth > GM_DEPTH) { m->overflow = 1; return; }
        if (visited(m, pos, parent)) return;
        const gel *e = &g->el[pos];
        if (e->type == GEL_END) {   /* the rule is matched: pop its frame */
            if (parent < 0) { out->can_end = 1; return; }
            pos = m->node[parent].pos;
            parent = m->node[parent].parent;
            continue;
        }
        if (e->type == GEL_CHARS) {
            int32_t id = intern(m, pos, parent);
            if (id >= 0) set_add(m, out, id);
            return;
        }
        /* a reference: push what follows it (nothing when it ends the
         * alternative: a tail call), then each alternative of the rule */
        int32_t cont = parent;
        if (g->el[pos + 1].type != GEL_END && (cont = intern(m, pos + 1, parent)) < 0) return;
        int32_t a0 = g->rule_alt[e->a], a1 = g->rule_alt[e->a + 1];
        for (int32_t a = a0; a < a1 - 1; a++) settle(m, g->alt[a], cont, out, depth + 1);
        pos = g->alt[a1 - 1];
        parent = cont;
        depth++;
    }
}

/* out = the stacks of in[0..n) after reading code point c. */
static void advance(gm *m, const int32_t *in, int32_t n, uint32_t c, gset *out)
{
    next_gen(m);
    next_visit(m);
    m->steps = 0;
    out->n = 0;
    out->can_end = 0;
    if ((m->work += n) > GM_WORK) { m->overflow = m->exhausted = 1; return; }   /* a class test per stack */
    for (int32_t i = 0; i < n && !m->overflow; i++) {
        const gnode *d = &m->node[in[i]];
        if (chars_match(m->g, &m->g->el[d->pos], c)) settle(m, d->pos + 1, d->parent, out, 0);
    }
}

static const uint32_t utf8_min[5] = { 0, 0, 0x80, 0x800, 0x10000 };

/* Read byte b into a character being decoded (cp, need, len: need == 0
 * when none is begun). Returns 1 when a valid character is complete (*cp),
 * 0 when more bytes are needed, -1 when the bytes are not UTF-8. */
static int utf8_step(uint32_t *cp, int *need, int *len, unsigned char b)
{
    if (!*need) {
        if (b < 0x80) { *cp = b; *len = 1; return 1; }
        int n = b >= 0xC2 && b <= 0xDF ? 1 : b >= 0xE0 && b <= 0xEF ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : -1;
        if (n < 0) return -1;
        *cp = b & (0x3Fu >> n);
        *need = n;
        *len = n + 1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    *cp = *cp << 6 | (b & 0x3Fu);
    if (--*need) {
        /* reject overlong and out-of-range beginnings early */
        uint32_t lo = *cp << (6 * *need), hi = lo | ((1u << (6 * *need)) - 1);
        if (hi < utf8_min[*len] || lo > 0x10FFFF) return -1;
        return 0;
    }
    if (*cp < utf8_min[*len] || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return -1;
    return 1;
}

/* A character begun (cp, need, len) can still match the top of a stack. */
static int partial_ok(const gm *m, const int32_t *set, int32_t n, uint32_t cp, int need, int len)
{
    uint32_t lo = cp << (6 * need), hi = lo | ((1u << (6 * need)) - 1);
    if (lo < utf8_min[len]) lo = utf8_min[len];
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi) return 0;
    /* the characters it can become, without the surrogates (not UTF-8):
     * [lo, hi] below U+D800 and above U+DFFF, tested apart (0xED begins both
     * U+D000..U+D7FF and surrogates: a class of neither must refuse it) */
    const uint32_t lo2 = lo > 0xE000 ? lo : 0xE000, hi1 = hi < 0xD7FF ? hi : 0xD7FF;
    for (int32_t i = 0; i < n; i++) {
        const gel *e = &m->g->el[m->node[set[i]].pos];
        if ((lo <= hi1 && chars_meet(m->g, e, lo, hi1)) || (lo2 <= hi && chars_meet(m->g, e, lo2, hi))) return 1;
    }
    return 0;
}

/* ---- the state ---- */

static void gm_free(gm *m)
{
    free(m->node);
    free(m->bucket);
    free(m->mark);
    free(m->cur);
    free(m->scratch);
    free(m->remap);
    free(m->visit);
    memset(m, 0, sizeof *m);   /* a second gm_free (mor_grammar_free after a failed gm_init) frees nothing */
}

/* Empty the hash chains of the nodes in use (not the whole table: a reset
 * or a commit per token must not cost a pass over every bucket). */
static void clear_buckets(gm *m)
{
    for (int32_t i = 0; i < m->n_node; i++) m->bucket[node_hash(m->node[i].pos, m->node[i].parent)] = -1;
}

/* The state before any output. */
static void gm_reset(gm *m)
{
    clear_buckets(m);
    m->n_node = 0;
    m->overflow = m->exhausted = 0;
    m->steps = m->work = 0;
    next_gen(m);
    next_visit(m);
    gset out = { m->cur, 0, GM_SET, 0 };
    const grammar_rules *g = m->g;
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) settle(m, g->alt[a], -1, &out, 0);
    m->n_cur = m->overflow ? 0 : out.n;
    m->can_end = out.can_end;
    m->n_keep = m->n_node;
    m->u_cp = 0;
    m->u_need = m->u_len = 0;
}

static mor_status gm_init(gm *m, const grammar_rules *g)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->node = malloc(sizeof *m->node * GM_NODES);
    m->bucket = malloc(sizeof *m->bucket * GM_BUCKETS);
    m->mark = calloc(GM_NODES, sizeof *m->mark);
    m->cur = malloc(sizeof *m->cur * GM_SET);
    m->scratch = malloc(sizeof *m->scratch * GM_SCRATCH);
    m->remap = malloc(sizeof *m->remap * GM_NODES);
    m->visit = calloc(GM_VISIT, sizeof *m->visit);
    if (!m->node || !m->bucket || !m->mark || !m->cur || !m->scratch || !m->remap || !m->visit) {
        gm_free(m);
        return MOR_E_NOMEM;
    }
    memset(m->bucket, 0xFF, sizeof *m->bucket * GM_BUCKETS);   /* once: afterwards only used chains are cleared */
    m->n_node = 0;
    gm_reset(m);
    if (m->overflow) { gm_free(m); return MOR_E_UNSUPPORTED; }   /* no start state within the bounds */
    return MOR_OK;
}

/* Make `set` (n ids, maybe in scratch) the current stacks and drop the
 * nodes they do not reach. Parents are older than their children, so
 * renumbering in order keeps every parent before its children. */
static void gm_commit(gm *m, const int32_t *set, int32_t n, int can_end)
{
    next_gen(m);
    for (int32_t i = 0; i < n; i++)
        for (int32_t id = set[i]; id >= 0 && m->mark[id] != m->gen; id = m->node[id].parent) m->mark[id] = m->gen;
    clear_buckets(m);   /* every chain is rebuilt below */
    int32_t k = 0;
    for (int32_t i = 0; i < m->n_node; i++) m->remap[i] = m->mark[i] == m->gen ? k++ : -1;
    for (int32_t i = 0; i < n; i++) m->cur[i] = m->remap[set[i]];
    for (int32_t i = 0; i < m->n_node; i++) {
        if (m->remap[i] < 0) continue;
        int32_t p = m->node[i].parent;
        m->node[m->remap[i]].pos = m->node[i].pos;   /* remap[i] <= i: node i is read before it is written */
        m->node[m->remap[i]].parent = p < 0 ? -1 : m->remap[p];
    }
    m->n_node = k;
    for (int32_t i = 0; i < k; i++) {
        uint32_t h = node_hash(m->node[i].pos, m->node[i].parent);
        m->node[i].next = m->bucket[h];
        m->bucket[h] = i;
    }
    m->n_cur = n;
    m->can_end = can_end;
    m->n_keep = k;
}

/* Read bytes into the state: 1 when the grammar can go on (the state is
 * updated), 0 when it cannot (the state is as it was). */
static int gm_feed(gm *m, const unsigned char *b, size_t n)
{
    uint32_t cp = m->u_cp;
    int need = m->u_need, len = m->u_len;
    const int32_t *set = m->cur;
    int32_t n_set = m->n_cur;
    int can_end = m->can_end;
    int32_t *buf[2] = { m->scratch, m->scratch + GM_SCRATCH / 2 };
    int which = 0;
    m->overflow = m->exhausted = 0;
    m->work = 0;
    for (size_t i = 0; i < n; i++) {
        int r = utf8_step(&cp, &need, &len, b[i]);
        if (r < 0) goto dead;
        if (r == 0) continue;
        gset out = { buf[which], 0, GM_SET, 0 };
        advance(m, set, n_set, cp, &out);
        if (m->overflow || (!out.n && !out.can_end)) goto dead;
        set = out.v; n_set = out.n; can_end = out.can_end;
        which ^= 1;
    }
    if (need && !partial_ok(m, set, n_set, cp, need, len)) goto dead;
    gm_commit(m, set, n_set, need ? 0 : can_end);
    m->u_cp = need ? cp : 0;
    m->u_need = need;
    m->u_len = need ? len : 0;
    return 1;
dead:
    rollback(m, m->n_keep);
    m->overflow = 0;
    return 0;
}

int grammar_match(const grammar_rules *g, const char *bytes, size_t n)
{
    gm m;
    mor_status st = gm_init(&m, g);
    if (st) return st;
    int ok = gm_feed(&m, (const unsigned char *)bytes, n) && !m.u_need && m.can_end;
    gm_free(&m);
    return ok;
}

/* ---- masking a vocabulary ---- */

static uint32_t piece_len(const mor_grammar *G, int32_t t) { return G->off[t + 1] - G->off[t]; }
static unsigned char piece_at(const mor_grammar *G, int32_t t, int32_t i) { return (unsigned char)G->bytes[G->off[t] + (uint32_t)i]; }

/* Mark the allowed tokens of ord[lo..hi), which share their first `depth`
 * bytes, read into the stacks set[0..n) (can_end, partial character cp,
 * need, len). Sets of deeper prefixes go to scratch from `free_at`. */
static void walk(mor_grammar *G, int32_t lo, int32_t hi, int32_t depth, const int32_t *set, int32_t n,
                 int can_end, uint32_t cp, int need, int len, int32_t free_at)
{
    gm *m = &G->m;
    int32_t i = lo, keep0 = m->n_node, top = free_at, n_memo = 0;
    struct { uint64_t sig; int32_t off, n; int can_end, dead; } memo[GM_MEMO];
    /* the tokens that end here: they come first in the sorted order */
    for (; i < hi && (int32_t)piece_len(G, G->ord[i]) == depth; i++)
        G->ok[G->ord[i]] = need ? (uint8_t)partial_ok(m, set, n, cp, need, len) : (uint8_t)(n > 0 || can_end);
    while (i < hi) {
        unsigned char c = piece_at(G, G->ord[i], depth);
        int32_t j = i + 1;
        while (j < hi && piece_at(G, G->ord[j], depth) == c) j++;
        uint32_t ncp = cp;
        int nneed = need, nlen = len;
        int r = utf8_step(&ncp, &nneed, &nlen, c);
        if (r == 0 && partial_ok(m, set, n, ncp, nneed, nlen))
            walk(G, i, j, depth + 1, set, n, 0, ncp, nneed, nlen, free_at);
        else if (r == 1) {
            /* Which stacks' classes take the character decides the stacks
             * after it: siblings with the same answer (the letters inside a
             * string, say) share one advance, kept until the last sibling. */
            uint64_t sig = 0;
            const int memoable = n <= 64;
            for (int32_t k = 0; memoable && k < n; k++)
                sig |= (uint64_t)chars_match(m->g, &m->g->el[m->node[set[k]].pos], ncp) << k;
            int hit = -1;
            for (int k = 0; memoable && k < n_memo && hit < 0; k++) if (memo[k].sig == sig) hit = k;
            if (hit >= 0) {
                if (!memo[hit].dead)
                    walk(G, i, j, depth + 1, m->scratch + memo[hit].off, memo[hit].n, memo[hit].can_end, 0, 0, 0, top);
            } else if (top < GM_SCRATCH) {
                int32_t keep = m->n_node, room = GM_SCRATCH - top;
                gset out = { m->scratch + top, 0, room < GM_SET ? room : GM_SET, 0 };
                advance(m, set, n, ncp, &out);
                int dead = m->overflow || (!out.n && !out.can_end);
                m->overflow = 0;
                if (memoable && n_memo < GM_MEMO) {   /* kept: its nodes stay until the end */
                    memo[n_memo].sig = sig; memo[n_memo].off = top; memo[n_memo].n = out.n;
                    memo[n_memo].can_end = out.can_end; memo[n_memo].dead = dead;
                    n_memo++;
                    top += out.n;
                    if (!dead) walk(G, i, j, depth + 1, out.v, out.n, out.can_end, 0, 0, 0, top);
                } else {
                    if (!dead) walk(G, i, j, depth + 1, out.v, out.n, out.can_end, 0, 0, 0, top + out.n);
                    rollback(m, keep);
                }
            }
        }
        i = j;
    }
    rollback(m, keep0);
}

static int is_end(const mor_grammar *G, mor_token t)
{
    for (int32_t i = 0; i < G->n_end; i++) if (G->end[i] == t) return 1;
    return 0;
}

/* The current state's key into G->key (n_key = -1: too long to cache). */
static void state_key(mor_grammar *G)
{
    const gm *m = &G->m;
    int32_t n = 0;
    G->key[n++] = G->ended;
    G->key[n++] = m->can_end;
    G->key[n++] = (int32_t)m->u_cp;
    G->key[n++] = m->u_need * 8 + m->u_len;
    for (int32_t i = 0; i < m->n_cur && n <= GM_KEY; i++) {
        for (int32_t id = m->cur[i]; id >= 0 && n <= GM_KEY; id = m->node[id].parent) G->key[n++] = m->node[id].pos;
        G->key[n++] = -1;
    }
    G->n_key = n <= GM_KEY ? n : -1;
}

/* The bound on one mask's or token's work was hit (a grammar ambiguous
 * enough to take seconds per token over a large vocabulary): an error, not
 * a mask that would silently drop tokens the grammar allows. */
static mor_status too_complex(const mor_grammar *G, const char *doing)
{
    return err_set(MOR_E_UNSUPPORTED,
                   "%s after %lld bytes of output took more than %d matcher steps: the grammar keeps too many "
                   "ways of matching open at once (such as many alternatives that share a long prefix, or "
                   "repetitions of groups that can match nothing)",
                   doing, (long long)G->n_out, GM_WORK);
}

/* ---- lazy grammars: free output until a trigger word ---- */

/* probe = the tail and token t's piece; its length. */
static int32_t lazy_probe(mor_grammar *G, mor_token t)
{
    uint32_t n = piece_len(G, t);
    memcpy(G->probe, G->tail, (size_t)G->n_tail);
    memcpy(G->probe + G->n_tail, G->bytes + G->off[t], n);
    return G->n_tail + (int32_t)n;
}

/* Where the first trigger word in probe[0..n) begins, or -1. The tail is
 * the longest suffix of the output that begins a word, so a word that began
 * earlier would have been found already: probe holds every new one. */
static int32_t lazy_find(const mor_grammar *G, int32_t n)
{
    int32_t first = -1;
    for (int32_t w = 0; w < G->n_words; w++) {
        const char *word = G->words + G->word_off[w];
        int32_t k = G->word_off[w + 1] - G->word_off[w];
        for (int32_t i = 0; i + k <= n && (first < 0 || i < first); i++)
            if (!memcmp(G->probe + i, word, (size_t)k)) { first = i; break; }
    }
    return first;
}

/* The tail after probe[0..n), which holds no word: its longest suffix that
 * is the beginning of a word. */
static void lazy_tail(mor_grammar *G, int32_t n)
{
    int32_t best = 0;
    for (int32_t w = 0; w < G->n_words; w++) {
        const char *word = G->words + G->word_off[w];
        int32_t k = G->word_off[w + 1] - G->word_off[w];
        for (int32_t len = (k - 1 < n ? k - 1 : n); len > best; len--)
            if (!memcmp(G->probe + n - len, word, (size_t)len)) { best = len; break; }
    }
    memmove(G->tail, G->probe + n - best, (size_t)best);
    G->n_tail = best;
}

/* The mask before a trigger: every token, but those that complete a word
 * and go on where the grammar cannot (read from its start, then put back). */
static int32_t lazy_allowed(mor_grammar *G, uint8_t *ok, int32_t n_vocab)
{
    gm *m = &G->m;
    memset(ok, 1, (size_t)n_vocab);
    int32_t k = n_vocab;
    for (int32_t i = 0; i < G->n_cand; i++) {
        int32_t n = lazy_probe(G, G->cand[i]), at = lazy_find(G, n);
        if (at < 0) continue;
        if (gm_feed(m, (const unsigned char *)G->probe + at, (size_t)(n - at))) gm_reset(m);
        else if (m->exhausted) return too_complex(G, "masking the vocabulary");
        else { ok[G->cand[i]] = 0; k--; }
    }
    return k;
}

/* Accept text token t before a trigger: a word it completes starts the
 * grammar there. MOR_E_INVALID_ARG (nothing changes) when what follows the
 * word cannot begin a string of the grammar. */
static mor_status lazy_accept(mor_grammar *G, mor_token t)
{
    int32_t n = lazy_probe(G, t), at = lazy_find(G, n);
    if (at < 0) { lazy_tail(G, n); return MOR_OK; }
    if (!gm_feed(&G->m, (const unsigned char *)G->probe + at, (size_t)(n - at)))
        return G->m.exhausted ? too_complex(G, "mor_grammar_accept: reading a token")
                              : err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: token %d completes a trigger word "
                                        "and goes on where the grammar cannot", (int)t);
    G->triggered = 1;
    G->n_tail = 0;
    G->n_out += n - at;
    return MOR_OK;
}

int32_t grammar_allowed(mor_grammar *G, uint8_t *ok, int32_t n_vocab)
{
    gm *m = &G->m;
    m->work = 0;
    m->exhausted = 0;
    if (G->words && !G->triggered && !G->ended) return lazy_allowed(G, ok, n_vocab);
    state_key(G);
    int hit = -1, lru = 0;
    for (int c = 0; c < GM_CACHE && hit < 0; c++) {
        if (G->cache[c].used < G->cache[lru].used) lru = c;
        if (G->cache[c].used && G->n_key >= 0 && G->cache[c].n_key == G->n_key &&
            !memcmp(G->cache[c].key, G->key, sizeof *G->key * (size_t)G->n_key)) hit = c;
    }
    if (hit >= 0) {
        const uint8_t *b = G->cache[hit].bits;
        for (int32_t t = 0; t < n_vocab; t++) ok[t] = (uint8_t)(b[t >> 3] >> (t & 7) & 1);
        G->cache[hit].used = ++G->clock;
        return G->cache[hit].k;
    }
    uint8_t *save = G->ok;
    G->ok = ok;
    memset(ok, 0, (size_t)n_vocab);
    if (!G->ended) {
        walk(G, 0, G->n_ord, 0, m->cur, m->n_cur, m->can_end, m->u_cp, m->u_need, m->u_len, 0);
        if (m->can_end && !m->u_need)
            for (int32_t i = 0; i < G->n_end; i++) ok[G->end[i]] = 1;
    }
    G->ok = save;
    if (m->exhausted) return too_complex(G, "masking the vocabulary");
    int32_t k = 0;
    for (int32_t t = 0; t < n_vocab; t++) k += ok[t];
    if (G->n_key >= 0) {   /* keep it, in place of the least recently used */
        uint8_t *b = G->cache[lru].bits;
        memset(b, 0, ((size_t)n_vocab + 7) / 8);
        for (int32_t t = 0; t < n_vocab; t++) b[t >> 3] |= (uint8_t)(ok[t] << (t & 7));
        memcpy(G->cache[lru].key, G->key, sizeof *G->key * (size_t)G->n_key);
        G->cache[lru].n_key = G->n_key;
        G->cache[lru].k = k;
        G->cache[lru].used = ++G->clock;
    }
    return k;
}

/* A short description of what the grammar expects next, for messages. */
static void describe_expected(const mor_grammar *G, char *buf, size_t cap)
{
    const gm *m = &G->m;
    size_t n = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < m->n_cur && i < 4 && n + 40 < cap; i++) {
        const gel *e = &G->g->el[m->node[m->cur[i]].pos];
        const uint32_t *r = G->g->ranges + 2 * (size_t)e->a;
        if (!e->n) n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", e->neg ? "any character" : "nothing");
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%s[U+%04X-U+%04X%s]", i ? ", " : "", e->neg ? "not " : "",
                                  r[0], r[1], e->n > 1 ? ",..." : "");
    }
    if (m->n_cur > 4 && n + 8 < cap) snprintf(buf + n, cap - n, ", ...");
}

/* Sort the text tokens G->ord by their bytes (a prefix first). qsort has no
 * context argument, and insertion sort would be quadratic: a merge sort.
 * 0, or -1 when out of memory. */
static int sort_pieces(mor_grammar *G)
{
    int32_t *tmp = malloc(sizeof *tmp * ((size_t)G->n_ord + 1));
    if (!tmp) return -1;
    for (int32_t w = 1; w < G->n_ord; w *= 2) {
        for (int32_t a = 0; a < G->n_ord; a += 2 * w) {
            int32_t mid = a + w < G->n_ord ? a + w : G->n_ord, b = a + 2 * w < G->n_ord ? a + 2 * w : G->n_ord;
            int32_t i = a, j = mid, k = a;
            while (i < mid && j < b) {
                int32_t x = G->ord[i], y = G->ord[j];
                uint32_t lx = piece_len(G, x), ly = piece_len(G, y);
                int c = memcmp(G->bytes + G->off[x], G->bytes + G->off[y], lx < ly ? lx : ly);
                tmp[k++] = (c < 0 || (c == 0 && lx <= ly)) ? G->ord[i++] : G->ord[j++];
            }
            while (i < mid) tmp[k++] = G->ord[i++];
            while (j < b) tmp[k++] = G->ord[j++];
        }
        memcpy(G->ord, tmp, sizeof *tmp * (size_t)G->n_ord);
    }
    free(tmp);
    return 0;
}

/* ---- the public API ---- */

MOR_API mor_status mor_grammar_create(const mor_model *model, const char *gbnf, size_t len, const char *root,
                                      const mor_token *end_tokens, int32_t n_end, mor_grammar **out)
{
    err_clear();
    if (!model || !out || (!gbnf && len))
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_create: %s is NULL", !model ? "model" : !out ? "out" : "gbnf");
    if (!model->tok) return err_set(MOR_E_UNSUPPORTED, "mor_grammar_create: the model has no tokenizer");
    if (n_end < 0 || (n_end && !end_tokens))
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_create: n_end = %d with end_tokens %s", (int)n_end,
                       end_tokens ? "set" : "NULL");
    const int32_t V = model->n_vocab;
    for (int32_t i = 0; i < n_end; i++)
        if (end_tokens[i] < 0 || end_tokens[i] >= V)
            return err_set(MOR_E_OUT_OF_RANGE, "mor_grammar_create: end token %d is not in [0, %d)", (int)end_tokens[i], (int)V);
    grammar_rules *rules;
    mor_status st = grammar_parse(gbnf, len, root, "mor_grammar_create", &rules);
    if (st) return st;

    mor_grammar *G = calloc(1, sizeof *G);
    if (!G) { grammar_rules_free(rules); return err_set(MOR_E_NOMEM, "mor_grammar_create: out of memory"); }
    G->g = rules;
    G->n_vocab = V;
    mor_token eos = tokenizer_eos(model->tok);
    int32_t ne = end_tokens ? n_end : eos >= 0 ? 1 : 0;
    G->end = malloc(sizeof *G->end * (size_t)(ne + 1));
    G->off = malloc(sizeof *G->off * ((size_t)V + 1));
    G->ord = malloc(sizeof *G->ord * ((size_t)V + 1));
    G->ok = malloc((size_t)V + 1);
    if (!G->end || !G->off || !G->ord || !G->ok) goto nomem;
    if ((st = gm_init(&G->m, rules)) == MOR_E_UNSUPPORTED) {
        mor_grammar_free(G);
        return err_set(st, "mor_grammar_create: the grammar's start nests or branches beyond the matcher's "
                       "bounds (%d stacks, %d nested rules): it keeps too many ways of matching open at once",
                       GM_SET, GM_DEPTH);
    }
    if (st) goto nomem;
    for (int c = 0; c < GM_CACHE; c++)
        if (!(G->cache[c].bits = malloc(((size_t)V + 7) / 8))) goto nomem;
    G->n_end = ne;
    if (end_tokens) memcpy(G->end, end_tokens, sizeof *G->end * (size_t)n_end);
    else if (ne) G->end[0] = eos;
    /* the pieces of the tokens that are text (not control, unknown or
     * unused tokens, which no grammar writes, nor end tokens) */
    size_t total = 0;
    for (int32_t t = 0; t < V; t++) {
        size_t n = 0;
        if (tokenizer_is_text(model->tok, t) && !is_end(G, t)) tokenizer_piece(model->tok, t, NULL, 0, &n);
        G->off[t] = (uint32_t)total;
        if (n <= GM_MAX_PIECE) total += n;
    }
    G->off[V] = (uint32_t)total;
    G->bytes = malloc(total + 1);
    if (!G->bytes) goto nomem;
    for (int32_t t = 0; t < V; t++) {
        size_t n = G->off[t + 1] - G->off[t], got;
        if (n && tokenizer_piece(model->tok, t, G->bytes + G->off[t], n, &got) == MOR_OK && got == n)
            G->ord[G->n_ord++] = t;
    }
    err_clear();
    if (sort_pieces(G)) goto nomem;
    *out = G;
    return MOR_OK;
nomem:
    mor_grammar_free(G);
    return err_set(MOR_E_NOMEM, "mor_grammar_create: out of memory");
}

MOR_API void mor_grammar_free(mor_grammar *G)
{
    if (!G) return;
    gm_free(&G->m);
    grammar_rules_free(G->g);
    free(G->end);
    free(G->bytes);
    free(G->off);
    free(G->ord);
    free(G->ok);
    for (int c = 0; c < GM_CACHE; c++) free(G->cache[c].bits);
    free(G->words);
    free(G->cand);
    free(G);
}

MOR_API void mor_grammar_reset(mor_grammar *G)
{
    if (!G) return;
    gm_reset(&G->m);
    G->ended = 0;
    G->n_out = 0;
    G->triggered = 0;
    G->n_tail = 0;
}

MOR_API int32_t mor_grammar_state(const mor_grammar *G)
{
    if (!G) return MOR_E_INVALID_ARG;
    const gm *m = &G->m;
    int32_t s = 0;
    if (G->words && !G->triggered) return G->ended ? MOR_GRAMMAR_CAN_END | MOR_GRAMMAR_MUST_END : MOR_GRAMMAR_CAN_END;
    if (G->ended || (m->can_end && !m->u_need)) s |= MOR_GRAMMAR_CAN_END;
    if (G->ended || (!m->n_cur && !m->u_need)) s |= MOR_GRAMMAR_MUST_END;
    return s;
}

MOR_API mor_status mor_grammar_apply(mor_grammar *G, float *logits, int32_t n_vocab)
{
    err_clear();
    if (!G || !logits) return err_set(MOR_E_INVALID_ARG, "mor_grammar_apply: %s is NULL", !G ? "grammar" : "logits");
    if (n_vocab != G->n_vocab)
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_apply: n_vocab is %d, the model's is %d", (int)n_vocab,
                       (int)G->n_vocab);
    int32_t k = grammar_allowed(G, G->ok, n_vocab);
    if (k < 0) return k;
    if (k == 0) {
        char what[200];
        describe_expected(G, what, sizeof what);
        if (G->ended || (!G->m.n_cur && !G->m.u_need))
            return err_set(MOR_E_INVALID_ARG, "mor_grammar_apply: the output is complete (the grammar allows "
                           "nothing more) and no end token is set: stop here");
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_apply: no token of the vocabulary can continue the grammar "
                       "after %lld bytes of output (it expects %s)", (long long)G->n_out, what);
    }
    for (int32_t t = 0; t < n_vocab; t++)
        if (!G->ok[t]) logits[t] = -HUGE_VALF;
    return MOR_OK;
}

int32_t grammar_n_vocab(const mor_grammar *G) { return G->n_vocab; }
int64_t grammar_work(const mor_grammar *G) { return G->m.work; }

void grammar_accept_allowed(mor_grammar *G, mor_token t)
{
    if (is_end(G, t)) { G->ended = 1; return; }
    uint32_t n = piece_len(G, t);
    if (G->words && !G->triggered) {   /* a control token breaks the text a word could span */
        if (n) (void)lazy_accept(G, t);
        else G->n_tail = 0;
        return;
    }
    if (gm_feed(&G->m, (const unsigned char *)G->bytes + G->off[t], n)) G->n_out += n;
}

MOR_API mor_status mor_grammar_accept(mor_grammar *G, mor_token t)
{
    err_clear();
    if (!G) return err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: grammar is NULL");
    if (t < 0 || t >= G->n_vocab)
        return err_set(MOR_E_OUT_OF_RANGE, "mor_grammar_accept: token %d is not in [0, %d)", (int)t, (int)G->n_vocab);
    if (G->ended) return err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: an end token was accepted already");
    if (G->words && !G->triggered) {
        if (is_end(G, t)) G->ended = 1;
        else if (piece_len(G, t)) return lazy_accept(G, t);
        else G->n_tail = 0;
        return MOR_OK;
    }
    if (is_end(G, t)) {
        if (!(G->m.can_end && !G->m.u_need))
            return err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: end token %d where the output is not complete", (int)t);
        G->ended = 1;
        return MOR_OK;
    }
    uint32_t n = piece_len(G, t);
    if (!n) return err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: token %d is not text (a control or unused token)", (int)t);
    if (!gm_feed(&G->m, (const unsigned char *)G->bytes + G->off[t], n)) {
        if (G->m.exhausted) return too_complex(G, "mor_grammar_accept: reading a token");
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_accept: token %d cannot continue the grammar here", (int)t);
    }
    G->n_out += n;
    return MOR_OK;
}

/* The words' text tokens that can complete a word: those holding one, and
 * those that begin with a proper suffix of one (the word began in earlier
 * tokens). Into *cand (allocated; NULL when none), their number returned;
 * -1 when out of memory. */
static int32_t lazy_candidates(const mor_grammar *G, const char *words, const int32_t *off, int32_t n_words,
                               int32_t **cand)
{
    *cand = NULL;
    int32_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int32_t i = 0; i < G->n_ord; i++) {
            const int32_t t = G->ord[i];
            const char *p = G->bytes + G->off[t];
            const uint32_t L = piece_len(G, t);
            int hit = 0;
            for (int32_t w = 0; w < n_words && !hit; w++) {
                const char *word = words + off[w];
                uint32_t k = (uint32_t)(off[w + 1] - off[w]);
                for (uint32_t j = 0; j + k <= L && !hit; j++) hit = !memcmp(p + j, word, k);
                for (uint32_t s = 1; s < k && !hit; s++) hit = k - s <= L && !memcmp(p, word + s, k - s);
            }
            if (hit && pass) (*cand)[n] = t;
            n += hit;
        }
        if (!pass && !(*cand = malloc(sizeof **cand * ((size_t)n + 1)))) return -1;
    }
    return n;
}

MOR_API mor_status mor_grammar_set_triggers(mor_grammar *G, const char *const *words, int32_t n_words)
{
    err_clear();
    if (!G) return err_set(MOR_E_INVALID_ARG, "mor_grammar_set_triggers: grammar is NULL");
    if (n_words < 0 || n_words > GM_TRIGGERS || (n_words && !words))
        return err_set(MOR_E_INVALID_ARG, "mor_grammar_set_triggers: n_words = %d (at most %d) with words %s",
                       (int)n_words, GM_TRIGGERS, words ? "set" : "NULL");
    int32_t off[GM_TRIGGERS + 1] = { 0 };
    for (int32_t w = 0; w < n_words; w++) {
        size_t k = words[w] ? strlen(words[w]) : 0;
        if (!k || k > GM_TRIGGER)
            return err_set(MOR_E_INVALID_ARG, "mor_grammar_set_triggers: word %d is %s (1 to %d bytes)", (int)w,
                           !words[w] ? "NULL" : k ? "too long" : "empty", GM_TRIGGER);
        off[w + 1] = off[w] + (int32_t)k;
    }
    char *text = n_words ? malloc((size_t)off[n_words]) : NULL;
    int32_t *cand = NULL, n_cand = 0;
    if (n_words && !text) return err_set(MOR_E_NOMEM, "mor_grammar_set_triggers: out of memory");
    for (int32_t w = 0; w < n_words; w++) memcpy(text + off[w], words[w], (size_t)(off[w + 1] - off[w]));
    if (n_words && (n_cand = lazy_candidates(G, text, off, n_words, &cand)) < 0) {
        free(text);
        return err_set(MOR_E_NOMEM, "mor_grammar_set_triggers: out of memory");
    }
    free(G->words);
    free(G->cand);
    G->words = text;
    G->cand = cand;
    G->n_cand = n_cand;
    G->n_words = n_words;
    memcpy(G->word_off, off, sizeof off);
    mor_grammar_reset(G);
    return MOR_OK;
}
