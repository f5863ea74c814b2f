/* replay.c - test_fuzz_replay: the fuzz targets of tests/fuzz/ as a normal
 * test (make test, and under ASan+UBSan in make test-sanitize).
 *
 * For every target: every seed of tests/fuzz/corpus/<target>/ must be
 * accepted; every input of tests/fuzz/regress/<target>/ (each a crash or a
 * broken invariant the fuzzer once found, since fixed) must run through;
 * and MUTATIONS (200) deterministic mutants of each seed (bit flips, byte writes,
 * cuts, duplicated spans; a fixed PRNG) must run through, so that even
 * without clang's libFuzzer every build re-checks a little of the fuzzing.
 * A broken invariant aborts (FUZZ_ASSERT): the program then ends without its
 * checks line and tests/run.sh counts the failure; the log names the input.
 * Runs from the repository root. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

#define TARGETS(X) X(gguf) X(safetensors) X(torch_zip) X(pickle) X(json) X(yaml) \
                   X(hf_tokenizer) X(tokenize) X(detokenize) X(decode) X(http) X(api) X(grammar) X(json_schema) \
                   X(sampler) X(chat_template) X(tools)
#define DECLARE(name) int fuzz_accept_##name(const uint8_t *data, size_t size);
TARGETS(DECLARE)
#define ENTRY(name) { #name, fuzz_accept_##name },
static const struct { const char *name; int (*run)(const uint8_t *, size_t); } targets[] = { TARGETS(ENTRY) };
#define N_TARGETS (sizeof targets / sizeof targets[0])

enum { MUTATIONS = 200 };

static uint8_t *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && len > 0 && fread(p, 1, (size_t)len, f) != (size_t)len) { free(p); p = NULL; }
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return p;
}

/* Sorted file names of a directory (NULL-terminated; NULL if it is missing). */
static char **list_dir(const char *dir, int *n)
{
    DIR *d = opendir(dir);
    *n = 0;
    if (!d) return NULL;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, sizeof *names * (size_t)(*n + 2));
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    if (!names) names = calloc(1, sizeof *names);
    names[*n] = NULL;
    for (int i = 1; i < *n; i++)    /* insertion sort: the order of the log is stable */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j]; names[j] = names[j - 1]; names[j - 1] = t;
        }
    return names;
}

static void free_list(char **names, int n)
{
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* One mutant of seed[0..n) into out (room for 2n + 16 bytes); returns its size. */
static size_t mutate(const uint8_t *seed, size_t n, uint8_t *out)
{
    memcpy(out, seed, n);
    size_t len = n;
    int edits = 1 + (int)(next_rand() % 4);
    for (int e = 0; e < edits; e++) {
        uint32_t kind = next_rand() % 6, at = len ? next_rand() % (uint32_t)len : 0;
        /* headers matter most: half of the edits land in the first 64 bytes */
        if (len > 64 && next_rand() % 2) at = next_rand() % 64;
        switch (kind) {
        case 0: if (len) out[at] ^= (uint8_t)(1u << (next_rand() % 8)); break;
        case 1: if (len) out[at] = (uint8_t)next_rand(); break;
        case 2: if (len) out[at] = (uint8_t[]){ 0, 0xFF, 0x7F, 0x80, 1 }[next_rand() % 5]; break;
        case 3: len = at; break;                                          /* cut */
        case 4: if (len + 8 <= 2 * n + 16) {                              /* insert */
                    memmove(out + at + 4, out + at, len - at);
                    for (int k = 0; k < 4; k++) out[at + k] = (uint8_t)next_rand();
                    len += 4;
                }
                break;
        default: if (len >= 8 && len + 8 <= 2 * n + 16) {                 /* duplicate 8 bytes */
                    size_t from = next_rand() % (uint32_t)(len - 7);
                    memmove(out + at + 8, out + at, len - at);
                    memcpy(out + at, out + (from >= at ? from + 8 : from), 8);
                    len += 8;
                }
                break;
        }
    }
    return len;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t t = 0; t < N_TARGETS; t++) {
        char dir[256], path[512];
        int n_seed = 0, n_reg = 0, accepted = 0, mutants = 0;
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", targets[t].name);
        char **seeds = list_dir(dir, &n_seed);
        for (int i = 0; i < n_seed; i++) {
            size_t n = 0;
            snprintf(path, sizeof path, "%s/%s", dir, seeds[i]);
            uint8_t *data = read_all(path, &n);
            printf("# %s: seed %s\n", targets[t].name, path);
            int ok = data && targets[t].run(data, n);
            accepted += ok;
            if (!ok) CHECK(0, "%s: seed %s is accepted", targets[t].name, path);
            uint8_t *mut = data ? malloc(2 * n + 16) : NULL;
            for (int k = 0; mut && k < MUTATIONS; k++) {
                size_t len = mutate(data, n, mut);
                uint8_t *exact = malloc(len ? len : 1);   /* exactly len bytes, for ASan */
                memcpy(exact, mut, len);
                targets[t].run(exact, len);
                free(exact);
                mutants++;
            }
            free(mut);
            free(data);
        }
        CHECK(n_seed > 0 && accepted == n_seed, "%s: %d seeds accepted of %d; %d mutants ran through",
              targets[t].name, accepted, n_seed, mutants);
        free_list(seeds, n_seed);

        snprintf(dir, sizeof dir, "tests/fuzz/regress/%s", targets[t].name);
        char **regs = list_dir(dir, &n_reg);
        for (int i = 0; i < n_reg; i++) {
            size_t n = 0;
            snprintf(path, sizeof path, "%s/%s", dir, regs[i]);
            printf("# %s: regression %s\n", targets[t].name, path);
            uint8_t *data = read_all(path, &n);
            if (data) targets[t].run(data, n);
            CHECK(data != NULL, "%s: regression %s runs through", targets[t].name, regs[i]);
            free(data);
        }
        free_list(regs, n_reg);
    }
    /* Every directory of tests/fuzz/corpus and tests/fuzz/regress names a target. */
    const char *const roots[2] = { "tests/fuzz/corpus", "tests/fuzz/regress" };
    for (int r = 0; r < 2; r++) {
        int n = 0;
        char **dirs = list_dir(roots[r], &n);
        for (int i = 0; i < n; i++) {
            int known = strchr(dirs[i], '.') != NULL;   /* README.md and the like */
            for (size_t t = 0; t < N_TARGETS; t++) known |= !strcmp(dirs[i], targets[t].name);
            if (!known) CHECK(0, "%s/%s names a fuzz target", roots[r], dirs[i]);
        }
        free_list(dirs, n);
    }
    return check_done();
}
