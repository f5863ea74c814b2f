/* relax.c - tying a vanilla model into a recursive one, and its LoRA deltas.
 * See relax.h. Index maps and initialisations follow the official
 * model/sharing_strategy/llama.py (mor-spec section 9.2), 0-indexed:
 *   cycle            slot i <- layers i + rec*K
 *   sequence         slot i <- layers i*N_r + rec
 *   middle_*         the same, shifted by the unique first layer (the last
 *                    layer stays unique too)
 *   stepwise         slot i takes layer round(linspace(0, L-1, K))[i]
 *                    (middle: linspace(1, L-2, K)), Python's round (half to even)
 *   lower / upper    the first / last K layers (middle: inside 1..L-2)
 *   average          the mean of the slot's layers */
#include "relax.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "svd.h"
#include "util.h"

const char *const relax_init_names[] = {"stepwise", "average", "lower", "upper", NULL};

static void *own(relax_state *rs, void *p)
{
    if (!p) return NULL;
    if (rs->n_own == rs->cap_own) {
        size_t cap = rs->cap_own ? rs->cap_own * 2 : 64;
        void **n = realloc(rs->own, cap * sizeof *n);
        if (!n) { free(p); return NULL; }
        rs->own = n;
        rs->cap_own = cap;
    }
    rs->own[rs->n_own++] = p;
    return p;
}

void relax_free(relax_state *rs)
{
    for (size_t i = 0; i < rs->n_own; i++) free(rs->own[i]);
    free(rs->own);
    memset(rs, 0, sizeof *rs);
}

/* round(np.linspace(a, b, num)) as the official code computes it: numpy's
 * i * ((b - a) / (num - 1)) + a with the last value exactly b, then
 * Python's round, half to even (rint in the default rounding mode). */
static void linspace_round(double a, double b, int num, int *out)
{
    double step = num > 1 ? (b - a) / (num - 1) : 0;
    for (int i = 0; i < num; i++) out[i] = (int)rint(i == num - 1 && num > 1 ? b : (double)i * step + a);
}

/* Unrolled layers (new numbering) tied to slot i. */
static void targets(int sharing, int K, int n_rec, int i, int *t)
{
    int mid = sharing == SHARE_MIDDLE_CYCLE || sharing == SHARE_MIDDLE_SEQUENCE;
    for (int rec = 0; rec < n_rec; rec++)
        t[rec] = mid + (sharing == SHARE_CYCLE || sharing == SHARE_MIDDLE_CYCLE ? i + rec * K : i * n_rec + rec);
}

static int is_norm_role(int role) { return cv_role_is_vector(role); }

/* The element-wise mean of n tensors of one shape and dtype, in double,
 * rounded to that dtype. */
static const ckpt_tensor *average(relax_state *rs, const ckpt_tensor *const *src, int n, char *err, size_t errcap)
{
    const ckpt_tensor *t0 = src[0];
    size_t numel = (size_t)t0->numel, es = cv_dtype_size(t0->dtype);
    double *acc = calloc(numel ? numel : 1, sizeof *acc);
    float *f = malloc(sizeof(float) * (numel ? numel : 1));
    uint8_t *out = own(rs, malloc(numel * es > 0 ? numel * es : 1));
    ckpt_tensor *t = &rs->synth[rs->n_synth];
    if (!acc || !f || !out) {
        free(acc);
        free(f);
        cv_fail(err, errcap, "out of memory averaging '%s'", t0->name);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        cv_convert(f, GGML_F32, src[k]->data, src[k]->dtype, numel);
        for (size_t i = 0; i < numel; i++) acc[i] += f[i];
    }
    for (size_t i = 0; i < numel; i++) f[i] = (float)(acc[i] / n);
    cv_convert(out, t0->dtype, f, GGML_F32, numel);
    free(acc);
    free(f);
    *t = *t0;
    t->name = (char *)"(an average of layers)";
    t->data = out;
    rs->n_synth++;
    return t;
}

