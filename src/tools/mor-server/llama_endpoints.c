/* llama_endpoints.c - llama.cpp's server endpoints beside the OpenAI ones,
 * in llama.cpp's shapes, so that its clients and scripts work:
 *   POST /tokenize    {"content", "add_special", "parse_special", "with_pieces"}
 *                     -> {"tokens": [id, ...]} or [{"id", "piece"}, ...]
 *                     (a piece that is not whole UTF-8 is a list of bytes)
 *   POST /detokenize  {"tokens": [id, ...]} -> {"content"}
 *   GET  /props       the context, slots, model, chat template, defaults
 *                     (the sampling set's, the default order of the stages) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "chat.h"
#include "json.h"
#include "jsonw.h"
#include "sampling.h"
#include "server.h"
#include "template.h"
#include "text.h"
#include "utf8.h"

/* A boolean field: 1/0, the default when absent or null, -1 after a 400. */
static int get_flag(conn *c, request *rq, const json *d, const char *key, int dflt)
{
    const json *v = json_get(d, key);
    if (!v || v->type == JSON_NULL) return dflt;
    if (v->type != JSON_BOOL) { conn_error(c, rq, 400, key, NULL, "'%s' must be a boolean", key); return -1; }
    return v->boolean;
}

/* One token's piece: a string when it is whole UTF-8, else its bytes. */
static void piece(jsonw *w, mor_token t)
{
    char small[256], *p = small;
    size_t len = 0;
    mor_status st = mor_token_to_piece(S.model, t, small, sizeof small, &len);
    if (st == MOR_E_BUFFER_TOO_SMALL && (p = malloc(len)) != NULL) st = mor_token_to_piece(S.model, t, p, len, &len);
    if (!p || st) { if (p != small) free(p); jw_str(w, ""); return; }
    int whole = 1;
    for (size_t i = 0; i < len && whole; ) {
        int k = utf8_seq((const unsigned char *)p + i, len - i);
        if (k <= 0) whole = 0; else i += (size_t)k;
    }
    if (whole) jw_strn(w, p, len);
    else {
        jw_arr(w);
        for (size_t i = 0; i < len; i++) jw_int(w, (unsigned char)p[i]);
        jw_arr_end(w);
    }
    if (p != small) free(p);
}

void handle_tokenize(conn *c, request *rq, const char *body, size_t n)
{
    static const char *const allowed[] = { "content", "add_special", "parse_special", "with_pieces", NULL };
    if (!S.has_tokenizer) { conn_error(c, rq, 400, "content", NULL, "the model has no tokenizer"); return; }
    json *d = parse_object(c, rq, body, n, allowed);
    if (!d) return;
    const json *text = json_get(d, "content");
    int add = get_flag(c, rq, d, "add_special", 0), special = add < 0 ? -1 : get_flag(c, rq, d, "parse_special", 1);
    int pieces = special < 0 ? -1 : get_flag(c, rq, d, "with_pieces", 0);
    if (pieces < 0) { json_free(d); return; }
    if (!text || text->type != JSON_STRING) {
        conn_error(c, rq, 400, "content", NULL, "'content' is required and must be a string");
        json_free(d);
        return;
    }
    uint32_t flags = (special ? MOR_TOKENIZE_PARSE_SPECIAL : 0) | (add && S.add_bos ? MOR_TOKENIZE_ADD_BOS : 0);
    int32_t cnt = 0;
    mor_token *ids = NULL;
    mor_status st = text_tokenize(S.model, text->str, text->str_len, flags, &ids, &cnt);
    json_free(d);
    if (st) {
        free(ids);
        conn_error(c, rq, st == MOR_E_NOMEM ? 500 : 400, "content", NULL, "tokenizing failed: %s", mor_last_error());
        return;
    }
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "tokens");
    jw_arr(&w);
    for (int32_t i = 0; i < cnt; i++) {
        if (!pieces) { jw_int(&w, ids[i]); continue; }
        jw_obj(&w);
        jw_key(&w, "id"); jw_int(&w, ids[i]);
        jw_key(&w, "piece"); piece(&w, ids[i]);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    jw_obj_end(&w);
    free(ids);
    send_json(c, rq, 200, &b);
    buf_free(&b);
}

