/* test_sampler_stages.c - the llama.cpp sampling set of the sampler (issue
 * 42): logit bias, the penalties (repeat, frequency, presence), DRY with
 * sequence breakers, top-n-sigma, typical-p, min_keep, XTC, dynamic
 * temperature, mirostat 1 and 2, the order of the stages; each checked
 * against a plain reference written here from llama.cpp's description
 * (double, libm, no shortcuts: O(n^2) DRY, full sorts), on the candidates
 * the stages keep and their probabilities (sampler_candidates), and on the
 * tokens drawn. Also: the params (defaults, validation, an older caller's
 * struct keeps the older chain), the setters, reset, determinism. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mor.h"
#include "sampler_impl.h"

#define NV 300
#define HMAX 256

/* ---- the reference ------------------------------------------------------ */

/* splitmix64 + xoshiro256**, 53-bit uniforms: the PRNG mor.h's sampler documents */
typedef struct { uint64_t s[4]; } ref_rng;
static uint64_t ref_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static void ref_seed(ref_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        r->s[i] = z ^ (z >> 31);
    }
}
static double ref_uniform(ref_rng *r)
{
    uint64_t *s = r->s, res = ref_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = ref_rotl(s[3], 45);
    return (double)(res >> 11) / 9007199254740992.0;
}

typedef struct { double l; int id; } rc;
typedef struct {
    rc c[NV];
    int n;
    double T;
} ref_t;

typedef struct {
    mor_sampler_params p;
    const mor_token *hist; int n_hist;              /* oldest first */
    const mor_token *bias_id; const float *bias; int n_bias;
    const mor_token *brk; const int32_t *brk_len; int n_brk;
    double xtc_u;                                   /* the PRNG's first number */
} ref_cfg;

static int rc_cmp(const void *a, const void *b)
{
    const rc *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static void ref_probs(const ref_t *r, double *p)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < r->n; i++) if (r->c[i].l > mx) mx = r->c[i].l;
    for (int i = 0; i < r->n; i++) { p[i] = exp((r->c[i].l - mx) / r->T); z += p[i]; }
    for (int i = 0; i < r->n; i++) p[i] /= z;
}

static mor_token ref_back(const ref_cfg *g, int i) { return g->hist[g->n_hist - 1 - i]; }

static void ref_penalties(const ref_cfg *g, ref_t *r)
{
    const mor_sampler_params *p = &g->p;
    if (p->repeat_last_n <= 0) return;
    for (int i = 0; i < r->n; i++) {
        int cnt = 0;
        for (int j = 0; j < g->n_hist && j < p->repeat_last_n; j++) cnt += ref_back(g, j) == r->c[i].id;
        if (!cnt) continue;
        double l = r->c[i].l;
        l = l <= 0 ? l * p->repeat_penalty : l / p->repeat_penalty;
        r->c[i].l = l - (cnt * (double)p->frequency_penalty + (double)p->presence_penalty);
    }
}

/* DRY as llama.cpp describes it, the repeats found by brute force */
static void ref_dry(const ref_cfg *g, ref_t *r)
{
    const mor_sampler_params *p = &g->p;
    if (p->dry_multiplier == 0 || p->dry_base < 1 || p->dry_penalty_last_n <= 0) return;
    int m = g->n_hist < p->dry_penalty_last_n ? g->n_hist : p->dry_penalty_last_n, lim = m;
    if (m <= p->dry_allowed_length) return;
    for (int i = 0, found = 0; i < m && !found; i++) {
        int longest = -1, off = 0;
        for (int b = 0; b < g->n_brk; off += g->brk_len[b], b++) {
            int tail = g->brk_len[b] - 1, ok = g->brk[off] == ref_back(g, i) && tail <= i;
            for (int o = 0; ok && o < tail; o++) ok = g->brk[off + 1 + o] == ref_back(g, i - o - 1);
            if (ok && tail > longest) longest = tail;
        }
        if (longest >= 0) { lim = i - longest; found = 1; }
    }
    if (lim < p->dry_allowed_length) return;
    int maxrep[NV];
    for (int i = 0; i < NV; i++) maxrep[i] = -1;
    for (int k = 1; k < m; k++) {
        int z = 0;
        while (z + k < m && ref_back(g, z) == ref_back(g, z + k)) z++;
        if (z > lim) z = lim;
        mor_token t = ref_back(g, k - 1);
        if (z >= p->dry_allowed_length && z > maxrep[t]) maxrep[t] = z;
    }
    int max_exp = p->dry_base > 1.000001f ? (int)(88.7228391 / log((double)p->dry_base)) : 0;
    for (int i = 0; i < r->n; i++) {
        int id = r->c[i].id, single = 0, off = 0;
        for (int b = 0; b < g->n_brk; off += g->brk_len[b], b++) single |= g->brk_len[b] == 1 && g->brk[off] == id;
        if (maxrep[id] < 0 || single) continue;
        int e = maxrep[id] - p->dry_allowed_length;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        r->c[i].l -= (double)p->dry_multiplier * pow((double)p->dry_base, e);
    }
}

