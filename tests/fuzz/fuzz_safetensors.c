/* fuzz_safetensors.c - any bytes as model.safetensors (the converter's reader). */
#include "fuzz.h"
#include "checkpoint.h"
#include "safetensors.h"

FUZZ_TARGET(safetensors)

static int fuzz_run(const uint8_t *data, size_t size)
{
    uint8_t *img = fuzz_copy(data, size);
    checkpoint ck;
    char err[256] = "";
    memset(&ck, 0, sizeof ck);
    int ok = img && safetensors_parse(&ck, img, size, err, sizeof err) == 0 &&
             ckpt_finish(&ck, err, sizeof err) == 0;
    FUZZ_ASSERT(ok || err[0], "a failure without a message");
    for (size_t i = 0; ok && i < ck.n; i++) {
        const ckpt_tensor *t = &ck.t[i];
        FUZZ_ASSERT(t->data >= img && t->nbytes <= size && (size_t)(t->data - img) <= size - t->nbytes,
                    "tensor '%s' outside the file", t->name);
        FUZZ_ASSERT(ckpt_find(&ck, t->name) == t, "ckpt_find('%s')", t->name);
    }
    ckpt_free(&ck);
    free(img);
    return ok;
}
