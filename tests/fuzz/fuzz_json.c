/* fuzz_json.c - any bytes as JSON: the strict parser (src/tools/common/json.c),
 * then the same text as a config.json (hf_config) and a mor_config.json
 * (cv_settings). Checks that the DOM is well formed. */
#include "fuzz.h"
#include "hf_config.h"
#include "json.h"
#include "settings.h"

FUZZ_TARGET(json)

/* Visit every node; returns the node count. */
static size_t walk(const json *v, int depth)
{
    FUZZ_ASSERT(v && depth <= JSON_MAX_DEPTH + 1, "depth %d", depth);
    size_t n = 1;
    int64_t i64;
    switch (v->type) {
    case JSON_STRING:
        FUZZ_ASSERT(v->str && v->str[v->str_len] == 0, "string not NUL-terminated");
        break;
    case JSON_NUMBER:
        FUZZ_ASSERT(v->num == v->num, "NaN number");
        json_as_int(v, INT64_MIN, INT64_MAX, &i64);
        break;
    case JSON_ARRAY:
        for (size_t k = 0; k < v->n; k++) { FUZZ_ASSERT(json_at(v, k) == v->items[k], "json_at"); n += walk(v->items[k], depth + 1); }
        FUZZ_ASSERT(json_at(v, v->n) == NULL, "json_at past the end");
        break;
    case JSON_OBJECT:
        for (size_t k = 0; k < v->n; k++) {
            FUZZ_ASSERT(v->keys[k], "NULL key");
            FUZZ_ASSERT(json_get(v, v->keys[k]) != NULL, "json_get of its own key");
            n += walk(v->items[k], depth + 1);
        }
        break;
    case JSON_NULL: case JSON_BOOL: break;
    default: FUZZ_ASSERT(0, "type %d", v->type);
    }
    return n;
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    char *text = (char *)fuzz_copy(data, size);
    char err[256] = "";
    if (!text) return 0;
    json *doc = json_parse(text, size, err, sizeof err);
    FUZZ_ASSERT(doc || err[0], "a failure without a message");
    if (doc) walk(doc, 0);
    json_free(doc);
    hf_config hc;
    err[0] = 0;
    if (hf_config_parse(&hc, text, size, err, sizeof err)) FUZZ_ASSERT(err[0], "hf_config: no message");
    cv_settings ms;
    cv_settings_init(&ms);
    err[0] = 0;
    if (cv_settings_parse(&ms, text, size, err, sizeof err)) FUZZ_ASSERT(err[0], "cv_settings: no message");
    free(text);
    return doc != NULL;
}