static void ref_top_n_sigma(const ref_cfg *g, ref_t *r)
{
    double n = g->p.top_n_sigma, mx = -INFINITY, mean = 0, var = 0;
    if (!(n > 0) || r->n <= 1) return;
    for (int i = 0; i < r->n; i++) { mx = fmax(mx, r->c[i].l); mean += r->c[i].l / r->n; }
    for (int i = 0; i < r->n; i++) var += (r->c[i].l - mean) * (r->c[i].l - mean) / r->n;
    int m = 0;
    for (int i = 0; i < r->n; i++) if (r->c[i].l >= mx - n * sqrt(var)) r->c[m++] = r->c[i];
    r->n = m;
}

static void ref_top_k(const ref_cfg *g, ref_t *r)
{
    qsort(r->c, (size_t)r->n, sizeof(rc), rc_cmp);
    if (g->p.top_k > 0 && g->p.top_k < r->n) r->n = g->p.top_k;
}

static void ref_top_p(const ref_cfg *g, ref_t *r)
{
    double p[NV], cum = 0;
    if (g->p.top_p >= 1) return;
    qsort(r->c, (size_t)r->n, sizeof(rc), rc_cmp);
    ref_probs(r, p);
    for (int i = 0; i < r->n; i++) {
        cum += p[i];
        if (cum >= g->p.top_p && i + 1 >= g->p.min_keep) { r->n = i + 1; return; }
    }
}

static void ref_min_p(const ref_cfg *g, ref_t *r)
{
    double p[NV], pmax = 0;
    if (g->p.min_p <= 0) return;
    qsort(r->c, (size_t)r->n, sizeof(rc), rc_cmp);
    ref_probs(r, p);
    for (int i = 0; i < r->n; i++) pmax = fmax(pmax, p[i]);
    int m = 0;
    while (m < r->n && (p[m] >= g->p.min_p * pmax || m < g->p.min_keep)) m++;
    r->n = m;
}

static int ref_score_cmp(const void *a, const void *b)
{
    const double *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : 1;
}

static void ref_typical(const ref_cfg *g, ref_t *r)
{
    double p[NV], h = 0, key[NV][2];
    if (g->p.typical_p >= 1) return;
    qsort(r->c, (size_t)r->n, sizeof(rc), rc_cmp);
    ref_probs(r, p);
    for (int i = 0; i < r->n; i++) h -= p[i] * log(p[i]);
    for (int i = 0; i < r->n; i++) { key[i][0] = fabs(-log(p[i]) - h); key[i][1] = i; }
    qsort(key, (size_t)r->n, sizeof key[0], ref_score_cmp);
    ref_t o = *r;
    double cum = 0;
    int m = r->n;
    for (int i = 0; i < r->n; i++) {
        cum += p[(int)key[i][1]];
        if (cum > g->p.typical_p && (g->p.min_keep == 0 || i >= g->p.min_keep - 1)) { m = i + 1; break; }
    }
    for (int i = 0; i < m; i++) r->c[i] = o.c[(int)key[i][1]];
    r->n = m;
}

static void ref_xtc(const ref_cfg *g, ref_t *r)
{
    double p[NV];
    if (g->p.xtc_probability <= 0 || g->p.xtc_threshold > 0.5f || r->n < 2 || g->xtc_u > g->p.xtc_probability) return;
    qsort(r->c, (size_t)r->n, sizeof(rc), rc_cmp);
    ref_probs(r, p);
    int last = 0;
    while (last + 1 < r->n && p[last + 1] >= g->p.xtc_threshold) last++;
    if (p[0] < g->p.xtc_threshold) last = 0;
    if (last == 0 || r->n - last < g->p.min_keep) return;
    memmove(r->c, r->c + last, sizeof(rc) * (size_t)(r->n - last));
    r->n -= last;
}

static void ref_temperature(const ref_cfg *g, ref_t *r)
{
    double t = g->p.temperature;
    if (g->p.dynatemp_range > 0) {
        double p[NV], h = 0, lo = fmax(0, t - g->p.dynatemp_range), hi = t + g->p.dynatemp_range;
        if (r->n <= 1) return;
        ref_probs(r, p);
        for (int i = 0; i < r->n; i++) if (p[i] > 0) h -= p[i] * log(p[i]);
        t = lo + (hi - lo) * pow(h / log((double)r->n), g->p.dynatemp_exponent);
    }
    r->T *= t;
}

static const int32_t DEFAULT_ORDER[] = { MOR_STAGE_PENALTIES, MOR_STAGE_DRY, MOR_STAGE_TOP_N_SIGMA,
    MOR_STAGE_TEMPERATURE, MOR_STAGE_TOP_K, MOR_STAGE_TYPICAL_P, MOR_STAGE_TOP_P, MOR_STAGE_MIN_P, MOR_STAGE_XTC };

