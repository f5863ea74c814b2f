/* hooks.c - the context hooks of hooks.h. */
#include "context.h"
#include "hooks.h"

void hook_context_kernels(mor_context *c, const kernel_set *ks)
{
    if (c) c->ls.exec.k = ks ? ks : context_kernels(c->params.flags);
}

uint64_t hook_context_weight_bytes(const mor_context *c)
{
    return c ? c->ls.exec.weight_bytes : 0;
}
