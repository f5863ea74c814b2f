/* gguf_write.h - build and write a GGUF v3 file (see docs/FORMAT.md).
 *
 * Keys and tensor infos are written in the order they were added. Key values
 * are copied; tensor data is borrowed and must stay valid until
 * gguf_writer_write returns. Errors from the add functions (duplicate names,
 * bad sizes, no memory) are sticky: the first one is reported by
 * gguf_writer_write, so callers may add everything and check once. */
#ifndef CV_GGUF_WRITE_H
#define CV_GGUF_WRITE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* dims in GGUF order (fastest first), 1..4 of them, each > 0; type is a
 * dtype.h value, or ggml's Q4_0 (2) / Q8_0 (8), blocks of 32 along dims[0];
 * nbytes must equal what the dims take in that type. */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, int n_dims, const uint64_t *dims,
                            const void *data, uint64_t nbytes);

/* Report each tensor written to fn (NULL: none). */
void gguf_writer_set_progress(gguf_writer *w, cv_progress_fn fn, void *user_data);

/* Write the file to f (from its current position, which should be 0). */
int gguf_writer_write(gguf_writer *w, FILE *f, char *err, size_t errcap);

#endif
