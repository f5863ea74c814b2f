/* torch_zip.c - the ZIP container of torch.save files, and the assembly of
 * tensors from the pickled state dict and the storage entries.
 *
 * Only the central directory is trusted for sizes (torch writes its local
 * headers with the "sizes follow in a data descriptor" flag and zero sizes);
 * a local header is read only for the length of its name and extra field,
 * which locate the entry's data. */
#include "torch_zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "pickle.h"

#define SIG_LOCAL    0x04034b50u
#define SIG_CENTRAL  0x02014b50u
#define SIG_EOCD     0x06054b50u
#define SIG_EOCD64   0x06064b50u
#define SIG_LOC64    0x07064b50u

typedef struct {
    const char *name;        /* into the buffer, not NUL-terminated */
    size_t name_len;
    uint16_t method;
    uint32_t crc;
    uint64_t csize, usize, local;
    const uint8_t *data;     /* resolved lazily */
    int checked;             /* data located and CRC verified */
} zentry;

typedef struct {
    const uint8_t *buf;
    size_t size;
    zentry *e;
    size_t n;
} zarchive;

/* ---- CRC-32 (the ZIP polynomial) ------------------------------------------ */

static uint32_t crc_table[256];
static int crc_ready;

static uint32_t crc32_of(const uint8_t *p, uint64_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    if (!crc_ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t k = i;
            for (int j = 0; j < 8; j++) k = k & 1 ? 0xEDB88320u ^ (k >> 1) : k >> 1;
            crc_table[i] = k;
        }
        crc_ready = 1;
    }
    for (uint64_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- directory ------------------------------------------------------------- */

static int find_eocd(const zarchive *z, size_t *pos)
{
    /* The end record is 22 bytes plus a comment of at most 65535 bytes. */
    size_t lo = z->size > 22 + 65535 ? z->size - 22 - 65535 : 0;
    if (z->size < 22) return 0;
    for (size_t p = z->size - 22 + 1; p-- > lo;) {
        if (cv_le32(z->buf + p) == SIG_EOCD && p + 22 + cv_le16(z->buf + p + 20) <= z->size) {
            *pos = p;
            return 1;
        }
    }
    return 0;
}

/* Values 0xFFFF.../0xFFFFFFFF in a central entry are in its ZIP64 extra field,
 * in the order usize, csize, local offset. */
static int read_zip64_extra(zentry *e, const uint8_t *x, size_t xn, char *err, size_t errcap)
{
    while (xn >= 4) {
        uint16_t id = cv_le16(x), len = cv_le16(x + 2);
        if ((size_t)len > xn - 4) break;
        if (id == 0x0001) {
            size_t off = 0;
            uint64_t *fields[3] = {&e->usize, &e->csize, &e->local};
            for (int i = 0; i < 3; i++) {
                if (*fields[i] != 0xFFFFFFFFu) continue;
                if (off + 8 > len) return cv_fail(err, errcap, "zip: truncated ZIP64 extra field");
                *fields[i] = cv_le64(x + 4 + off);
                off += 8;
            }
            return 0;
        }
        x += 4 + (size_t)len;
        xn -= 4 + (size_t)len;
    }
    if (e->usize == 0xFFFFFFFFu || e->csize == 0xFFFFFFFFu || e->local == 0xFFFFFFFFu)
        return cv_fail(err, errcap, "zip: missing ZIP64 extra field");
    return 0;
}

static int read_directory(zarchive *z, char *err, size_t errcap)
{
    size_t eocd;
    uint64_t count, cd_size, cd_off, pos;
    const uint8_t *b = z->buf;
    if (!find_eocd(z, &eocd)) return cv_fail(err, errcap, "zip: end of central directory not found (truncated file?)");
    if (cv_le16(b + eocd + 4) != 0 || cv_le16(b + eocd + 6) != 0)
        return cv_fail(err, errcap, "zip: multi-disk archives are not supported");
    count = cv_le16(b + eocd + 10);
    cd_size = cv_le32(b + eocd + 12);
    cd_off = cv_le32(b + eocd + 16);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFFu || cd_off == 0xFFFFFFFFu) {
        /* ZIP64: a locator right before the end record points to the real one */
        uint64_t r;
        if (eocd < 20 || cv_le32(b + eocd - 20) != SIG_LOC64) return cv_fail(err, errcap, "zip: ZIP64 locator missing");
        r = cv_le64(b + eocd - 20 + 8);
        if (r > z->size || z->size - r < 56 || cv_le32(b + r) != SIG_EOCD64)
            return cv_fail(err, errcap, "zip: bad ZIP64 end of central directory");
        count = cv_le64(b + r + 32);
        cd_size = cv_le64(b + r + 40);
        cd_off = cv_le64(b + r + 48);
    }
    if (cd_off > z->size || cd_size > z->size - cd_off) return cv_fail(err, errcap, "zip: central directory outside the file");
    if (count > cd_size / 46) return cv_fail(err, errcap, "zip: entry count does not fit the central directory");
    z->e = calloc(count ? (size_t)count : 1, sizeof *z->e);
    if (!z->e) return cv_fail(err, errcap, "out of memory");
    pos = cd_off;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *c = b + pos;
        zentry *e = &z->e[z->n];
        size_t nl, xl, cl;
        if (cd_off + cd_size - pos < 46 || cv_le32(c) != SIG_CENTRAL) return cv_fail(err, errcap, "zip: bad central directory entry");
        nl = cv_le16(c + 28);
        xl = cv_le16(c + 30);
        cl = cv_le16(c + 32);
        if (cd_off + cd_size - pos - 46 < nl + xl + cl) return cv_fail(err, errcap, "zip: bad central directory entry");
        e->method = cv_le16(c + 10);
        e->crc = cv_le32(c + 16);
        e->csize = cv_le32(c + 20);
        e->usize = cv_le32(c + 24);
        e->local = cv_le32(c + 42);
        e->name = (const char *)c + 46;
        e->name_len = nl;
        if (cv_le16(c + 34) != 0 && cv_le16(c + 34) != 0xFFFF) return cv_fail(err, errcap, "zip: multi-disk archives are not supported");
        if (read_zip64_extra(e, c + 46 + nl, xl, err, errcap)) return -1;
        z->n++;
        pos += 46 + nl + xl + cl;
    }
    return 0;
}

