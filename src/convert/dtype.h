/* dtype.h - the element types a checkpoint may hold and exact conversions
 * between them.
 *
 * The enum values are the ggml/GGUF tensor type numbers, so a dtype can be
 * written to a GGUF file as is. */
#ifndef CV_DTYPE_H
#define CV_DTYPE_H
#include <stddef.h>
#include <stdint.h>

enum { CV_F32 = 0, CV_F16 = 1, CV_BF16 = 30 };

size_t      cv_dtype_size(int dtype);   /* bytes per element; 0 if unknown */
const char *cv_dtype_name(int dtype);   /* "F32", "F16", "BF16" or "?" */

float    cv_f16_to_f32(uint16_t h);
uint16_t cv_f32_to_f16(float f);        /* round to nearest even; overflow -> inf */
float    cv_bf16_to_f32(uint16_t b);
uint16_t cv_f32_to_bf16(float f);       /* round to nearest even; NaN stays NaN */

/* Convert n elements of type `from` at src to type `to` at dst (both may be
 * unaligned; they must not overlap). Widening is exact; narrowing rounds to
 * nearest even. Returns the number of finite inputs that became infinite
 * (the caller decides whether that is an error). */
size_t cv_convert(void *dst, int to, const void *src, int from, size_t n);

#endif
