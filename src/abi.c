/* abi.c - size-prefixed structs in and out, one rule (see abi.h). */
#include <string.h>
#include "abi.h"
#include "status.h"

void abi_init(void *p, size_t size, const void *defaults, size_t lib_size)
{
    if (!p || size < sizeof(uint32_t)) return;
    memset(p, 0, size);
    memcpy(p, defaults, size < lib_size ? size : lib_size);
    *(uint32_t *)p = (uint32_t)size;
}

static mor_status check(uint32_t size, size_t lib_size, size_t v1_size, const char *what)
{
    if (size < v1_size || size > lib_size)
        return err_set(MOR_E_ABI, "%s.size is %u; this libmor accepts %zu (its first release) to %zu "
                       "(set it with the _INIT macro of the header you compile with)",
                       what, (unsigned)size, v1_size, lib_size);
    return MOR_OK;
}

mor_status abi_read(void *out, size_t lib_size, const void *in, size_t v1_size, const char *what)
{
    if (!in) return MOR_OK;
    const uint32_t size = *(const uint32_t *)in;
    mor_status st = check(size, lib_size, v1_size, what);
    if (st) return st;
    memcpy(out, in, size);
    *(uint32_t *)out = (uint32_t)lib_size;
    return MOR_OK;
}

mor_status abi_write(void *out, const void *full, size_t lib_size, size_t v1_size, const char *what)
{
    const uint32_t size = *(const uint32_t *)out;
    mor_status st = check(size, lib_size, v1_size, what);
    if (st) return st;
    memcpy((char *)out + sizeof(uint32_t), (const char *)full + sizeof(uint32_t), size - sizeof(uint32_t));
    return MOR_OK;
}