/* The reference chain: candidates and probabilities by id (0: not kept). */
static void ref_chain(const ref_cfg *g, const float *logits, double *prob)
{
    static ref_t r;
    r.n = 0; r.T = 1;
    for (int i = 0; i < NV; i++) {
        double l = logits[i];
        for (int b = 0; b < g->n_bias; b++) if (g->bias_id[b] == i) l += g->bias[b];
        if (l > -INFINITY) { r.c[r.n].l = l; r.c[r.n].id = i; r.n++; }
    }
    const int32_t *order = g->p.n_samplers ? g->p.samplers : DEFAULT_ORDER;
    int n_order = g->p.n_samplers ? g->p.n_samplers : 9;
    for (int j = 0; j < n_order; j++) {
        switch (order[j]) {
        case MOR_STAGE_PENALTIES: ref_penalties(g, &r); break;
        case MOR_STAGE_DRY: ref_dry(g, &r); break;
        case MOR_STAGE_TOP_N_SIGMA: ref_top_n_sigma(g, &r); break;
        case MOR_STAGE_TOP_K: ref_top_k(g, &r); break;
        case MOR_STAGE_TYPICAL_P: ref_typical(g, &r); break;
        case MOR_STAGE_TOP_P: ref_top_p(g, &r); break;
        case MOR_STAGE_MIN_P: ref_min_p(g, &r); break;
        case MOR_STAGE_XTC: ref_xtc(g, &r); break;
        case MOR_STAGE_TEMPERATURE: ref_temperature(g, &r); break;
        }
    }
    double p[NV];
    ref_probs(&r, p);
    for (int i = 0; i < NV; i++) prob[i] = 0;
    for (int i = 0; i < r.n; i++) prob[r.c[i].id] = p[i];
}

/* ---- the library against it --------------------------------------------- */

static mor_sampler *make_cfg(const ref_cfg *g)
{
    mor_sampler *s = NULL;
    if (mor_sampler_create(&g->p, &s) != MOR_OK) return NULL;
    if (g->n_bias) mor_sampler_set_logit_bias(s, g->bias_id, g->bias, g->n_bias);
    if (g->n_brk) mor_sampler_set_dry_breakers(s, g->brk, g->brk_len, g->n_brk);
    for (int i = 0; i < g->n_hist; i++) mor_sampler_accept(s, g->hist[i]);
    return s;
}

static void synth(float *l, uint32_t salt)
{
    for (int i = 0; i < NV; i++) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt * 40503u;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        l[i] = (float)(int32_t)(h % 1000u) / 100.0f - 5.0f;
    }
    l[salt % NV] = -INFINITY;   /* a banned token */
}

/* The library's kept candidates and probabilities against the
 * reference's, over several logits: the same set, probabilities within
 * 1e-9. Returns the mean number kept. */
static double compare(const char *what, ref_cfg *g)
{
    float l[NV];
    double want[NV], got[NV];
    int same_set = 1, bad_salt = -1;
    double worst = 0, kept = 0;
    for (uint32_t salt = 1; salt <= 12; salt++) {
        synth(l, salt);
        ref_rng rr;
        ref_seed(&rr, g->p.seed);
        g->xtc_u = ref_uniform(&rr);
        ref_chain(g, l, want);
        mor_sampler *s = make_cfg(g);
        if (!REQUIRE(s, "%s: create: %s", what, mor_last_error())) return 0;
        int32_t n = sampler_candidates(s, l, NV);
        double z = 0;
        for (int i = 0; i < NV; i++) got[i] = 0;
        for (int32_t i = 0; i < n; i++) z += s->cand[i].w;
        for (int32_t i = 0; i < n; i++) got[s->cand[i].id] = s->cand[i].w / z;
        for (int i = 0; i < NV; i++) {
            if ((got[i] > 0) != (want[i] > 0)) { if (same_set) bad_salt = (int)salt; same_set = 0; }
            worst = fmax(worst, fabs(got[i] - want[i]));
        }
        kept += n;
        mor_sampler_free(s);
    }
    if (!same_set) printf("# %s: the sets differ at salt %d\n", what, bad_salt);
    CHECK(same_set && worst < 1e-9, "%s: the reference's candidates and probabilities (max diff %.2g, "
          "%.1f kept of %d)", what, worst, kept / 12, NV);
    return kept / 12;
}

static void base_cfg(ref_cfg *g)
{
    memset(g, 0, sizeof *g);
    MOR_SAMPLER_PARAMS_INIT(&g->p);
    g->p.seed = 7;
    g->p.temperature = 1.0f;
    g->p.top_k = 0;
    g->p.top_p = 1.0f;
    g->p.min_p = 0.0f;
}

