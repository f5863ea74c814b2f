/* util.c - error messages, file images, paths and checked arithmetic for the
 * converter. See util.h. */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#  include <fcntl.h>
#  include <sys/mman.h>
#  include <sys/stat.h>
#  include <unistd.h>
#  define CV_HAVE_MMAP 1
#endif

int cv_fail(char *err, size_t errcap, const char *fmt, ...)
{
    if (err && errcap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errcap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int cv_prefix(char *err, size_t errcap, const char *fmt, ...)
{
    char head[512], old[1024];
    va_list ap;
    if (!err || !errcap) return -1;
    snprintf(old, sizeof old, "%s", err);
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    snprintf(err, errcap, "%s: %s", head, old);
    return -1;
}

/* A static empty image, so that data is never NULL (memcpy/memcmp with NULL
 * is undefined even for length 0). */
static const uint8_t cv_empty[1];

#ifdef CV_HAVE_MMAP
int cv_file_open(cv_file *f, const char *path, char *err, size_t errcap)
{
    struct stat st;
    int fd;
    memset(f, 0, sizeof *f);
    fd = open(path, O_RDONLY);
    if (fd < 0) return cv_fail(err, errcap, "cannot open %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cv_fail(err, errcap, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cv_fail(err, errcap, "%s is not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return cv_fail(err, errcap, "%s is too large for this machine", path);
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) {
        close(fd);
        f->data = cv_empty;
        return 0;
    }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        /* Some file systems cannot map; fall back to reading. */
        size_t got = 0;
        f->map = NULL;
        f->heap = malloc(f->size);
        if (!f->heap) {
            close(fd);
            return cv_fail(err, errcap, "out of memory reading %s", path);
        }
        while (got < f->size) {
            ssize_t r = read(fd, (char *)f->heap + got, f->size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                int e = errno;
                close(fd);
                free(f->heap);
                f->heap = NULL;
                return cv_fail(err, errcap, "cannot read %s: %s", path, r < 0 ? strerror(e) : "short read");
            }
            got += (size_t)r;
        }
        f->data = f->heap;
    } else {
        f->data = f->map;
    }
    close(fd);
    return 0;
}

void cv_file_close(cv_file *f)
{
    if (f->map) munmap(f->map, f->size);
    free(f->heap);
    memset(f, 0, sizeof *f);
}

int cv_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
#else
int cv_file_open(cv_file *f, const char *path, char *err, size_t errcap)
{
    FILE *fp;
    long n;
    memset(f, 0, sizeof *f);
    fp = fopen(path, "rb");
    if (!fp) return cv_fail(err, errcap, "cannot open %s: %s", path, strerror(errno));
    if (fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        fclose(fp);
        return cv_fail(err, errcap, "cannot size %s", path);
    }
    f->size = (size_t)n;
    if (f->size == 0) {
        fclose(fp);
        f->data = cv_empty;
        return 0;
    }
    f->heap = malloc(f->size);
    if (!f->heap) {
        fclose(fp);
        return cv_fail(err, errcap, "out of memory reading %s", path);
    }
    if (fread(f->heap, 1, f->size, fp) != f->size) {
        fclose(fp);
        free(f->heap);
        f->heap = NULL;
        return cv_fail(err, errcap, "cannot read %s", path);
    }
    fclose(fp);
    f->data = f->heap;
    return 0;
}

void cv_file_close(cv_file *f)
{
    free(f->heap);
    memset(f, 0, sizeof *f);
}

int cv_file_exists(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    fclose(fp);
    return 1;
}
#endif

char *cv_strndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *cv_strdup(const char *s)
{
    return cv_strndup(s, strlen(s));
}

char *cv_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + (size_t)slash, name, b + 1);
    return p;
}

char *cv_path_dirname(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s) return cv_strdup(".");
    if (s == path) return cv_strdup("/");
    return cv_strndup(path, (size_t)(s - path));
}

int cv_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int cv_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a) return 0;
    *out = a + b;
    return 1;
}

uint16_t cv_le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
uint32_t cv_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
uint64_t cv_le64(const uint8_t *p) { return (uint64_t)cv_le32(p) | (uint64_t)cv_le32(p + 4) << 32; }
