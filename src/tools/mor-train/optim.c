/* optim.c - AdamW with global-norm gradient clipping, and the learning-rate
 * schedules: linear warmup, then cosine to min_lr, or warmup-stable-decay
 * (constant, then a linear decay over the last decay_frac of the steps). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "train.h"

void tr_optim_defaults(tr_optim_config *oc)
{
    memset(oc, 0, sizeof *oc);
    oc->lr = 3e-3f; oc->min_lr = 3e-4f; oc->beta1 = 0.9f; oc->beta2 = 0.95f; oc->eps = 1e-8f;
    oc->wd = 0.1f; oc->clip = 1.0f; oc->warmup = 100; oc->steps = 1000;
    oc->schedule = TR_SCHED_COSINE; oc->decay_frac = 0.2f;
}

int tr_optim_init(tr_optim *o, const tr_optim_config *oc, size_t n)
{
    memset(o, 0, sizeof *o);
    o->oc = *oc; o->n = n;
    o->m = calloc(n ? n : 1, sizeof(float));
    o->v = calloc(n ? n : 1, sizeof(float));
    if (!o->m || !o->v) { tr_optim_free(o); return -1; }
    return 0;
}

void tr_optim_free(tr_optim *o)
{
    if (!o) return;
    free(o->m); free(o->v);
    o->m = o->v = NULL;
}

float tr_lr_at(const tr_optim_config *oc, int64_t step)
{
    if (oc->warmup > 0 && step < oc->warmup) return oc->lr * (float)(step + 1) / (float)oc->warmup;
    if (oc->schedule == TR_SCHED_CONSTANT || oc->steps <= oc->warmup) return oc->lr;
    if (oc->schedule == TR_SCHED_WSD) {
        int64_t decay = (int64_t)(oc->decay_frac * oc->steps), start = oc->steps - decay;
        if (step < start || decay <= 0) return oc->lr;
        double f = (double)(step - start) / decay;
        if (f > 1) f = 1;
        return (float)(oc->lr + (oc->min_lr - oc->lr) * f);
    }
    double f = (double)(step - oc->warmup) / (double)(oc->steps - oc->warmup);
    if (f > 1) f = 1;
    return (float)(oc->min_lr + 0.5 * (oc->lr - oc->min_lr) * (1 + cos(3.141592653589793 * f)));
}

double tr_optim_step(tr_optim *o, tr_model *m)
{
    const tr_optim_config *oc = &o->oc;
    double ss = 0;
    for (size_t i = 0; i < m->n_params; i++) ss += (double)m->g[i] * m->g[i];
    double norm = sqrt(ss);
    double scale = (oc->clip > 0 && norm > oc->clip) ? oc->clip / norm : 1.0;
    float lr = tr_lr_at(oc, o->step);
    o->step++;
    double bc1 = 1 - pow(oc->beta1, (double)o->step), bc2 = 1 - pow(oc->beta2, (double)o->step);
    for (int t = 0; t < m->n_t; t++) {
        const tr_tensor *tt = &m->t[t];
        size_t n = (size_t)(tt->rows * tt->cols);
        real *p = m->p + tt->off, *g = m->g + tt->off;
        float *mo = o->m + tt->off, *vo = o->v + tt->off;
        float wd = tt->decay ? oc->wd : 0;
        for (size_t i = 0; i < n; i++) {
            float gi = (float)(g[i] * scale);
            mo[i] = oc->beta1 * mo[i] + (1 - oc->beta1) * gi;
            vo[i] = oc->beta2 * vo[i] + (1 - oc->beta2) * gi * gi;
            double mh = mo[i] / bc1, vh = vo[i] / bc2;
            p[i] -= (real)(lr * (mh / (sqrt(vh) + oc->eps) + wd * p[i]));
        }
    }
    memset(m->g, 0, sizeof(real) * m->n_params);
    return norm;
}
