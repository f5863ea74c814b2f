/* fuzz_torch_zip.c - any bytes as a checkpoint file through ckpt_parse: a ZIP
 * (torch.save) goes to the ZIP reader and its pickle, anything else to the
 * safetensors reader. CRC-32 is checked on every entry, so mutations of the
 * pickle inside mostly stop there: fuzz_pickle reaches it directly. */
#include "fuzz.h"
#include "checkpoint.h"

FUZZ_TARGET(torch_zip)

static int fuzz_run(const uint8_t *data, size_t size)
{
    uint8_t *img = fuzz_copy(data, size);
    checkpoint ck;
    char err[256] = "";
    int ok = img && ckpt_parse(&ck, img, size, err, sizeof err) == 0;
    FUZZ_ASSERT(ok || err[0], "a failure without a message");
    for (size_t i = 0; ok && i < ck.n; i++) {
        const ckpt_tensor *t = &ck.t[i];
        FUZZ_ASSERT(t->data >= img && t->nbytes <= size && (size_t)(t->data - img) <= size - t->nbytes,
                    "tensor '%s' outside the file", t->name);
    }
    if (ok) ckpt_free(&ck);
    free(img);
    return ok;
}