static const mor_token HIST[] = { 5, 9, 5, 17, 3, 5, 9, 21, 40, 9, 9, 3, 77, 5, 12, 13, 14, 5, 12, 13,
                                  14, 5, 12, 13, 14, 1, 2, 3, 12, 13 };
#define N_HIST ((int)(sizeof HIST / sizeof HIST[0]))

static void test_stages(void)
{
    ref_cfg g;
    SCENARIO("each stage against the reference");
    base_cfg(&g);
    compare("no stage: the softmax", &g);
    g.hist = HIST; g.n_hist = N_HIST;
    g.p.repeat_penalty = 1.3f; g.p.frequency_penalty = 0.4f; g.p.presence_penalty = 0.7f; g.p.repeat_last_n = 16;
    compare("penalties: repeat 1.3, frequency 0.4, presence 0.7 over 16", &g);
    g.p.frequency_penalty = -0.3f; g.p.presence_penalty = 0; g.p.repeat_penalty = 1; g.p.repeat_last_n = 64;
    compare("penalties: frequency -0.3 over 64", &g);
    base_cfg(&g);
    static const mor_token bid[] = { 4, 10, 11, 299, 4 };
    static const float bval[] = { 2.5f, -INFINITY, 1.0f, -3.0f, -1.0f };
    g.bias_id = bid; g.bias = bval; g.n_bias = 5;
    compare("logit bias (a ban, a token listed twice)", &g);
    base_cfg(&g);
    for (int mk = 0; mk <= 40; mk += 40) {
        g.p.min_keep = mk;
        g.p.typical_p = 0.5f;
        compare(mk ? "typical_p 0.5, min_keep 40" : "typical_p 0.5", &g);
        g.p.typical_p = 1; g.p.top_p = 0.6f;
        compare(mk ? "top_p 0.6, min_keep 40" : "top_p 0.6", &g);
        g.p.top_p = 1; g.p.min_p = 0.3f;
        compare(mk ? "min_p 0.3, min_keep 40" : "min_p 0.3", &g);
        g.p.min_p = 0;
    }
    g.p.top_n_sigma = 1.0f;
    compare("top_n_sigma 1", &g);
    g.p.top_n_sigma = 0.25f; g.p.temperature = 0.5f;
    compare("top_n_sigma 0.25 at temperature 0.5", &g);
    base_cfg(&g);
    g.p.xtc_probability = 1.0f; g.p.xtc_threshold = 0.01f;
    double k1 = compare("xtc: probability 1, threshold 0.01", &g);
    g.p.xtc_threshold = 0.6f;
    double k2 = compare("xtc: threshold 0.6 is off", &g);
    CHECK(k1 < k2, "xtc removed the likely tokens (%.1f < %.1f kept)", k1, k2);
    g.p.xtc_probability = 0.5f; g.p.xtc_threshold = 0.005f; g.p.min_keep = 3;
    for (uint64_t seed = 1; seed <= 6; seed++) { g.p.seed = seed; compare("xtc: probability 0.5 (the seed's draw)", &g); }
    base_cfg(&g);
    g.p.dynatemp_range = 0.5f;
    compare("dynamic temperature: 1 +- 0.5", &g);
    g.p.dynatemp_exponent = 2.5f; g.p.temperature = 0.3f;
    compare("dynamic temperature: 0.3 +- 0.5, exponent 2.5", &g);
}

static void test_dry(void)
{
    ref_cfg g;
    SCENARIO("DRY against the reference");
    base_cfg(&g);
    g.hist = HIST; g.n_hist = N_HIST;
    g.p.dry_multiplier = 0.8f;
    compare("dry 0.8, base 1.75, allowed 2, last 64: penalises 14 (5 12 13 14 repeats)", &g);
    g.p.dry_allowed_length = 1; g.p.dry_base = 3.0f; g.p.dry_penalty_last_n = 20;
    compare("dry: allowed 1, base 3, last 20", &g);
    static const mor_token brk1[] = { 14 };
    static const int32_t len1[] = { 1 };
    g.brk = brk1; g.brk_len = len1; g.n_brk = 1;
    compare("dry: a one-token breaker (14, 5 back) limits the repetitions and is not penalised", &g);
    static const mor_token brk2[] = { 2, 3, 77, 5, 12, 13, 14 };
    static const int32_t len2[] = { 2, 1, 4 };
    g.brk = brk2; g.brk_len = len2; g.n_brk = 3;
    compare("dry: breakers of 2 and 4 tokens", &g);
    g.p.dry_allowed_length = 9;
    compare("dry: allowed 9 (nothing that long)", &g);
    /* a long repetition: the exponent capped at 88.72 / ln base */
    static mor_token rep[HMAX];
    for (int i = 0; i < HMAX; i++) rep[i] = (mor_token)(i % 7 + 1);
    base_cfg(&g);
    g.hist = rep; g.n_hist = HMAX;
    g.p.dry_multiplier = 2e-38f; g.p.dry_base = 2.0f; g.p.dry_penalty_last_n = HMAX; g.p.dry_allowed_length = 2;
    compare("dry: a repetition of 249 tokens (the exponent capped at 128: a penalty of 6.8)", &g);

    /* the tokens: a repeat gets what the reference says, greedy too */
    base_cfg(&g);
    g.hist = HIST; g.n_hist = N_HIST;
    g.p.dry_multiplier = 50.0f; g.p.temperature = 0.0f;
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = 0;
    l[14] = 10.0f; l[20] = 9.0f;
    mor_sampler *s = make_cfg(&g);
    mor_token t = -1;
    mor_status st = s ? mor_sampler_sample(s, l, NV, &t) : MOR_E_INVALID_ARG;
    CHECK(st == MOR_OK && t == 20, "greedy with DRY: 14 would continue 5 12 13 14 again, 20 is drawn (%d)", (int)t);
    mor_sampler_free(s);
}

