/* test_sampler.c - the sampler of mor.h: params, validation, greedy, top-k,
 * top-p, min-p, repetition penalty, seeded reproducibility, distribution. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mor.h"
#include "check.h"

#define N_DRAWS 20000

static mor_sampler *make(float temp, int32_t top_k, float top_p, float min_p, uint64_t seed)
{
    mor_sampler_params p;
    mor_sampler *s = NULL;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = seed;
    if (mor_sampler_create(&p, &s) != MOR_OK) return NULL;
    return s;
}

static mor_token sample1(mor_sampler *s, const float *logits, int32_t n)
{
    mor_token t = -1;
    mor_status st = mor_sampler_sample(s, logits, n, &t);
    return st == MOR_OK ? t : -100 + st;
}

/* Logits without libm: a small integer hash scaled to [-5, 5). */
static void synth_logits(float *l, int32_t n, uint32_t salt)
{
    for (int32_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)i * 2654435761u ^ salt * 40503u;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        l[i] = (float)(int32_t)(h % 1000u) / 100.0f - 5.0f;
    }
}

static void softmax(const float *l, int n, double T, double *p)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) { p[i] = exp(((double)l[i] - mx) / T); z += p[i]; }
    for (int i = 0; i < n; i++) p[i] /= z;
}

static void test_params(void)
{
    mor_sampler_params p;
    memset(&p, 0xAB, sizeof(p));
    MOR_SAMPLER_PARAMS_INIT(&p);
    CHECK(p.size == sizeof(p), "params_init sets size");
    CHECK(p.seed == 0 && p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f &&
          p.min_p == 0.05f && p.repeat_penalty == 1.0f && p.repeat_last_n == 64,
          "params_init defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, penalty 1, last_n 64");
    CHECK(mor_sizeof_sampler_params() == sizeof(mor_sampler_params),
          "mor_sizeof_sampler_params() == sizeof (%zu)", mor_sizeof_sampler_params());

    /* An older, shorter caller struct: nothing past `size` is written. */
    unsigned char buf[sizeof(mor_sampler_params) + 16];
    size_t short_size = offsetof(mor_sampler_params, top_p);
    memset(buf, 0xCD, sizeof(buf));
    mor_sampler_params_init((mor_sampler_params *)(void *)buf, short_size);
    int untouched = 1;
    for (size_t i = short_size; i < sizeof(buf); i++) untouched &= buf[i] == 0xCD;
    mor_sampler_params q;
    memcpy(&q, buf, sizeof(q));
    CHECK(untouched, "params_init(size=%zu) writes nothing past size", short_size);
    CHECK(q.size == short_size && q.temperature == 0.8f && q.top_k == 40,
          "params_init(short) fills the fields that fit");
    /* A newer, longer caller struct: its unknown tail is zeroed. */
    memset(buf, 0xCD, sizeof(buf));
    mor_sampler_params_init((mor_sampler_params *)(void *)buf, sizeof(buf));
    untouched = 1;
    for (size_t i = sizeof(mor_sampler_params); i < sizeof(buf); i++) untouched &= buf[i] == 0;
    CHECK(untouched, "params_init(longer) zeroes the unknown tail");
    mor_sampler_params_init(NULL, sizeof(p));   /* no-op; a crash fails the program */
}

static void expect_status(const mor_sampler_params *p, mor_status want, const char *what)
{
    mor_sampler *s = (mor_sampler *)(uintptr_t)0x1;   /* must stay untouched on error */
    mor_status st = mor_sampler_create(p, &s);
    if (want == MOR_OK) {
        CHECK(st == MOR_OK && s != NULL && s != (mor_sampler *)(uintptr_t)0x1,
              "%s -> MOR_OK (got %s)", what, mor_status_str(st));
        if (st == MOR_OK) mor_sampler_free(s);
    } else {
        CHECK(st == want && s == (mor_sampler *)(uintptr_t)0x1,
              "%s -> %s (got %s, out untouched: %s)", what, mor_status_str(want), mor_status_str(st),
              s == (mor_sampler *)(uintptr_t)0x1 ? "yes" : "no");
        CHECK(mor_last_error()[0] != '\0', "%s sets a message: \"%s\"", what, mor_last_error());
    }
}

