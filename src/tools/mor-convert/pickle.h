/* pickle.h - read the state dict that torch.save pickles into data.pkl, with
 * a restricted pickle machine that never executes anything.
 *
 * Only the opcodes torch.save (protocol 2) writes are understood, and only
 * these globals may be named: collections.OrderedDict,
 * torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and
 * torch.{Float,Half,BFloat16}Storage. "Calling" them builds plain records;
 * anything else is an error. A persistent id is a tuple ('storage',
 * StorageType, key, location, numel) naming the archive entry data/<key>. */
#ifndef CV_PICKLE_H
#define CV_PICKLE_H
#include <stddef.h>
#include <stdint.h>
#include "checkpoint.h"

/* One tensor of the state dict, before its storage is looked up. */
typedef struct {
    char *name;              /* state-dict key */
    char *storage_key;       /* archive entry <prefix>/data/<storage_key> */
    int dtype;               /* GGML_F32 / GGML_F16 / GGML_BF16 */
    uint64_t storage_numel;  /* elements in the storage */
    uint64_t offset;         /* storage_offset, in elements */
    int ndim;
    uint64_t shape[CKPT_MAX_DIMS];
    uint64_t numel;          /* product of shape; the strides were checked contiguous */
} pk_tensor;

typedef struct {
    pk_tensor *t;
    size_t n;
} pk_state_dict;

int  pickle_load_state_dict(const uint8_t *buf, size_t len, pk_state_dict *out, char *err, size_t errcap);
void pk_state_dict_free(pk_state_dict *sd);

#endif