static void test_order(void)
{
    ref_cfg g;
    SCENARIO("the order of the stages");
    base_cfg(&g);
    g.hist = HIST; g.n_hist = N_HIST;
    g.p.temperature = 0.7f; g.p.top_k = 40; g.p.top_p = 0.9f; g.p.min_p = 0.05f; g.p.repeat_penalty = 1.2f;
    g.p.typical_p = 0.95f; g.p.top_n_sigma = 2.0f; g.p.dry_multiplier = 0.5f; g.p.presence_penalty = 0.2f;
    compare("every stage, the default order", &g);
    static const int32_t llama[] = { MOR_STAGE_PENALTIES, MOR_STAGE_DRY, MOR_STAGE_TOP_N_SIGMA, MOR_STAGE_TOP_K,
        MOR_STAGE_TYPICAL_P, MOR_STAGE_TOP_P, MOR_STAGE_MIN_P, MOR_STAGE_XTC, MOR_STAGE_TEMPERATURE };
    memcpy(g.p.samplers, llama, sizeof llama);
    g.p.n_samplers = 9;
    compare("every stage, llama.cpp's order (temperature last)", &g);
    static const int32_t few[] = { MOR_STAGE_MIN_P, MOR_STAGE_TEMPERATURE, MOR_STAGE_TOP_K, MOR_STAGE_TOP_P };
    memcpy(g.p.samplers, few, sizeof few);
    g.p.n_samplers = 4;
    compare("min_p, temperature, top_k, top_p (penalties, DRY left out)", &g);
    static const int32_t twice[] = { MOR_STAGE_TOP_K, MOR_STAGE_TEMPERATURE, MOR_STAGE_TEMPERATURE, MOR_STAGE_TOP_P };
    memcpy(g.p.samplers, twice, sizeof twice);
    compare("temperature twice (0.7 x 0.7)", &g);

    /* the default order written out is the default, token for token */
    float l[NV];
    synth(l, 99);
    ref_cfg d = g;
    d.p.n_samplers = 0;
    g.p.n_samplers = 9;
    memcpy(g.p.samplers, DEFAULT_ORDER, sizeof DEFAULT_ORDER);
    mor_sampler *a = make_cfg(&d), *b = make_cfg(&g);
    int same = a && b;
    for (int i = 0; same && i < 200; i++) {
        mor_token ta = -1, tb = -2;
        mor_sampler_sample(a, l, NV, &ta);
        mor_sampler_sample(b, l, NV, &tb);
        same = ta == tb && ta >= 0;
    }
    CHECK(same, "the default order written out draws the default's 200 tokens");
    mor_sampler_free(a);
    mor_sampler_free(b);
}

/* mirostat, as llama.cpp's: sorted softmax, k or the surprise cut, a draw,
 * mu -= eta (surprise - tau) */
static mor_token ref_mirostat(const mor_sampler_params *p, const float *logits, double *mu, ref_rng *rr)
{
    static ref_t r;
    double w[NV], z = 0;
    r.n = 0; r.T = p->temperature;
    for (int i = 0; i < NV; i++) if (logits[i] > -INFINITY) { r.c[r.n].l = logits[i]; r.c[r.n].id = i; r.n++; }
    qsort(r.c, (size_t)r.n, sizeof(rc), rc_cmp);
    ref_probs(&r, w);
    int k = 1;
    if (p->mirostat == 1) {
        double tb = 0, tt = 0;
        for (int i = 0; i < 99 && i < r.n - 1; i++) {
            double t = log((i + 2.0) / (i + 1.0)), b = log(w[i] / w[i + 1]);
            tb += t * b; tt += t * t;
        }
        double sh = tb / tt, eps = sh - 1;
        double kd = pow(eps * pow(2, *mu) / (1 - pow((double)NV, -eps)), 1 / sh);
        k = kd >= r.n ? r.n : kd >= 1 ? (int)kd : 1;
    } else {
        while (k < r.n && -log2(w[k]) <= *mu) k++;
    }
    for (int i = 0; i < k; i++) z += w[i];
    double target = ref_uniform(rr) * z, cum = 0;
    int idx = k - 1;
    for (int i = 0; i < k; i++) { cum += w[i]; if (cum > target) { idx = i; break; } }
    *mu -= p->mirostat_eta * (-log2(w[idx] / z) - p->mirostat_tau);
    return r.c[idx].id;
}

