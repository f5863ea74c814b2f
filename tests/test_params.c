/* test_params.c - the one rule for size-prefixed structs (mor.h "ABI",
 * src/abi.h): a struct of the first released size (libmor 0.1, as
 * src/libmor.sym records it; declared here again, as an old caller's header
 * had it) is accepted everywhere and its missing fields take defaults; a
 * size no release declared, or a newer header's, is MOR_E_ABI; the *_INIT
 * functions write only the caller's bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "mor.h"

/* libmor 0.1's structs, as its header declared them */
typedef struct {
    uint32_t size, flags;
    int32_t (*progress)(float, void *);
    void    *progress_user_data;
} model_params_v1;
typedef struct {
    uint32_t size, flags, n_ctx, n_batch, n_seq_max;
    int32_t  kv_mode, n_threads;
    int32_t (*abort_callback)(void *);
    void    *abort_user_data;
    int32_t  max_pos;
} context_params_v1;
typedef struct {
    uint32_t size;
    uint64_t seed;
    float    temperature;
    int32_t  top_k;
    float    top_p, min_p, repeat_penalty;
    int32_t  repeat_last_n;
} sampler_params_v1;
typedef struct {
    uint32_t size;
    int32_t  mode;
    uint32_t n_slots, n_ctx, n_batch;
    int32_t  n_threads, kv_mode, exit_mode;
    float    exit_threshold;
    void   (*on_token)(mor_request_id, mor_token, int32_t, void *);
    void    *user_data;
} server_params_v1;
/* mor_request_params as its first release declares it (today's: its
 * first release will be 0.1; when fields are appended, this stays) */
typedef struct {
    uint32_t size;
    const mor_sampler_params *sampling;
    int32_t  max_tokens, n_stop;
    const mor_token *stop;
    mor_grammar *grammar;
    int32_t  n_draft, draft_depth;
    float    exit_threshold;
    int32_t  n_keep;
} request_params_v1;
typedef struct {
    uint32_t size;
    uint64_t n_tokens;
    double   mean_depth;
    uint64_t n_at_depth[17];
} router_stats_v1;

