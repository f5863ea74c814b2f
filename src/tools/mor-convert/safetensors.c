/* safetensors.c - the safetensors reader. Every offset is checked against the
 * file size and every byte length against shape x dtype size, so a corrupt
 * file is rejected rather than read out of bounds. */
#include "safetensors.h"

#include <string.h>

#include "dtype.h"
#include "json.h"

static int dtype_from_name(const char *s)
{
    if (strcmp(s, "F32") == 0) return GGML_F32;
    if (strcmp(s, "F16") == 0) return GGML_F16;
    if (strcmp(s, "BF16") == 0) return GGML_BF16;
    return -1;
}

static int add_tensor(checkpoint *ck, const char *name, const json *info, const uint8_t *data,
                      uint64_t data_size, char *err, size_t errcap)
{
    const json *jd = json_get(info, "dtype"), *js = json_get(info, "shape"), *jo = json_get(info, "data_offsets");
    uint64_t shape[CKPT_MAX_DIMS];
    int64_t begin, end;
    int dtype;
    if (info->type != JSON_OBJECT || !json_as_str(jd) || !js || js->type != JSON_ARRAY || !jo ||
        jo->type != JSON_ARRAY || jo->n != 2)
        return cv_fail(err, errcap, "safetensors: entry '%.200s' needs dtype, shape and data_offsets", name);
    dtype = dtype_from_name(jd->str);
    if (dtype < 0)
        return cv_fail(err, errcap, "safetensors: tensor '%.200s' has dtype %.20s; only F32, F16 and BF16 are supported",
                       name, jd->str);
    if (js->n > CKPT_MAX_DIMS)
        return cv_fail(err, errcap, "safetensors: tensor '%.200s' has %zu dimensions", name, js->n);
    for (size_t i = 0; i < js->n; i++) {
        int64_t d;
        if (!json_as_int(js->items[i], 0, INT64_MAX, &d))
            return cv_fail(err, errcap, "safetensors: tensor '%.200s' has a bad shape", name);
        shape[i] = (uint64_t)d;
    }
    if (!json_as_int(jo->items[0], 0, INT64_MAX, &begin) || !json_as_int(jo->items[1], 0, INT64_MAX, &end) ||
        begin > end || (uint64_t)end > data_size)
        return cv_fail(err, errcap, "safetensors: tensor '%.200s' has data_offsets outside the file", name);
    return ckpt_add(ck, name, strlen(name), dtype, (int)js->n, shape, data + begin, (uint64_t)(end - begin), err,
                    errcap);
}

int safetensors_parse(checkpoint *ck, const uint8_t *buf, size_t size, char *err, size_t errcap)
{
    uint64_t hlen;
    json *h;
    int rc = 0;
    if (size < 8) return cv_fail(err, errcap, "safetensors: file too short (%zu bytes)", size);
    hlen = cv_le64(buf);
    if (hlen > size - 8) return cv_fail(err, errcap, "safetensors: header length %llu exceeds the file", (unsigned long long)hlen);
    if (hlen > SAFETENSORS_MAX_HEADER) return cv_fail(err, errcap, "safetensors: header larger than 100 MB");
    if (hlen == 0 || buf[8] != '{') return cv_fail(err, errcap, "not a safetensors file (no JSON header)");
    h = json_parse((const char *)buf + 8, (size_t)hlen, err, errcap);
    if (!h) return cv_prefix(err, errcap, "safetensors header");
    if (h->type != JSON_OBJECT) {
        json_free(h);
        return cv_fail(err, errcap, "safetensors: the header is not a JSON object");
    }
    for (size_t i = 0; i < h->n && rc == 0; i++) {
        if (strcmp(h->keys[i], "__metadata__") == 0) {
            if (h->items[i]->type != JSON_OBJECT) rc = cv_fail(err, errcap, "safetensors: __metadata__ is not an object");
            continue;
        }
        rc = add_tensor(ck, h->keys[i], h->items[i], buf + 8 + hlen, (uint64_t)(size - 8 - hlen), err, errcap);
    }
    json_free(h);
    return rc;
}
