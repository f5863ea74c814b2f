/* checkpoint.h - a PyTorch state dict as a list of named tensors, read from
 * model.safetensors or a torch pytorch_model.bin, whichever the file is.
 *
 * Tensor data points into the file image (no copies); it may be unaligned.
 * After loading, the tensors are sorted by name, names are unique, and every
 * tensor's bytes lie inside the file. */
#ifndef CV_CHECKPOINT_H
#define CV_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "util.h"

#define CKPT_MAX_DIMS 8

enum { CKPT_SAFETENSORS = 1, CKPT_TORCH = 2 };

typedef struct {
    char *name;
    int dtype;                        /* GGML_F32, GGML_F16 or GGML_BF16 (dtype.h) */
    int ndim;
    uint64_t shape[CKPT_MAX_DIMS];    /* PyTorch order: slowest dimension first */
    uint64_t numel;
    const uint8_t *data;              /* contiguous, row-major, little-endian */
    uint64_t nbytes;                  /* numel * element size */
} ckpt_tensor;

typedef struct {
    int format;                       /* CKPT_SAFETENSORS or CKPT_TORCH */
    ckpt_tensor *t;
    size_t n, cap;
    cv_file file;                     /* the image, when opened from a path */
} checkpoint;

/* Open a checkpoint file and detect its format from its first bytes (a ZIP
 * archive is a torch file, anything else must be safetensors). */
int ckpt_open(checkpoint *ck, const char *path, char *err, size_t errcap);
/* The same from a buffer in memory, which must outlive the checkpoint. */
int ckpt_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap);
void ckpt_free(checkpoint *ck);

/* Binary search by name; NULL if absent. */
const ckpt_tensor *ckpt_find(const checkpoint *ck, const char *name);

/* For the format readers: append a tensor (the name is copied), and at the
 * end sort and reject duplicate names. */
int ckpt_add(checkpoint *ck, const char *name, size_t name_len, int dtype, int ndim,
             const uint64_t *shape, const uint8_t *data, uint64_t nbytes, char *err, size_t errcap);
int ckpt_finish(checkpoint *ck, char *err, size_t errcap);

#endif