/* Entries are sorted by name (bytewise, shorter first on a common prefix) so
 * that a large archive is searched in log time. */
static int name_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    int c = memcmp(a, b, an < bn ? an : bn);
    if (c) return c;
    return an < bn ? -1 : an > bn;
}

static int entry_cmp(const void *x, const void *y)
{
    const zentry *a = x, *b = y;
    return name_cmp(a->name, a->name_len, b->name, b->name_len);
}

static int sort_entries(zarchive *z, char *err, size_t errcap)
{
    if (z->n) qsort(z->e, z->n, sizeof *z->e, entry_cmp);
    for (size_t i = 1; i < z->n; i++)
        if (entry_cmp(&z->e[i - 1], &z->e[i]) == 0)
            return cv_fail(err, errcap, "zip: entry '%.*s' appears twice", (int)(z->e[i].name_len > 200 ? 200 : z->e[i].name_len),
                           z->e[i].name);
    return 0;
}

static zentry *find_entry(zarchive *z, const char *prefix, size_t plen, const char *rest)
{
    char name[512];
    size_t rl = strlen(rest), lo = 0, hi = z->n;
    if (plen + rl > sizeof name) return NULL;
    memcpy(name, prefix, plen);
    memcpy(name + plen, rest, rl);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = name_cmp(z->e[mid].name, z->e[mid].name_len, name, plen + rl);
        if (c == 0) return &z->e[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Locate an entry's bytes and verify it is stored and intact. */
static int entry_data(zarchive *z, zentry *e, char *err, size_t errcap)
{
    const uint8_t *l;
    uint64_t start;
    if (e->checked) return 0;
    if (e->method != 0)
        return cv_fail(err, errcap, "zip: entry '%.*s' is compressed (method %u); torch checkpoints store entries "
                                    "uncompressed", (int)(e->name_len > 200 ? 200 : e->name_len), e->name, e->method);
    if (e->csize != e->usize) return cv_fail(err, errcap, "zip: stored entry with different sizes");
    if (e->local > z->size || z->size - e->local < 30 || cv_le32(z->buf + e->local) != SIG_LOCAL)
        return cv_fail(err, errcap, "zip: bad local header for '%.*s'", (int)(e->name_len > 200 ? 200 : e->name_len), e->name);
    l = z->buf + e->local;
    start = e->local + 30 + (uint64_t)cv_le16(l + 26) + cv_le16(l + 28);
    if (start > z->size || e->usize > z->size - start)
        return cv_fail(err, errcap, "zip: entry '%.*s' extends past the end of the file",
                       (int)(e->name_len > 200 ? 200 : e->name_len), e->name);
    e->data = z->buf + start;
    if (crc32_of(e->data, e->usize) != e->crc)
        return cv_fail(err, errcap, "zip: CRC mismatch in '%.*s' (corrupt file)", (int)(e->name_len > 200 ? 200 : e->name_len), e->name);
    e->checked = 1;
    return 0;
}

/* ---- the torch layout ------------------------------------------------------- */

int torch_zip_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap)
{
    zarchive z = {buf, size, NULL, 0};
    zentry *pkl = NULL, *bo;
    const char *prefix = NULL;
    size_t plen = 0;
    pk_state_dict sd = {0};
    int rc = -1;

    if (read_directory(&z, err, errcap) || sort_entries(&z, err, errcap)) goto done;
    /* exactly one "<prefix>/data.pkl" with a one-component prefix */
    for (size_t i = 0; i < z.n; i++) {
        zentry *e = &z.e[i];
        const char *slash = memchr(e->name, '/', e->name_len);
        if (slash && slash > e->name && (size_t)(e->name + e->name_len - slash) == 9 && memcmp(slash, "/data.pkl", 9) == 0) {
            if (pkl) { cv_fail(err, errcap, "zip: more than one data.pkl in the archive"); goto done; }
            pkl = e;
            prefix = e->name;
            plen = (size_t)(slash - e->name) + 1;   /* with the slash */
            if (plen > 256) { cv_fail(err, errcap, "zip: archive prefix too long"); goto done; }
        }
    }
    if (!pkl) { cv_fail(err, errcap, "zip: no <name>/data.pkl entry; not a torch checkpoint"); goto done; }
    bo = find_entry(&z, prefix, plen, "byteorder");
    if (bo) {
        if (entry_data(&z, bo, err, errcap)) goto done;
        if (bo->usize != 6 || memcmp(bo->data, "little", 6) != 0) {
            cv_fail(err, errcap, "big-endian torch checkpoints are not supported");
            goto done;
        }
    }
    if (entry_data(&z, pkl, err, errcap)) goto done;
    if (pickle_load_state_dict(pkl->data, (size_t)pkl->usize, &sd, err, errcap)) goto done;

    for (size_t i = 0; i < sd.n; i++) {
        pk_tensor *t = &sd.t[i];
        size_t es = cv_dtype_size(t->dtype);
        uint64_t need, off, nbytes;
        char rest[300];
        zentry *e;
        if (strlen(t->storage_key) > 200) { cv_fail(err, errcap, "torch: storage key too long"); goto done; }
        snprintf(rest, sizeof rest, "data/%s", t->storage_key);
        e = find_entry(&z, prefix, plen, rest);
        if (!e) { cv_fail(err, errcap, "torch: storage '%s' of tensor '%.200s' is missing", t->storage_key, t->name); goto done; }
        if (entry_data(&z, e, err, errcap)) goto done;
        if (!cv_mul_u64(t->storage_numel, es, &need) || need > e->usize) {
            cv_fail(err, errcap, "torch: storage '%s' is shorter than its %llu elements", t->storage_key,
                    (unsigned long long)t->storage_numel);
            goto done;
        }
        /* rebuild_tensor checked offset + numel <= storage_numel */
        off = t->offset * es;
        nbytes = t->numel * es;
        if (ckpt_add(ck, t->name, strlen(t->name), t->dtype, t->ndim, t->shape, e->data + off, nbytes, err, errcap))
            goto done;
    }
    rc = 0;
done:
    pk_state_dict_free(&sd);
    free(z.e);
    return rc;
}
