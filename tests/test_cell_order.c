/* test_cell_order.c - attention does not depend on where the KV cache put a
 * sequence's cells.
 *
 * Once cells are freed and reused, a sequence's cells are no longer in
 * position order, and the order depends on what else ran. Attention sums in
 * (position, cell) order (kernels_threads.c), so a sequence decoded into a
 * cache that a removed sequence left full of holes gives bitwise the logits
 * and depths of the same sequence decoded into a fresh cache. Checked with
 * every kernel set this CPU runs, F32 and Q8_0 weights, F32, F16 and Q8_0
 * caches, recursion-wise and shared KV, THRESHOLD routing (so deeper
 * recursion caches hold different cells than recursion 0), and two layouts:
 * cells interleaved with another sequence's holes (many short runs), and a
 * sequence that wraps around the end of the cache (two runs). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "context.h"
#include "kernels.h"
#include "mor.h"
#include "synth_model.h"

enum { PROMPT = 5, LEN = 28, NCTX = 40, V = 512 };

static mor_token tok(int32_t seq, int32_t pos) { return (mor_token)((seq * 7919 + pos * 104729 + 13) % V); }

/* Decode sequence 0: a PROMPT-token prefill, then one token per call, LEN
 * in all; logits[p] and depth[p] of every position. other > 0: sequence 1
 * gets `other` tokens too, one beside each of sequence 0's in the calls
 * before call `with`, the rest in that call, and is then removed, so that
 * sequence 0 goes on in the holes it left. Returns the number of descents
 * of sequence 0's positions in cell order of layer 0 at the end (the
 * unique first layer: every token is there), or -1 if a call failed. */
static int32_t run(mor_model *m, const kernel_set *ks, int32_t kv_mode, int32_t kv_type, int32_t other,
                   int32_t with, float *logits, int32_t *depth)
{
    mor_context_params cp;
    MOR_CONTEXT_PARAMS_INIT(&cp);
    cp.n_ctx = NCTX; cp.n_batch = 64; cp.n_seq_max = 2; cp.kv_mode = kv_mode; cp.kv_type = kv_type; cp.n_threads = 2;
    mor_context *c = NULL;
    mor_batch *b = NULL;
    int ok = mor_context_create(m, &cp, &c) == MOR_OK && mor_batch_create(64, &b) == MOR_OK;
    if (ok) {
        c->ls.exec.k = ks;
        ok = mor_router_set_mode(mor_context_router(c), MOR_ROUTE_THRESHOLD, 0) == MOR_OK;
    }
    int32_t p1 = 0, descents = 0;   /* p1: next position of sequence 1 */
    for (int32_t p = 0, call = 0; ok && p < LEN; call++) {
        const int32_t n0 = p ? 1 : PROMPT;
        int32_t rows[PROMPT], dep[64];
        mor_batch_clear(b);
        for (int32_t t = 0; t < n0; t++) {
            if (p1 < other && call < with) { mor_batch_add(b, tok(1, p1), p1, 1, 0); p1++; }
            rows[t] = mor_batch_size(b);
            mor_batch_add(b, tok(0, p + t), p + t, 0, 1);
        }
        if (call == with)
            for (; p1 < other; p1++) mor_batch_add(b, tok(1, p1), p1, 1, 0);
        ok = mor_decode(c, b) == MOR_OK;
        if (ok) mor_router_get_depths(mor_context_router(c), dep, mor_batch_size(b));
        for (int32_t t = 0; ok && t < n0; t++) {
            memcpy(logits + (size_t)(p + t) * V, mor_get_logits(c, rows[t]), sizeof(float) * V);
            depth[p + t] = dep[rows[t]];
        }
        if (ok && other && call == with) ok = mor_kv_seq_rm(mor_context_kv(c), 1, -1, -1) == MOR_OK;
        p += n0;
    }
    if (ok) {
        const kv_layer *L = &c->kv->layers[0];
        for (int32_t i = 0, last = -1; i < L->n_hi; i++)
            if (L->seq[i] == 0) { descents += L->pos[i] < last; last = L->pos[i]; }
    }
    mor_batch_free(b);
    mor_context_free(c);
    return ok ? descents : -1;
}

