/* grammar.h - GBNF grammars (llama.cpp's grammar language): the parser
 * (grammar_parse.c) and the matcher behind mor_grammar (grammar.c).
 *
 * A parsed grammar is a set of rules; each rule a list of alternatives; each
 * alternative a sequence of elements ending with GEL_END: a reference to a
 * rule, or a character class (ranges of code points, maybe negated).
 * Groups and repetitions become rules of their own at parse time
 * (x* is R ::= x R | "", x? is R ::= x | "", x{m,n} m copies of x then
 * nested optionals), so the matcher knows only sequences, alternatives and
 * references. Grammars that are left-recursive (also through rules that can
 * match nothing) are refused: matching them would not end. */
#ifndef MOR_GRAMMAR_H
#define MOR_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>
#include "mor.h"

enum { GEL_END = 0, GEL_REF = 1, GEL_CHARS = 2 };

typedef struct {
    uint8_t type;   /* GEL_* */
    uint8_t neg;    /* GEL_CHARS: matches the code points outside the ranges */
    int32_t a;      /* GEL_REF: rule id; GEL_CHARS: first range              */
    int32_t n;      /* GEL_CHARS: number of ranges                           */
} gel;

typedef struct grammar_rules {
    int32_t   n_rules, root;
    gel      *el;          /* every alternative's elements, each ending with GEL_END */
    int32_t   n_el;
    int32_t  *alt;         /* start (index into el) of each alternative          */
    int32_t  *rule_alt;    /* [n_rules + 1]: rule r's alternatives are alt[rule_alt[r] .. rule_alt[r+1]) */
    uint32_t *ranges;      /* pairs lo, hi (inclusive) of code points            */
    uint8_t  *nullable;    /* [n_rules]: the rule matches the empty string        */
    char    **names;       /* [n_rules]: for messages; generated rules get name-N  */
} grammar_rules;

/* Limits that keep parsing and matching bounded on hostile input. */
#define GRAMMAR_MAX_RULES    16384
#define GRAMMAR_MAX_ELEMENTS (1 << 20)
#define GRAMMAR_MAX_NESTING  128      /* parentheses */
#define GRAMMAR_MAX_REPEAT   10000    /* m and n of x{m,n} */

/* Parse GBNF text[0..len) whose start rule is `root` (NULL: "root").
 * MOR_E_INVALID_ARG with "line L, column C: ..." for a syntax error, an
 * undefined or twice-defined rule, left recursion, or a start rule that
 * matches no string; MOR_E_NOMEM. `who` prefixes messages. */
mor_status grammar_parse(const char *text, size_t len, const char *root, const char *who, grammar_rules **out);
void       grammar_rules_free(grammar_rules *g);

/* 1 if bytes[0..n) (UTF-8) is a whole string of the grammar, 0 if not, or
 * a negative mor_status (MOR_E_NOMEM; MOR_E_UNSUPPORTED when the nesting
 * goes beyond what the matcher holds). For tests and tools. */
int grammar_match(const grammar_rules *g, const char *bytes, size_t n);

/* The server's use of a mor_grammar (serve.c): grammar_allowed marks in
 * ok[0..n_vocab) the tokens that can come next (end tokens only where the
 * output may end) and returns how many, or a negative mor_status;
 * grammar_accept_allowed takes a token it marked, which cannot fail. */
int32_t grammar_allowed(mor_grammar *g, uint8_t *ok, int32_t n_vocab);
/* The matcher steps of the last mask or accepted token (at most GM_WORK,
 * 2^24: beyond it the call fails with MOR_E_UNSUPPORTED). For tests. */
int64_t grammar_work(const mor_grammar *g);
void    grammar_accept_allowed(mor_grammar *g, mor_token t);
int32_t grammar_n_vocab(const mor_grammar *g);
#endif