static void test_validation(void)
{
    mor_sampler_params p;
#define TRY(field, val, want) do { MOR_SAMPLER_PARAMS_INIT(&p); p.field = (val); \
        expect_status(&p, want, #field " = " #val); } while (0)
    TRY(temperature, NAN, MOR_E_INVALID_ARG);
    TRY(temperature, INFINITY, MOR_E_INVALID_ARG);
    TRY(temperature, -1.0f, MOR_OK);
    TRY(temperature, 0.0f, MOR_OK);
    TRY(top_p, NAN, MOR_E_INVALID_ARG);
    TRY(top_p, 0.0f, MOR_E_INVALID_ARG);
    TRY(top_p, -0.5f, MOR_E_INVALID_ARG);
    TRY(top_p, 1.0f, MOR_OK);
    TRY(top_p, 1.5f, MOR_OK);
    TRY(min_p, NAN, MOR_E_INVALID_ARG);
    TRY(min_p, 1.5f, MOR_E_INVALID_ARG);
    TRY(min_p, 1.0f, MOR_OK);
    TRY(min_p, 0.0f, MOR_OK);
    TRY(min_p, -1.0f, MOR_OK);
    TRY(repeat_penalty, NAN, MOR_E_INVALID_ARG);
    TRY(repeat_penalty, 0.0f, MOR_E_INVALID_ARG);
    TRY(repeat_penalty, -1.0f, MOR_E_INVALID_ARG);
    TRY(repeat_penalty, INFINITY, MOR_E_INVALID_ARG);
    TRY(repeat_penalty, 0.5f, MOR_OK);
    TRY(repeat_last_n, -1, MOR_E_INVALID_ARG);
    TRY(repeat_last_n, 0, MOR_OK);
    TRY(top_k, -7, MOR_OK);
    TRY(size, 0u, MOR_E_ABI);
    TRY(size, (uint32_t)sizeof(p) - 4, MOR_E_ABI);
#undef TRY
    {
        unsigned char big[sizeof(mor_sampler_params) + 8];
        mor_sampler_params_init((mor_sampler_params *)(void *)big, sizeof(big));
        expect_status((mor_sampler_params *)(void *)big, MOR_E_ABI, "size > sizeof");
    }
    expect_status(NULL, MOR_OK, "params NULL (defaults)");

    MOR_SAMPLER_PARAMS_INIT(&p);
    CHECK(mor_sampler_create(&p, NULL) == MOR_E_INVALID_ARG, "create(out NULL) -> MOR_E_INVALID_ARG");

    mor_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1);
    float l[4] = { 0, 1, 2, 3 };
    mor_token t = 77;
    CHECK(mor_sampler_sample(NULL, l, 4, &t) == MOR_E_INVALID_ARG, "sample(NULL sampler) -> MOR_E_INVALID_ARG");
    CHECK(mor_sampler_sample(s, NULL, 4, &t) == MOR_E_INVALID_ARG, "sample(NULL logits) -> MOR_E_INVALID_ARG");
    CHECK(mor_sampler_sample(s, l, 4, NULL) == MOR_E_INVALID_ARG, "sample(NULL out) -> MOR_E_INVALID_ARG");
    CHECK(mor_sampler_sample(s, l, 0, &t) == MOR_E_INVALID_ARG, "sample(n_vocab 0) -> MOR_E_INVALID_ARG");
    CHECK(mor_sampler_sample(s, l, -3, &t) == MOR_E_INVALID_ARG, "sample(n_vocab -3) -> MOR_E_INVALID_ARG");
    CHECK(t == 77, "failed sample leaves *out alone");
    mor_sampler_free(s);
    /* no-ops with nothing to observe; a crash fails the program */
    mor_sampler_free(NULL);
    mor_sampler_accept(NULL, 3);
    mor_sampler_reset(NULL);
}