void handle_detokenize(conn *c, request *rq, const char *body, size_t n)
{
    static const char *const allowed[] = { "tokens", NULL };
    if (!S.has_tokenizer) { conn_error(c, rq, 400, "tokens", NULL, "the model has no tokenizer"); return; }
    json *d = parse_object(c, rq, body, n, allowed);
    if (!d) return;
    const json *arr = json_get(d, "tokens");
    if (!arr || arr->type != JSON_ARRAY) {
        conn_error(c, rq, 400, "tokens", NULL, "'tokens' is required and must be an array of token ids");
        json_free(d);
        return;
    }
    int32_t n_ids = (int32_t)arr->n;   /* arr is freed with d below */
    mor_token *ids = malloc(sizeof *ids * (arr->n ? arr->n : 1));
    if (!ids) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); json_free(d); return; }
    for (size_t i = 0; i < arr->n; i++) {
        int64_t v;
        if (!json_as_int(arr->items[i], 0, S.n_vocab - 1, &v)) {
            conn_error(c, rq, 400, "tokens", NULL, "tokens[%zu] is not a token id in [0, %d)", i, S.n_vocab);
            free(ids);
            json_free(d);
            return;
        }
        ids[i] = (mor_token)v;
    }
    json_free(d);
    size_t len = 0;
    char *text = NULL;
    mor_status st = text_detokenize(S.model, ids, n_ids, &text, &len);
    free(ids);
    if (st) { free(text); conn_error(c, rq, 500, NULL, NULL, "detokenizing failed: %s", mor_last_error()); return; }
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "content"); jw_strn(&w, text, len);
    jw_obj_end(&w);
    free(text);
    send_json(c, rq, 200, &b);
    buf_free(&b);
}

/* The sampler's settings in llama.cpp's names (after the caller's first
 * keys): /props' defaults, /completion's generation_settings. */
void sampler_settings(jsonw *w, const mor_sampler_params *sp)
{
    jw_key(w, "temperature"); jw_double(w, sp->temperature);
    jw_key(w, "top_k"); jw_int(w, sp->top_k);
    jw_key(w, "top_p"); jw_double(w, sp->top_p);
    jw_key(w, "min_p"); jw_double(w, sp->min_p);
    jw_key(w, "repeat_penalty"); jw_double(w, sp->repeat_penalty);
    jw_key(w, "repeat_last_n"); jw_int(w, sp->repeat_last_n);
    jw_key(w, "presence_penalty"); jw_double(w, sp->presence_penalty);
    jw_key(w, "frequency_penalty"); jw_double(w, sp->frequency_penalty);
    jw_key(w, "typical_p"); jw_double(w, sp->typical_p);
    jw_key(w, "min_keep"); jw_int(w, sp->min_keep);
    jw_key(w, "top_n_sigma"); jw_double(w, sp->top_n_sigma);
    jw_key(w, "dynatemp_range"); jw_double(w, sp->dynatemp_range);
    jw_key(w, "dynatemp_exponent"); jw_double(w, sp->dynatemp_exponent);
    jw_key(w, "xtc_probability"); jw_double(w, sp->xtc_probability);
    jw_key(w, "xtc_threshold"); jw_double(w, sp->xtc_threshold);
    jw_key(w, "mirostat"); jw_int(w, sp->mirostat);
    jw_key(w, "mirostat_tau"); jw_double(w, sp->mirostat_tau);
    jw_key(w, "mirostat_eta"); jw_double(w, sp->mirostat_eta);
    jw_key(w, "dry_multiplier"); jw_double(w, sp->dry_multiplier);
    jw_key(w, "dry_base"); jw_double(w, sp->dry_base);
    jw_key(w, "dry_allowed_length"); jw_int(w, sp->dry_allowed_length);
    jw_key(w, "dry_penalty_last_n"); jw_int(w, sp->dry_penalty_last_n);
    jw_key(w, "samplers");   /* the order, llama.cpp's names */
    jw_arr(w);
    static const int order[] = { MOR_STAGE_PENALTIES, MOR_STAGE_DRY, MOR_STAGE_TOP_N_SIGMA, MOR_STAGE_TEMPERATURE,
                                 MOR_STAGE_TOP_K, MOR_STAGE_TYPICAL_P, MOR_STAGE_TOP_P, MOR_STAGE_MIN_P, MOR_STAGE_XTC };
    if (sp->n_samplers > 0)
        for (int32_t i = 0; i < sp->n_samplers && i < MOR_SAMPLERS_MAX; i++) jw_str(w, sampling_stage_name(sp->samplers[i]));
    else
        for (int i = 0; i < 9; i++) jw_str(w, sampling_stage_name(order[i]));
    jw_arr_end(w);
}


