/* serve_shift.c - llama.cpp's arithmetic for a sequence longer than its
 * context: the truncation of a prompt that does not fit (its server's and
 * mor-run's rule, one implementation for the library's server and the
 * programs). The shift of a running sequence is serve.c's (shift_slots). */
#include <string.h>
#include "mor.h"
#include "status.h"

MOR_API int32_t mor_prompt_truncate(mor_token *tokens, int32_t n_tokens, int32_t n_ctx, int32_t n_keep)
{
    err_clear();
    if (!tokens || n_tokens < 0) return err_set(MOR_E_INVALID_ARG, "mor_prompt_truncate: NULL tokens or n_tokens < 0");
    if (n_tokens <= n_ctx) return n_tokens;
    if (n_keep < 0 || n_ctx < 2 || n_keep > n_ctx - 2)
        return err_set(MOR_E_INVALID_ARG, "mor_prompt_truncate: keeping %d tokens leaves nothing to drop in a "
                       "context of %d positions", (int)n_keep, (int)n_ctx);
    /* blocks of half of what is not kept, so that at least that much room
     * is left for generation; what stays fills at most n_ctx - 1 positions */
    const int32_t block = (n_ctx - n_keep) / 2, erased = (n_tokens - n_keep - block) / block;
    memmove(tokens + n_keep, tokens + n_keep + (int64_t)erased * block,
            sizeof *tokens * (size_t)(n_tokens - n_keep - erased * block));
    return n_tokens - erased * block;
}