static void test_greedy(void)
{
    mor_sampler *s = make(0.0f, 40, 0.95f, 0.05f, 7);
    mor_sampler *sneg = make(-2.0f, 0, 1.0f, 0.0f, 7);
    float l[6] = { 0.5f, -1.0f, 3.25f, 3.0f, 3.25f, -7.0f };
    CHECK(sample1(s, l, 6) == 2, "greedy: argmax, ties to the lowest id (2 of {2,4})");
    CHECK(sample1(sneg, l, 6) == 2, "negative temperature is greedy");
    float big[1000];
    synth_logits(big, 1000, 3);
    int arg = 0;
    for (int i = 1; i < 1000; i++) if (big[i] > big[arg]) arg = i;
    int same = 1;
    for (int k = 0; k < 10; k++) same &= sample1(s, big, 1000) == arg;
    CHECK(same, "greedy over 1000 logits: always the argmax %d", arg);

    /* NaN and +inf are refused (a broken model's output), every logit -inf too;
     * -inf alone bans a token. A refused call changes nothing. */
    float nan_l[5] = { NAN, 1.0f, NAN, 2.0f, NAN };
    float all_nan[3] = { NAN, NAN, NAN };
    float all_ninf[3] = { -INFINITY, -INFINITY, -INFINITY };
    float pinf[4] = { 1.0f, INFINITY, 5.0f, INFINITY };
    mor_sampler *hot = make(1.0f, 0, 1.0f, 0.0f, 7), *ref = make(1.0f, 0, 1.0f, 0.0f, 7);
    const float *bad[] = { nan_l, all_nan, all_ninf, pinf };
    const int32_t nbad[] = { 5, 3, 3, 4 };
    for (int i = 0; i < 4; i++) {
        mor_token t = 77;
        mor_status a = mor_sampler_sample(s, bad[i], nbad[i], &t), b = mor_sampler_sample(hot, bad[i], nbad[i], &t);
        CHECK(a == MOR_E_INVALID_ARG && b == MOR_E_INVALID_ARG && t == 77 && *mor_last_error(),
              "logits %d (NaN / all NaN / all -inf / +inf): MOR_E_INVALID_ARG, greedy and sampling (%s)", i,
              mor_last_error());
    }
    same = 1;   /* the refused calls did not advance the PRNG or the history */
    for (int k = 0; k < 50; k++) same &= sample1(hot, big, 1000) == sample1(ref, big, 1000);
    CHECK(same, "refused calls leave the sampler as it was (the same draws as a fresh one)");
    float ninf_one[4] = { -INFINITY, -INFINITY, 0.0f, -INFINITY };
    int only2 = 1;
    for (int k = 0; k < 200; k++) only2 &= sample1(hot, ninf_one, 4) == 2;
    CHECK(only2 && sample1(s, ninf_one, 4) == 2, "-inf logits are banned tokens: one finite logit is always picked");
    mor_sampler_free(ref);
    mor_sampler_free(s);
    mor_sampler_free(sneg);
    mor_sampler_free(hot);
}

static void test_topk1_is_greedy(void)
{
    const float temps[] = { 0.05f, 0.7f, 1.0f, 3.0f, 100.0f };
    float l[512];
    int ok = 1;
    for (int ti = 0; ti < 5; ti++) {
        mor_sampler *s = make(temps[ti], 1, 1.0f, 0.0f, 1234 + ti);
        mor_sampler *g = make(0.0f, 0, 1.0f, 0.0f, 0);
        for (uint32_t trial = 0; trial < 50; trial++) {
            synth_logits(l, 512, trial);
            if (trial % 5 == 0) { l[100] = 9.0f; l[7] = 9.0f; }       /* ties */
            if (trial % 7 == 0) { l[3] = 6.0f; l[4] = 6.0f + 1e-6f; } /* near-ties */
            ok &= sample1(s, l, 512) == sample1(g, l, 512);
        }
        mor_sampler_free(s);
        mor_sampler_free(g);
    }
    CHECK(ok, "top_k = 1 equals greedy at temperatures 0.05..100 (ties, near-ties)");
}

static void draw_seq(mor_sampler *s, const float *l, int n, mor_token *out, int count)
{
    for (int i = 0; i < count; i++) out[i] = sample1(s, l, n);
}

