/* kv_cache.h - keys and values per unrolled layer, with recursion-wise caching
 * or recursive KV sharing, and llama.cpp-style sequence operations. */
#ifndef MOR_KV_CACHE_H
#define MOR_KV_CACHE_H
#include "kernels.h"
#include "model.h"

/* One cached layer: cells hold (seq, pos, K row, V row); seq < 0 marks a free
 * cell. K is stored after RoPE, as HF caches it. Rows are in the cache's
 * type (F32, F16 or Q8_0 blocks along the row; quant.h). */
typedef struct {
    int32_t  n_cells, n_used, hint;
    int32_t  n_hi;             /* no cell at or above n_hi is in use: scans stop here */
    int32_t *pos, *seq;
    unsigned char *k, *v;      /* [n_cells][row_bytes] */
} kv_layer;

struct mor_kv_cache {
    const mor_model *m;
    int32_t  mode;             /* MOR_KV_RECURSION_WISE, MOR_KV_SHARED or MOR_KV_DENSE */
    int32_t  kv_dim, n_ctx, n_seq_max;
    uint32_t type;             /* MOR_KV_TYPE_*, a ggml type number */
    size_t   row_bytes;        /* one K (or V) row of kv_dim values in that type */
    kv_layer *layers;          /* [n_layer]; under sharing, recursions >= 1 have no cells */
    kv_layer tokens;           /* every decoded token's (seq, pos), no K/V: sequence bookkeeping */
    int32_t *seq_pos_max;      /* [n_seq_max], -1 when empty */
    unsigned char *kv_mem;     /* every layer's K and V rows (the struct and the rest are one block) */
    /* undo log of the decode in progress: (layer, cell); layer -1 = tokens */
    int32_t *undo, n_undo, cap_undo;
    /* mor_kv_seq_add, allocated here so that it cannot fail half-way: the
     * RoPE frequencies, cos/sin of one shift, one K row in float */
    float   *inv_freq;         /* [head_dim/2] */
    double  *shift_cs;         /* [head_dim]: cos, then sin */
    float   *shift_row;        /* [kv_dim] */
};

/* type: MOR_KV_TYPE_F32, _F16 or _Q8_0 (checked by the caller). */
mor_status kv_create(const mor_model *m, int32_t mode, uint32_t type, int32_t n_ctx, int32_t n_seq_max,
                     int32_t max_batch, mor_kv_cache **out);
void       kv_free(mor_kv_cache *kv);

/* Which layer's cells recursion-r layers read: itself, or under sharing the
 * recursion-0 layer of the same block position. Returns NULL-free pointer. */
kv_layer  *kv_read_layer(mor_kv_cache *kv, int32_t layer);
/* The cells attention reads for `layer` (those of kv_read_layer), as the
 * kernels take them. */
kv_rows    kv_layer_rows(const mor_kv_cache *kv, int32_t layer);
/* Whether a layer stores its own K/V (false for recursions >= 1 under sharing). */
int        kv_layer_stores(const mor_kv_cache *kv, int32_t layer);
/* Whether recursion r caches the K/V of every token of a decode, those its
 * router did not take included: then the scheduler runs r's block over those
 * rows too, for their K/V only, and discards their outputs. Under KV sharing
 * this holds at recursion 0: the official code runs recursion 0's block over
 * the whole chunk and stores every token's K/V there, even when the first
 * capacity is below 1, and deeper recursions read them. Under MOR_KV_DENSE
 * it holds at every recursion (the official forward without its sharing
 * cache runs every block over every token). The one rule both schedulers
 * (decode.c, serve.c) follow. */
int        kv_caches_every_row(const mor_kv_cache *kv, int32_t r);

/* Decode transactions: begin, append cells, then commit or roll back. */
void       kv_begin(mor_kv_cache *kv);
/* Append one cell to layer (-1: the token log); returns its index, or -1 if full. */
int32_t    kv_append(mor_kv_cache *kv, int32_t layer, mor_seq_id seq, mor_pos pos);
void       kv_rollback(mor_kv_cache *kv);
/* Take back, inside the transaction, the cells it appended to layers
 * [l0, l1) (and to the token log when with_tokens) for sequence seq at
 * positions >= p0: freed and forgotten by the undo log, as if never
 * appended (speculate.c: a draft's last layers, rejected drafts). */
void       kv_unappend(mor_kv_cache *kv, int32_t l0, int32_t l1, int with_tokens, mor_seq_id seq, mor_pos p0);
void       kv_commit(mor_kv_cache *kv);
#endif
