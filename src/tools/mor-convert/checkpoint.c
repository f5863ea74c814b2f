/* checkpoint.c - the format-independent state dict, and format detection.
 * See checkpoint.h. */
#include "checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "safetensors.h"
#include "torch_zip.h"

int ckpt_add(checkpoint *ck, const char *name, size_t name_len, int dtype, int ndim,
             const uint64_t *shape, const uint8_t *data, uint64_t nbytes, char *err, size_t errcap)
{
    ckpt_tensor *t;
    uint64_t numel = 1, want;
    if (ndim < 0 || ndim > CKPT_MAX_DIMS)
        return cv_fail(err, errcap, "tensor '%.*s' has %d dimensions (at most %d supported)",
                       (int)(name_len > 200 ? 200 : name_len), name, ndim, CKPT_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (!cv_mul_u64(numel, shape[i], &numel))
            return cv_fail(err, errcap, "tensor '%.*s': element count overflows", (int)(name_len > 200 ? 200 : name_len), name);
    if (cv_dtype_bytes(dtype, numel, ndim ? shape[ndim - 1] : 1, &want) || want != nbytes)
        return cv_fail(err, errcap, "tensor '%.*s': %llu bytes for a shape of %llu %s elements",
                       (int)(name_len > 200 ? 200 : name_len), name, (unsigned long long)nbytes,
                       (unsigned long long)numel, cv_dtype_name(dtype));
    if (ck->n == ck->cap) {
        size_t cap = ck->cap ? ck->cap * 2 : 64;
        ckpt_tensor *nt = realloc(ck->t, cap * sizeof *nt);
        if (!nt) return cv_fail(err, errcap, "out of memory");
        ck->t = nt;
        ck->cap = cap;
    }
    t = &ck->t[ck->n];
    memset(t, 0, sizeof *t);
    t->name = cv_strndup(name, name_len);
    if (!t->name) return cv_fail(err, errcap, "out of memory");
    if (strlen(t->name) != name_len) {
        free(t->name);
        return cv_fail(err, errcap, "a tensor name contains a NUL byte");
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    t->data = data;
    t->nbytes = nbytes;
    ck->n++;
    return 0;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const ckpt_tensor *)a)->name, ((const ckpt_tensor *)b)->name);
}

int ckpt_finish(checkpoint *ck, char *err, size_t errcap)
{
    if (ck->n) qsort(ck->t, ck->n, sizeof *ck->t, cmp_tensor);
    for (size_t i = 1; i < ck->n; i++)
        if (strcmp(ck->t[i - 1].name, ck->t[i].name) == 0)
            return cv_fail(err, errcap, "tensor '%.200s' appears twice", ck->t[i].name);
    return 0;
}

const ckpt_tensor *ckpt_find(const checkpoint *ck, const char *name)
{
    size_t lo = 0, hi = ck->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->t[mid].name, name);
        if (c == 0) return &ck->t[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

void ckpt_free(checkpoint *ck)
{
    for (size_t i = 0; i < ck->n; i++) free(ck->t[i].name);
    free(ck->t);
    cv_file_close(&ck->file);
    memset(ck, 0, sizeof *ck);
}

int ckpt_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap)
{
    int rc;
    memset(ck, 0, sizeof *ck);
    if (size >= 4 && memcmp(buf, "PK\x03\x04", 4) == 0) {
        ck->format = CKPT_TORCH;
        rc = torch_zip_parse(ck, buf, size, err, errcap);
    } else if (size >= 2 && buf[0] == 0x80 && buf[1] <= 5) {
        return cv_fail(err, errcap, "this is a legacy (pre-1.6, non-zip) torch file; re-save it with torch.save "
                                    "(zip format) or as safetensors");
    } else if (size < 9 || buf[8] != '{') {
        return cv_fail(err, errcap, "neither a safetensors file nor a torch (zip) checkpoint");
    } else {
        ck->format = CKPT_SAFETENSORS;
        rc = safetensors_parse(ck, buf, size, err, errcap);
    }
    if (rc == 0) rc = ckpt_finish(ck, err, errcap);
    if (rc != 0) ckpt_free(ck);
    return rc;
}

int ckpt_open(checkpoint *ck, const char *path, char *err, size_t errcap)
{
    cv_file f;
    if (cv_file_open(&f, path, err, errcap) != 0) return -1;
    if (ckpt_parse(ck, f.data, f.size, err, errcap) != 0) {
        cv_file_close(&f);
        return cv_prefix(err, errcap, "%s", path);
    }
    ck->file = f;
    return 0;
}
