/* unicode.h - UTF-8 decoding and the Unicode properties of code points that the pre-tokenizers test. */
#ifndef MOR_UNICODE_H
#define MOR_UNICODE_H
#include <stddef.h>
#include <stdint.h>

/* What the GPT-2 pre-tokenizer needs to know about a code point. */
enum uclass {
    UC_OTHER  = 0,  /* none of the below: [^\s\p{L}\p{N}]                      */
    UC_LETTER = 1,  /* \p{L}: Lu Ll Lt Lm Lo                                  */
    UC_NUMBER = 2,  /* \p{N}: Nd Nl No (= Rust's char::is_numeric)            */
    UC_SPACE  = 3   /* \s as Oniguruma has it: the Unicode White_Space property */
};

/* The properties as bits, for character classes such as [\p{P}\s]. At most
 * one bit is set; 0 for the rest (controls, format characters, separators
 * that are not White_Space, unassigned code points, invalid bytes). */
enum {
    UF_LETTER = 1u << 0,  /* \p{L} */
    UF_NUMBER = 1u << 1,  /* \p{N} */
    UF_PUNCT  = 1u << 2,  /* \p{P} */
    UF_SYMBOL = 1u << 3,  /* \p{S} */
    UF_MARK   = 1u << 4,  /* \p{M} */
    UF_SPACE  = 1u << 5   /* \s: White_Space */
};

/* Marks a byte that does not start a valid UTF-8 sequence. */
#define UTF8_INVALID 0xFFFFFFFFu

/* Decode the UTF-8 sequence at s[0..n), n >= 1. Returns its length (1..4) and
 * stores the code point in *cp. A byte that does not begin a well-formed
 * sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
 * truncation) is a unit of length 1 with *cp = UTF8_INVALID. */
size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encode code point cp (<= 0x10FFFF) as UTF-8 into out[0..4). Returns its
 * length (1..4). */
size_t utf8_encode(uint32_t cp, char out[4]);

/* UF_* bits of a code point; UTF8_INVALID has none. */
unsigned unicode_flags(uint32_t cp);

/* Class of a code point; UTF8_INVALID is UC_OTHER. */
int unicode_class(uint32_t cp);

#endif
