/* test_header.c - include/mor.h as a contract.
 *
 * Built three ways: by the Makefile like every C test (C11), by
 * tests/test_header.sh as strict C99 (-std=c99 -pedantic -Werror -Wall
 * -Wextra), and, through tests/header_cpp.cpp, as strict C++11. It checks at
 * compile time that mor.h is self-contained, that every enum's values are
 * unique (a duplicate case label does not compile), that params structs begin
 * with their uint32_t size, and at run time that the library agrees with the
 * header: version, status names, struct sizes, params_init.
 *
 * Every enumerator of mor.h must appear below (tests/test_header.sh checks),
 * so a value appended to the header is also appended here. */
#include "mor.h"   /* first: the header must compile on its own */
#include "mor.h"   /* and twice */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define HT_CAT2(a, b) a##b
#define HT_CAT(a, b) HT_CAT2(a, b)
/* C99-compatible static assertion (no _Static_assert before C11). */
#define HT_STATIC_ASSERT(cond) typedef char HT_CAT(ht_static_assert_, __LINE__)[(cond) ? 1 : -1]

HT_STATIC_ASSERT(MOR_VERSION_NUMBER ==
                 MOR_VERSION_MAJOR * 10000 + MOR_VERSION_MINOR * 100 + MOR_VERSION_PATCH);
HT_STATIC_ASSERT(sizeof(mor_status) == 4 && sizeof(mor_token) == 4);
HT_STATIC_ASSERT(sizeof(mor_pos) == 4 && sizeof(mor_seq_id) == 4);
HT_STATIC_ASSERT(MOR_OK == 0);
HT_STATIC_ASSERT(MOR_E_INVALID_ARG < 0 && MOR_E_NOMEM < 0 && MOR_E_IO < 0 && MOR_E_FORMAT < 0);
HT_STATIC_ASSERT(MOR_E_UNSUPPORTED < 0 && MOR_E_KV_FULL < 0 && MOR_E_ABORTED < 0 && MOR_E_ABI < 0);
HT_STATIC_ASSERT(MOR_E_OUT_OF_RANGE < 0 && MOR_E_POSITION < 0 && MOR_E_BUFFER_TOO_SMALL < 0);
HT_STATIC_ASSERT(MOR_E_INTERNAL < 0);
/* Flags are distinct single bits. */
HT_STATIC_ASSERT((MOR_MODEL_NO_MMAP & MOR_MODEL_VOCAB_ONLY) == 0);
HT_STATIC_ASSERT(((MOR_MODEL_NO_MMAP | MOR_MODEL_VOCAB_ONLY) & MOR_MODEL_FOLD_LORA) == 0);
HT_STATIC_ASSERT(((MOR_MODEL_NO_MMAP | MOR_MODEL_VOCAB_ONLY | MOR_MODEL_FOLD_LORA) & MOR_MODEL_CHECK_TENSORS) == 0);
HT_STATIC_ASSERT((MOR_TOKENIZE_ADD_BOS & MOR_TOKENIZE_PARSE_SPECIAL) == 0);
HT_STATIC_ASSERT(((MOR_TOKENIZE_ADD_BOS | MOR_TOKENIZE_PARSE_SPECIAL) & MOR_TOKENIZE_PARSE_USER_DEFINED) == 0);
HT_STATIC_ASSERT(MOR_CTX_CAPTURE_HIDDEN != 0 && MOR_CTX_FAST_BF16 != 0 && (MOR_CTX_CAPTURE_HIDDEN & MOR_CTX_FAST_BF16) == 0);
HT_STATIC_ASSERT(MOR_EMBD_NORMALIZE != 0 && MOR_POOL_MEAN != 0 && MOR_POOL_LAST != 0);
/* Recursion selectors cannot be confused with a recursion index. */
HT_STATIC_ASSERT(MOR_KV_UNIQUE_LAYERS < 0 && MOR_KV_ALL < 0 && MOR_KV_UNIQUE_LAYERS != MOR_KV_ALL);
/* Size-prefixed structs: a uint32_t size first. */
HT_STATIC_ASSERT(offsetof(mor_model_params, size) == 0);
HT_STATIC_ASSERT(offsetof(mor_context_params, size) == 0);
HT_STATIC_ASSERT(offsetof(mor_sampler_params, size) == 0);
HT_STATIC_ASSERT(offsetof(mor_router_stats, size) == 0);
HT_STATIC_ASSERT(sizeof(((mor_model_params *)0)->size) == 4);
HT_STATIC_ASSERT(sizeof(((mor_context_params *)0)->size) == 4);
HT_STATIC_ASSERT(sizeof(((mor_sampler_params *)0)->size) == 4);
HT_STATIC_ASSERT(sizeof(((mor_router_stats *)0)->size) == 4);

