/* test_normalize.c - NFC (src/normalize.c) against CPython's
 * unicodedata.normalize: tests/data/tokenizer/nfc.txt holds ~8000 texts
 * (every code point with a decomposition, a combining class or a composite,
 * in sequences that reorder, block and compose, and Hangul) with their NFC,
 * written by tests/tokenizer/gen_nfc.py. Also: nfc_quick() never calls a text
 * stable that NFC changes; bytes that are not UTF-8 pass through unchanged. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "normalize.h"

static int unhex(const char *h, size_t n, uint8_t *out)
{
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v;
        if (sscanf(h + i, "%2x", &v) != 1) return -1;
        out[i / 2] = (uint8_t)v;
    }
    return (int)(n / 2);
}

static int nfc_is(const uint8_t *in, size_t n, const uint8_t *want, size_t wn, uint8_t **buf, size_t *cap)
{
    size_t got = 0;
    return nfc_normalize(in, n, buf, cap, &got) == MOR_OK && got == wn && !memcmp(*buf, want, wn);
}

int main(void)
{
    (void)check_maxdiff;
    FILE *f = fopen("tests/data/tokenizer/nfc.txt", "r");
    if (!CHECK(f, "read tests/data/tokenizer/nfc.txt (run from the repository root)")) return check_done();
    char line[512];
    uint8_t in[128], want[128], *buf = NULL;
    size_t cap = 0;
    int n_cases = 0, bad = 0, bad_quick = 0, changed = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *sp = strchr(line, ' ');
        if (!sp) continue;
        size_t la = (size_t)(sp - line), lb = strcspn(sp + 1, "\n");
        int n = unhex(line, la, in), wn = unhex(sp + 1, lb, want);
        if (n < 0 || wn < 0) { bad++; continue; }
        n_cases++;
        if (!nfc_is(in, (size_t)n, want, (size_t)wn, &buf, &cap)) {
            if (bad++ < 5) CHECK(0, "NFC of %.*s: %.*s expected", (int)la, line, (int)lb, sp + 1);
        }
        int same = n == wn && !memcmp(in, want, (size_t)n);
        changed += !same;
        if (nfc_quick(in, (size_t)n) && !same) bad_quick++;
    }
    fclose(f);
    CHECK(n_cases > 7000 && bad == 0, "%d of %d texts normalize as CPython's NFC (%d of them change)", n_cases - bad,
          n_cases, changed);
    CHECK(bad_quick == 0, "nfc_quick never calls a text stable that NFC changes");

    static const uint8_t odd[] = "a\xff\xcc\x81 e\xcc\x81\x80\xcc\x81 \xe1\x84\x80\xc3\xa1\xe1\x85\xa1";
    /* a + FF + U+0301: FF blocks nothing but composes with nothing; e + U+0301 -> e-acute; a stray
     * continuation byte; then L jamo, a-acute, V jamo: the V does not join L across a-acute */
    static const uint8_t odd_nfc[] = "a\xff\xcc\x81 \xc3\xa9\x80\xcc\x81 \xe1\x84\x80\xc3\xa1\xe1\x85\xa1";
    CHECK(nfc_is(odd, sizeof odd - 1, odd_nfc, sizeof odd_nfc - 1, &buf, &cap), "invalid UTF-8 bytes pass through");
    CHECK(nfc_quick((const uint8_t *)"plain ASCII, 123", 16) && nfc_quick((const uint8_t *)"\xe4\xbd\xa0\xe5\xa5\xbd", 6) &&
          !nfc_quick((const uint8_t *)"e\xcc\x81", 3), "nfc_quick: ASCII and CJK stable, e + U+0301 not");
    size_t got = 7;
    CHECK(nfc_normalize((const uint8_t *)"", 0, &buf, &cap, &got) == MOR_OK && got == 0, "empty text");
    free(buf);
    return check_done();
}
