/* fuzz_pickle.c - any bytes as the data.pkl of a torch checkpoint: the
 * restricted pickle machine (src/tools/mor-convert/pickle.c). */
#include "fuzz.h"
#include "pickle.h"

FUZZ_TARGET(pickle)

static int fuzz_run(const uint8_t *data, size_t size)
{
    uint8_t *img = fuzz_copy(data, size);
    pk_state_dict sd;
    char err[256] = "";
    memset(&sd, 0, sizeof sd);
    int ok = img && pickle_load_state_dict(img, size, &sd, err, sizeof err) == 0;
    FUZZ_ASSERT(ok || err[0], "a failure without a message");
    for (size_t i = 0; ok && i < sd.n; i++) {
        const pk_tensor *t = &sd.t[i];
        FUZZ_ASSERT(t->name && t->storage_key && t->ndim >= 0 && t->ndim <= CKPT_MAX_DIMS, "tensor %zu", i);
        uint64_t n = 1;
        for (int k = 0; k < t->ndim; k++) n *= t->shape[k];
        FUZZ_ASSERT(n == t->numel, "numel of '%s'", t->name);
    }
    pk_state_dict_free(&sd);
    free(img);
    return ok;
}