static void test_mirostat(void)
{
    SCENARIO("mirostat 1 and 2 against the reference");
    for (int v = 1; v <= 2; v++) {
        mor_sampler_params p;
        MOR_SAMPLER_PARAMS_INIT(&p);
        p.mirostat = v; p.seed = 40 + (uint64_t)v; p.temperature = 0.9f;
        p.mirostat_tau = v == 1 ? 4.0f : 3.0f; p.mirostat_eta = 0.2f;
        p.repeat_penalty = 1.5f;   /* not applied under mirostat, as in llama.cpp */
        mor_sampler *s = NULL;
        if (!REQUIRE(mor_sampler_create(&p, &s) == MOR_OK, "mirostat create: %s", mor_last_error())) return;
        ref_rng rr;
        ref_seed(&rr, p.seed);
        double mu = 2.0 * p.mirostat_tau;
        mor_token first[60];
        int same = 1, at = -1, distinct = 0;
        float l[NV];
        for (int i = 0; i < 60 && same; i++) {
            synth(l, 1000u + (uint32_t)i);
            mor_token want = ref_mirostat(&p, l, &mu, &rr), got = -1;
            mor_sampler_sample(s, l, NV, &got);
            first[i] = got;
            if (got != want) { same = 0; at = i; }
            distinct += i == 0 || got != first[i - 1];
        }
        CHECK(same && distinct > 10, "mirostat %d: the reference's 60 tokens (first difference %d; mu now %.3f)",
              v, at, mu);
        mor_sampler_reset(s);
        same = 1;
        for (int i = 0; i < 60 && same; i++) {
            synth(l, 1000u + (uint32_t)i);
            mor_token t = -1;
            mor_sampler_sample(s, l, NV, &t);
            same = t == first[i];
        }
        CHECK(same, "mirostat %d: after mor_sampler_reset (mu 2 tau again), the same 60 tokens", v);
        mor_sampler_free(s);
    }
}

/* ---- params, setters, determinism ---------------------------------------- */

typedef struct {   /* libmor 0.1's mor_sampler_params */
    uint32_t size;
    uint64_t seed;
    float    temperature;
    int32_t  top_k;
    float    top_p, min_p, repeat_penalty;
    int32_t  repeat_last_n;
} sampler_params_v1;