static void test_reproducible(void)
{
    enum { N = 2000, COUNT = 300 };
    static float l[N];
    mor_token a[COUNT], b[COUNT], c[COUNT];
    synth_logits(l, N, 99);
    for (int i = 0; i < N; i++) l[i] *= 0.4f;    /* flat enough to spread draws */

    mor_sampler *s1 = make(1.0f, 0, 1.0f, 0.0f, 42);
    mor_sampler *s2 = make(1.0f, 0, 1.0f, 0.0f, 42);
    mor_sampler *s3 = make(1.0f, 0, 1.0f, 0.0f, 43);
    draw_seq(s1, l, N, a, COUNT);
    draw_seq(s2, l, N, b, COUNT);
    draw_seq(s3, l, N, c, COUNT);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "same seed: same %d tokens", COUNT);
    int differ = 0, distinct = 0;
    for (int i = 0; i < COUNT; i++) differ += a[i] != c[i];
    for (int i = 1; i < COUNT; i++) distinct += a[i] != a[0];
    CHECK(differ > COUNT / 2, "different seeds: sequences differ (%d of %d)", differ, COUNT);
    CHECK(distinct > 0, "draws are not constant");
    mor_sampler_reset(s1);
    draw_seq(s1, l, N, b, COUNT);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "reset re-seeds: same sequence again");

    /* A failed call changes nothing (no PRNG step, no history). */
    mor_sampler_reset(s1);
    draw_seq(s1, l, N, b, 10);
    mor_token t;
    (void)mor_sampler_sample(s1, l, 0, &t);
    (void)mor_sampler_sample(s1, NULL, N, &t);
    draw_seq(s1, l, N, b + 10, COUNT - 10);
    CHECK(memcmp(a, b, sizeof(a)) == 0, "failed calls do not disturb the sequence");
    mor_sampler_free(s1);
    mor_sampler_free(s2);
    mor_sampler_free(s3);

    /* Default chain, larger vocab: same seed same tokens, across a growing
     * n_vocab (scratch is reallocated). */
    static float big[50000];
    synth_logits(big, 50000, 5);
    mor_sampler_params p;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.seed = 2024;
    p.repeat_penalty = 1.3f;
    mor_sampler *d1, *d2;
    CHECK(mor_sampler_create(&p, &d1) == MOR_OK && mor_sampler_create(&p, &d2) == MOR_OK,
          "create with defaults + penalty");
    int same = 1, valid = 1;
    for (int i = 0; i < 60; i++) {
        int n = i % 3 == 0 ? 50000 : i % 3 == 1 ? 17 : 3000;
        mor_token x = sample1(d1, big, n), y = sample1(d2, big, n);
        same &= x == y;
        valid &= x >= 0 && x < n;
    }
    CHECK(same && valid, "default chain with n_vocab 50000/17/3000: reproducible, in range");
    mor_sampler_free(d1);
    mor_sampler_free(d2);
}

/* Pinned output: these tokens must come out on every platform and compiler
 * (the sampler uses no libm and no FMA contraction; see src/sampler.c). If the
 * algorithm changes on purpose, regenerate them and say so in the changelog. */
static void test_golden(void)
{
    static const mor_token want[3][24] = {
        { 36877, 6539, 48192, 2622, 27486, 638, 8015, 14675, 18928, 45704, 38953, 26621,
          41910, 47142, 6854, 43286, 22655, 42975, 26812, 21371, 4707, 16269, 6596, 14725 },
        { 25038, 16602, 30818, 3065, 20830, 34627, 887, 32480, 5271, 24117, 28758, 5488,
          39419, 40672, 27369, 30284, 4682, 4294, 37160, 46253, 17033, 9899, 49865, 40167 },
        { 15050, 252, 9968, 6166, 46152, 21755, 21047, 19370, 20061, 29552, 3718, 15752,
          614, 18842, 27884, 37844, 33424, 20436, 39948, 48532, 2942, 40391, 19618, 46610 },
    };
    static const float T[3] = { 0.6f, 1.0f, 1.3f }, P[3] = { 1.0f, 0.95f, 0.9f },
                       M[3] = { 0.0f, 0.05f, 0.0f };
    static const int32_t K[3] = { 0, 40, 0 };
    static float l[50000];
    synth_logits(l, 50000, 5);
    for (int i = 0; i < 50000; i++) l[i] *= 0.9f;
    for (int c = 0; c < 3; c++) {
        mor_sampler_params p;
        mor_sampler *s = NULL;
        MOR_SAMPLER_PARAMS_INIT(&p);
        p.seed = 12345 + (uint64_t)c;
        p.temperature = T[c];
        p.top_k = K[c];
        p.top_p = P[c];
        p.min_p = M[c];
        p.repeat_penalty = 1.1f;
        int same = mor_sampler_create(&p, &s) == MOR_OK, first_bad = -1;
        for (int i = 0; same && i < 24; i++) {
            mor_token t = sample1(s, l, 50000);
            if (t != want[c][i]) { same = 0; first_bad = i; }
        }
        mor_sampler_free(s);
        CHECK(same, "golden sequence %d (T=%.1f top_k=%d top_p=%.2f min_p=%.2f seed %d; first mismatch: %d)",
              c, (double)T[c], (int)K[c], (double)P[c], (double)M[c], 12345 + c, first_bad);
    }
}

