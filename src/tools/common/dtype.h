/* dtype.h - the element types a checkpoint may hold (F32, F16, BF16: the
 * tensor_type values of tensor.h, so a dtype is written to a GGUF file as is)
 * and conversion of whole arrays between them. */
#ifndef CV_DTYPE_H
#define CV_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include "internal.h"

size_t      cv_dtype_size(int dtype);   /* bytes per element; 0 if unknown */
const char *cv_dtype_name(int dtype);   /* "F32", "F16", "BF16", a quant's name ("Q4_K") or "?" */
/* ggml's block-quantized types (Q8_0, Q4_K, ...): a llama.cpp file's matrices, kept as stored by a
 * plain conversion (never converted element by element: cv_convert does not take them). */
int         cv_dtype_is_quant(int dtype);
/* Bytes of numel elements in rows of cols (the fastest dimension): -1 for an unknown type, or a
 * quant's rows that are not whole blocks. */
int         cv_dtype_bytes(int dtype, uint64_t numel, uint64_t cols, uint64_t *bytes);

/* Convert n elements of type `from` at src to type `to` at dst (both may be
 * unaligned; they must not overlap). Widening is exact; narrowing rounds to
 * nearest even. Returns the number of finite inputs that became infinite
 * (the caller decides whether that is an error). */
size_t cv_convert(void *dst, int to, const void *src, int from, size_t n);

#endif
