/*
 * mor.h - libmor: Mixture-of-Recursions language models on CPUs.
 *
 * This header is the whole public contract of libmor. Everything a user may
 * rely on is written here; anything not written here may change.
 *
 * A Mixture-of-Recursions (MoR) model is a Recursive Transformer: one shared
 * stack of Llama-style layers applied N_r times (under middle-cycle sharing the
 * first and last layers are unique), with a small router per recursion that
 * decides, token by token, how many recursions each token gets. libmor loads
 * such models from GGUF v3 files with general.architecture = "mor" (see
 * docs/FORMAT.md; bin/mor-convert makes them from official PyTorch
 * checkpoints), and runs them with plain C99, libm and pthreads.
 *
 * Typical use:
 *
 *     mor_model *model; mor_context *ctx; mor_batch *batch;
 *     MOR_MODEL_PARAMS_INIT(&mp);  mor_model_load_file("m.gguf", &mp, &model);
 *     MOR_CONTEXT_PARAMS_INIT(&cp); mor_context_create(model, &cp, &ctx);
 *     mor_batch_create(512, &batch);
 *     for each prompt token t at position p: mor_batch_add(batch, t, p, 0, p == last);
 *     mor_decode(ctx, batch);                  logits = mor_get_logits(ctx, last);
 *     ... sample, mor_batch_clear, add the new token, mor_decode again ...
 *     mor_batch_free(batch); mor_context_free(ctx); mor_model_free(model);
 *
 * Conventions (they hold for every function below unless it says otherwise):
 *  - Errors: functions return a mor_status. MOR_OK (0) is success; every error is
 *    negative, named, and never reused. A call that fails changes nothing: no
 *    handle, cache or output is modified. mor_last_error() is the message of
 *    the calling thread's last call that could fail: every function that
 *    returns a mor_status (or a count, id or state that is a negative
 *    mor_status on error) sets it when it fails and clears it ("") when it
 *    succeeds. Functions that cannot fail (the version, size and
 *    hyperparameter getters, the _free functions, mor_get_logits and the
 *    like, which return NULL or -1 for bad arguments) leave it as it was.
 *  - The library never aborts, exits, or prints. It logs only through a
 *    callback set with mor_log_set().
 *  - Ownership: a handle returned through an out-parameter belongs to the caller
 *    and is released with its _free function. Free functions accept NULL.
 *    Pointers returned by getters are borrowed and valid as the getter says.
 *  - Threads: a mor_model is immutable once loaded and may be used from any
 *    number of threads and contexts at once. A mor_context, together with the
 *    mor_kv_cache and mor_router it owns, and a mor_batch or mor_sampler, must
 *    be used by one thread at a time (different objects in different threads
 *    is fine). mor_log_set() may be called from any thread.
 *  - ABI: params structs begin with a `size` field that the caller sets (the
 *    *_INIT macros do it). Fields are only ever appended; enum values are only
 *    ever appended. A library built with a newer header accepts structs from
 *    older callers.
 *
 * Copyright the libmor authors. MIT licence.
 */
#ifndef MOR_H
#define MOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MOR_STATIC)
#  define MOR_API
#elif defined(_WIN32)
#  ifdef MOR_BUILD
#    define MOR_API __declspec(dllexport)
#  else
#    define MOR_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define MOR_API __attribute__((visibility("default")))
#else
#  define MOR_API
#endif

/* ------------------------------------------------------------------------ */
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */

#define MOR_VERSION_MAJOR 0
#define MOR_VERSION_MINOR 1
#define MOR_VERSION_PATCH 0
#define MOR_VERSION_NUMBER (MOR_VERSION_MAJOR * 10000 + MOR_VERSION_MINOR * 100 + MOR_VERSION_PATCH)
#define MOR_VERSION_STRING "0.1.0"

/* The version of the library actually linked (may differ from the header's
 * MOR_VERSION_NUMBER when linking dynamically). Thread-safe. */
MOR_API uint32_t    mor_version_number(void);
/* "MAJOR.MINOR.PATCH" of the linked library. Static string. Thread-safe. */
MOR_API const char *mor_version_string(void);
/* One line describing the build: compiler, kernels compiled in, OpenMP. Static
 * string. Thread-safe. */