int relax_tie(relax_state *rs, cv_layout *lo, hf_config *cfg, int sharing, int n_rec, int init, int keep_norms,
              char *err, size_t errcap)
{
    const int mid = sharing == SHARE_MIDDLE_CYCLE || sharing == SHARE_MIDDLE_SEQUENCE, L0 = lo->n_layer;
    int K, L, *src = NULL, *tar = NULL;
    const ckpt_tensor **grp = NULL;
    if (lo->kind != ROUTE_NONE) return cv_fail(err, errcap, "--init converts a plain (vanilla) checkpoint");
    if (sharing <= SHARE_NONE || n_rec < 2)
        return cv_fail(err, errcap, "--init needs --num-recursion N >= 2 and --sharing cycle|middle_cycle|sequence|middle_sequence");
    K = (L0 - 2 * mid) / n_rec;
    if (K < 1) return cv_fail(err, errcap, "%d layers cannot loop %d times under %s sharing", L0, n_rec, ms_sharing_names[sharing]);
    L = K * n_rec + 2 * mid;
    rs->n_orig = L0;
    rs->kept = own(rs, malloc(sizeof(int) * (size_t)L));
    rs->orig = own(rs, calloc((size_t)L, sizeof *rs->orig));
    rs->synth = own(rs, calloc((size_t)K * CV_ROLE_ALL, sizeof *rs->synth));
    src = malloc(sizeof(int) * (size_t)K);
    tar = malloc(sizeof(int) * (size_t)n_rec);
    grp = malloc(sizeof *grp * (size_t)n_rec);
    if (!rs->kept || !rs->orig || !rs->synth || !src || !tar || !grp) {
        free(src); free(tar); free(grp);
        return cv_fail(err, errcap, "out of memory");
    }
    /* the official selection when L does not divide: keep the layers at
     * round(linspace(0, L-1, K*N_r)), or the first, those at
     * round(linspace(1, L-2, K*N_r)) and the last */
    if (L == L0) {
        for (int l = 0; l < L; l++) rs->kept[l] = l;
    } else {
        linspace_round(mid, L0 - 1 - mid, K * n_rec, rs->kept + mid);
        if (mid) { rs->kept[0] = 0; rs->kept[L - 1] = L0 - 1; }
    }
    for (int l = 0; l < L; l++) memcpy(rs->orig[l], lo->role[rs->kept[l]], sizeof rs->orig[l]);
    {   /* per-layer features follow the layers kept */
        unsigned char local[CV_MAX_LAYERS];
        for (int l = 0; l < L; l++) local[l] = cfg->arch.local[rs->kept[l]];
        memcpy(cfg->arch.local, local, (size_t)L);
        memset(cfg->arch.local + L, 0, (size_t)(L0 - L));
    }
    /* source layers (new numbering) of the selection initialisations */
    if (init == INIT_STEPWISE) linspace_round(mid, L - 1 - mid, K, src);
    for (int i = 0; i < K; i++) {
        if (init == INIT_LOWER) src[i] = mid + i;
        if (init == INIT_UPPER) src[i] = L - mid - K + i;
    }
    lo->n_layer = L;
    cfg->n_layer = (uint32_t)L;
    for (int l = 0; l < L; l++) memcpy(lo->role[l], rs->orig[l], sizeof lo->role[l]);   /* prelude, coda, and norms kept */
    for (int i = 0; i < K; i++) {
        targets(sharing, K, n_rec, i, tar);
        for (int role = 0; role < CV_ROLE_ALL; role++) {
            const ckpt_tensor *w;
            if (!rs->orig[0][role] || (keep_norms && is_norm_role(role))) continue;   /* absent, or kept per layer */
            if (init == INIT_AVERAGE) {
                for (int rec = 0; rec < n_rec; rec++) grp[rec] = rs->orig[tar[rec]][role];
                if (!(w = average(rs, grp, n_rec, err, errcap))) { free(src); free(tar); free(grp); return -1; }
            } else {
                w = rs->orig[src[i]][role];
            }
            for (int rec = 0; rec < n_rec; rec++) lo->role[tar[rec]][role] = w;
        }
    }
    free(src);
    free(tar);
    free(grp);
    return 0;
}

/* ---- SVD deltas ---------------------------------------------------------- */

typedef struct {
    int l, role, r;
    int64_t out, in;
    const ckpt_tensor *w;        /* the layer's own weight */
    const void *shared;
    int type;
    float *a, *b;                /* results (malloc'd by the job) */
    double res2, cap2;
    int zero, failed;
} svd_job;

