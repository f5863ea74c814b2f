/* fuzz.h - what the fuzz targets of tests/fuzz/ share.
 *
 * Each tests/fuzz/fuzz_<name>.c is one target. It writes its body as
 *
 *     FUZZ_TARGET(name)
 *     static int fuzz_run(const uint8_t *data, size_t size) { ...; return accepted; }
 *
 * and is built twice:
 *  - by `make fuzz` with clang -fsanitize=fuzzer,address,undefined, where
 *    LLVMFuzzerTestOneInput runs it (build/fuzz/fuzz_<name>);
 *  - with -DFUZZ_REPLAY into build/tests/test_fuzz_replay (make test, also
 *    under ASan+UBSan), which calls fuzz_accept_<name> on every seed in
 *    tests/fuzz/corpus/<name>/ (each must be accepted: a seed the parser
 *    rejects at its header fuzzes nothing) and every regression input in
 *    tests/fuzz/regress/<name>/ (a crash once found by the fuzzer).
 * fuzz_run returns 1 when the input was accepted (parsed, loaded, decoded)
 * and 0 when it was rejected with an error status; anything else (a broken
 * invariant) is FUZZ_ASSERT, which aborts so that the fuzzer records it.
 *
 * Targets that need a model load the tiny ones in tests/fuzz/models/ (see
 * make_seeds.py), from the directory $MOR_FUZZ_MODELS or, by default, the
 * repository root as the working directory. */
#ifndef MOR_FUZZ_H
#define MOR_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond, ...) do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz invariant broken at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            abort(); \
        } \
    } while (0)

#ifdef FUZZ_REPLAY
#  define FUZZ_TARGET(name) \
    static int fuzz_run(const uint8_t *data, size_t size); \
    int fuzz_accept_##name(const uint8_t *data, size_t size); \
    int fuzz_accept_##name(const uint8_t *data, size_t size) { return fuzz_run(data, size); }
#else
#  define FUZZ_TARGET(name) \
    static int fuzz_run(const uint8_t *data, size_t size); \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size); \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { fuzz_run(data, size); return 0; }
#endif

/* A whole file in a malloc'd buffer (NULL if unreadable). */
static inline uint8_t *fuzz_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *p = NULL;
    size_t cap = 0, len = 0, k;
    do {
        if (len == cap) {
            uint8_t *q = realloc(p, cap = cap ? 2 * cap : 65536);
            if (!q) { free(p); fclose(f); return NULL; }
            p = q;
        }
        k = fread(p + len, 1, cap - len, f);
        len += k;
    } while (k > 0);
    fclose(f);
    *n = len;
    return p;
}

/* The path of tests/fuzz/models/<name> into buf. */
static inline const char *fuzz_model_path(const char *name, char *buf, size_t cap)
{
    const char *dir = getenv("MOR_FUZZ_MODELS");
    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : "tests/fuzz/models", name);
    return buf;
}

/* A copy of data in its own allocation: libFuzzer's buffers and the replay's
 * have exactly `size` bytes, so ASan sees every read past the end; malloc
 * also gives the 4-byte alignment a model image needs. */
static inline uint8_t *fuzz_copy(const uint8_t *data, size_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    if (p && size) memcpy(p, data, size);
    return p;
}
#endif
