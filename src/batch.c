/* batch.c - the batch builder: tokens with explicit positions and sequences. */
#include <stdlib.h>
#include "context.h"
#include "status.h"

mor_status mor_batch_create(int32_t capacity, mor_batch **out)
{
    err_clear();
    if (!out) return err_set(MOR_E_INVALID_ARG, "mor_batch_create: out is NULL");
    *out = NULL;
    if (capacity <= 0) return err_set(MOR_E_INVALID_ARG, "mor_batch_create: capacity %d <= 0", capacity);
    mor_batch *b = calloc(1, sizeof *b);
    if (!b) return err_set(MOR_E_NOMEM, "out of memory");
    b->cap = capacity;
    b->token = malloc(sizeof(mor_token) * (size_t)capacity);
    b->pos = malloc(sizeof(mor_pos) * (size_t)capacity);
    b->seq = malloc(sizeof(mor_seq_id) * (size_t)capacity);
    b->want = malloc((size_t)capacity);
    if (!b->token || !b->pos || !b->seq || !b->want) { mor_batch_free(b); return err_set(MOR_E_NOMEM, "out of memory"); }
    *out = b;
    return MOR_OK;
}

void mor_batch_free(mor_batch *b)
{
    if (!b) return;
    free(b->token); free(b->pos); free(b->seq); free(b->want);
    free(b);
}

void mor_batch_clear(mor_batch *b) { if (b) b->n = 0; }

int32_t mor_batch_size(const mor_batch *b) { return b ? b->n : 0; }

mor_status mor_batch_add(mor_batch *b, mor_token token, mor_pos pos, mor_seq_id seq, int32_t want_logits)
{
    err_clear();
    if (!b) return err_set(MOR_E_INVALID_ARG, "mor_batch_add: batch is NULL");
    if (b->n >= b->cap) return err_set(MOR_E_BUFFER_TOO_SMALL, "mor_batch_add: batch is full (%d tokens)", b->cap);
    b->token[b->n] = token; b->pos[b->n] = pos; b->seq[b->n] = seq; b->want[b->n] = want_logits != 0;
    b->n++;
    return MOR_OK;
}