MOR_API const char *mor_build_info(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------ */

typedef int32_t mor_status;
enum {
    MOR_OK                  =   0,
    MOR_E_INVALID_ARG       =  -1, /* NULL handle, bad value, misuse of the API   */
    MOR_E_NOMEM             =  -2, /* an allocation failed                         */
    MOR_E_IO                =  -3, /* open/read/mmap of a file failed              */
    MOR_E_FORMAT            =  -4, /* a file is corrupt, truncated or inconsistent */
    MOR_E_UNSUPPORTED       =  -5, /* valid, but not supported by this build/model */
    MOR_E_KV_FULL           =  -6, /* the KV cache has no room; nothing was stored */
    MOR_E_ABORTED           =  -7, /* the abort callback asked to stop             */
    MOR_E_ABI               =  -8, /* a params struct has a size this lib rejects  */
    MOR_E_OUT_OF_RANGE      =  -9, /* token id, sequence id, index out of range    */
    MOR_E_POSITION          = -10, /* positions not increasing within a sequence   */
    MOR_E_BUFFER_TOO_SMALL  = -11, /* caller's buffer too small; needed size given */
    MOR_E_INTERNAL          = -12  /* a bug in libmor; please report it            */
};

/* Name of a status, e.g. "MOR_E_FORMAT". Static string; "MOR_E_UNKNOWN" for a
 * value this version does not know. Thread-safe. */
MOR_API const char *mor_status_str(mor_status s);

/* The message of the calling thread's last call that could fail ("" if it
 * succeeded; see "Errors" above). Valid until that thread's next call that
 * can fail. Thread-safe (per thread). */
MOR_API const char *mor_last_error(void);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

enum { MOR_LOG_ERROR = 0, MOR_LOG_WARN = 1, MOR_LOG_INFO = 2, MOR_LOG_DEBUG = 3 };
/* `msg` has no trailing newline and is valid only during the call. */
typedef void (*mor_log_fn)(int32_t level, const char *msg, void *user_data);

/* Route libmor's log messages of `level <= max_level` to `fn`; fn == NULL (the
 * default) silences the library completely. The only global mutable state of
 * libmor. Thread-safe, but a message being delivered concurrently may still
 * reach the previous callback. */
MOR_API void mor_log_set(mor_log_fn fn, void *user_data, int32_t max_level);

/* ------------------------------------------------------------------------ */
/* Basic types                                                               */
/* ------------------------------------------------------------------------ */

/* The most recursions a model may have (N_r); mor_max_recursions() gives the
 * same at run time. Part of the ABI (mor_router_stats.n_at_depth). */
#define MOR_MAX_RECURSIONS 16

typedef int32_t mor_token;   /* token id, 0 <= id < mor_model_n_vocab()          */
typedef int32_t mor_pos;     /* absolute position within its sequence, >= 0      */
typedef int32_t mor_seq_id;  /* 0 <= id < mor_context_params.n_seq_max            */

typedef struct mor_model    mor_model;     /* immutable weights + hyperparameters */
typedef struct mor_context  mor_context;   /* scratch, outputs; owns kv + router  */
typedef struct mor_kv_cache mor_kv_cache;  /* keys/values, per recursion          */
typedef struct mor_router   mor_router;    /* depth-routing policy and read-back  */
typedef struct mor_batch    mor_batch;     /* tokens to decode                    */
typedef struct mor_sampler  mor_sampler;   /* picks the next token from logits    */
typedef struct mor_grammar  mor_grammar;   /* constrains sampling to a grammar    */

/* ------------------------------------------------------------------------ */
/* Model                                                                     */
/* ------------------------------------------------------------------------ */

enum {
    MOR_MODEL_NO_MMAP    = 1u << 0, /* read the file into memory instead of mmap */
    MOR_MODEL_VOCAB_ONLY = 1u << 1, /* load only the tokenizer (no weights)       */
    /* Relaxed models (depth-wise LoRA, docs/FORMAT.md): fold each layer's
     * delta into a weight of its own, W + s*B*A in F32, at load, instead of
     * applying it per row after the shared weight at every decode. No
     * per-row product (faster prompts), but one F32 matrix per relaxed
     * projection and layer: a quantized or 16-bit shared weight is
     * dequantized for it, and generation, which reads every weight per
     * token, can be much slower than unfolded (docs/RELAXED.md). Logits
     * agree with the unfolded model to rounding. No effect without LoRA. */
    MOR_MODEL_FOLD_LORA  = 1u << 2,
    /* Check every weight for NaN and infinity at load (MOR_E_FORMAT naming
     * the tensor), reading the whole file once. Without it only the norms
     * and routers are checked, which is cheap; the tools set it by default
     * (their --no-check-tensors skips it), as llama.cpp's --check-tensors. */
    MOR_MODEL_CHECK_TENSORS = 1u << 3
};

typedef struct mor_model_params {
    uint32_t size;   /* sizeof(mor_model_params) as compiled by the caller */
    uint32_t flags;  /* MOR_MODEL_* bits; default 0                        */
    /* Optional: called during loading with progress in [0,1]; return
     * non-zero to cancel (the load then fails with MOR_E_ABORTED, having
     * freed everything). Called at every stage: 0 first, while the file is
     * read (MOR_MODEL_NO_MMAP, every 1/16 of it), after parsing, for each
     * of the nine weight roles, after the tokenizer, and 1 last; the values
     * never decrease. */
    int32_t (*progress)(float progress, void *user_data);
    void     *progress_user_data;
} mor_model_params;

/* Fill `p` with defaults for a struct of `size` bytes (use the macro). */
MOR_API void mor_model_params_init(mor_model_params *p, size_t size);
#define MOR_MODEL_PARAMS_INIT(p) mor_model_params_init((p), sizeof(*(p)))

/* Load a GGUF file. The file is mapped read-only (weights are used in place,
 * with no copy, where the stored type is used as is) and checked strictly:
 * every key, type, shape, offset and size, and the norms and routers for
 * NaN and infinity (every weight with MOR_MODEL_CHECK_TENSORS). params may be NULL for defaults.
 * On success *out owns the model. Errors: MOR_E_INVALID_ARG, MOR_E_IO,
 * MOR_E_FORMAT, MOR_E_UNSUPPORTED, MOR_E_NOMEM, MOR_E_ABORTED, MOR_E_ABI.
 * Thread-safe. */
MOR_API mor_status mor_model_load_file(const char *path, const mor_model_params *params,
                                       mor_model **out);

/* As mor_model_load_file, from a GGUF image in memory. The buffer is borrowed:
 * it must stay valid and unchanged until mor_model_free(). Thread-safe. */
MOR_API mor_status mor_model_load_memory(const void *data, size_t size,
                                         const mor_model_params *params, mor_model **out);

/* Free a model. Every context created from it must be freed first. NULL ok. */
MOR_API void mor_model_free(mor_model *model);

/* Routing the model was trained with. */
enum { MOR_ROUTER_TYPE_NONE = 0, MOR_ROUTER_TYPE_EXPERT = 1, MOR_ROUTER_TYPE_TOKEN = 2 };

/* Hyperparameter getters; 0 for a NULL model. Thread-safe. */
MOR_API int32_t mor_model_n_vocab(const mor_model *model);
MOR_API int32_t mor_model_n_embd(const mor_model *model);
MOR_API int32_t mor_model_n_layer(const mor_model *model);      /* unrolled depth L     */
MOR_API int32_t mor_model_n_recursion(const mor_model *model);  /* N_r (1: no recursion) */
MOR_API int32_t mor_model_n_head(const mor_model *model);
MOR_API int32_t mor_model_n_head_kv(const mor_model *model);
MOR_API int32_t mor_model_head_dim(const mor_model *model);      /* per attention head */
MOR_API int32_t mor_model_n_ctx_train(const mor_model *model);
MOR_API int32_t mor_model_router_type(const mor_model *model);  /* MOR_ROUTER_TYPE_*    */
/* Number of hidden-state capture points (see mor_get_hidden). */
MOR_API int32_t mor_model_n_boundaries(const mor_model *model);
/* Bytes of weights the model reads (mapped or owned). */
MOR_API uint64_t mor_model_size_bytes(const mor_model *model);
/* Special tokens, -1 when the model has none. */
MOR_API mor_token mor_model_token_bos(const mor_model *model);
MOR_API mor_token mor_model_token_eos(const mor_model *model);
/* 1 if the model's texts start with BOS (tokenizer.ggml.add_bos_token; when
 * the file does not say: 1 for SentencePiece-style tokenizers, 0 for
 * byte-level BPE, as llama.cpp decides), 0 otherwise or without a tokenizer. */
MOR_API int32_t mor_model_add_bos(const mor_model *model);

/* Copy the value of a string, integer, float or bool metadata key, formatted
 * as text, into buf (NUL-terminated, truncated to cap). *len_out (may be NULL)
 * receives the full length. MOR_E_OUT_OF_RANGE if the key does not exist,
 * MOR_E_BUFFER_TOO_SMALL if truncated. Thread-safe. */
MOR_API mor_status mor_model_meta_str(const mor_model *model, const char *key,
                                      char *buf, size_t cap, size_t *len_out);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

enum {
    /* Keep the hidden state of every row at every capture point, for
     * mor_get_hidden() (costs n_boundaries * n_batch * n_embd floats). */
    MOR_CTX_CAPTURE_HIDDEN = 1u << 0,
    /* BF16 weights: round each matrix product's activations to bfloat16
     * and multiply with the CPU's bfloat16 dot products, as llama.cpp does
     * (x86-64 with AVX512_BF16 and without AMX; elsewhere no effect: the
     * AMX kernels are exact and fast already). On an AMD Zen 5, 135M
     * shape: prefill 1.5-1.8x, generation 1.1-1.2x the default's speed
     * (docs/PERFORMANCE.md). Each activation moves by up to 2^-8 of
     * itself: there, logits moved by up to 0.014 (rms 0.0025, logit sd
     * 0.48), less than storing F32 weights as BF16 moves them. Results
     * still do not depend on thread count or batching. Other weight types
     * are unaffected. */
    MOR_CTX_FAST_BF16      = 1u << 1
};

/* How keys and values are cached across recursions, and so what a model
 * trained with recursive KV sharing computes.
 *
 * The official code shares K/V across recursions only through its own cache
 * object (RecursiveDynamicCache). The trained semantics of a KV-sharing model
 * (its training forward, and any forward with use_cache on, the default) have
 * it: MOR_KV_SHARED, the default for such a model, computes those, whether a
 * sequence is decoded incrementally or recomputed from an empty cache at
 * every step (mor-run --no-cache). Called with use_cache=False, or under HF
 * generate() (which passes a cache of its own), the official code shares
 * nothing: every recursion's block runs over every token with that
 * recursion's own K/V projections, and routing only decides which rows take
 * the gated update. MOR_KV_DENSE computes that, for comparison with those
 * paths: recomputing the whole sequence at every step gives the official
 * no-cache greedy loop, a prompt then one token per decode gives generate().
 * A model without KV sharing has one official path, recursion-wise, and
 * MOR_KV_DENSE resolves to MOR_KV_RECURSION_WISE for it. */
enum {
    MOR_KV_MODEL_DEFAULT  = 0, /* what the model file says (mor.kv.shared)          */
    MOR_KV_RECURSION_WISE = 1, /* recursion r caches only the tokens active at r    */
    MOR_KV_SHARED         = 2, /* recursions >= 1 reuse recursion 0's K/V; no store.
                                  Recursion 0 caches every token, those its router
                                  did not take included (their outputs are not
                                  used), as the official code does below a first
                                  capacity of 1                                   */
    MOR_KV_DENSE          = 3  /* KV-sharing models, compatibility: every recursion
                                  runs every token (up to the depth cap) and caches
                                  its K/V in its own layers; only the rows the
                                  router took are updated (see above)             */
};

/* How keys and values are stored (mor_context_params.kv_type); the values are
 * ggml's type numbers. Attention always computes in float. */
enum {
    MOR_KV_TYPE_F32  = 0,  /* exact                                              */
    MOR_KV_TYPE_F16  = 1,  /* half the bytes                                     */
    MOR_KV_TYPE_Q8_0 = 8   /* about a quarter: blocks of 32 values with an F16
                              scale (ggml Q8_0); needs a head_dim multiple of 32 */
};

typedef struct mor_context_params {
    uint32_t size;       /* sizeof(mor_context_params) as compiled by the caller   */
    uint32_t flags;      /* MOR_CTX_* bits; default 0                              */
    uint32_t n_ctx;      /* KV cells per cached layer, shared by all sequences;
                            default: min(model n_ctx_train, 4096)                  */
    uint32_t n_batch;    /* max tokens per mor_decode; default 512                 */
    uint32_t n_seq_max;  /* sequence ids are 0..n_seq_max-1; default 1             */
    int32_t  kv_mode;    /* MOR_KV_*; default MOR_KV_MODEL_DEFAULT                 */
    int32_t  n_threads;  /* worker threads; <= 0: one. Results do not depend on it */
    /* Optional: polled between recursion steps of mor_decode; return non-zero
     * to stop. The decode then returns MOR_E_ABORTED and the cache is as it
     * was before the call. */
    int32_t (*abort_callback)(void *user_data);
    void     *abort_user_data;
    /* The maximum context: every position must be < max_pos, else mor_decode
     * fails with MOR_E_POSITION (and changes nothing). 0 (default): the
     * model's training context, mor_model_n_ctx_train(), past which RoPE
     * positions were never trained; < 0: no limit (positions up to
     * INT32_MAX - 1). Independent of n_ctx, the number of cells, which
     * bounds how many tokens are cached at once (MOR_E_KV_FULL). */
    int32_t   max_pos;
    /* MOR_KV_TYPE_*: how the cache stores keys and values; default F32.
     * MOR_E_UNSUPPORTED for Q8_0 when head_dim is not a multiple of 32. */
    int32_t   kv_type;
    /* The most rows of one mor_decode that may ask for logits; 0
     * (default): n_batch. Their buffer, n_outputs x n_vocab floats, is
     * allocated with the context (generation needs one row per sequence:
     * set it to n_seq_max to save memory with a large vocabulary). */
    uint32_t  n_outputs;
} mor_context_params;

MOR_API void mor_context_params_init(mor_context_params *p, size_t size);
#define MOR_CONTEXT_PARAMS_INIT(p) mor_context_params_init((p), sizeof(*(p)))

/* Create a context: all scratch, output and KV memory is allocated here, once;
 * mor_decode does not allocate. The model must outlive the context. params may
 * be NULL. Errors: MOR_E_INVALID_ARG, MOR_E_NOMEM, MOR_E_UNSUPPORTED (e.g. KV
 * sharing on a model whose sharing scheme has no recursion-0 to share),
 * MOR_E_ABI. Thread-safe (several contexts may be created on one model). */
MOR_API mor_status mor_context_create(mor_model *model, const mor_context_params *params,
                                      mor_context **out);
MOR_API void       mor_context_free(mor_context *ctx);   /* NULL ok */

/* The model of a context (borrowed). */
MOR_API const mor_model *mor_context_model(const mor_context *ctx);

/* ------------------------------------------------------------------------ */
/* Batches and decoding                                                      */
/* ------------------------------------------------------------------------ */

/* A batch of up to `capacity` tokens, each with its own position and sequence.
 * Errors: MOR_E_INVALID_ARG (capacity <= 0), MOR_E_NOMEM. */
MOR_API mor_status mor_batch_create(int32_t capacity, mor_batch **out);
MOR_API void       mor_batch_free(mor_batch *batch);   /* NULL ok */
MOR_API void       mor_batch_clear(mor_batch *batch);  /* size back to 0 */
MOR_API int32_t    mor_batch_size(const mor_batch *batch);
/* Append one token. want_logits != 0 asks mor_decode for this row's logits.
 * Errors: MOR_E_INVALID_ARG (NULL), MOR_E_BUFFER_TOO_SMALL (batch full).
 * Token, position and sequence are checked by mor_decode, against the model. */
MOR_API mor_status mor_batch_add(mor_batch *batch, mor_token token, mor_pos pos,
                                 mor_seq_id seq, int32_t want_logits);

/* Run the model over a batch, appending the batch's keys and values to the
 * context's KV cache. Tokens of one sequence must come in increasing position
 * order, after every position already cached for that sequence; sequences
 * may be interleaved freely. Routing follows the context's mor_router.
 *
 * Allocates nothing: every buffer is the context's. Errors:
 * MOR_E_INVALID_ARG (NULL, empty, larger than n_batch, more rows asking
 * for logits than n_outputs),
 * MOR_E_OUT_OF_RANGE (token or sequence id), MOR_E_POSITION,
 * MOR_E_KV_FULL, MOR_E_ABORTED, MOR_E_UNSUPPORTED (routing mode vs model).
 * On any error the KV cache and the previous outputs are unchanged.
 * Not thread-safe for one context. */
MOR_API mor_status mor_decode(mor_context *ctx, const mor_batch *batch);

/* Logits [n_vocab] of row i of the last successful mor_decode, or NULL if row
 * i did not ask for logits or is out of range. Valid until the next
 * mor_decode or mor_context_free. */
MOR_API const float *mor_get_logits(mor_context *ctx, int32_t i);

/* Self-speculative decoding by recursion depth: one step of generation for
 * sequence seq that gives the same tokens as plain decoding, often several
 * per call. `token` is the next input (the last token sampled, not yet
 * decoded) at position pos. The step drafts up to n_draft tokens, each
 * drawn from logits taken after only the first draft_depth recursions (by
 * the caller's sampler, whose state is then put back, so that a draft uses
 * the random number the real draw at its position will use; with a grammar,
 * the argmax), then
 * runs the deeper recursions of the input and all drafts together (one
 * matrix-matrix pass per recursion instead of one matrix-vector pass per
 * token), and samples each position from its verified logits with the
 * caller's sampler (and grammar, when not NULL: mask, sample, accept, as in
 * the grammar's usage below), in order, until a sampled token differs from
 * the draft. The sampled tokens go to out[0..*n_out): 1 <= *n_out <=
 * n_max, n_draft + 1 at most; the last one is the next call's input (at
 * position pos + *n_out). The step also stops after the model's EOS token,
 * after a token that makes the grammar end (MOR_GRAMMAR_MUST_END), and at
 * n_max, so that a caller that stops there sees exactly what plain
 * decoding gives. *n_accepted (may be NULL) counts the drafts taken.
 *
 * Exactness: the tokens are those of decoding one token per mor_decode and
 * sampling each with the same sampler (same seed, same history, same
 * grammar): every position's logits are plain decoding's, bit for bit
 * (recursions below draft_depth run as plain decoding runs them, the deeper
 * ones row by row as the kernels compute any batch, kernels.h), and the
 * sampler draws once per emitted token, in order (the drafts' draws are
 * taken back). This holds for every causal routing mode (expert-choice
 * THRESHOLD and FORCED, token-choice, models without routers, depth caps)
 * and every KV mode; TOPK routing, which ranks a whole batch, is refused.
 *
 * After the call the cache holds the inputs whose outputs were emitted
 * (positions pos .. pos + *n_out - 1): the cells of rejected drafts are
 * gone from every recursion's cache, and mor_get_logits(ctx, i), i <
 * *n_out, gives the logits out[i] was sampled from (the router's read-back
 * likewise). If the first position cannot be sampled (the sampler or the
 * grammar refuses its logits), *n_out is 0 and the input stays decoded, as
 * after mor_decode: sampling mor_get_logits(ctx, 0) then reports why.
 * n_draft is reduced to fit n_batch - 1, n_outputs - 1, n_max - 1 and the
 * maximum position; 0 is plain decoding of one token. draft_depth at or
 * past the depth cap drafts with the whole model (every draft accepted).
 *
 * Errors (nothing changes: cache, sampler, grammar, outputs):
 * MOR_E_INVALID_ARG (NULL ctx, sampler, out or n_out; n_max < 1; n_draft <
 * 0), MOR_E_OUT_OF_RANGE (token, sequence, draft_depth outside [1, N_r]),
 * MOR_E_POSITION (pos not after the sequence's cached positions, or past
 * the maximum context), MOR_E_UNSUPPORTED (TOPK routing, a context with
 * MOR_CTX_CAPTURE_HIDDEN), MOR_E_KV_FULL, MOR_E_ABORTED, MOR_E_NOMEM.
 * Allocates once per context: when the model's output matrix is F32, F16
 * or BF16, the drafts use a Q8_0 copy of it (n_vocab x n_embd x 34/32
 * bytes, made on the first call, freed with the context; the verified
 * logits use the model's own). Not thread-safe for one context (as
 * mor_decode). */
MOR_API mor_status mor_speculate(mor_context *ctx, mor_seq_id seq, mor_token token, mor_pos pos,
                                 int32_t n_draft, int32_t draft_depth, mor_sampler *sampler,
                                 mor_grammar *grammar, mor_token *out, int32_t n_max, int32_t *n_out,
                                 int32_t *n_accepted);

/* Hidden state [n_embd] of row i at capture point b of the last decode, or
 * NULL (no MOR_CTX_CAPTURE_HIDDEN, or out of range). Capture points follow the
 * official model's module list: b = 0 is the embedding, b = k the input of
 * module k (the unique first layer, each expert-choice recursion, the
 * token-choice MoR block, the unique last layer each count as one module;
 * in a model without routers every layer is a module), and the last point
 * (mor_model_n_boundaries() - 1) is the final RMSNorm output. */
MOR_API const float *mor_get_hidden(mor_context *ctx, int32_t b, int32_t i);

/* Pooling of mor_embeddings_seq. */
enum {
    MOR_POOL_MEAN = 1,  /* the mean of the sequence's rows                       */
    MOR_POOL_LAST = 2   /* its last row (the highest position): causal models'
                           usual sentence embedding                            */
};
/* mor_embeddings_seq flags. */
enum {
    MOR_EMBD_NORMALIZE = 1u << 0   /* scale to unit Euclidean length (OpenAI's and
                                      llama.cpp's server default); a zero vector
                                      stays zero                                 */
};

/* The embedding of sequence seq from the last successful mor_decode, into
 * out[0..n_embd): the final hidden states (the final norm's output, the last
 * capture point of mor_get_hidden, as llama.cpp's embeddings) of that decode's
 * rows of seq, pooled (MOR_POOL_*; the mean is summed in double, in row order)
 * and, with MOR_EMBD_NORMALIZE, normalized. Only the rows of that one decode
 * count: to embed a text, decode all its tokens in one batch under a sequence
 * of their own (no logits needed), call this, then remove the sequence from
 * the cache (mor_kv_seq_rm). Every row ran its own routed depth; the final
 * norm applies to each as for logits.
 * Needs a context created with MOR_CTX_CAPTURE_HIDDEN.
 * Errors (out untouched): MOR_E_INVALID_ARG (NULL, no MOR_CTX_CAPTURE_HIDDEN,
 * unknown pooling or flags), MOR_E_BUFFER_TOO_SMALL (cap < n_embd),
 * MOR_E_OUT_OF_RANGE (the last decode had no row of seq).
 * Not thread-safe for one context (as mor_decode). */
MOR_API mor_status mor_embeddings_seq(mor_context *ctx, mor_seq_id seq, int32_t pooling, uint32_t flags,
                                      float *out, int32_t cap);

/* ------------------------------------------------------------------------ */
/* Router: how deep each token goes, and what it decided                     */
/* ------------------------------------------------------------------------ */

enum {
    MOR_ROUTE_DEFAULT   = 0, /* the model's own: TOPK for expert-choice, TOKEN for
                                token-choice, all layers for models without routers */
    MOR_ROUTE_TOPK      = 1, /* official expert-choice: per sequence and per call,
                                k_r = max(1, int(c_r * T)), hierarchical; not causal */
    MOR_ROUTE_THRESHOLD = 2, /* causal: a token goes on at r while it went on at r-1
                                and sigmoid(z_r) >= threshold_r (a recursion of
                                capacity 1.0 is always taken)                      */
    MOR_ROUTE_FORCED    = 3, /* every token gets exactly `forced_depth` recursions  */
    MOR_ROUTE_TOKEN     = 4  /* token-choice: depth = argmax of the router, once   */
};

/* The context's router (borrowed; lives as long as the context). */
MOR_API mor_router *mor_context_router(mor_context *ctx);

/* Choose the routing mode. forced_depth is used by MOR_ROUTE_FORCED only and
 * must be in [1, N_r]. MOR_E_UNSUPPORTED when the mode does not fit the model
 * (TOPK/THRESHOLD need expert-choice routers, TOKEN a token-choice router;
 * FORCED works on any MoR model). Changes apply to the next decode. */
MOR_API mor_status mor_router_set_mode(mor_router *r, int32_t mode, int32_t forced_depth);
MOR_API int32_t    mor_router_get_mode(const mor_router *r);
/* THRESHOLD mode: per-recursion threshold on sigmoid(z) (or on the router's
 * function output); defaults come from the model file (0.5). */
MOR_API mor_status mor_router_set_threshold(mor_router *r, int32_t recursion, float threshold);
MOR_API float      mor_router_get_threshold(const mor_router *r, int32_t recursion);
/* Cap every token's depth at max_depth recursions (0 = no cap). Applies to
 * every mode. */
MOR_API mor_status mor_router_set_max_depth(mor_router *r, int32_t max_depth);
/* Exits for mor_decode on this context's router: exit_mode MOR_EXIT_* (see
 * there) with its threshold, on top of the mode's depths; MOR_EXIT_NONE
 * (the default) turns them off. MOR_E_UNSUPPORTED: MOR_EXIT_LEARNED on a
 * model without an exit gate, any exit on a token-choice model, or a
 * server's router (a server's exits are its mor_server_params');
 * MOR_E_INVALID_ARG: an unknown mode, a NaN threshold, or a learned-exit q
 * outside [0, 1]. A failed call changes nothing. Applies to the next decode. */
MOR_API mor_status mor_router_set_exit(mor_router *r, int32_t exit_mode, float threshold);

/* After a decode: the number of recursions row i ran (0..N_r), for the rows of
 * the last successful mor_decode. Writes min(n, rows) values and returns the
 * number of rows, or a negative mor_status. */
MOR_API int32_t mor_router_get_depths(const mor_router *r, int32_t *depths, int32_t n);
/* After a decode: row i's router output per recursion, into out[0..N_r-1].
 * Expert-choice: the gate alpha*f(z_r) of each recursion where the token was a
 * candidate, NAN where it was not. Token-choice: the N_r probabilities.
 * Returns N_r, or a negative mor_status. */
MOR_API int32_t mor_router_get_scores(const mor_router *r, int32_t i, float *out, int32_t n);
/* As get_scores, but the raw router logits z (before alpha and the function). */
MOR_API int32_t mor_router_get_logits(const mor_router *r, int32_t i, float *out, int32_t n);

typedef struct mor_router_stats {
    uint32_t size;              /* set by the caller: sizeof(mor_router_stats)     */
    uint64_t n_tokens;          /* tokens routed since the last reset              */
    double   mean_depth;        /* mean recursions per token                       */
    uint64_t n_at_depth[MOR_MAX_RECURSIONS + 1];   /* tokens that ran exactly d recursions */
} mor_router_stats;
/* Depth statistics accumulated over decodes since the last reset. */
MOR_API mor_status mor_router_get_stats(const mor_router *r, mor_router_stats *out);
MOR_API void       mor_router_reset_stats(mor_router *r);

/* ------------------------------------------------------------------------ */
/* KV cache                                                                  */
/* ------------------------------------------------------------------------ */

/* The context's cache (borrowed; lives as long as the context). The sequence
 * operations follow llama.cpp: p0 < 0 means from the start, p1 < 0 to the end,
 * the range is [p0, p1). They apply to every layer and recursion at once. */
MOR_API mor_kv_cache *mor_context_kv(mor_context *ctx);

MOR_API void       mor_kv_clear(mor_kv_cache *kv);
/* Remove positions [p0,p1) of sequence seq (seq < 0: of every sequence). */
MOR_API mor_status mor_kv_seq_rm(mor_kv_cache *kv, mor_seq_id seq, mor_pos p0, mor_pos p1);
/* Copy positions [p0,p1) of src into dst (prefix reuse). Cells are duplicated;
 * MOR_E_KV_FULL (nothing copied) when there is no room. */
MOR_API mor_status mor_kv_seq_cp(mor_kv_cache *kv, mor_seq_id src, mor_seq_id dst,
                                 mor_pos p0, mor_pos p1);
/* Remove every sequence but seq. */
MOR_API mor_status mor_kv_seq_keep(mor_kv_cache *kv, mor_seq_id seq);
/* Largest cached position of seq, or -1 when it has none. */
MOR_API mor_pos    mor_kv_seq_pos_max(const mor_kv_cache *kv, mor_seq_id seq);
/* Add delta to the positions [p0,p1) of sequence seq, as llama.cpp's seq_add
 * does for a context shift: keep n_keep tokens, mor_kv_seq_rm the next
 * n_discard, then mor_kv_seq_add(kv, seq, n_keep + n_discard, -1, -n_discard)
 * and decode on at the lower positions. The cached keys of those tokens, in
 * every layer and recursion that holds them (recursion-wise, shared or
 * dense), are rotated by delta positions: RoPE is a rotation, so they become
 * the keys of the new positions up to rounding (F32 cache: float rounding;
 * F16 and Q8_0: dequantized, rotated and stored again, one more rounding).
 * Values are unchanged. The tokens that move keep their order within the
 * sequence. MOR_E_POSITION, and nothing changes, when a new position would
 * be negative or above INT32_MAX - 1, or would reach or pass a position of
 * seq outside [p0,p1) (remove those first). A range without tokens, or
 * delta 0, changes nothing and is not an error. A shift is exact for what it
 * moves, but not the same as decoding the kept tokens afresh when tokens
 * were removed: their deeper layers' keys and values were computed with the
 * removed tokens in view (llama.cpp's context shift is approximate the same
 * way). Errors: MOR_E_INVALID_ARG (NULL kv), MOR_E_OUT_OF_RANGE (seq),
 * MOR_E_POSITION. Does not allocate. */
MOR_API mor_status mor_kv_seq_add(mor_kv_cache *kv, mor_seq_id seq, mor_pos p0, mor_pos p1, mor_pos delta);

/* llama.cpp's truncation of a prompt longer than a context of n_ctx
 * positions (its server's and mor-run's, MOR_SERVE_CONTEXT_SHIFT's): the
 * first n_keep tokens stay, then whole blocks of (n_ctx - n_keep) / 2
 * tokens after them are dropped until the rest fits, the end of the prompt
 * staying. tokens[0..n_tokens-1] is rewritten in place; returns the new
 * length (n_tokens when it fits already: nothing changes). Errors (a
 * negative mor_status, nothing changed): MOR_E_INVALID_ARG (NULL tokens,
 * n_tokens < 0, and for a prompt that does not fit n_keep outside
 * [0, n_ctx - 2], which leaves nothing to drop). Thread-safe; does not
 * allocate. */
MOR_API int32_t mor_prompt_truncate(mor_token *tokens, int32_t n_tokens, int32_t n_ctx, int32_t n_keep);

/* Recursion selector for the accounting functions below. */
#define MOR_KV_UNIQUE_LAYERS (-1)   /* layers outside the recursions (first/last) */
#define MOR_KV_ALL           (-2)   /* everything                                 */
/* Exact bytes of K/V storage allocated for, and in use by, recursion r
 * (0..N_r-1), or MOR_KV_UNIQUE_LAYERS, or MOR_KV_ALL. "In use" counts the
 * cells that hold a token. Under MOR_KV_SHARED, recursions >= 1 allocate and
 * use 0 bytes; under MOR_KV_DENSE every recursion holds every token. Either
 * out pointer may be NULL. */
MOR_API mor_status mor_kv_bytes(const mor_kv_cache *kv, int32_t r,
                                uint64_t *allocated, uint64_t *used);
/* Number of cached tokens summed over the layers of recursion r (same r as
 * mor_kv_bytes), or a negative mor_status. */
MOR_API int64_t    mor_kv_n_cells_used(const mor_kv_cache *kv, int32_t r);
/* The cache mode in effect: MOR_KV_RECURSION_WISE, MOR_KV_SHARED or
 * MOR_KV_DENSE (never MOR_KV_MODEL_DEFAULT). */
MOR_API int32_t    mor_kv_mode(const mor_kv_cache *kv);

/* ------------------------------------------------------------------------ */
/* Sampling                                                                  */
/* ------------------------------------------------------------------------ */

/* Stage ids of mor_sampler_params.samplers (llama.cpp's `samplers` names in
 * brackets). */
enum {
    MOR_STAGE_PENALTIES   = 1,  /* repeat, frequency, presence penalties ("penalties") */
    MOR_STAGE_DRY         = 2,  /* DRY ("dry")                                        */
    MOR_STAGE_TOP_N_SIGMA = 3,  /* top-n-sigma ("top_n_sigma")                        */
    MOR_STAGE_TOP_K       = 4,  /* top-k ("top_k")                                    */
    MOR_STAGE_TYPICAL_P   = 5,  /* locally typical sampling ("typ_p")                 */
    MOR_STAGE_TOP_P       = 6,  /* nucleus ("top_p")                                  */
    MOR_STAGE_MIN_P       = 7,  /* min-p ("min_p")                                    */
    MOR_STAGE_XTC         = 8,  /* exclude top choices ("xtc")                        */
    MOR_STAGE_TEMPERATURE = 9   /* temperature, dynamic temperature ("temperature")   */
};
/* The most stages mor_sampler_params.samplers holds. */
#define MOR_SAMPLERS_MAX 16

/* The fields after repeat_last_n came with the llama.cpp sampling set (issue
 * 42); each has llama.cpp's meaning (llama.cpp's own name in brackets when it
 * differs) and a default that turns it off, so that a caller compiled with
 * the older, shorter struct gets exactly the older chain. */
typedef struct mor_sampler_params {
    uint32_t size;            /* sizeof(mor_sampler_params) as compiled by caller */
    uint64_t seed;            /* PRNG seed; same seed + same logits = same tokens */
    float    temperature;     /* <= 0: greedy (argmax, lowest id on ties); def 0.8 */
    int32_t  top_k;           /* keep the k most likely; <= 0 off; default 40     */
    float    top_p;           /* nucleus; >= 1 off; default 0.95                  */
    float    min_p;           /* drop p < min_p * p_max; <= 0 off; default 0.05   */
    float    repeat_penalty;  /* CTRL-style penalty on recent tokens; 1 off (def) */
    int32_t  repeat_last_n;   /* how many recent tokens the penalties look at
                                 (repeat, frequency, presence); 0: penalties off;
                                 default 64 (llama.cpp's -1, the context, is the
                                 caller's to turn into a count)                   */
    /* OpenAI / llama.cpp penalties, with repeat_penalty in one stage: a token
     * seen c > 0 times among the last repeat_last_n gets
     * logit -= c * frequency_penalty + presence_penalty. Finite, any sign;
     * 0 off (default). */
    float    presence_penalty;
    float    frequency_penalty;
    /* Top-p, min-p, typical-p and XTC keep at least min_keep candidates
     * (top-k does not, as in llama.cpp). >= 0; default 0. */
    int32_t  min_keep;
    /* Locally typical sampling (typ_p): keep the tokens whose surprise is
     * closest to the entropy, up to probability mass typical_p. Not NaN; >= 1
     * off (default 1). */
    float    typical_p;
    /* Keep logits >= max - top_n_sigma * (their standard deviation). Not NaN;
     * <= 0 off (default -1). */
    float    top_n_sigma;
    /* Dynamic temperature: the temperature stage uses lo + (hi - lo) h^exponent,
     * lo = max(0, temperature - range), hi = temperature + range, h the
     * entropy of the candidates' probabilities over its maximum log n (n >= 2
     * candidates). Finite; range <= 0 off (default 0); exponent default 1. */
    float    dynatemp_range;
    float    dynatemp_exponent;
    /* XTC: with probability xtc_probability (one draw of the PRNG), drop all
     * but the least likely of the tokens of probability >= xtc_threshold.
     * Not NaN; probability <= 0 (default 0) or threshold > 0.5 (default
     * 0.1) off. */
    float    xtc_probability;
    float    xtc_threshold;
    /* Mirostat 1 or 2 (0 off, default): replaces the stages by temperature
     * and mirostat's own truncation, steering the surprise of the drawn
     * tokens toward mirostat_tau (default 5) at learning rate mirostat_eta
     * (default 0.1); its state mu starts at 2 tau (mor_sampler_reset too).
     * Logit bias applies; the penalties and DRY do not (as in llama.cpp). */
    int32_t  mirostat;
    float    mirostat_tau;
    float    mirostat_eta;
    /* DRY ("don't repeat yourself"): a token that would extend a sequence
     * repeated from the last dry_penalty_last_n tokens (>= 0; 0 off; default
     * 64) by more than dry_allowed_length (>= 0; default 2) tokens gets
     * logit -= dry_multiplier * dry_base^(length - dry_allowed_length).
     * dry_multiplier finite, 0 off (default); dry_base finite, < 1 off
     * (default 1.75). A repetition does not reach back across a sequence
     * breaker: see mor_sampler_set_dry_breakers (none by default). */
    float    dry_multiplier;
    float    dry_base;
    int32_t  dry_allowed_length;
    int32_t  dry_penalty_last_n;
    /* The order of the stages: samplers[0..n_samplers) (MOR_STAGE_*, a
     * stage may appear more than once, as in llama.cpp's `samplers`); a
     * stage left out is not applied. n_samplers 0 (default): the default order
     * PENALTIES, DRY, TOP_N_SIGMA, TEMPERATURE, TOP_K, TYPICAL_P, TOP_P,
     * MIN_P, XTC: llama.cpp's default order except that the temperature
     * comes before the truncations, as libmor's sampler always had it (in
     * llama.cpp's own order, "temperature" last, top-p and min-p see the
     * probabilities before the temperature). In [0, MOR_SAMPLERS_MAX]. */
    int32_t  n_samplers;
    int32_t  samplers[MOR_SAMPLERS_MAX];
} mor_sampler_params;

MOR_API void mor_sampler_params_init(mor_sampler_params *p, size_t size);
#define MOR_SAMPLER_PARAMS_INIT(p) mor_sampler_params_init((p), sizeof(*(p)))

/* The chain applied: the logit bias (mor_sampler_set_logit_bias); then, if
 * temperature <= 0, the penalties and DRY (where the order has them) and
 * greedy (the first maximum); else, with mirostat, temperature and
 * mirostat; else the stages in the params' order and a draw from the seeded
 * PRNG. Each stage works on what the previous ones kept: the truncations in
 * their order, the temperature where it stands (a stage after it sees the
 * probabilities at that temperature). Ties are broken by the lower id, every
 * step is taken in double in a fixed order without libm's exp or log, so
 * that the same seed, params, history, biases and logits give the same
 * token on every platform.
 * Errors: MOR_E_INVALID_ARG (a NaN, infinite or out-of-range value where
 * not allowed; the message names the field), MOR_E_NOMEM, MOR_E_ABI. */
MOR_API mor_status mor_sampler_create(const mor_sampler_params *params, mor_sampler **out);
MOR_API void       mor_sampler_free(mor_sampler *s);   /* NULL ok */
/* Pick a token from logits[0..n_vocab-1] (not modified), write it to *out and
 * add it to the sampler's history (for the penalties and DRY). A logit of
 * -inf bans its token. MOR_E_INVALID_ARG, changing nothing (neither the
 * history nor the PRNG), when a logit is NaN or +inf or every logit is -inf
 * or banned by the logit bias: no token is right for such logits (they come
 * from non-finite weights or overflowed activations). */
MOR_API mor_status mor_sampler_sample(mor_sampler *s, const float *logits, int32_t n_vocab,
                                      mor_token *out);
/* Add a token to the history without sampling (e.g. the prompt). */
MOR_API void       mor_sampler_accept(mor_sampler *s, mor_token token);
/* Forget the history, re-seed the PRNG with the params' seed and set
 * mirostat's mu back to 2 tau. The logit bias and the DRY breakers stay. */
MOR_API void       mor_sampler_reset(mor_sampler *s);
/* Logit bias (llama.cpp's logit_bias, OpenAI's): before every other stage,
 * logit[ids[i]] += bias[i] for i in [0, n) (copied; a token listed twice gets
 * both); -inf bans the token. Replaces the sampler's previous list; n == 0
 * clears it. ids >= n_vocab of a sample are ignored there. Errors, changing
 * nothing: MOR_E_INVALID_ARG (NULL s, n < 0, NULL arrays with n > 0, a
 * NaN or +inf bias), MOR_E_OUT_OF_RANGE (a negative id), MOR_E_NOMEM. */
MOR_API mor_status mor_sampler_set_logit_bias(mor_sampler *s, const mor_token *ids, const float *bias,
                                              int32_t n);
/* DRY's sequence breakers, as token sequences: breaker i is the lens[i] >= 1
 * tokens that follow breakers 0..i-1 in tokens[] (copied). A repetition DRY
 * measures stops where a breaker occurs in the history, and a one-token
 * breaker is never penalised. llama.cpp takes strings (default "\n", ":",
 * "\"", "*") and turns each into the token sequences that can spell it
 * (every token containing it, or ending in a prefix of it followed by the
 * tokenization of the rest); the caller does that with its vocabulary
 * (mor-server and mor-run do, as llama.cpp) and passes the sequences here.
 * Replaces the previous breakers; n == 0 clears them (the default).
 * Errors, changing nothing: MOR_E_INVALID_ARG (NULL s, n < 0, NULL arrays
 * with n > 0, a length < 1), MOR_E_NOMEM. */
MOR_API mor_status mor_sampler_set_dry_breakers(mor_sampler *s, const mor_token *tokens, const int32_t *lens,
                                                int32_t n);

/* Log-probabilities of the tokens under logits[0..n_vocab-1] (not
 * modified): logprob(i) = logits[i] - log(sum_j exp(logits[j])), the
 * log-softmax of the logits as given (no temperature, penalty or
 * truncation: the model's own distribution when they are a context's
 * logits), computed in double and rounded to float. A logit of -inf
 * gives -inf. When logprob_out is not NULL, *logprob_out receives
 * logprob(token). When k > 0, the k most likely tokens, most likely first
 * (ties: the lower id first, as greedy sampling picks), go to
 * top_tokens[0..k-1] and their log-probabilities to top_logprobs[0..k-1]
 * (caller's arrays). The same bits on every platform (the sampler's
 * arithmetic rules); allocates nothing; O(n_vocab log k). Errors, writing
 * nothing: MOR_E_INVALID_ARG (NULL logits, n_vocab <= 0, k outside
 * [0, n_vocab], a NULL array with k > 0, a NaN or +inf logit, every logit
 * -inf), MOR_E_OUT_OF_RANGE (token outside [0, n_vocab) when logprob_out
 * is not NULL; token is ignored otherwise). Thread-safe (it reads only its
 * arguments). */
MOR_API mor_status mor_logprobs(const float *logits, int32_t n_vocab, mor_token token, float *logprob_out,
                                int32_t k, mor_token *top_tokens, float *top_logprobs);

/* ------------------------------------------------------------------------ */
/* Grammar-constrained sampling                                              */
/* ------------------------------------------------------------------------ */

/* A grammar constraint: the output is kept a prefix of a string of a GBNF
 * grammar (llama.cpp's grammar language: rules `name ::= ...`, "literals"
 * with \n \t \xHH \uHHHH escapes, [a-z] and [^...] classes, `.`, groups,
 * alternatives `|`, repetitions * + ? {m} {m,} {m,n}, # comments). Use per
 * generated token:
 *
 *     mor_grammar_apply(g, logits, n_vocab);      (a copy of the logits)
 *     mor_sampler_sample(s, logits, n_vocab, &t);
 *     mor_grammar_accept(g, t);
 *
 * and stop when mor_grammar_state() has MOR_GRAMMAR_MUST_END or an end token
 * was drawn. Tokens are byte strings: a token is allowed when its bytes can
 * continue the output, also when it spans several grammar elements or ends
 * inside a UTF-8 character (the character is finished by the next tokens).
 * Control, unknown and unused tokens are never allowed; the end tokens only
 * where the output is a whole string of the grammar. Prompt tokens are not
 * given to the grammar: it constrains what is generated.
 *
 * Cost: masking walks the vocabulary's tokens sorted by their bytes and
 * reads each distinct prefix once, dropping every token under a prefix the
 * grammar refuses; docs/SERVING.md gives measured times. Memory is planned
 * at creation (about 1.2 MB of matcher state, and the vocabulary's bytes); a
 * prefix that would nest deeper or stay ambiguous beyond that is treated as
 * not allowed. Time is bounded too: a mask or token takes at most 2^24
 * matcher steps (about 0.15 s on one AMD EPYC Zen 2 core; a JSON grammar's
 * masks on GPT-2's 50K vocabulary take under 3% of it), beyond which the call fails
 * with MOR_E_UNSUPPORTED rather than return a mask that drops allowed
 * tokens: a grammar that keeps thousands of ways of matching open at once
 * (many alternatives sharing a long prefix) can reach it. A mor_grammar
 * (declared with the other handles above) is used by one thread at a time. */

/* Parse gbnf[0..len) (UTF-8) for a model's vocabulary, starting at rule
 * `root` (NULL: "root"). end_tokens[0..n_end) end a generation (copied);
 * end_tokens NULL: the model's EOS, if any (n_end = 0 with end_tokens not
 * NULL: none). Errors: MOR_E_INVALID_ARG (a syntax
 * error, with its line and column; an undefined or twice-defined rule;
 * left recursion, which could never be matched; a start rule that matches no
 * string), MOR_E_OUT_OF_RANGE (an end token), MOR_E_UNSUPPORTED (no
 * tokenizer; or the grammar's start alone goes beyond the matcher's bounds:
 * over 4096 ways of matching open, or 4096 nested rules), MOR_E_NOMEM. The
 * model must outlive the grammar. */
MOR_API mor_status mor_grammar_create(const mor_model *model, const char *gbnf, size_t len, const char *root,
                                      const mor_token *end_tokens, int32_t n_end, mor_grammar **out);
MOR_API void       mor_grammar_free(mor_grammar *g);   /* NULL ok */
/* Set logits[t] = -inf for every token t that cannot come next. n_vocab
 * must be the model's. Errors, leaving the logits and the grammar unchanged:
 * MOR_E_INVALID_ARG when no token can come next (the message says what the
 * grammar expects: a grammar the vocabulary cannot write, or an output that
 * is complete with no end token set); MOR_E_UNSUPPORTED when the mask goes
 * over the work bound (above). */
MOR_API mor_status mor_grammar_apply(mor_grammar *g, float *logits, int32_t n_vocab);
/* Advance the grammar by a generated token. MOR_E_INVALID_ARG, changing
 * nothing, for a token the grammar does not allow there;
 * MOR_E_OUT_OF_RANGE for an id outside the vocabulary; MOR_E_UNSUPPORTED,
 * changing nothing, when reading it goes over the work bound (never for a
 * token the last mor_grammar_apply allowed). */
MOR_API mor_status mor_grammar_accept(mor_grammar *g, mor_token token);
enum {
    MOR_GRAMMAR_CAN_END  = 1, /* the output is a whole string of the grammar */
    MOR_GRAMMAR_MUST_END = 2  /* ... and nothing can follow (or an end token was accepted) */
};
/* MOR_GRAMMAR_* flags of the output so far, or a negative mor_status. */
MOR_API int32_t    mor_grammar_state(const mor_grammar *g);
/* Back to the start: no output. */
MOR_API void       mor_grammar_reset(mor_grammar *g);
/* Make g lazy, as llama.cpp's lazy grammars (for a tool call a reply may or
 * may not make): the output is free until its text contains one of the
 * trigger words words[0..n_words) (each 1 to 64 bytes, at most 16 words;
 * copied), and from that word's first byte on it is kept a prefix of a
 * string of the grammar. Before a trigger, mor_grammar_apply allows every
 * token (control and end tokens too) but one that completes a word and goes
 * on where the grammar cannot, mor_grammar_accept takes any of those, and
 * mor_grammar_state is MOR_GRAMMAR_CAN_END (with MUST_END once an end token
 * was accepted). A word is found in the text of the text tokens; a control
 * token between two parts of a word breaks it. A word that the grammar
 * cannot begin with never triggers: tokens completing it are refused.
 * n_words 0 makes g eager again. Either way g is reset (mor_grammar_reset,
 * which keeps the words). Cost: a pass over the vocabulary here; before a
 * trigger, a mask is a pass over the tokens that can complete a word. Errors,
 * changing nothing: MOR_E_INVALID_ARG (NULL g, a NULL, empty or too long
 * word, n_words out of [0, 16]), MOR_E_NOMEM. */
MOR_API mor_status mor_grammar_set_triggers(mor_grammar *g, const char *const *words, int32_t n_words);

/* Grammars from JSON Schema                                                 */
/* ------------------------------------------------------------------------ */

/* A GBNF grammar (llama.cpp's grammar language) whose rule `root` accepts
 * the JSON texts valid under the JSON Schema in schema[0..len-1] (UTF-8
 * JSON, RFC 8259), for grammar-constrained sampling (mor_grammar_create).
 * The grammar's text goes to buf (not NUL-terminated); *len_out receives its
 * byte count (the count needed, with MOR_E_BUFFER_TOO_SMALL, when cap is too
 * small; buf may then be NULL with cap 0). The same schema gives the same
 * bytes.
 *
 * Supported, as llama.cpp's json-schema-to-grammar: type (a name or an array
 * of names: object, array, string, number, integer, boolean, null); object
 * properties and required (the required properties in the order of
 * `properties`, then each optional one, optional, in that order; a required
 * name not in `properties` takes any value), additionalProperties (absent or
 * false: no other members when there are properties or required names;
 * true or a schema: other members after them, under any key, a listed one
 * too); array items, minItems, maxItems, prefixItems (or items as an array:
 * a tuple whose elements from the minItems-th on are optional, as JSON
 * Schema reads it, followed by elements of `items`); string minLength,
 * maxLength; string pattern (an ECMA-262 regular expression: literals,
 * ., classes, \d \w \s and their negations, groups, alternatives,
 * quantifiers; a leading ^ and trailing $ anchor it, else it is a search
 * as JSON Schema reads it; no lookaround, backreferences or inner
 * anchors); string format date, time, date-time (RFC 3339), uuid, email
 * (dot-atom addresses), hostname, ipv4 (any other format is refused:
 * validators often assert it); integer minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum (both the number and draft 4's
 * boolean forms; fractional bounds round inward); enum and const of any
 * JSON values (those fitting the type); anyOf and oneOf (as alternatives:
 * oneOf's exclusivity is not enforced); allOf of object schemas (their
 * properties merged) or of one schema; local $ref ("#", "#/$defs/X",
 * "#/definitions/X", any "#/..." pointer; a cycle becomes a recursive
 * rule); the empty schema {} and true (any JSON value). Without "type",
 * properties/required/additionalProperties imply an object,
 * items/prefixItems/minItems/maxItems an array, minLength/maxLength/
 * pattern/format a string. Between tokens the grammar allows a bounded amount of whitespace;
 * strings are JSON strings (escapes allowed, no raw control characters);
 * numbers JSON numbers of at most 16 digits per part.
 *
 * Errors, writing nothing to buf: MOR_E_INVALID_ARG (NULL schema or len_out;
 * invalid JSON, naming the byte, line and column; a schema that no value
 * satisfies, e.g. minItems > maxItems or a $ref cycle through required
 * properties, or that the converter cannot express: bounds on numbers
 * that are not "type": "integer", pattern or format on other than
 * "type": "string", either beside enum or const or minLength/maxLength,
 * the other keywords that restrict values beyond the list above, a $ref
 * that is not local or does not resolve, a $ref cycle with no object or
 * array between, nesting deeper than 64 schemas or 128 JSON levels, counts
 * above 10000, more than 64 prefixItems; mor_last_error() names the part as
 * a JSON pointer, e.g. "#/properties/tags/maxItems"), MOR_E_NOMEM,
 * MOR_E_BUFFER_TOO_SMALL. Thread-safe (it reads only its arguments). */
MOR_API mor_status mor_json_schema_to_grammar(const char *schema, size_t len, char *buf, size_t cap,
                                              size_t *len_out);

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

enum {
    MOR_TOKENIZE_ADD_BOS       = 1u << 0, /* prepend the BOS token if the model has one  */
    MOR_TOKENIZE_PARSE_SPECIAL = 1u << 1, /* match special tokens in the text, as HF does */
    /* Match only the user-defined added tokens (not the control ones): what
     * HF does with split_special_tokens=True and llama.cpp with
     * parse_special=false, for vocabularies such as GPT-NeoX's (runs of
     * spaces) or DeepSeek's. Implied by MOR_TOKENIZE_PARSE_SPECIAL. */
    MOR_TOKENIZE_PARSE_USER_DEFINED = 1u << 2
};

/* Tokenize `len` bytes of `text` (UTF-8) into out[0..cap-1]; *n_out receives
 * the number of tokens. If cap is too small, nothing useful is written,
 * *n_out is the count needed and MOR_E_BUFFER_TOO_SMALL is returned.
 * MOR_E_UNSUPPORTED if the model has no tokenizer. Thread-safe (const model).
 *
 * Added tokens: without flags none is matched and the text is all plain text;
 * MOR_TOKENIZE_PARSE_USER_DEFINED matches the user-defined ones,
 * MOR_TOKENIZE_PARSE_SPECIAL all (control, user-defined, unknown), leftmost
 * first and the longest there. Each stretch of text between them is
 * tokenized on its own.
 *
 * BOS: MOR_TOKENIZE_ADD_BOS prepends the BOS token whenever the model has one
 * (mor_model_token_bos() >= 0), whatever mor_model_add_bos() says; EOS is
 * never added. With the flags of a model's training, pass ADD_BOS when
 * mor_model_add_bos() is 1.
 *
 * Byte-level BPE (GPT-2, GPT-NeoX/Pythia, SmolLM, StarCoder, Falcon,
 * DeepSeek, ...): each byte is encoded by its token, invalid UTF-8 bytes as
 * one-byte characters of their own, so any text decodes back; a byte the
 * vocabulary has no token for (StarCoder's C0 and C1, some of Falcon's
 * control bytes) is dropped, as HF and llama.cpp drop it. Where the model's
 * tokenizer normalizes (GPT-NeoX's tokenizer.json: NFC), each stretch is
 * tokenized in NFC, and decoding gives that NFC.
 *
 * SentencePiece-style (Llama, TinyLlama, Gemma): spaces become U+2581 and,
 * where the model says so, a U+2581 goes before the text (and before each
 * stretch after a special token: SentencePiece's dummy prefix, as llama.cpp
 * and HF's legacy Llama tokenizers do it; HF's Metaspace adds it only where
 * the stretch does not start with a space, and "first" only at the start of
 * the text; Gemma adds none). A character outside the vocabulary becomes the
 * <0xNN> tokens of its bytes (byte fallback), or the unknown token when the
 * vocabulary has no byte tokens. */
MOR_API mor_status mor_tokenize(const mor_model *model, const char *text, size_t len,
                                uint32_t flags, mor_token *out, int32_t cap, int32_t *n_out);

/* The text of `n` tokens into buf (not NUL-terminated); *len_out receives the
 * byte count (the count needed, with MOR_E_BUFFER_TOO_SMALL, if cap is too
 * small). Control, unknown and user-defined tokens are rendered as their
 * text; byte-level tokens give their bytes; SentencePiece tokens give their
 * text with U+2581 as a space and <0xNN> as the byte NN. When the model puts
 * a space before the text (SentencePiece, above), one leading space of the
 * first token is dropped, as llama.cpp's llama_detokenize and HF's decoder
 * do, so that decoding what mor_tokenize gave (without ADD_BOS) gives the
 * text back (a U+2581 in it comes back as a space, and under HF Metaspace's
 * rules a leading space is lost, as in HF). To print tokens one at a time,
 * use mor_token_to_piece.
 * MOR_E_OUT_OF_RANGE for an invalid id. Thread-safe. */
MOR_API mor_status mor_detokenize(const mor_model *model, const mor_token *tokens, int32_t n,
                                  char *buf, size_t cap, size_t *len_out);

/* The bytes of one token as they appear inside a text, into buf (not
 * NUL-terminated): mor_detokenize of the token without the leading-space
 * rule, so that the pieces of a sequence, concatenated, are its text (with
 * the prefix space, if any). *len_out receives the byte count (the count
 * needed, with MOR_E_BUFFER_TOO_SMALL). MOR_E_OUT_OF_RANGE for an invalid
 * id, MOR_E_UNSUPPORTED without a tokenizer. Thread-safe. */
MOR_API mor_status mor_token_to_piece(const mor_model *model, mor_token token, char *buf, size_t cap,
                                      size_t *len_out);

/* ------------------------------------------------------------------------ */
/* Serving: many sequences at once                                           */
/* ------------------------------------------------------------------------ */

/* A server decodes many requests (prompt -> generated tokens) over one
 * context of its own. Each step advances every running request; finished
 * slots are refilled from a FIFO queue. Routing is causal, so that a
 * request's output does not depend on the others: expert-choice models run
 * MOR_ROUTE_THRESHOLD (set at creation; MOR_ROUTE_FORCED may be chosen
 * instead), token-choice models MOR_ROUTE_TOKEN, models without routers
 * every recursion (up to the depth cap). Tokens, depths and logits are then
 * bitwise those of decoding each request alone with mor_decode (its whole
 * prompt in one call, then one token per call), whatever the mode, the other
 * requests, how its prompt was split into chunks and which KV cells it got. */
typedef struct mor_server mor_server;
typedef int32_t mor_request_id;   /* >= 0, unique within a server */

enum {
    MOR_SERVE_SERIAL    = 0, /* one request after another, through mor_decode          */
    MOR_SERVE_SEQUENCE  = 1, /* continuous sequence-level batching: each step is one
                                mor_decode of one token of every running request
                                (all its recursions), as Orca/vLLM batch             */
    MOR_SERVE_DEPTHWISE = 2  /* continuous depth-wise batching: each step is one batch
                                of rows at different recursion depths, each shared
                                layer run once over all of them; a token that exits
                                is finished (last layer, norm, logits, sample) in the
                                same step and its row refilled at the next      */
};

/* Early exits, on top of the router's exits (and the only exits of a model
 * without routers): a server's (mor_server_params.exit_mode, DEPTHWISE
 * only) or a context's (mor_router_set_exit, for mor_decode). Before
 * recursion r >= 1 a token stops when its measure >= exit_threshold:
 *  MARGIN: softmax top-1 minus top-2 probability of the exit logits
 *          (final RMSNorm + output matrix on the hidden state so far);
 *  SATURATION: cos(h_r, h_{r-1}), the hidden state before recursion r vs
 *          before recursion r-1;
 *  LEARNED: Ouro's learned exit (models with an exit gate, arXiv 2510.25741,
 *          the Q-exit of its adaptive computation): after loop t the gate
 *          gives lambda_t = sigmoid(w . norm(h_t) + b), norm the final norm
 *          (the loop norm); the exit distribution is p(t) = lambda_t
 *          prod_{j<t} (1 - lambda_j), the last loop taking the remainder,
 *          and a token exits after the first loop t < N_r where its CDF
 *          1 - prod_{j<=t} (1 - lambda_j) >= q, q = exit_threshold in
 *          [0, 1] (0: every token after loop 1; 1: never early, full depth).
 *          Per token and causal: the decision reads only the token's own
 *          state, which attends to earlier tokens only.
 * Missing keys and values: an exited token stores no K/V in the layers of
 * the recursions it skipped. Under recursion-wise caching later tokens at
 * those depths do not see it (as MoR's own router exits); under KV sharing
 * they read its recursion-0 K/V, as for every token. (mor_decode under
 * MOR_KV_DENSE still runs the skipped recursions for their K/V only.) */
enum { MOR_EXIT_NONE = 0, MOR_EXIT_MARGIN = 1, MOR_EXIT_SATURATION = 2, MOR_EXIT_LEARNED = 3 };

/* State of a request. */
enum { MOR_REQ_QUEUED = 0, MOR_REQ_RUNNING = 1, MOR_REQ_DONE = 2, MOR_REQ_CANCELLED = 3 };

typedef struct mor_server_params {
    uint32_t size;          /* sizeof(mor_server_params) as compiled by the caller   */
    int32_t  mode;          /* MOR_SERVE_*; default MOR_SERVE_DEPTHWISE              */
    uint32_t n_slots;       /* requests running at once; default 8 (SERIAL: 1 used) */
    /* KV budget: cells per cached layer, shared by the running requests;
     * default min(n_ctx_train, 4096). A request is admitted only when
     * n_prompt + max_tokens cells (under MOR_SERVE_CONTEXT_SHIFT at most
     * n_ctx_seq) are free beside those reserved by the running ones; until
     * then it waits in the queue (never MOR_E_KV_FULL). */
    uint32_t n_ctx;
    uint32_t n_batch;       /* rows per step (see mor_server_submit); default 512    */
    int32_t  n_threads;     /* worker threads; <= 0: one                             */
    int32_t  kv_mode;       /* MOR_KV_*; default MOR_KV_MODEL_DEFAULT                */
    int32_t  exit_mode;     /* MOR_EXIT_*; default NONE                              */
    float    exit_threshold;/* for exit_mode; default 0.9                            */
    /* Optional stream: called from mor_server_step for each generated token,
     * in order per request, with the recursions its last input token ran
     * (its depth). On the stepping thread; it must not call the server. */
    void   (*on_token)(mor_request_id id, mor_token token, int32_t depth, void *user_data);
    void    *user_data;
    /* Optional: polled between the layer passes of a step; non-zero stops
     * the step with MOR_E_ABORTED, which then changes nothing. */
    int32_t (*abort_callback)(void *user_data);
    void    *abort_user_data;
    /* MOR_SERVE_* flags below; default 0 (prompt reuse on). */
    uint32_t flags;
    /* Optional: as on_token, with the logits the token was sampled from:
     * logits[0..n_vocab-1], the model's (mor_get_logits of a decode of the
     * request alone), before the sampler's penalty, temperature and
     * truncation; mor_logprobs gives their log-probabilities. Borrowed:
     * valid during the call only. Called right after on_token for the same
     * token when both are set; the same rules (the stepping thread, no call
     * to the server). Default NULL. */
    void   (*on_token_logits)(mor_request_id id, mor_token token, int32_t depth, const float *logits,
                              int32_t n_vocab, void *user_data);
    /* The context of one request's sequence, llama-server's per-slot n_ctx:
     * the positions it may hold, L = n_ctx_seq; 0 (default): min(n_ctx,
     * the model's training context), also the most it may be (more:
     * MOR_E_INVALID_ARG). A request of more than L tokens is refused at
     * submit, or shifts under MOR_SERVE_CONTEXT_SHIFT. */
    uint32_t n_ctx_seq;
} mor_server_params;

/* mor_server_params.flags.
 * Prompt reuse (llama.cpp's cache_prompt): a request's slot keeps its
 * sequence's K/V when the request ends. A new request takes the free slot
 * whose kept tokens share the longest prefix with its prompt, keeps those
 * cells and decodes only the rest (at least its last prompt token, for the
 * logits): the outputs are bitwise those of a fresh slot, since routing is
 * causal and a token's K/V depend only on the tokens before it (a prefix
 * kept under other router settings is not reused). Kept cells of free slots
 * are dropped, least recently used first, whenever a request needs room:
 * they never make a request wait. Prompt sharing, under the same flag: a
 * request whose prompt starts like a running request's (n choices of one
 * prompt, a common system prompt) copies that request's prompt cells
 * (mor_kv_seq_cp) when they give more than a free slot keeps, and decodes
 * only the rest; while those cells are still being decoded it waits in
 * the queue for them (a step or a few). The outputs stay bitwise those of
 * a fresh slot. mor_server_request_cached says how many prompt tokens a
 * request reused or copied.
 * MOR_SERVE_FAST_BF16: the server's context runs with MOR_CTX_FAST_BF16
 * (BF16 weights on bfloat16-rounded activations; see there).
 * MOR_SERVE_CONTEXT_SHIFT (llama-server's --context-shift): a request may
 * be longer than the context. The context of each request's sequence is
 * L positions (n_ctx_seq; default min(n_ctx, the model's training
 * context)). A prompt longer
 * than L is truncated at submit by mor_prompt_truncate (its first n_keep
 * tokens and its end stay; mor_server_set_keep, default n_keep 0), and when
 * the sequence holds L tokens and the next one is to enter, it is shifted
 * as llama.cpp's server does: its first n_keep cells stay, the next
 * n_discard = (L - n_keep) / 2 are removed (mor_kv_seq_rm) and the rest
 * move down by n_discard positions (mor_kv_seq_add, whose re-rotation of
 * the cached keys applies to every layer and recursion that holds a token:
 * recursion-wise, shared or dense caching alike; a token that exited early
 * has no cells in the deeper recursions, and only its positions move).
 * Generation then goes on for up to max_tokens tokens. The shift is made
 * between steps, once a step has succeeded, when the slot has no row in
 * flight (its token was just sampled), so under DEPTHWISE every
 * recursion's cells of the sequence are in place; other requests are not
 * touched. A request reserves min(n_prompt + max_tokens, L) cells. Its
 * tokens are then those of mor_decode on one context of L positions with
 * the same truncation and the same shifts (mor-run's generation with --ctx
 * L --keep n_keep); a request that never reaches L gives what it gives
 * without the flag, bit for bit. After a shift the cells past n_keep were
 * computed with the dropped tokens in view, so prompt reuse and prompt
 * sharing take at most the first n_keep cells of a shifted sequence. */
enum { MOR_SERVE_NO_PROMPT_REUSE = 1u << 0, MOR_SERVE_FAST_BF16 = 1u << 1, MOR_SERVE_CONTEXT_SHIFT = 1u << 2 };

MOR_API void mor_server_params_init(mor_server_params *p, size_t size);
#define MOR_SERVER_PARAMS_INIT(p) mor_server_params_init((p), sizeof(*(p)))

/* Create a server on a model (which must outlive it). params may be NULL.
 * Errors: MOR_E_INVALID_ARG, MOR_E_ABI, MOR_E_NOMEM, MOR_E_UNSUPPORTED
 * (an exit_mode with a mode other than DEPTHWISE, or with MOR_KV_DENSE,
 * where every token runs every recursion for its K/V; MOR_EXIT_LEARNED on a
 * model without an exit gate). */
MOR_API mor_status mor_server_create(mor_model *model, const mor_server_params *params, mor_server **out);
/* Free a server and every request it holds. NULL ok. */
MOR_API void       mor_server_free(mor_server *srv);
/* The server's router (borrowed): thresholds, max depth, statistics. Change
 * it between steps only. */
MOR_API mor_router *mor_server_router(mor_server *srv);

/* Queue a request: n_prompt >= 1 tokens (copied), sampling settings (NULL:
 * defaults; the sampler is seeded per request), at most max_tokens >= 1
 * generated tokens, and n_stop stop tokens (copied; a stop token ends the
 * request and is the last token returned). The prompt
 * tokens are added to the sampler's history. Chunked prefill: a prompt
 * longer than the rows a step has left (n_batch, less the next tokens of the
 * running requests, which go first) enters in chunks of those rows over
 * several steps, its first token coming after the last chunk; the outputs
 * are those of the whole prompt decoded at once. Errors: MOR_E_INVALID_ARG,
 * MOR_E_OUT_OF_RANGE (a token id), MOR_E_KV_FULL (n_prompt + max_tokens
 * exceeds n_ctx, n_ctx_seq or the model's context: it could never run; under
 * MOR_SERVE_CONTEXT_SHIFT such a request is taken, its prompt truncated to
 * the context, unless the context has fewer than 2 positions), MOR_E_ABI,
 * MOR_E_NOMEM. May be called between steps, at any time.
 * mor_server_submit_request takes these and a request's other settings in
 * one call. */
MOR_API mor_status mor_server_submit(mor_server *srv, const mor_token *prompt, int32_t n_prompt,
                                     const mor_sampler_params *sampling, int32_t max_tokens,
                                     const mor_token *stop, int32_t n_stop, mor_request_id *id_out);
/* One step: admit queued requests, advance every running one, stream the
 * tokens generated. *n_pending (may be NULL) receives the number of
 * requests queued or running afterwards. Errors: MOR_E_INVALID_ARG (also
 * when a request's logits cannot be sampled: a NaN or +inf logit, from
 * non-finite weights or an overflow, or its grammar's mask went over the
 * matcher's work bound; the message names the request, and
 * cancelling it lets the others go on), MOR_E_UNSUPPORTED (the router was set
 * to a non-causal mode), MOR_E_ABORTED (abort_callback), MOR_E_NOMEM,
 * MOR_E_KV_FULL. A failed step changes nothing (no token streamed; requests,
 * caches, samplers, router statistics as they were; only prefixes kept by
 * free slots for reuse may be shorter): stepping again gives what the step
 * would have given. */
MOR_API mor_status mor_server_step(mor_server *srv, int32_t *n_pending);
/* Step until no request is queued or running. */
MOR_API mor_status mor_server_run(mor_server *srv);
/* Stop a queued or running request; its tokens so far stay readable.
 * MOR_E_OUT_OF_RANGE for an unknown id; MOR_OK (no-op) if already over. */
MOR_API mor_status mor_server_cancel(mor_server *srv, mor_request_id id);
/* MOR_REQ_* of a request, or a negative mor_status (unknown id). */
MOR_API int32_t    mor_server_request_state(const mor_server *srv, mor_request_id id);
/* Prompt tokens a request took from a free slot's kept K/V (prompt reuse,
 * MOR_SERVE_NO_PROMPT_REUSE): 0 while queued or when nothing was reused, or
 * a negative mor_status (unknown id). */
MOR_API int32_t    mor_server_request_cached(const mor_server *srv, mor_request_id id);
/* The slot (0..n_slots-1) a running request holds, -1 while it is queued
 * or once it is over, or a negative mor_status below -1 (unknown id:
 * MOR_E_OUT_OF_RANGE). For monitoring (llama-server's GET /slots). */
MOR_API int32_t    mor_server_request_slot(const mor_server *srv, mor_request_id id);
/* Copy a request's generated tokens (and, if depths is not NULL, the depth
 * of each) into out[0..cap-1]; *n_out receives the count (the count needed,
 * with MOR_E_BUFFER_TOO_SMALL). Readable until mor_server_release. */
MOR_API mor_status mor_server_get_tokens(const mor_server *srv, mor_request_id id, mor_token *out,
                                         int32_t *depths, int32_t cap, int32_t *n_out);
/* Forget a finished or cancelled request (its memory is freed).
 * MOR_E_INVALID_ARG if it is still queued or running. */
MOR_API mor_status mor_server_release(mor_server *srv, mor_request_id id);

/* Constrain a queued request's output with a grammar (mor_grammar_create
 * on this server's model; mor_grammar in mor.h): its tokens are drawn among
 * those the grammar allows, and the request ends when the grammar must end
 * (MOR_GRAMMAR_MUST_END) or at an end token. On success the server owns g
 * (freed with the request); on error the caller keeps it. A step where no
 * token can continue a request's grammar fails naming the request, as for
 * logits that cannot be sampled. Errors: MOR_E_INVALID_ARG (NULL, a request
 * no longer queued or constrained already, a grammar of another
 * vocabulary), MOR_E_OUT_OF_RANGE (unknown id), MOR_E_NOMEM. */
MOR_API mor_status mor_server_set_grammar(mor_server *srv, mor_request_id id, mor_grammar *g);

/* Self-speculative decoding for a queued request (mor_speculate, whose
 * exactness holds here): once its prompt has entered, each step of the
 * request drafts up to n_draft tokens with the recursions below
 * draft_depth, verifies them in one pass, and emits the tokens its sampler
 * (and grammar) draws position by position up to the first that differs
 * from its draft: up to n_draft + 1 tokens per step, each with the depth
 * and the logits (on_token_logits) it gets without speculation, and the
 * same tokens. Stop tokens, max_tokens and the grammar end it where they
 * would. Every mode: under DEPTHWISE its steps run beside the depth-wise
 * rows (its inputs do not take rows between steps); a step where the rows
 * in flight fill n_batch skips it once. n_draft 0 turns it off. Allocates
 * the request's buffers ((n_draft + 1) x n_vocab logits). Errors:
 * MOR_E_INVALID_ARG (NULL server, a request no longer queued, n_draft < 0
 * or > n_batch - 1), MOR_E_OUT_OF_RANGE (unknown id, draft_depth outside
 * [1, N_r]), MOR_E_NOMEM; on error the request is as it was. */
MOR_API mor_status mor_server_set_speculate(mor_server *srv, mor_request_id id, int32_t n_draft,
                                            int32_t draft_depth);
/* Tokens a request drafted and those of them its sampler accepted so far
 * (0 and 0 without speculation). Either pointer may be NULL. Readable until
 * mor_server_release. Errors: MOR_E_OUT_OF_RANGE (unknown id). */
MOR_API mor_status mor_server_request_speculation(const mor_server *srv, mor_request_id id, int64_t *drafted,
                                                  int64_t *accepted);

/* Context shift (MOR_SERVE_CONTEXT_SHIFT): the tokens at the start of a
 * queued request's sequence that truncation and shifts keep, llama.cpp's
 * n_keep: n_keep >= 0 tokens (more than the prompt: the prompt), -1 the
 * whole prompt; default 0. Counted from the prompt's first token, a BOS
 * included (llama-server adds 1 for its BOS; mor-server does too). When
 * the prompt was longer than the context it is truncated again from the
 * prompt as submitted, keeping these tokens, and the sampler's history
 * (mor_sampler_reset, the logit bias and breakers staying) set to the new
 * prompt. Errors, changing nothing: MOR_E_INVALID_ARG (NULL server, a
 * server without MOR_SERVE_CONTEXT_SHIFT, a request no longer queued,
 * n_keep < -1, or a request that may reach the context L keeping more than
 * L - 2 tokens, which leaves nothing to drop), MOR_E_OUT_OF_RANGE (unknown
 * id). Does not allocate. */
MOR_API mor_status mor_server_set_keep(mor_server *srv, mor_request_id id, int32_t n_keep);
/* What context shifting did to a request so far: *n_prompt receives the
 * prompt tokens it runs on (fewer than submitted when truncated), *n_shifts
 * the shifts of its sequence, *n_discarded the tokens they removed (0 and 0
 * without MOR_SERVE_CONTEXT_SHIFT). Any pointer may be NULL. Readable until
 * mor_server_release. Errors: MOR_E_OUT_OF_RANGE (unknown id). */
MOR_API mor_status mor_server_request_shift(const mor_server *srv, mor_request_id id, int32_t *n_prompt,
                                            int32_t *n_shifts, int32_t *n_discarded);

/* The sampler of a queued request (borrowed; the server owns it), for
 * mor_sampler_set_logit_bias and mor_sampler_set_dry_breakers, the settings
 * that do not fit mor_sampler_params: call them before the request's first
 * step (between steps, on the stepping thread), and no other sampler
 * function. NULL for an unknown id or a request no longer queued. */
MOR_API mor_sampler *mor_server_request_sampler(mor_server *srv, mor_request_id id);

/* The exit threshold of a queued request, in place of the server's
 * mor_server_params.exit_threshold, under the server's exit_mode (its rows
 * exit by it in every recursion; the other requests' rows by theirs); NaN
 * goes back to the server's. The K/V a finished request leaves for prompt
 * reuse are reused only by a request of the same threshold. Errors:
 * MOR_E_INVALID_ARG (NULL server, a request no longer queued, a threshold
 * the mode refuses: for MOR_EXIT_LEARNED outside [0, 1]), MOR_E_OUT_OF_RANGE
 * (unknown id), MOR_E_UNSUPPORTED (a server created without exits); on error
 * the request is as it was. */
MOR_API mor_status mor_server_set_exit(mor_server *srv, mor_request_id id, float threshold);

/* A request's settings in one size-prefixed struct, for
 * mor_server_submit_request: those mor_server_submit takes and those the
 * setters above give a queued request. The defaults (mor_request_params_init)
 * are a request of mor_server_submit on which no setter was called. Like
 * the params structs, fields are only appended (an older caller's struct
 * gets the defaults of the fields it lacks). */
typedef struct mor_request_params {
    uint32_t size;                  /* sizeof(mor_request_params) as compiled by the caller */
    /* Sampling settings (NULL, default: mor_sampler_params_init's); the
     * sampler is seeded per request. A pointer, so that mor_sampler_params
     * may grow without moving the fields below. */
    const mor_sampler_params *sampling;
    int32_t  max_tokens;            /* generated tokens at most, >= 1; default 16           */
    /* Stop tokens stop[0..n_stop-1] (copied; ids in [0, n_vocab)): one ends
     * the request and is the last token returned. Default none (0, NULL). */
    int32_t  n_stop;
    const mor_token *stop;
    /* The output's grammar, as mor_server_set_grammar: made on this
     * server's model (its vocabulary); the server owns it once the call
     * succeeds (freed with the request), the caller keeps it when the call
     * fails. NULL (default): none. */
    mor_grammar *grammar;
    /* Self-speculative decoding, as mor_server_set_speculate: n_draft
     * drafts a step (in [0, n_batch - 1]) made with the recursions below
     * draft_depth (in [1, N_r]). n_draft 0 (default): off, draft_depth
     * unread; draft_depth default 1. */
    int32_t  n_draft;
    int32_t  draft_depth;
    /* The request's exit threshold, as mor_server_set_exit (a server
     * created with exits only). NaN (default): the server's, on any server. */
    float    exit_threshold;
    /* The tokens a context shift keeps, as mor_server_set_keep (n_keep >= 0,
     * -1 the whole prompt; a server with MOR_SERVE_CONTEXT_SHIFT only). 0
     * (default): the server's default, on any server. */
    int32_t  n_keep;
} mor_request_params;

MOR_API void mor_request_params_init(mor_request_params *p, size_t size);
#define MOR_REQUEST_PARAMS_INIT(p) mor_request_params_init((p), sizeof(*(p)))

/* Queue a request with all its settings (params; NULL: the defaults): the
 * same request, and the same outputs, as mor_server_submit followed by
 * mor_server_set_grammar, mor_server_set_speculate, mor_server_set_exit
 * and mor_server_set_keep for the fields not at their default, but in one
 * call that succeeds or changes nothing: on error no request is queued, no
 * id is used, *id_out is untouched and params->grammar stays the caller's.
 * params and what it points to are read during the call only (the prompt
 * and stop tokens are copied); only the grammar is kept, on success. The
 * logit bias and DRY's breakers go through mor_server_request_sampler
 * afterwards. Errors, the first met (checked as mor_server_submit checks,
 * then the grammar, the speculation, the exit threshold, n_keep):
 * MOR_E_INVALID_ARG (NULL srv, prompt or id_out, n_prompt < 1, max_tokens
 * < 1, n_stop < 0 or a NULL stop with n_stop > 0, a sampling value the
 * sampler refuses, a grammar of another vocabulary, n_draft < 0 or >
 * n_batch - 1, an exit threshold the server's exit mode refuses, n_keep <
 * -1, n_keep != 0 on a server without MOR_SERVE_CONTEXT_SHIFT, or keeping
 * more than L - 2 tokens of a request that may reach the context L),
 * MOR_E_OUT_OF_RANGE (a prompt or stop token id; draft_depth outside [1,
 * N_r] with n_draft > 0), MOR_E_KV_FULL (as mor_server_submit),
 * MOR_E_UNSUPPORTED (an exit threshold on a server created without exits),
 * MOR_E_ABI (params->size or sampling->size), MOR_E_NOMEM. May be called
 * between steps, at any time. */
MOR_API mor_status mor_server_submit_request(mor_server *srv, const mor_token *prompt, int32_t n_prompt,
                                             const mor_request_params *params, mor_request_id *id_out);

/* Thread-safety: a mor_server, like a context, is used by one thread at a
 * time; several servers may share one model. */

/* ------------------------------------------------------------------------ */
/* Chat templates                                                            */
/* ------------------------------------------------------------------------ */

/* A model's chat template (Jinja, as in GGUF's tokenizer.chat_template, which
 * mor_model_meta_str(model, "tokenizer.chat_template", ...) returns, or the
 * chat_template of a Hugging Face tokenizer_config.json) renders a
 * conversation into the prompt text the model was trained on. libmor
 * renders it as Hugging Face transformers does (jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, its
 * tojson, raise_exception and strftime_now): the same bytes for the
 * templates of tests/data/chat_templates. The subset and the differences
 * from jinja2 are listed in docs/CHAT_TEMPLATES.md.
 *
 * Bounded: a render takes at most 20 million evaluation steps, nests at
 * most 160 levels (48 macro calls) and uses at most 256 MiB (its output
 * included); past a bound it fails with MOR_E_UNSUPPORTED, never runs away.
 *
 * Thread-safety: a template is immutable once created; any number of
 * threads may render the same template at once (each render keeps its
 * state in memory of its own). */
typedef struct mor_chat_template mor_chat_template;

/* Parse a template: source[0..len-1] (UTF-8). On success *out owns it.
 * Errors (*out untouched): MOR_E_INVALID_ARG (NULL source or out; a syntax
 * error: mor_last_error() names its line and column, e.g. "template syntax
 * error at line 3, column 14: expected 'endfor'"), MOR_E_UNSUPPORTED (a
 * source over 1 MiB, a tag this subset lacks: extends, include, import,
 * recursive loops), MOR_E_NOMEM. Thread-safe. */
MOR_API mor_status mor_chat_template_create(const char *source, size_t len, mor_chat_template **out);
MOR_API void       mor_chat_template_free(mor_chat_template *t);   /* NULL ok */

typedef struct mor_chat_params {
    uint32_t    size;            /* sizeof(mor_chat_params) as compiled by the caller      */
    /* The conversation: a JSON array of OpenAI-style messages (objects
     * with role, content as a string, null or an array of parts,
     * tool_calls, ...), given to the template as `messages` exactly as
     * parsed (tool_calls' function.arguments as given: a string stays a
     * string). Required. A length of 0 means NUL-terminated. */
    const char *messages_json;
    size_t      messages_len;
    /* Optional JSON (usually an array of tool definitions) as `tools`;
     * NULL: `tools` is none, as transformers passes it. */
    const char *tools_json;
    size_t      tools_len;
    /* Optional JSON object whose members become variables too (e.g.
     * {"enable_thinking": false, "documents": [...]}); they may replace
     * the others. NULL: none. */
    const char *extra_json;
    size_t      extra_len;
    int32_t     add_generation_prompt;   /* `add_generation_prompt`; default 0      */
    const char *bos_token;       /* `bos_token` (NUL-terminated); NULL: undefined     */
    const char *eos_token;       /* `eos_token`; NULL: undefined                      */
    /* The time strftime_now(format) formats, in seconds since the epoch,
     * as UTC; 0 (default): the current time. */
    int64_t     now;
} mor_chat_params;

MOR_API void mor_chat_params_init(mor_chat_params *p, size_t size);
#define MOR_CHAT_PARAMS_INIT(p) mor_chat_params_init((p), sizeof(*(p)))

/* Render a template with the variables of params (messages, tools,
 * documents = none, add_generation_prompt, bos_token, eos_token, then the
 * extra ones). The text goes to out (not NUL-terminated); *n_out receives
 * its byte count (the count needed, with MOR_E_BUFFER_TOO_SMALL, when cap
 * is too small; out may then be NULL with cap 0). The same template and
 * params give the same bytes (strftime_now aside when now is 0).
 * Errors, writing nothing to out and leaving *n_out as it was:
 * MOR_E_INVALID_ARG (NULL t, params, messages_json or n_out; JSON that does
 * not parse, naming line and column, or messages that are not an array,
 * extra that is not an object; an error the template meets while
 * rendering, as jinja2 would raise it: raise_exception(msg), whose message
 * mor_last_error() carries as "raise_exception: msg", an undefined value
 * used as a value, a type error, a sandboxed method such as list.append;
 * the message names the template line), MOR_E_UNSUPPORTED (a bound above,
 * an integer beyond 64 bits), MOR_E_NOMEM, MOR_E_ABI. Thread-safe. */
MOR_API mor_status mor_chat_template_render(const mor_chat_template *t, const mor_chat_params *params, char *out,
                                            size_t cap, size_t *n_out);

/* ------------------------------------------------------------------------ */
/* ABI self-description (for bindings)                                       */
/* ------------------------------------------------------------------------ */

MOR_API size_t mor_sizeof_model_params(void);
MOR_API size_t mor_sizeof_context_params(void);
MOR_API size_t mor_sizeof_sampler_params(void);
MOR_API size_t mor_sizeof_router_stats(void);
MOR_API size_t mor_sizeof_server_params(void);
MOR_API size_t mor_sizeof_chat_params(void);
MOR_API size_t mor_sizeof_request_params(void);
/* Largest N_r this build supports. */
MOR_API int32_t mor_max_recursions(void);

#ifdef __cplusplus
}
#endif

#endif /* MOR_H */