/* Frequencies of N_DRAWS draws vs softmax(l / T): each within 5 sigma. */
static void test_distribution_at(float T)
{
    float l[8] = { 1.0f, 2.0f, 0.5f, -1.0f, 2.2f, 0.0f, 1.7f, -3.0f };
    double p[8];
    int cnt[8] = { 0 };
    softmax(l, 8, T, p);
    mor_sampler *s = make(T, 0, 1.0f, 0.0f, 777);
    for (int i = 0; i < N_DRAWS; i++) {
        mor_token t = sample1(s, l, 8);
        if (t >= 0 && t < 8) cnt[t]++;
    }
    mor_sampler_free(s);
    double worst = 0;
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        double f = (double)cnt[i] / N_DRAWS;
        double sigma = sqrt(p[i] * (1 - p[i]) / N_DRAWS);
        double z = fabs(f - p[i]) / (sigma + 1e-12);
        if (z > worst) worst = z;
        ok &= fabs(f - p[i]) <= 5 * sigma + 1e-4;
    }
    CHECK(ok, "T=%.2f: %d draws match softmax(logits/T) (worst %.2f sigma)", (double)T, N_DRAWS, worst);
}

static void test_filters(void)
{
    /* top-k: only the k best ever come out, and each of them does. */
    float l[10] = { 0.1f, 2.0f, 0.3f, 1.9f, -1.0f, 1.8f, 0.0f, 0.2f, 1.0f, 0.9f };
    mor_sampler *s = make(1.5f, 3, 1.0f, 0.0f, 11);
    int seen[10] = { 0 };
    for (int i = 0; i < 3000; i++) { mor_token t = sample1(s, l, 10); if (t >= 0 && t < 10) seen[t]++; }
    mor_sampler_free(s);
    int outside = 0;
    for (int i = 0; i < 10; i++) if (i != 1 && i != 3 && i != 5) outside += seen[i];
    CHECK(outside == 0 && seen[1] && seen[3] && seen[5], "top_k=3 draws only ids {1,3,5}, all of them");

    /* top-p: p = {.5,.3,.15,.05}; top_p .7 keeps {0,1} (0.5 < .7 <= 0.8). */
    float q[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
    s = make(1.0f, 0, 0.7f, 0.0f, 12);
    int c[4] = { 0 };
    for (int i = 0; i < N_DRAWS; i++) { mor_token t = sample1(s, q, 4); if (t >= 0 && t < 4) c[t]++; }
    mor_sampler_free(s);
    double r0 = (double)c[0] / N_DRAWS;
    CHECK(c[2] == 0 && c[3] == 0 && c[0] && c[1], "top_p=0.7 keeps exactly {0,1}");
    CHECK(fabs(r0 - 0.625) < 0.02, "top_p renormalises: P(0) = %.3f ~ 0.625", r0);
    s = make(1.0f, 0, 0.45f, 0.0f, 12);
    int only0 = 1;
    for (int i = 0; i < 500; i++) only0 &= sample1(s, q, 4) == 0;
    mor_sampler_free(s);
    CHECK(only0, "top_p=0.45 keeps only the top token");
    s = make(5.0f, 0, 1e-6f, 0.0f, 12);
    only0 = 1;
    for (int i = 0; i < 500; i++) only0 &= sample1(s, q, 4) == 0;
    mor_sampler_free(s);
    CHECK(only0, "tiny top_p still keeps one token");
    /* top-p after top-k: top_k 2 renormalises {0,1} to {.625,.375}; top_p .6 -> {0}. */
    s = make(1.0f, 2, 0.6f, 0.0f, 12);
    only0 = 1;
    for (int i = 0; i < 500; i++) only0 &= sample1(s, q, 4) == 0;
    mor_sampler_free(s);
    CHECK(only0, "top_p is applied to the top-k renormalised distribution");

    /* min-p: p = {.5,.3,.04,.16}; min_p .1 drops p < .05, i.e. id 2 only. */
    float m[4] = { logf(0.5f), logf(0.3f), logf(0.04f), logf(0.16f) };
    s = make(1.0f, 0, 1.0f, 0.1f, 13);
    int cm[4] = { 0 };
    for (int i = 0; i < N_DRAWS; i++) { mor_token t = sample1(s, m, 4); if (t >= 0 && t < 4) cm[t]++; }
    mor_sampler_free(s);
    CHECK(cm[2] == 0 && cm[0] && cm[1] && cm[3], "min_p=0.1 drops only the token below 0.05");
    CHECK(fabs((double)cm[3] / N_DRAWS - 0.16 / 0.96) < 0.015, "min_p renormalises: P(3) = %.3f ~ %.3f",
          (double)cm[3] / N_DRAWS, 0.16 / 0.96);
    /* min-p with top-p on (the sorted path): same exclusion. */
    s = make(1.0f, 0, 0.99f, 0.1f, 13);
    memset(cm, 0, sizeof(cm));
    for (int i = 0; i < 5000; i++) { mor_token t = sample1(s, m, 4); if (t >= 0 && t < 4) cm[t]++; }
    mor_sampler_free(s);
    CHECK(cm[2] == 0 && cm[0] && cm[1] && cm[3], "min_p with top_p: still drops only id 2");
    s = make(1.0f, 0, 1.0f, 1.0f, 13);
    only0 = 1;
    for (int i = 0; i < 500; i++) only0 &= sample1(s, m, 4) == 0;
    mor_sampler_free(s);
    CHECK(only0, "min_p=1 keeps only the maximum");
}

static mor_sampler *make_pen(float penalty, int32_t last_n)
{
    mor_sampler_params p;
    mor_sampler *s = NULL;
    MOR_SAMPLER_PARAMS_INIT(&p);
    p.temperature = 0.0f;
    p.repeat_penalty = penalty;
    p.repeat_last_n = last_n;
    return mor_sampler_create(&p, &s) == MOR_OK ? s : NULL;
}

static void test_penalty(void)
{
    float pos[4] = { 2.0f, 1.9f, -1.0f, 0.0f };
    float neg[4] = { -1.0f, -1.2f, -5.0f, -9.0f };
    mor_sampler *s = make_pen(1.5f, 64);
    mor_sampler_accept(s, 0);
    CHECK(sample1(s, pos, 4) == 1, "penalty 1.5 divides a positive logit (2 -> 1.33 < 1.9)");
    mor_sampler_reset(s);
    mor_sampler_accept(s, 0);
    CHECK(sample1(s, neg, 4) == 1, "penalty 1.5 multiplies a negative logit (-1 -> -1.5 < -1.2)");
    mor_sampler_reset(s);
    CHECK(sample1(s, pos, 4) == 0 && sample1(s, pos, 4) == 1,
          "sampled tokens enter the history: 0, then 1");
    mor_sampler_reset(s);
    CHECK(sample1(s, pos, 4) == 0, "reset forgets the history");

    float two[2] = { 2.0f, 1.2f };
    mor_sampler_reset(s);
    mor_sampler_accept(s, 0);
    mor_sampler_accept(s, 0);
    mor_sampler_accept(s, 0);
    CHECK(sample1(s, two, 2) == 0, "a repeated token is penalised once (2/1.5 = 1.33 > 1.2)");
    mor_sampler_reset(s);
    mor_sampler_accept(s, 1000);
    mor_sampler_accept(s, -5);
    CHECK(sample1(s, pos, 4) == 0, "history ids outside the vocab are ignored");
    mor_sampler_free(s);

    s = make_pen(1.5f, 2);
    mor_sampler_accept(s, 0);
    mor_sampler_accept(s, 2);
    mor_sampler_accept(s, 3);
    CHECK(sample1(s, pos, 4) == 0, "repeat_last_n=2: a token 3 back is not penalised");
    mor_sampler_free(s);

    s = make_pen(1.0f, 64);
    mor_sampler_accept(s, 0);
    CHECK(sample1(s, pos, 4) == 0, "penalty 1 is off");
    mor_sampler_free(s);
    s = make_pen(1.5f, 0);
    mor_sampler_accept(s, 0);
    CHECK(sample1(s, pos, 4) == 0, "repeat_last_n 0 is off");
    mor_sampler_free(s);
    s = make_pen(0.5f, 64);
    mor_sampler_accept(s, 1);
    CHECK(sample1(s, pos, 4) == 1, "penalty < 1 favours recent tokens (1.9 -> 3.8)");
    mor_sampler_free(s);
}

/* mor_logprobs: the log-softmax (against libm in double), the top k sorted
 * best first with ties by id, the sampled token of a greedy draw first, and
 * failures that write nothing. */
static void test_logprobs(void)
{
    enum { N = 3001 };
    static float l[N], top_lp[N];
    static mor_token top[N];
    static double p[N];
    synth_logits(l, N, 77);   /* values in steps of 0.01: many ties */
    l[5] = -INFINITY;
    softmax(l, N, 1.0, p);
    double worst = 0;
    int all_ok = 1;
    for (int i = 0; i < N; i++) {
        float lp = 1;
        all_ok &= mor_logprobs(l, N, i, &lp, 0, NULL, NULL) == MOR_OK;
        if (i == 5) { all_ok &= lp == -INFINITY; continue; }
        double d = fabs((double)lp - log(p[i]));
        if (d > worst) worst = d;
    }
    CHECK(all_ok && worst < 2e-6, "mor_logprobs: the log-softmax within %.2g of libm's in double", worst);
    CHECK(mor_logprobs(l, N, 0, NULL, N, top, top_lp) == MOR_OK, "mor_logprobs: k = n_vocab");
    int sorted = top[N - 1] == 5, seen_all = 1;
    static unsigned char seen[N];
    for (int i = 0; i < N; i++) seen[top[i]]++;
    for (int i = 0; i < N; i++) seen_all &= seen[i] == 1;
    for (int i = 1; i < N; i++)
        sorted &= l[top[i - 1]] > l[top[i]] || (l[top[i - 1]] == l[top[i]] && top[i - 1] < top[i]);
    CHECK(sorted && seen_all, "mor_logprobs: every token once, best first, ties by the lower id, -inf last");
    mor_token t20[20];
    float lp20[20];
    int same = mor_logprobs(l, N, 0, NULL, 20, t20, lp20) == MOR_OK;
    for (int i = 0; i < 20; i++) same &= t20[i] == top[i] && lp20[i] == top_lp[i];
    mor_sampler *g = make(0.0f, 0, 1.0f, 0.0f, 1);
    CHECK(same && sample1(g, l, N) == t20[0], "mor_logprobs: the top 20 are the first 20 of all; greedy picks the first");
    mor_sampler_free(g);
    /* failures write nothing */
    float keep = 42;
    mor_token kt[2] = { -7, -7 };
    float kl[2] = { 42, 42 };
    float bad[3] = { 0, NAN, 1 };
    int untouched = 1;
    untouched &= mor_logprobs(bad, 3, 0, &keep, 2, kt, kl) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "NaN");
    untouched &= mor_logprobs(l, N, N, &keep, 2, kt, kl) == MOR_E_OUT_OF_RANGE;
    untouched &= mor_logprobs(l, N, -1, &keep, 2, kt, kl) == MOR_E_OUT_OF_RANGE;
    untouched &= mor_logprobs(l, 2, 0, &keep, 3, kt, kl) == MOR_E_INVALID_ARG;
    untouched &= mor_logprobs(l, N, 0, &keep, -1, kt, kl) == MOR_E_INVALID_ARG;
    untouched &= mor_logprobs(l, N, 0, &keep, 2, NULL, kl) == MOR_E_INVALID_ARG;
    untouched &= mor_logprobs(NULL, N, 0, &keep, 2, kt, kl) == MOR_E_INVALID_ARG;
    untouched &= mor_logprobs(l, 0, 0, &keep, 0, kt, kl) == MOR_E_INVALID_ARG;
    float inf3[3] = { -INFINITY, -INFINITY, -INFINITY }, pinf[2] = { 0, INFINITY };
    untouched &= mor_logprobs(inf3, 3, 0, &keep, 1, kt, kl) == MOR_E_INVALID_ARG;
    untouched &= mor_logprobs(pinf, 2, 0, &keep, 1, kt, kl) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "+inf");
    CHECK(untouched && keep == 42 && kt[0] == -7 && kt[1] == -7 && kl[0] == 42 && kl[1] == 42,
          "mor_logprobs: NaN, +inf, all -inf, bad token, k, NULL, n_vocab: refused, nothing written");
    CHECK(mor_logprobs(l, N, 0, &keep, 0, NULL, NULL) == MOR_OK && mor_last_error()[0] == 0,
          "mor_logprobs: success clears the error");
}

int main(void)
{
    (void)check_maxdiff;
    test_params();
    test_validation();
    test_greedy();
    test_topk1_is_greedy();
    test_reproducible();
    test_golden();
    test_distribution_at(0.7f);
    test_distribution_at(1.0f);
    test_distribution_at(1.8f);
    test_filters();
    test_penalty();
    test_logprobs();
    return check_done();
}