/* Uniqueness: a duplicated value is a duplicate case label, a compile error. */
static int status_unique(mor_status v)
{
    switch (v) {
    case MOR_OK: case MOR_E_INVALID_ARG: case MOR_E_NOMEM: case MOR_E_IO: case MOR_E_FORMAT:
    case MOR_E_UNSUPPORTED: case MOR_E_KV_FULL: case MOR_E_ABORTED: case MOR_E_ABI:
    case MOR_E_OUT_OF_RANGE: case MOR_E_POSITION: case MOR_E_BUFFER_TOO_SMALL:
    case MOR_E_INTERNAL:
        return 1;
    default:
        return 0;
    }
}

static int other_enums_unique(int32_t v)
{
    int n = 0;
    switch (v) {
    case MOR_LOG_ERROR: case MOR_LOG_WARN: case MOR_LOG_INFO: case MOR_LOG_DEBUG: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_MODEL_NO_MMAP: case MOR_MODEL_VOCAB_ONLY: case MOR_MODEL_FOLD_LORA: case MOR_MODEL_CHECK_TENSORS: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_ROUTER_TYPE_NONE: case MOR_ROUTER_TYPE_EXPERT: case MOR_ROUTER_TYPE_TOKEN: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_CTX_CAPTURE_HIDDEN: case MOR_CTX_FAST_BF16: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_POOL_MEAN: case MOR_POOL_LAST: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_EMBD_NORMALIZE: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_SERVE_NO_PROMPT_REUSE: case MOR_SERVE_FAST_BF16: case MOR_SERVE_CONTEXT_SHIFT: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_GRAMMAR_CAN_END: case MOR_GRAMMAR_MUST_END: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_STAGE_PENALTIES: case MOR_STAGE_DRY: case MOR_STAGE_TOP_N_SIGMA: case MOR_STAGE_TOP_K:
    case MOR_STAGE_TYPICAL_P: case MOR_STAGE_TOP_P: case MOR_STAGE_MIN_P: case MOR_STAGE_XTC:
    case MOR_STAGE_TEMPERATURE: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_KV_MODEL_DEFAULT: case MOR_KV_RECURSION_WISE: case MOR_KV_SHARED: case MOR_KV_DENSE: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_KV_TYPE_F32: case MOR_KV_TYPE_F16: case MOR_KV_TYPE_Q8_0: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_KV_UNIQUE_LAYERS: case MOR_KV_ALL: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_ROUTE_DEFAULT: case MOR_ROUTE_TOPK: case MOR_ROUTE_THRESHOLD: case MOR_ROUTE_FORCED:
    case MOR_ROUTE_TOKEN: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_SERVE_SERIAL: case MOR_SERVE_SEQUENCE: case MOR_SERVE_DEPTHWISE: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_EXIT_NONE: case MOR_EXIT_MARGIN: case MOR_EXIT_SATURATION: case MOR_EXIT_LEARNED: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_REQ_QUEUED: case MOR_REQ_RUNNING: case MOR_REQ_DONE: case MOR_REQ_CANCELLED: n++; break;
    default: break;
    }
    switch (v) {
    case MOR_TOKENIZE_ADD_BOS: case MOR_TOKENIZE_PARSE_SPECIAL: case MOR_TOKENIZE_PARSE_USER_DEFINED: n++; break;
    default: break;
    }
    return n;
}

#define HT_STATUS(x) { x, #x }
static const struct { mor_status value; const char *name; } ht_statuses[] = {
    HT_STATUS(MOR_OK), HT_STATUS(MOR_E_INVALID_ARG), HT_STATUS(MOR_E_NOMEM), HT_STATUS(MOR_E_IO),
    HT_STATUS(MOR_E_FORMAT), HT_STATUS(MOR_E_UNSUPPORTED), HT_STATUS(MOR_E_KV_FULL),
    HT_STATUS(MOR_E_ABORTED), HT_STATUS(MOR_E_ABI), HT_STATUS(MOR_E_OUT_OF_RANGE),
    HT_STATUS(MOR_E_POSITION), HT_STATUS(MOR_E_BUFFER_TOO_SMALL), HT_STATUS(MOR_E_INTERNAL)
};

