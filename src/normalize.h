/* normalize.h - Unicode normalization form C (NFC, UAX #15), the normalizer
 * of GPT-NeoX's (Pythia's) tokenizer.json. */
#ifndef MOR_NORMALIZE_H
#define MOR_NORMALIZE_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

/* 1 if s[0..n) is NFC as it is: no code point in it that NFC may change or
 * that may change its neighbours (the common case, checked first). */
int nfc_quick(const uint8_t *s, size_t n);

/* The NFC of s[0..n) into *buf (grown with realloc; *cap its size), its
 * length in *out_n. Bytes that do not start valid UTF-8 are kept as they are
 * and compose with nothing. MOR_E_NOMEM leaves *buf valid. */
mor_status nfc_normalize(const uint8_t *s, size_t n, uint8_t **buf, size_t *cap, size_t *out_n);

#endif
