/* util.h - small helpers shared by the converter's readers and writer.
 *
 * Conventions of src/tools/mor-convert: a function that can fail takes `char *err,
 * size_t errcap` last and returns 0 on success, -1 on failure with a one-line
 * message in err. Nothing here prints or exits; only the CLI does. */
#ifndef CV_UTIL_H
#define CV_UTIL_H
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#  define CV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#  define CV_PRINTF(a, b)
#endif

/* Progress of a long step ("writing tensors", "SVDs"): done of total units.
 * Called from the converting thread (SVDs: one at a time, under a lock). */
typedef void (*cv_progress_fn)(const char *what, int64_t done, int64_t total, void *user_data);

/* Write a message into err (when err && errcap) and return -1, so that callers
 * can write `return cv_fail(err, errcap, "bad %s", what);`. */
int cv_fail(char *err, size_t errcap, const char *fmt, ...) CV_PRINTF(3, 4);

/* Prefix an existing message in err with "what: " (for context). Returns -1. */
int cv_prefix(char *err, size_t errcap, const char *fmt, ...) CV_PRINTF(3, 4);

/* A read-only image of a whole file: memory-mapped where possible (a
 * checkpoint may be gigabytes), else read into memory. */
typedef struct {
    const uint8_t *data;   /* never NULL after a successful open, even if size == 0 */
    size_t         size;
    void          *map;    /* mmap base, or NULL */
    void          *heap;   /* malloc'd copy, or NULL */
} cv_file;

int  cv_file_open(cv_file *f, const char *path, char *err, size_t errcap);
void cv_file_close(cv_file *f);
int  cv_file_exists(const char *path);          /* a regular file we can open */

/* Paths. Results are malloc'd (NULL when out of memory). */
char *cv_path_join(const char *dir, const char *name);
char *cv_path_dirname(const char *path);        /* "." for a bare file name */

char *cv_strndup(const char *s, size_t n);
char *cv_strdup(const char *s);

/* Overflow-checked arithmetic: 1 on success, 0 on overflow. */
int cv_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
int cv_add_u64(uint64_t a, uint64_t b, uint64_t *out);

/* Little-endian loads from unaligned memory. */
uint16_t cv_le16(const uint8_t *p);
uint32_t cv_le32(const uint8_t *p);
uint64_t cv_le64(const uint8_t *p);

#endif
