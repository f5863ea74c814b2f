/* hooks.c - the context hooks of hooks.h. */
#include "context.h"
#include "hooks.h"

void hook_context_kernels(mor_context *c, const kernel_set *ks)
{
    if (!c) return;
    if (!ks) ks = c->params.flags & MOR_CTX_FAST_BF16 ? kernels_fast_bf16(kernels_best()) : kernels_best();
    c->ls.exec.k = ks;
}
