/* unicode.h - UTF-8 decoding and the Unicode classes of the GPT-2 pre-tokenizer regex. */
#ifndef MOR_UNICODE_H
#define MOR_UNICODE_H
#include <stddef.h>
#include <stdint.h>

/* What the pre-tokenizer needs to know about a code point. */
enum uclass {
    UC_OTHER  = 0,  /* none of the below: [^\s\p{L}\p{N}]                      */
    UC_LETTER = 1,  /* \p{L}: Lu Ll Lt Lm Lo                                  */
    UC_NUMBER = 2,  /* \p{N}: Nd Nl No (= Rust's char::is_numeric)            */
    UC_SPACE  = 3   /* \s as Oniguruma has it: the Unicode White_Space property */
};

/* Marks a byte that does not start a valid UTF-8 sequence. */
#define UTF8_INVALID 0xFFFFFFFFu

/* Decode the UTF-8 sequence at s[0..n), n >= 1. Returns its length (1..4) and
 * stores the code point in *cp. A byte that does not begin a well-formed
 * sequence (stray continuation, overlong form, surrogate, > U+10FFFF,
 * truncation) is a unit of length 1 with *cp = UTF8_INVALID. */
size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Class of a code point; UTF8_INVALID is UC_OTHER. */
int unicode_class(uint32_t cp);

/* End of the GPT-2 pre-tokenizer regex match that starts at s[i] (i < n):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * The one matcher for the runtime tokenizer and the BPE trainer, so the two
 * can never cut a text differently. */
size_t gpt2_piece_end(const uint8_t *s, size_t n, size_t i);

#endif
