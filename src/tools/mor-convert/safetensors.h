/* safetensors.h - read model.safetensors: an 8-byte little-endian header
 * length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
 * {...}}, then the tensor bytes. Only F32, F16 and BF16 tensors are accepted. */
#ifndef CV_SAFETENSORS_H
#define CV_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "checkpoint.h"

/* The safetensors library refuses headers above 100 MB; so do we. */
#define SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

/* Add every tensor of buf[0..size) to ck (ckpt_add); the caller finishes. */
int safetensors_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap);

#endif
