/* text.c - see text.h. */
#include <stdlib.h>
#include "text.h"

mor_status text_tokenize(const mor_model *m, const char *text, size_t n, uint32_t flags, mor_token **out,
                         int32_t *n_out)
{
    int32_t cnt = 0;
    *out = NULL;
    *n_out = 0;
    mor_status st = mor_tokenize(m, text, n, flags, NULL, 0, &cnt);
    if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL) return st;
    mor_token *ids = malloc(sizeof *ids * (size_t)(cnt ? cnt : 1));
    if (!ids) return MOR_E_NOMEM;
    if ((st = mor_tokenize(m, text, n, flags, ids, cnt, &cnt))) { free(ids); return st; }
    *out = ids;
    *n_out = cnt;
    return MOR_OK;
}

mor_status text_detokenize(const mor_model *m, const mor_token *ids, int32_t n, char **out, size_t *len)
{
    size_t need = 0;
    *out = NULL;
    *len = 0;
    mor_status st = mor_detokenize(m, ids, n, NULL, 0, &need);
    if (st != MOR_OK && st != MOR_E_BUFFER_TOO_SMALL) return st;
    char *s = malloc(need + 1);
    if (!s) return MOR_E_NOMEM;
    if ((st = mor_detokenize(m, ids, n, s, need, &need))) { free(s); return st; }
    s[need] = 0;
    *out = s;
    *len = need;
    return MOR_OK;
}
