/* api.h - the OpenAI request bodies the server accepts, parsed and checked.
 *
 * POST /v1/completions and /v1/chat/completions take a JSON object. Every
 * field is checked for its type and range, and an error names the field
 * (OpenAI's "param"). Fields of the OpenAI API that libmor does not
 * implement are accepted only with their neutral value (n: 1, echo: false,
 * frequency_penalty: 0, logit_bias: {}, ...), so that a client that sends
 * them by default still works while one that relies on them gets a clear
 * 400 instead of a silently different answer. Any other field is refused.
 * logprobs (chat: logprobs true and top_logprobs 0..20; completions:
 * logprobs 0..20) asks for each token's log-probability and the most likely
 * tokens'. The server's own extensions (llama.cpp's names): top_k, min_p,
 * repeat_penalty, repeat_last_n, presence_penalty and frequency_penalty
 * (OpenAI's too), logit_bias, typical_p, min_keep, mirostat, mirostat_tau,
 * mirostat_eta, dry_multiplier, dry_base, dry_allowed_length,
 * dry_penalty_last_n, dry_sequence_breakers, xtc_probability,
 * xtc_threshold, top_n_sigma, dynatemp_range, dynatemp_exponent, samplers,
 * n_probs (logprobs' count), ignore_eos, return_tokens, and accepted with
 * nothing to do here: cache_prompt (prompt reuse is the server's and gives
 * the same tokens either way), n_keep (the tokens a context shift keeps,
 * with mor-server --context-shift; without it nothing shifts: an OpenAI
 * request must fit, a /completion ends when the context is full),
 * id_slot (the server picks the slot); libmor's: speculate,
 * speculate_depth, exit_threshold. Checks that need the model (token ids < n_vocab, texts
 * to tokenize, the context length) are the caller's. */
#ifndef MORSRV_API_H
#define MORSRV_API_H
#include <stddef.h>
#include <stdint.h>
#include "json.h"

/* API_NATIVE: llama.cpp's POST /completion, the completions' fields and
 * n_predict (-1: until the context is full, even with --context-shift;
 * 0: nothing generated), with
 * llama.cpp's own that need no work here accepted at their neutral value
 * (n_indent 0, t_max_predict_ms 0, timings_per_token, post_sampling_probs
 * and return_progress false, n_cmpl 1); one completion (n 1). */
enum { API_COMPLETIONS, API_CHAT, API_NATIVE };

#define API_MAX_STOP     16     /* stop strings per request */
#define API_MAX_STOP_LEN 1024   /* bytes per stop string */
#define API_MAX_LOGPROBS 20     /* top_logprobs (chat), logprobs (completions) */
#define API_MAX_N        8      /* choices of one request (n) */
#define API_MAX_BREAKERS 64     /* dry_sequence_breakers */

/* llama.cpp's numeric request fields beyond OpenAI's (api_request.num). */
enum {
    API_PRESENCE_PENALTY, API_FREQUENCY_PENALTY, API_MIN_KEEP, API_TYPICAL_P, API_TOP_N_SIGMA,
    API_DYNATEMP_RANGE, API_DYNATEMP_EXPONENT, API_XTC_PROBABILITY, API_XTC_THRESHOLD, API_MIROSTAT,
    API_MIROSTAT_TAU, API_MIROSTAT_ETA, API_DRY_MULTIPLIER, API_DRY_BASE, API_DRY_ALLOWED_LENGTH,
    API_DRY_PENALTY_LAST_N, API_N_KEEP, API_ID_SLOT, API_N_PROBS, API_N_NUM
};

typedef struct {
    const char *role;           /* "system", "user", "assistant" (and "developer", as "system") */
    const char *content;        /* UTF-8; may contain NUL bytes */
    size_t      content_len;
    char       *owned;          /* content when joined from parts (freed with the request) */
    int         content_null;   /* content was null or absent (an assistant's tool calls) */
    const json *tool_calls;     /* an assistant's [{id, type, function: {name, arguments}}] (into doc) */
    const char *tool_call_id;   /* a tool result's (role "tool"), or NULL */
    const char *name;           /* the message's name, or NULL */
} api_message;

/* tool_choice (chat): what the model may do with `tools`. */
enum { API_TOOLS_AUTO, API_TOOLS_NONE, API_TOOLS_REQUIRED, API_TOOLS_NAMED };