void handle_props(conn *c, request *rq)
{
    mor_sampler_params sp;
    MOR_SAMPLER_PARAMS_INIT(&sp);
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_obj(&w);
    jw_key(&w, "default_generation_settings");
    jw_obj(&w);
    jw_key(&w, "n_ctx"); jw_int(&w, S.ctx_limit);
    jw_key(&w, "params");
    jw_obj(&w);
    jw_key(&w, "n_predict"); jw_int(&w, 16);   /* handlers.c: completions' default max_tokens */
    jw_key(&w, "dry_sequence_breakers");
    jw_arr(&w);
    for (int i = 0; i < 4; i++) jw_str(&w, SAMPLING_DRY_DEFAULT_BREAKERS[i]);
    jw_arr_end(&w);
    sampler_settings(&w, &sp);
    jw_obj_end(&w);
    jw_obj_end(&w);
    jw_key(&w, "total_slots"); jw_int(&w, S.o.n_slots);
    jw_key(&w, "model_alias"); jw_str(&w, S.model_id);
    jw_key(&w, "model_path"); jw_str(&w, S.o.model_path);
    jw_key(&w, "chat_template");   /* llama-server's: the template's text; here a built-in format's name */
    if (S.chat_tpl) jw_str(&w, S.chat_source);
    else if (S.chat_family >= 0) jw_str(&w, chat_name(S.chat_family));
    else jw_null(&w);
    jw_key(&w, "n_vocab"); jw_int(&w, S.n_vocab);
    jw_key(&w, "n_ctx_train"); jw_int(&w, S.n_ctx_train);
    jw_key(&w, "n_recursion"); jw_int(&w, mor_model_n_recursion(S.model));
    jw_key(&w, "build_info"); jw_str(&w, mor_version_string());
    jw_obj_end(&w);
    send_json(c, rq, 200, &b);
    buf_free(&b);
}

/* POST /apply-template (llama-server's): {"messages": [...]} gives
 * {"prompt": "..."}, the text a chat completion of them would start from. */
void handle_apply_template(conn *c, request *rq, const char *body, size_t n)
{
    api_request ar;
    api_error ae;
    if (api_parse(API_CHAT, body, n, &ar, &ae)) {
        conn_error(c, rq, ae.status, ae.param, NULL, "%s", ae.msg);
        return;
    }
    buf text = { 0 }, b = { 0 };
    char why[400];
    int bos;
    int cr = chat_prompt(&ar, &text, &bos, why, sizeof why);
    if (cr) {
        conn_error(c, rq, 400, cr == -2 ? "tools" : "messages", S.chat_tpl ? NULL : "chat_not_supported", "%s", why);
    } else {
        jsonw w;
        jw_init(&w, &b);
        jw_obj(&w);
        jw_key(&w, "prompt"); jw_strn(&w, text.p ? text.p : "", text.len);
        jw_obj_end(&w);
        if (!buf_ok(&text) || !buf_ok(&b)) conn_error(c, rq, 500, NULL, NULL, "out of memory");
        else send_json(c, rq, 200, &b);
    }
    buf_free(&text);
    buf_free(&b);
    api_request_free(&ar);
}

/* GET /slots (llama-server's): what each slot is doing, as of the engine's
 * last step. /slots?fail_on_no_slot=1 answers 503 when none is idle. */
void handle_slots(conn *c, request *rq)
{
    engine_slot *sl = malloc(sizeof *sl * (size_t)S.o.n_slots);
    if (!sl) { conn_error(c, rq, 500, NULL, NULL, "out of memory"); return; }
    int n = engine_get_slots(S.eng, sl, S.o.n_slots), idle = 0;
    buf b = { 0 };
    jsonw w;
    jw_init(&w, &b);
    jw_arr(&w);
    for (int i = 0; i < n; i++) {
        idle += sl[i].id_task < 0;
        jw_obj(&w);
        jw_key(&w, "id"); jw_int(&w, i);
        jw_key(&w, "id_task"); jw_int(&w, sl[i].id_task);
        jw_key(&w, "n_ctx"); jw_int(&w, S.ctx_limit);
        jw_key(&w, "is_processing"); jw_bool(&w, sl[i].id_task >= 0);
        jw_key(&w, "n_prompt_tokens"); jw_int(&w, sl[i].n_prompt);
        jw_key(&w, "next_token"); jw_obj(&w);
        jw_key(&w, "n_decoded"); jw_int(&w, sl[i].n_decoded);
        jw_obj_end(&w);
        jw_obj_end(&w);
    }
    jw_arr_end(&w);
    free(sl);
    if (strstr(rq->path, "fail_on_no_slot=1") && !idle)
        conn_error(c, rq, 503, NULL, "no_slot_available", "no slot is idle");
    else if (!buf_ok(&b)) conn_error(c, rq, 500, NULL, NULL, "out of memory");
    else send_json(c, rq, 200, &b);
    buf_free(&b);
}