static const char *tname(uint32_t t) { return t == GGML_Q8_0 ? "Q8_0" : t == GGML_F16 ? "F16" : "F32"; }

int main(void)
{
    const char *out = getenv("OUT");
    char dir[600], cmd[700], path[760];
    snprintf(dir, sizeof dir, "%s/build/tmp", out && *out ? out : ".");
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (!CHECK(system(cmd) == 0, "scratch directory %s", dir)) return check_done();
    /* sequence 1's filler and layouts: (other, with) */
    static const int32_t layouts[2][2] = {
        { 23, 12 },   /* side by side for 12 calls, the rest fills the cache; then sequence 0 wraps
                         into the holes between its own first cells */
        { 30, 0 },    /* after the prefill: sequence 0 wraps past the end into the hole */
    };
    static const char *const lname[2] = { "interleaved holes", "wrapped" };
    static const uint32_t wtypes[2] = { GGML_F32, GGML_Q8_0 };
    static const int32_t kvtypes[3] = { MOR_KV_TYPE_F32, MOR_KV_TYPE_F16, MOR_KV_TYPE_Q8_0 };
    float *ref = malloc(sizeof(float) * LEN * V), *got = malloc(sizeof(float) * LEN * V);
    if (!CHECK(ref && got, "buffers")) return check_done();
    for (int wt = 0; wt < 2; wt++) {
        /* d 128, 8 layers (1 + 3 x 2 + 1), heads 2/1 of 64, ffn 256, vocab 512 */
        synth_spec sp = { 128, 8, 2, 1, 64, 256, V, 256, 3, wtypes[wt], wtypes[wt], 7, 0 };
        snprintf(path, sizeof path, "%s/cell-order-%s-%ld.gguf", dir, tname(wtypes[wt]), (long)getpid());
        mor_model *m = NULL;
        if (!CHECK(synth_write(&sp, path) == 0 && mor_model_load_file(path, NULL, &m) == MOR_OK,
                   "random-weight MoR model, %s weights", tname(wtypes[wt]))) continue;
        for (int isa = 0; isa < ISA_COUNT; isa++) {
            const kernel_set *ks = kernels_get(isa);
            if (!ks) continue;
            for (int32_t kvm = MOR_KV_RECURSION_WISE; kvm <= MOR_KV_SHARED; kvm++)
                for (int kt = 0; kt < 3; kt++) {
                    int32_t dref[LEN], dgot[LEN], kinds = 0, seen[8] = { 0 };
                    int ok_ref = run(m, ks, kvm, kvtypes[kt], 0, 0, ref, dref) == 0;
                    for (int32_t p = 0; ok_ref && p < LEN; p++) seen[dref[p] & 7] = 1;
                    for (int k = 0; k < 8; k++) kinds += seen[k];
                    for (int lo = 0; lo < 2; lo++) {
                        int32_t desc = run(m, ks, kvm, kvtypes[kt], layouts[lo][0], layouts[lo][1], got, dgot);
                        CHECK(ok_ref && desc > 0 && kinds >= 2 && !memcmp(ref, got, sizeof(float) * LEN * V) &&
                              !memcmp(dref, dgot, sizeof dref),
                              "%s, %s weights, %s cache, %s KV, %s (%d descents; %d depths seen): sequence 0 "
                              "bitwise as in a fresh cache", ks->name, tname(wtypes[wt]), tname((uint32_t)kvtypes[kt]),
                              kvm == MOR_KV_SHARED ? "shared" : "recursion-wise", lname[lo], desc, kinds);
                    }
                }
        }
        mor_model_free(m);
        remove(path);
    }
    free(ref); free(got);
    return check_done();
}