typedef struct {
    svd_job *jobs;
    int n, exact;
    pthread_mutex_t mu;
    int next, done;
    cv_progress_fn progress;
    void *progress_ud;
} svd_queue;

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static void run_job(svd_job *j, int exact)
{
    const int64_t out = j->out, in = j->in, r = j->r, n = out * in;
    double *R = malloc(sizeof(double) * (size_t)n), *u = malloc(sizeof(double) * (size_t)(out * r));
    double *s = malloc(sizeof(double) * (size_t)r), *v = malloc(sizeof(double) * (size_t)(in * r));
    float *f = malloc(sizeof(float) * (size_t)n);
    j->a = malloc(sizeof(float) * (size_t)(r * in));
    j->b = malloc(sizeof(float) * (size_t)(out * r));
    if (!R || !u || !s || !v || !f || !j->a || !j->b) { j->failed = 1; goto done; }
    cv_convert(f, GGML_F32, j->w->data, j->w->dtype, (size_t)n);
    for (int64_t i = 0; i < n; i++) R[i] = f[i];
    cv_convert(f, GGML_F32, j->shared, j->type, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        R[i] -= f[i];
        j->res2 += R[i] * R[i];
    }
    if (j->res2 == 0) {
        /* nothing was lost (e.g. the source layer of a Stepwise slot): the
         * standard LoRA init, B = 0 and A ~ N(0, 1/r^2) (PEFT "gaussian") */
        uint64_t st = mix64((uint64_t)j->l * 64 + (uint64_t)j->role);
        for (int64_t i = 0; i < r * in; i++) {
            double u1 = ((double)(mix64(st++) >> 11) + 0.5) / 9007199254740992.0;
            double u2 = (double)(mix64(st++) >> 11) / 9007199254740992.0;
            j->a[i] = (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2) / (double)r);
        }
        memset(j->b, 0, sizeof(float) * (size_t)(out * r));
        j->zero = 1;
        goto done;
    }
    if (cv_svd_top(R, out, in, r, exact, mix64((uint64_t)j->l * 64 + (uint64_t)j->role + 1), u, s, v)) {
        j->failed = 1;
        goto done;
    }
    for (int64_t t = 0; t < r; t++) j->cap2 += s[t] * s[t];
    for (int64_t o = 0; o < out; o++)        /* B = U_r S_r */
        for (int64_t t = 0; t < r; t++) j->b[o * r + t] = (float)(u[o * r + t] * s[t]);
    for (int64_t t = 0; t < r; t++)          /* A = V_r^T */
        for (int64_t c = 0; c < in; c++) j->a[t * in + c] = (float)v[c * r + t];
done:
    free(R); free(u); free(s); free(v); free(f);
}

static void *svd_worker(void *arg)
{
    svd_queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        int i = q->next < q->n ? q->next++ : -1;
        pthread_mutex_unlock(&q->mu);
        if (i < 0) return NULL;
        run_job(&q->jobs[i], q->exact);
        pthread_mutex_lock(&q->mu);   /* one report at a time */
        q->done++;
        if (q->progress) q->progress("SVDs", q->done, q->n, q->progress_ud);
        pthread_mutex_unlock(&q->mu);
    }
}

int relax_svd(relax_state *rs, const cv_layout *lo, int first, int last, const int *rank,
              const void *const *shared, const int *type, int exact, int threads, char *err, size_t errcap)
{
    svd_queue q;
    pthread_t th[64];
    int n = 0, started = 0, rc = 0;
    memset(&q, 0, sizeof q);
    if (!rs->orig) return cv_fail(err, errcap, "--lora-rank needs --init (the deltas relax a tied vanilla model)");
    if (!rs->delta && !(rs->delta = own(rs, calloc((size_t)lo->n_layer, sizeof *rs->delta))))
        return cv_fail(err, errcap, "out of memory");
    q.jobs = calloc((size_t)lo->n_layer * CV_ROLE_COUNT, sizeof *q.jobs);
    if (!q.jobs) return cv_fail(err, errcap, "out of memory");
    for (int l = first; l < last; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const ckpt_tensor *w = rs->orig[l][role];
            if (is_norm_role(role) || rank[role] <= 0 || !w) continue;
            svd_job *j = &q.jobs[n++];
            j->l = l;
            j->role = role;
            j->out = (int64_t)w->shape[0];
            j->in = (int64_t)w->shape[1];
            j->r = rank[role] < (j->in < j->out ? j->in : j->out) ? rank[role] : (int)(j->in < j->out ? j->in : j->out);
            j->w = w;
            j->shared = shared[(size_t)l * CV_ROLE_COUNT + role];
            j->type = type[role];
        }
    q.n = n;
    q.exact = exact;
    q.progress = rs->progress;
    q.progress_ud = rs->progress_ud;
    pthread_mutex_init(&q.mu, NULL);
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    if (threads > n) threads = n;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&th[t], NULL, svd_worker, &q) == 0) started++;
    svd_worker(&q);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&q.mu);
    /* results in job order: the output does not depend on the thread count */
    for (int i = 0; i < n; i++) {
        svd_job *j = &q.jobs[i];
        own(rs, j->a);
        own(rs, j->b);
        if (j->failed && !rc) rc = cv_fail(err, errcap, "out of memory in the SVD of layer %d %s", j->l, cv_role_gguf[j->role]);
        if (j->failed) continue;
        rs->delta[j->l][j->role] = (cv_delta){j->r, j->a, j->b, 1.0f};
        rs->n_delta++;
        rs->residual2 += j->res2;
        rs->captured2 += j->cap2;
        rs->n_zero += j->zero;
    }
    free(q.jobs);
    return rc;
}

