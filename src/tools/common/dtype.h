/* dtype.h - the element types a checkpoint may hold (F32, F16, BF16: the
 * tensor_type values of tensor.h, so a dtype is written to a GGUF file as is)
 * and conversion of whole arrays between them. */
#ifndef CV_DTYPE_H
#define CV_DTYPE_H
#include <stddef.h>
#include <stdint.h>
#include "internal.h"

size_t      cv_dtype_size(int dtype);   /* bytes per element; 0 if unknown */
const char *cv_dtype_name(int dtype);   /* "F32", "F16", "BF16" or "?" */

/* Convert n elements of type `from` at src to type `to` at dst (both may be
 * unaligned; they must not overlap). Widening is exact; narrowing rounds to
 * nearest even. Returns the number of finite inputs that became infinite
 * (the caller decides whether that is an error). */
size_t cv_convert(void *dst, int to, const void *src, int from, size_t n);

#endif
