/* gguf_write.h - build and write a GGUF v3 file (see docs/FORMAT.md): the one
 * GGUF writer of the programs (the converter, the trainer, mor-quantize,
 * mor-bench's synthetic models) and the tests. The library itself never
 * writes files.
 *
 * Keys and tensor infos are written in the order they were added. Key values
 * are copied; tensor data is borrowed and must stay valid until
 * gguf_writer_write returns, unless it was added as owned (then the writer
 * frees it). Errors from the add functions (duplicate names, bad sizes, no
 * memory) are sticky: the first one is reported by gguf_writer_write, so
 * callers may add everything and check once. */
#ifndef CV_GGUF_WRITE_H
#define CV_GGUF_WRITE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "internal.h"
#include "util.h"

#define GGUF_WRITE_ALIGNMENT 32

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

void gguf_writer_add_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_add_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_add_bool(gguf_writer *w, const char *key, int v);
void gguf_writer_add_str(gguf_writer *w, const char *key, const char *v);
void gguf_writer_add_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n);
void gguf_writer_add_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n);
void gguf_writer_add_arr_f64(gguf_writer *w, const char *key, const double *v, size_t n);
void gguf_writer_add_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n);

/* dims in GGUF order (fastest first), 1..4 of them, each > 0; type a
 * tensor_type (Q4_0 and Q8_0: blocks of 32 along dims[0]); nbytes must
 * equal what the dims take in that type. */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const uint64_t *dims,
                            const void *data, uint64_t nbytes);

/* A matrix of rows x cols (rows 0: a vector of cols) of `type` (any
 * tensor_type), nbytes of data; owned != 0: the writer frees the data (also
 * when the add fails). */
void gguf_writer_add_matrix(gguf_writer *w, const char *name, uint32_t type, int64_t cols, int64_t rows,
                            const void *data, uint64_t nbytes, int owned);
/* The same from floats (rows x cols, or a vector with rows 0), converted to
 * `type` as the library's quantizers do. */
void gguf_writer_add_matrix_f32(gguf_writer *w, const char *name, uint32_t type, const float *x, int64_t cols,
                                int64_t rows);
/* Every key of g verbatim (its alignment kept), then every tensor of g,
 * re-typed: norms, routers, LoRA factors and every other 1-D or F32-only
 * tensor as they are; token_embd (and an untied output) to embd_type; every
 * other matrix to type (through float: exact from F32/F16/BF16). A
 * quantized type needs whole blocks along the row: other rows fall back
 * (below), counted in *n_fallback. (mor-quantize, and the tests that make a
 * model's variants.) */
void gguf_writer_add_retyped(gguf_writer *w, const gguf_file *g, uint32_t type, uint32_t embd_type, int *n_fallback);
/* Whether re-typing keeps a tensor as it is stored: routers ("rtr*"), LoRA
 * factors ("lora.*") and every tensor that is not a matrix. */
int gguf_retype_keeps(const char *name, uint32_t n_dims);
/* `type` where rows of `cols` values are whole blocks of it; else llama-quantize's fallback (Q2_K, Q3_K ->
 * Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0) where they are whole blocks of that; else F16. */
uint32_t gguf_row_type(uint32_t type, int64_t cols);
/* The same with each tensor's type chosen by `pick` (given its name, dims and stored type; return the type
 * to store, or its stored type to keep it), for mixes such as llama.cpp's Q4_K_M. (Both:) a type whose
 * block does not divide the rows falls back as llama-quantize's does (Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0;
 * Q5_K -> Q5_1; Q6_K -> Q8_0), else, or where that does not divide them either, to F16; each tensor that
 * falls back is counted in *n_fallback. */
typedef uint32_t (*gguf_type_pick_fn)(const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, void *user);
void gguf_writer_add_retyped_fn(gguf_writer *w, const gguf_file *g, gguf_type_pick_fn pick, void *user,
                                int *n_fallback);

/* Whether an add has failed (gguf_writer_write will report it). */
int gguf_writer_failed(const gguf_writer *w);
/* Bytes of tensor data added so far. */
uint64_t gguf_writer_data_bytes(const gguf_writer *w);
/* Make the writer fail (sticky, like an add that failed): for a caller whose
 * own preparation of a tensor failed. */
void gguf_writer_fail(gguf_writer *w, const char *what);

/* Report each tensor written to fn (NULL: none). */
void gguf_writer_set_progress(gguf_writer *w, cv_progress_fn fn, void *user_data);

/* Write the file to f (from its current position, which should be 0). */
int gguf_writer_write(gguf_writer *w, FILE *f, char *err, size_t errcap);
/* The same into a new file at path (err, errcap may be NULL, 0). */
int gguf_writer_write_file(gguf_writer *w, const char *path, char *err, size_t errcap);

#endif