/* ---- PEFT deltas ---------------------------------------------------------- */

static int proj_of_role(int role)
{
    switch (role) {
    case CV_ROLE_ATTN_Q: return MS_PROJ_Q;
    case CV_ROLE_ATTN_K: return MS_PROJ_K;
    case CV_ROLE_ATTN_V: return MS_PROJ_V;
    case CV_ROLE_ATTN_OUT: return MS_PROJ_O;
    case CV_ROLE_FFN_GATE: return MS_PROJ_GATE;
    case CV_ROLE_FFN_UP: return MS_PROJ_UP;
    case CV_ROLE_FFN_DOWN: return MS_PROJ_DOWN;
    default: return -1;
    }
}

int relax_peft(relax_state *rs, const cv_layout *lo, const cv_settings *s, char *err, size_t errcap)
{
    if (!lo->lora) return 0;
    if (s->relax == 0)
        return cv_fail(err, errcap, "the checkpoint has LoRA factors (lora_A/lora_B) but its config says relaxation.enable: false");
    const int by_pattern = s->have_lora_alpha_pattern && s->lora_alpha_pattern != 0;
    if (!by_pattern && !s->have_lora_alpha)
        return cv_fail(err, errcap, "this relaxed (LoRA) checkpoint needs its LoRA scale: pass --mor-config mor_cfg.yaml "
                                    "(relaxation.lora.alpha / alpha_pattern) or --lora-alpha / --lora-alpha-pattern");
    if (!rs->delta && !(rs->delta = own(rs, calloc((size_t)lo->n_layer, sizeof *rs->delta))))
        return cv_fail(err, errcap, "out of memory");
    for (int l = 0; l < lo->n_layer; l++)
        for (int role = 0; role < CV_ROLE_COUNT; role++) {
            const ckpt_tensor *a = lo->lora[l][role][0], *b = lo->lora[l][role][1];
            if (!a) continue;
            const int p = proj_of_role(role), r = (int)a->shape[0];
            const uint64_t out = lo->role[l][role]->shape[0], in = lo->role[l][role]->shape[1];
            if (s->lora_targets && !(s->lora_targets & (1u << p)))
                return cv_fail(err, errcap, "'%.200s': %s is not in relaxation.lora.target_modules", a->name, ms_proj_names[p]);
            /* the official rank: rank_pattern.self_attn (q, k, v) or .ffn, else r, at most min(in, out) */
            int want = p <= MS_PROJ_V && s->lora_rank_attn ? s->lora_rank_attn
                     : p >= MS_PROJ_GATE && s->lora_rank_ffn ? s->lora_rank_ffn : s->lora_r;
            if (want && (uint64_t)want > in) want = (int)in;
            if (want && (uint64_t)want > out) want = (int)out;
            if (want && want != r)
                return cv_fail(err, errcap, "'%.200s' has rank %d but the relaxation config gives %s rank %d", a->name, r,
                               ms_proj_names[p], want);
            float *fa = own(rs, malloc(sizeof(float) * (size_t)a->numel)), *fb = own(rs, malloc(sizeof(float) * (size_t)b->numel));
            if (!fa || !fb) return cv_fail(err, errcap, "out of memory");
            if (cv_convert(fa, GGML_F32, a->data, a->dtype, (size_t)a->numel) ||
                cv_convert(fb, GGML_F32, b->data, b->dtype, (size_t)b->numel))
                return cv_fail(err, errcap, "'%.200s': non-finite values", a->name);
            rs->delta[l][role] = (cv_delta){r, fa, fb, (float)(by_pattern ? s->lora_alpha_pattern : s->lora_alpha / r)};
            rs->n_delta++;
        }
    return 0;
}
