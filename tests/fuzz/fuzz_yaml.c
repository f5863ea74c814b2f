/* fuzz_yaml.c - any bytes as the training config (mor_cfg.yaml): the YAML
 * subset reader (src/tools/mor-convert/yaml.c), then the MoR settings taken from it. */
#include "fuzz.h"
#include "json.h"
#include "settings.h"
#include "yaml.h"

FUZZ_TARGET(yaml)

static size_t walk(const json *v, int depth)
{
    FUZZ_ASSERT(v && depth <= YAML_MAX_DEPTH + 2, "depth %d", depth);
    size_t n = 1;
    if (v->type == JSON_STRING) FUZZ_ASSERT(v->str && v->str[v->str_len] == 0, "string not NUL-terminated");
    if (v->type == JSON_ARRAY || v->type == JSON_OBJECT)
        for (size_t k = 0; k < v->n; k++) {
            if (v->type == JSON_OBJECT) FUZZ_ASSERT(v->keys[k] && json_get(v, v->keys[k]), "key %zu", k);
            n += walk(v->items[k], depth + 1);
        }
    return n;
}

static int fuzz_run(const uint8_t *data, size_t size)
{
    char *text = (char *)fuzz_copy(data, size);
    char err[256] = "";
    if (!text) return 0;
    json *doc = yaml_parse(text, size, err, sizeof err);
    FUZZ_ASSERT(doc || err[0], "a failure without a message");
    int ok = doc != NULL;
    if (doc) {
        walk(doc, 0);
        cv_settings ms;
        cv_settings_init(&ms);
        err[0] = 0;
        if (cv_settings_from_doc(&ms, doc, err, sizeof err)) FUZZ_ASSERT(err[0], "cv_settings: no message");
        json_free(doc);
    }
    free(text);
    return ok;
}