/* An old caller's INIT: the library fills exactly its bytes, the guard after them stays. */
#define OLD_INIT(init, T, v)                                                                      \
    do {                                                                                          \
        unsigned char buf_[sizeof(T) + 16];                                                       \
        memset(buf_, 0xa5, sizeof buf_);                                                          \
        init((void *)buf_, sizeof(T));                                                            \
        int guard_ = 1;                                                                           \
        for (size_t q_ = sizeof(T); q_ < sizeof buf_; q_++) guard_ &= buf_[q_] == 0xa5;            \
        CHECK(guard_, #init ": writes only the %zu bytes of a 0.1 caller's struct", sizeof(T));     \
        memcpy(&(v), buf_, sizeof(T));                                                            \
        CHECK((v).size == sizeof(T), #init ": size set to the caller's %zu", sizeof(T));           \
    } while (0)

int main(void)
{
    char path[600];
    const char *out = getenv("OUT");
    snprintf(path, sizeof path, "%s/build/fixtures/expert_mc3_fix_perturbed.st.gguf", out && *out ? out : ".");
    mor_model *m = NULL;

    model_params_v1 mp;
    OLD_INIT(mor_model_params_init, model_params_v1, mp);
    CHECK(mor_model_load_file(path, (const mor_model_params *)(void *)&mp, &m) == MOR_OK,
          "mor_model_load_file: a 0.1 struct is accepted (%s)", mor_last_error());
    if (!m) return check_done();
    mp.size = (uint32_t)sizeof mp - 1;
    mor_model *m2 = NULL;
    CHECK(mor_model_load_file(path, (const mor_model_params *)(void *)&mp, &m2) == MOR_E_ABI && !m2,
          "mor_model_params: smaller than any release -> MOR_E_ABI");
    CHECK(strstr(mor_last_error(), "mor_model_params") != NULL, "the message names the struct: %s", mor_last_error());

    context_params_v1 cp;
    OLD_INIT(mor_context_params_init, context_params_v1, cp);
    cp.n_ctx = 64;
    mor_context *c = NULL;
    CHECK(mor_context_create(m, (const mor_context_params *)(void *)&cp, &c) == MOR_OK && c,
          "mor_context_create: a 0.1 struct is accepted, newer fields take their defaults (%s)", mor_last_error());
    cp.size = (uint32_t)offsetof(context_params_v1, max_pos);
    mor_context *c2 = NULL;
    CHECK(mor_context_create(m, (const mor_context_params *)(void *)&cp, &c2) == MOR_E_ABI && !c2,
          "mor_context_params: the 0.1 struct without its last field -> MOR_E_ABI");
    {
        unsigned char big[sizeof(mor_context_params) + 8];
        mor_context_params_init((mor_context_params *)(void *)big, sizeof big);
        CHECK(mor_context_create(m, (const mor_context_params *)(void *)big, &c2) == MOR_E_ABI && !c2,
              "mor_context_params: a newer header's bigger struct -> MOR_E_ABI");
    }

    sampler_params_v1 sp;
    OLD_INIT(mor_sampler_params_init, sampler_params_v1, sp);
    mor_sampler *smp = NULL;
    CHECK(mor_sampler_create((const mor_sampler_params *)(void *)&sp, &smp) == MOR_OK && smp,
          "mor_sampler_create: a 0.1 struct is accepted");
    {   /* its sampler is today's with the newer fields (llama.cpp's set) at their defaults */
        mor_sampler_params now;
        MOR_SAMPLER_PARAMS_INIT(&now);
        sp.seed = now.seed = 11;
        sp.temperature = now.temperature = 1.1f;
        sp.repeat_penalty = now.repeat_penalty = 1.3f;
        mor_sampler *a = NULL, *b = NULL;
        int same = mor_sampler_create((const mor_sampler_params *)(void *)&sp, &a) == MOR_OK &&
                   mor_sampler_create(&now, &b) == MOR_OK;
        float l[257];
        for (int i = 0; i < 257; i++) l[i] = (float)((i * 37) % 101) / 20.0f;
        for (int i = 0; same && i < 64; i++) {
            mor_token ta = -1, tb = -2;
            same = mor_sampler_sample(a, l, 257, &ta) == MOR_OK && mor_sampler_sample(b, l, 257, &tb) == MOR_OK &&
                   ta == tb;
        }
        CHECK(same && now.mirostat == 0 && now.n_samplers == 0 && now.dry_multiplier == 0.0f,
              "mor_sampler_params: a 0.1 struct draws what today's does with the newer fields' defaults (64 tokens)");
        mor_sampler_free(a);
        mor_sampler_free(b);
        now.size = (uint32_t)sizeof(sampler_params_v1) + 4;
        a = NULL;
        CHECK(mor_sampler_create(&now, &a) == MOR_E_ABI && !a,
              "mor_sampler_params: a size between the two declared ones -> MOR_E_ABI");
    }
    mor_sampler_free(smp);

    server_params_v1 vp;
    OLD_INIT(mor_server_params_init, server_params_v1, vp);
    vp.n_ctx = 64;
    mor_server *srv = NULL;
    CHECK(mor_server_create(m, (const mor_server_params *)(void *)&vp, &srv) == MOR_OK && srv,
          "mor_server_create: a 0.1 struct is accepted (%s)", mor_last_error());
    /* mor_request_params: the first release's struct is accepted, its INIT writes only its bytes (the
     * defaults: a request of mor_server_submit); a smaller size or a newer header's is MOR_E_ABI */
    request_params_v1 rp;
    OLD_INIT(mor_request_params_init, request_params_v1, rp);
    CHECK(rp.max_tokens == 16 && !rp.sampling && !rp.n_stop && !rp.stop && !rp.grammar && !rp.n_draft &&
          rp.draft_depth == 1 && rp.exit_threshold != rp.exit_threshold && rp.n_keep == 0,
          "mor_request_params_init: max_tokens 16, draft_depth 1, exit_threshold NaN, the rest 0");
    mor_token prompt[2] = { 3, 4 };
    mor_request_id rid = -1;
    CHECK(srv && mor_server_submit_request(srv, prompt, 2, (const mor_request_params *)(void *)&rp, &rid) == MOR_OK &&
          rid == 0, "mor_server_submit_request: the first release's struct is accepted (%s)", mor_last_error());
    rp.size = (uint32_t)offsetof(request_params_v1, n_keep);
    rid = -1;
    CHECK(srv && mor_server_submit_request(srv, prompt, 2, (const mor_request_params *)(void *)&rp, &rid) ==
                     MOR_E_ABI && rid == -1 && strstr(mor_last_error(), "mor_request_params"),
          "mor_request_params: the first release's struct without its last field -> MOR_E_ABI, naming the struct");
    {
        struct { mor_request_params p; uint64_t more; } big;
        mor_request_params_init(&big.p, sizeof big);
        CHECK(srv && mor_server_submit_request(srv, prompt, 2, &big.p, &rid) == MOR_E_ABI && rid == -1,
              "mor_request_params: a newer header's bigger struct -> MOR_E_ABI");
    }
    mor_server_free(srv);

    /* an output struct: filled as far as the caller's size reaches */
    if (c) {
        mor_batch *b = NULL;
        mor_batch_create(8, &b);
        for (int i = 0; i < 5; i++) mor_batch_add(b, (mor_token)(3 * i + 1), i, 0, i == 4);
        CHECK(mor_decode(c, b) == MOR_OK, "a decode for the statistics");
        mor_router_stats full;
        memset(&full, 0, sizeof full);
        full.size = sizeof full;
        CHECK(mor_router_get_stats(mor_context_router(c), &full) == MOR_OK && full.n_tokens == 5,
              "mor_router_get_stats: today's struct (%llu tokens)", (unsigned long long)full.n_tokens);
        unsigned char buf[sizeof(router_stats_v1) + 16];
        memset(buf, 0xa5, sizeof buf);
        router_stats_v1 old;
        memset(&old, 0, sizeof old);
        old.size = sizeof old;
        memcpy(buf, &old, sizeof old);
        CHECK(mor_router_get_stats(mor_context_router(c), (mor_router_stats *)(void *)buf) == MOR_OK,
              "mor_router_get_stats: a 0.1 struct is accepted");
        memcpy(&old, buf, sizeof old);
        int guard = 1;
        for (size_t q = sizeof old; q < sizeof buf; q++) guard &= buf[q] == 0xa5;
        CHECK(guard && old.n_tokens == 5 && old.mean_depth == full.mean_depth &&
              !memcmp(old.n_at_depth, full.n_at_depth, sizeof old.n_at_depth),
              "mor_router_get_stats: the 0.1 fields filled, nothing past the caller's size written");
        old.size = 4;
        CHECK(mor_router_get_stats(mor_context_router(c), (mor_router_stats *)(void *)&old) == MOR_E_ABI,
              "mor_router_stats: smaller than any release -> MOR_E_ABI");
        mor_batch_free(b);
    }
    /* n_outputs: the logits buffer is sized at creation; a decode asking more is refused, changing nothing */
    {
        mor_context_params np;
        MOR_CONTEXT_PARAMS_INIT(&np);
        np.n_ctx = 64; np.n_batch = 8; np.n_outputs = 2;
        mor_context *c3 = NULL;
        mor_batch *b3 = NULL;
        int ok = mor_context_create(m, &np, &c3) == MOR_OK && mor_batch_create(8, &b3) == MOR_OK;
        if (ok) for (int i = 0; i < 3; i++) mor_batch_add(b3, (mor_token)(i + 1), i, 0, 1);
        CHECK(ok && mor_decode(c3, b3) == MOR_E_INVALID_ARG && strstr(mor_last_error(), "n_outputs") &&
              mor_kv_seq_pos_max(mor_context_kv(c3), 0) == -1,
              "n_outputs 2: a decode of 3 rows with logits -> MOR_E_INVALID_ARG, nothing cached");
        mor_batch_clear(b3);
        if (ok) for (int i = 0; i < 3; i++) mor_batch_add(b3, (mor_token)(i + 1), i, 0, i >= 1);
        CHECK(ok && mor_decode(c3, b3) == MOR_OK && !mor_get_logits(c3, 0) && mor_get_logits(c3, 2),
              "n_outputs 2: 3 rows, 2 of them with logits, decode");
        mor_batch_free(b3);
        mor_context_free(c3);
    }
    /* mor_last_error: set by a failure, cleared by the next call that succeeds */
    mor_batch *b = NULL;
    CHECK(mor_batch_create(-1, &b) != MOR_OK && mor_last_error()[0], "a failed call leaves a message");
    CHECK(mor_batch_create(4, &b) == MOR_OK && !mor_last_error()[0], "a call that succeeds clears it");
    CHECK(mor_router_get_mode(NULL) == MOR_E_INVALID_ARG && mor_last_error()[0], "a getter that fails sets it too");
    mor_batch_free(b);
    mor_context_free(c);
    mor_model_free(m);
    return check_done();
}