static void test_params(void)
{
    mor_sampler_params p;
    SCENARIO("params");
    MOR_SAMPLER_PARAMS_INIT(&p);
    CHECK(p.presence_penalty == 0 && p.frequency_penalty == 0 && p.min_keep == 0 && p.typical_p == 1 &&
          p.top_n_sigma == -1 && p.dynatemp_range == 0 && p.dynatemp_exponent == 1 && p.xtc_probability == 0 &&
          p.xtc_threshold == 0.1f && p.mirostat == 0 && p.mirostat_tau == 5 && p.mirostat_eta == 0.1f &&
          p.dry_multiplier == 0 && p.dry_base == 1.75f && p.dry_allowed_length == 2 && p.dry_penalty_last_n == 64 &&
          p.n_samplers == 0, "params_init: llama.cpp's defaults, every new stage off, the default order");
#define TRY(field, val, want) do { mor_sampler_params q_; MOR_SAMPLER_PARAMS_INIT(&q_); q_.field = (val); \
        mor_sampler *s_ = NULL; mor_status st_ = mor_sampler_create(&q_, &s_); \
        CHECK(st_ == (want) && (st_ != MOR_OK) == (s_ == NULL) && \
              (st_ == MOR_OK || strstr(mor_last_error(), #field)), \
              #field " = " #val " -> %s (%s)", mor_status_str(st_), mor_last_error()); \
        mor_sampler_free(s_); } while (0)
    TRY(presence_penalty, NAN, MOR_E_INVALID_ARG);
    TRY(presence_penalty, -2.0f, MOR_OK);
    TRY(frequency_penalty, INFINITY, MOR_E_INVALID_ARG);
    TRY(min_keep, -1, MOR_E_INVALID_ARG);
    TRY(typical_p, NAN, MOR_E_INVALID_ARG);
    TRY(top_n_sigma, NAN, MOR_E_INVALID_ARG);
    TRY(dynatemp_range, INFINITY, MOR_E_INVALID_ARG);
    TRY(dynatemp_exponent, NAN, MOR_E_INVALID_ARG);
    TRY(xtc_probability, NAN, MOR_E_INVALID_ARG);
    TRY(xtc_threshold, NAN, MOR_E_INVALID_ARG);
    TRY(mirostat, 3, MOR_E_INVALID_ARG);
    TRY(mirostat, -1, MOR_E_INVALID_ARG);
    TRY(mirostat_tau, NAN, MOR_E_INVALID_ARG);
    TRY(mirostat_eta, INFINITY, MOR_E_INVALID_ARG);
    TRY(dry_multiplier, NAN, MOR_E_INVALID_ARG);
    TRY(dry_base, INFINITY, MOR_E_INVALID_ARG);
    TRY(dry_allowed_length, -1, MOR_E_INVALID_ARG);
    TRY(dry_penalty_last_n, -1, MOR_E_INVALID_ARG);
    TRY(n_samplers, 17, MOR_E_INVALID_ARG);
    TRY(n_samplers, -1, MOR_E_INVALID_ARG);
    TRY(samplers[0], 0, MOR_OK);   /* n_samplers 0: not read */
#undef TRY
    p.n_samplers = 2; p.samplers[0] = MOR_STAGE_TOP_K; p.samplers[1] = 10;
    mor_sampler *s = NULL;
    CHECK(mor_sampler_create(&p, &s) == MOR_E_INVALID_ARG && !s && strstr(mor_last_error(), "samplers[1]"),
          "a stage id outside MOR_STAGE_* -> MOR_E_INVALID_ARG naming it (%s)", mor_last_error());
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.size = (uint32_t)(sizeof(sampler_params_v1) + 8);
    CHECK(mor_sampler_create(&p, &s) == MOR_E_ABI && !s, "a size between two releases' -> MOR_E_ABI");

    /* an older caller's struct draws what today's does with the new fields at their defaults */
    static float l[50000];
    for (int i = 0; i < 50000; i++) l[i] = (float)((i * 7919) % 1000) / 150.0f;
    sampler_params_v1 old;
    mor_sampler_params_init((mor_sampler_params *)(void *)&old, sizeof old);
    old.temperature = 1.2f; old.top_k = 0; old.top_p = 0.9f; old.min_p = 0.02f; old.repeat_penalty = 1.1f; old.seed = 3;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.temperature = 1.2f; p.top_k = 0; p.top_p = 0.9f; p.min_p = 0.02f; p.repeat_penalty = 1.1f; p.seed = 3;
    mor_sampler *a = NULL, *b = NULL;
    int same = mor_sampler_create((const mor_sampler_params *)(void *)&old, &a) == MOR_OK &&
               mor_sampler_create(&p, &b) == MOR_OK;
    for (int i = 0; same && i < 50; i++) {
        mor_token ta = -1, tb = -2;
        mor_sampler_sample(a, l, 50000, &ta);
        mor_sampler_sample(b, l, 50000, &tb);
        same = ta == tb;
    }
    CHECK(same, "a 0.1 struct (%zu bytes) and today's (%zu) with the new fields' defaults: the same 50 tokens",
          sizeof old, sizeof p);
    mor_sampler_free(a);
    mor_sampler_free(b);
}

static void test_setters(void)
{
    SCENARIO("logit bias and breakers: setters, bans, failures that change nothing");
    mor_sampler_params p;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.temperature = 0.0f;
    mor_sampler *s = NULL;
    if (!REQUIRE(mor_sampler_create(&p, &s) == MOR_OK, "create")) return;
    float l[4] = { 1, 3, 2, 0 };
    mor_token ids[2] = { 1, 3 }, bad_id[1] = { -1 };
    float bias[2] = { -INFINITY, 2.5f }, nan_b[1] = { NAN }, pinf[1] = { INFINITY };
    mor_token t = -1;
    mor_status st = mor_sampler_set_logit_bias(s, ids, bias, 2);
    if (!st) st = mor_sampler_sample(s, l, 4, &t);
    CHECK(st == MOR_OK && t == 3, "greedy with a bias: 1 banned, 3 raised to 2.5 (%d)", (int)t);
    CHECK(mor_sampler_set_logit_bias(s, bad_id, bias, 1) == MOR_E_OUT_OF_RANGE, "a negative id -> MOR_E_OUT_OF_RANGE");
    CHECK(mor_sampler_set_logit_bias(s, ids, nan_b, 1) == MOR_E_INVALID_ARG &&
          mor_sampler_set_logit_bias(s, ids, pinf, 1) == MOR_E_INVALID_ARG &&
          mor_sampler_set_logit_bias(NULL, ids, bias, 1) == MOR_E_INVALID_ARG &&
          mor_sampler_set_logit_bias(s, NULL, bias, 1) == MOR_E_INVALID_ARG &&
          mor_sampler_set_logit_bias(s, ids, bias, -1) == MOR_E_INVALID_ARG,
          "a NaN or +inf bias, NULL, n < 0 -> MOR_E_INVALID_ARG");
    st = mor_sampler_sample(s, l, 4, &t);
    CHECK(st == MOR_OK && t == 3, "a failed set kept the list (%d)", (int)t);
    mor_token all[4] = { 0, 1, 2, 3 };
    float ban[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    CHECK(mor_sampler_set_logit_bias(s, all, ban, 4) == MOR_OK && mor_sampler_sample(s, l, 4, &t) == MOR_E_INVALID_ARG &&
          strstr(mor_last_error(), "bias"), "every token banned -> MOR_E_INVALID_ARG (%s)", mor_last_error());
    float l5[5] = { 1, 3, 2, 0, -1 };
    st = mor_sampler_sample(s, l5, 5, &t);
    CHECK(st == MOR_OK && t == 4, "a token past the banned ones is drawn (%d)", (int)t);
    CHECK(mor_sampler_set_logit_bias(s, NULL, NULL, 0) == MOR_OK && mor_sampler_sample(s, l, 4, &t) == MOR_OK && t == 1,
          "n 0 clears the bias");
    mor_token brk[3] = { 1, 2, 3 };
    int32_t lens[2] = { 1, 2 }, bad_len[2] = { 1, 0 };
    CHECK(mor_sampler_set_dry_breakers(s, brk, lens, 2) == MOR_OK && mor_sampler_set_dry_breakers(s, brk, bad_len, 2) ==
          MOR_E_INVALID_ARG && mor_sampler_set_dry_breakers(NULL, brk, lens, 2) == MOR_E_INVALID_ARG &&
          mor_sampler_set_dry_breakers(s, NULL, NULL, 0) == MOR_OK, "dry breakers: set, a length 0 refused, cleared");
    mor_sampler_free(s);

    /* a refused sample changes nothing: history and PRNG as they were */
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.seed = 5; p.xtc_probability = 0.5f; p.dry_multiplier = 1.0f; p.presence_penalty = 0.5f;
    mor_sampler *a = NULL, *b = NULL;
    mor_sampler_create(&p, &a);
    mor_sampler_create(&p, &b);
    mor_sampler_set_logit_bias(a, all, ban, 4);
    CHECK(mor_sampler_sample(a, l, 4, &t) == MOR_E_INVALID_ARG, "refused");
    mor_sampler_set_logit_bias(a, NULL, NULL, 0);
    int same = 1;
    float lv[NV];
    for (int i = 0; i < 40 && same; i++) {
        synth(lv, (uint32_t)i + 3);
        mor_token ta = -1, tb = -2;
        mor_sampler_sample(a, lv, NV, &ta);
        mor_sampler_sample(b, lv, NV, &tb);
        same = ta == tb;
    }
    CHECK(same, "after a refused sample, the tokens of a sampler that never saw it");
    mor_sampler_free(a);
    mor_sampler_free(b);
}

/* Pinned: every stage on; these tokens on every platform and compiler. */
static void test_golden_all(void)
{
    static const mor_token want[24] = { 255, 39, 71, 202, 207, 238, 95, 33, 142, 137, 218, 155,
                                        281, 66, 30, 277, 141, 39, 115, 203, 63, 185, 156, 273 };
    mor_sampler_params p;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.seed = 2024; p.temperature = 0.9f; p.top_k = 60; p.top_p = 0.95f; p.min_p = 0.02f; p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.3f; p.frequency_penalty = 0.1f; p.typical_p = 0.97f; p.top_n_sigma = 2.5f;
    p.dynatemp_range = 0.3f; p.xtc_probability = 0.3f; p.xtc_threshold = 0.02f; p.dry_multiplier = 0.8f; p.min_keep = 2;
    mor_sampler *s = NULL;
    if (!REQUIRE(mor_sampler_create(&p, &s) == MOR_OK, "create")) return;
    mor_token brk[1] = { 7 };
    int32_t len[1] = { 1 };
    mor_sampler_set_dry_breakers(s, brk, len, 1);
    float l[NV];
    mor_token got[24];
    for (int i = 0; i < 24; i++) {
        synth(l, 7u * (uint32_t)i + 1u);
        for (int j = 0; j < NV; j++) if (l[j] > -INFINITY) l[j] *= 1.5f;
        got[i] = -1;
        mor_sampler_sample(s, l, NV, &got[i]);
    }
    mor_sampler_free(s);
    int same = !memcmp(got, want, sizeof got);
    if (!same) {
        printf("# got:");
        for (int i = 0; i < 24; i++) printf(" %d,", (int)got[i]);
        printf("\n");
    }
    CHECK(same, "every stage on: the pinned 24 tokens");
}

int main(void)
{
    test_params();
    test_stages();
    test_dry();
    test_order();
    test_mirostat();
    test_setters();
    test_golden_all();
    return check_done();
}