typedef struct {
    int          kind;                    /* API_* */
    json        *doc;                     /* the parsed body: strings below point into it */
    const char  *model;                   /* NULL when absent */
    /* completions: the prompt as text (prompt_text != NULL) or token ids */
    const char  *prompt_text;
    size_t       prompt_len;
    int32_t     *prompt_ids;              /* malloc'd */
    int32_t      n_prompt_ids;
    const json  *prompt_mixed;            /* llama.cpp's [id, "text", ...] (ids checked >= 0; texts
                                             tokenized by the caller), into doc */
    /* chat */
    api_message *messages;                /* malloc'd */
    int32_t      n_messages;
    /* OpenAI's function calling: tools (a non-empty array of {"type":
     * "function", "function": {name, description, parameters}}, into doc;
     * NULL when none), tool_choice (API_TOOLS_*; the named function's
     * tool_name), parallel_tool_calls (default 1) */
    const json  *tools;
    int          tool_choice;
    const char  *tool_name;
    int          parallel_tool_calls;
    /* generation; *_set: the field was given (else the server's default) */
    int          n_predict_set;           /* n_predict was given (-1 leaves max_tokens unset) */
    int          max_tokens_set, temperature_set, top_p_set, top_k_set, min_p_set, seed_set;
    int          repeat_penalty_set, repeat_last_n_set;
    int64_t      max_tokens, top_k, repeat_last_n;
    double       temperature, top_p, min_p, repeat_penalty;
    uint64_t     seed;
    const char  *stop[API_MAX_STOP];
    size_t       stop_len[API_MAX_STOP];
    int          n_stop;
    int          stream, include_usage;
    /* logprobs: chat's logprobs (bool) and top_logprobs, completions'
     * logprobs (an integer: top_logprobs, and logprobs = 1) */
    int          logprobs, top_logprobs_set;
    int64_t      top_logprobs;
    int32_t      n_logprobs;              /* -1: none, else how many of the most likely per token */
    int          test_hold;               /* 2 | hold when given: mor-server --test-hooks only (engine.h) */
    /* self-speculative decoding (mor_server_set_speculate): drafts per step,
     * their recursion depth; *_set: given (else mor-server's --speculate) */
    int          speculate_set, speculate_depth_set;
    int64_t      speculate, speculate_depth;
    /* the request's early-exit threshold (mor_server_set_exit) under
     * mor-server's --exit mode; *_set: given (else --exit's) */
    int          exit_threshold_set;
    double       exit_threshold;
    int64_t      n;                       /* choices, 1..API_MAX_N (default 1) */
    /* llama.cpp's sampling set: num[API_*] when num_set[API_*] (checked for
     * type and range here, for the library's rules in mor.h), the order of
     * the stages (samplers: an array of names or a string of letters), the
     * logit bias (logit_bias: OpenAI's object of id strings, or llama.cpp's
     * [[id or text, bias or false], ...]; into doc, its ids and texts
     * resolved by the caller) and DRY's breakers (strings into doc) */
    double       num[API_N_NUM];
    unsigned char num_set[API_N_NUM];
    int32_t      samplers[16];
    int          n_samplers;              /* -1: not given */
    const json  *logit_bias;
    const char  *breakers[API_MAX_BREAKERS];
    size_t       breaker_len[API_MAX_BREAKERS];
    int          n_breakers;              /* -1: not given */
    int          ignore_eos, return_tokens, cache_prompt;   /* cache_prompt: 1 unless false was given */
    /* constrained output, at most one: a GBNF grammar (llama.cpp's "grammar"),
     * a JSON Schema ("json_schema", or response_format json_schema), or any
     * JSON object (response_format json_object) */
    const char  *grammar;
    size_t       grammar_len;
    const json  *json_schema;             /* into doc */
    int          json_object;
    const char  *constraint;              /* the field that gave it, for messages */
} api_request;

typedef struct {
    int  status;          /* HTTP status: 400 */
    char param[48];       /* the offending field ("" when none) */
    char msg[256];
} api_error;

/* Parse body[0..len) as a request of kind `kind` into *req (zeroed first).
 * 0 on success (free with api_request_free), -1 with *err set; on failure
 * nothing needs freeing. */
int  api_parse(int kind, const char *body, size_t len, api_request *req, api_error *err);
void api_request_free(api_request *req);
#endif