static void test_versions(void)
{
    char want[32];
    sprintf(want, "%d.%d.%d", MOR_VERSION_MAJOR, MOR_VERSION_MINOR, MOR_VERSION_PATCH);
    CHECK(strcmp(want, MOR_VERSION_STRING) == 0, "MOR_VERSION_STRING \"%s\" matches the numbers", MOR_VERSION_STRING);
    CHECK(mor_version_number() == (uint32_t)MOR_VERSION_NUMBER, "mor_version_number() == %d",
          MOR_VERSION_NUMBER);
    CHECK(mor_version_string() != NULL && strcmp(mor_version_string(), MOR_VERSION_STRING) == 0,
          "mor_version_string() == \"%s\"", MOR_VERSION_STRING);
    CHECK(mor_build_info() != NULL && mor_build_info()[0] != '\0', "mor_build_info() is not empty");
    CHECK(mor_max_recursions() >= 1, "mor_max_recursions() >= 1 (%d)", (int)mor_max_recursions());
}

static void test_statuses(void)
{
    size_t n = sizeof(ht_statuses) / sizeof(ht_statuses[0]);
    for (size_t i = 0; i < n; i++) {
        const char *s = mor_status_str(ht_statuses[i].value);
        CHECK(status_unique(ht_statuses[i].value) && s != NULL && strcmp(s, ht_statuses[i].name) == 0,
              "mor_status_str(%d) == \"%s\"", (int)ht_statuses[i].value, ht_statuses[i].name);
        for (size_t j = 0; j < i; j++)
            if (ht_statuses[j].value == ht_statuses[i].value)
                CHECK(0, "%s and %s share a value", ht_statuses[i].name, ht_statuses[j].name);
    }
    CHECK(strcmp(mor_status_str(-9999), "MOR_E_UNKNOWN") == 0 && strcmp(mor_status_str(12345), "MOR_E_UNKNOWN") == 0,
          "mor_status_str(unknown) == \"MOR_E_UNKNOWN\"");
    CHECK(mor_last_error() != NULL, "mor_last_error() is never NULL");
    CHECK(other_enums_unique(MOR_ROUTE_TOKEN) >= 1, "enum switches compile (values unique)");
}

static void test_struct_sizes(void)
{
    CHECK(mor_sizeof_model_params() == sizeof(mor_model_params), "mor_sizeof_model_params() == sizeof");
    CHECK(mor_sizeof_context_params() == sizeof(mor_context_params), "mor_sizeof_context_params() == sizeof");
    CHECK(mor_sizeof_sampler_params() == sizeof(mor_sampler_params), "mor_sizeof_sampler_params() == sizeof");
    CHECK(mor_sizeof_router_stats() == sizeof(mor_router_stats), "mor_sizeof_router_stats() == sizeof");
    CHECK(mor_sizeof_chat_params() == sizeof(mor_chat_params), "mor_sizeof_chat_params() == sizeof");

    mor_model_params mp;
    mor_context_params cp;
    mor_sampler_params sp;
    memset(&mp, 0xEE, sizeof(mp));
    memset(&cp, 0xEE, sizeof(cp));
    memset(&sp, 0xEE, sizeof(sp));
    MOR_MODEL_PARAMS_INIT(&mp);
    MOR_CONTEXT_PARAMS_INIT(&cp);
    MOR_SAMPLER_PARAMS_INIT(&sp);
    CHECK(mp.size == sizeof(mp) && mp.flags == 0 && mp.progress == NULL,
          "MOR_MODEL_PARAMS_INIT: size set, flags 0, no callback");
    CHECK(cp.size == sizeof(cp) && cp.n_batch == 512 && cp.n_seq_max == 1 &&
          cp.kv_mode == MOR_KV_MODEL_DEFAULT && cp.abort_callback == NULL,
          "MOR_CONTEXT_PARAMS_INIT: size set, n_batch 512, n_seq_max 1, kv default");
    CHECK(sp.size == sizeof(sp) && sp.top_k == 40 && sp.repeat_last_n == 64,
          "MOR_SAMPLER_PARAMS_INIT: size set, top_k 40, repeat_last_n 64");
}

static void test_free_null(void)
{
    /* Free functions accept NULL (nothing to assert: a crash here ends the
     * program without its checks line, which tests/run.sh counts as a failure). */
    mor_model_free(NULL);
    mor_context_free(NULL);
    mor_batch_free(NULL);
    mor_sampler_free(NULL);
    CHECK(check_maxdiff(NULL, NULL, 0) == 0.0, "check.h helpers usable from C99 and C++");
}

int main(void)
{
    test_versions();
    test_statuses();
    test_struct_sizes();
    test_free_null();
    return check_done();
}
