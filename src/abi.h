/* abi.h - the one rule for the size-prefixed structs of mor.h.
 *
 * A caller sets `size` to sizeof the struct as its header declared it. This
 * library accepts any size from the struct's first released size (libmor
 * 0.1, the fields recorded in src/libmor.sym; the abi_*_v1 mirrors below)
 * up to its own sizeof: the fields the caller has are copied over this
 * library's defaults, the others keep their defaults. A size outside that
 * range (a struct no release declared, or one from a newer header) is
 * MOR_E_ABI, and nothing is written. Output structs (mor_router_stats) are
 * filled up to the caller's size, under the same rule. The *_params_init
 * functions zero the caller's `size` bytes, write the defaults that fit and
 * set `size` to the caller's size. mor_sampler_params is stricter: only its
 * two declared sizes (0.1's and today's) are accepted (sampler.c). */
#ifndef MOR_ABI_H
#define MOR_ABI_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

/* The structs as libmor 0.1 declared them (their first released sizes). */
typedef struct {
    uint32_t size, flags;
    int32_t (*progress)(float, void *);
    void    *progress_user_data;
} abi_model_params_v1;
typedef struct {
    uint32_t size, flags, n_ctx, n_batch, n_seq_max;
    int32_t  kv_mode, n_threads;
    int32_t (*abort_callback)(void *);
    void    *abort_user_data;
    int32_t  max_pos;
} abi_context_params_v1;
typedef struct {
    uint32_t size;
    uint64_t seed;
    float    temperature;
    int32_t  top_k;
    float    top_p, min_p, repeat_penalty;
    int32_t  repeat_last_n;
} abi_sampler_params_v1;
typedef struct {
    uint32_t size;
    int32_t  mode;
    uint32_t n_slots, n_ctx, n_batch;
    int32_t  n_threads, kv_mode, exit_mode;
    float    exit_threshold;
    void   (*on_token)(mor_request_id, mor_token, int32_t, void *);
    void    *user_data;
} abi_server_params_v1;
typedef struct {
    uint32_t size;
    const mor_sampler_params *sampling;
    int32_t  max_tokens, n_stop;
    const mor_token *stop;
    mor_grammar *grammar;
    int32_t  n_draft, draft_depth;
    float    exit_threshold;
    int32_t  n_keep;
} abi_request_params_v1;
typedef struct {
    uint32_t size;
    uint64_t n_tokens;
    double   mean_depth;
    uint64_t n_at_depth[MOR_MAX_RECURSIONS + 1];
} abi_router_stats_v1;

/* *_params_init: defaults (a whole struct of this library's) into the
 * caller's p of `size` bytes. No-op for a NULL p or a size below 4. */
void       abi_init(void *p, size_t size, const void *defaults, size_t lib_size);
/* Read a caller's struct `in` (NULL: the defaults alone) into out, which
 * holds this library's defaults (lib_size bytes); out->size becomes
 * lib_size. MOR_E_ABI (out unchanged) when in->size is outside
 * [v1_size, lib_size]; `what` names the struct in the message. */
mor_status abi_read(void *out, size_t lib_size, const void *in, size_t v1_size, const char *what);
/* Write this library's full struct `full` into the caller's out, as far as
 * out->size reaches. MOR_E_ABI (nothing written) under the same rule. */
mor_status abi_write(void *out, const void *full, size_t lib_size, size_t v1_size, const char *what);
#endif
