/* settings.h - the MoR hyperparameters that live outside the checkpoint:
 * in the official repo's resolved Hydra config (mor_cfg.yaml), in its JSON
 * form (mor_config.json), or on the command line.
 *
 * Every field starts unset (-1 / 0 / have_* = 0); sources are merged with
 * cv_settings_merge, later sources winning, and the converter checks the
 * result against the checkpoint's keys. */
#ifndef CV_MOR_SETTINGS_H
#define CV_MOR_SETTINGS_H
#include <stddef.h>
#include "json.h"

#define MS_MAX_REC 64

enum { ROUTE_NONE, ROUTE_EXPERT, ROUTE_TOKEN };
enum { SHARE_NONE, SHARE_CYCLE, SHARE_MIDDLE_CYCLE, SHARE_SEQUENCE, SHARE_MIDDLE_SEQUENCE };
enum { ARCH_LINEAR, ARCH_MLP };
enum { FUNC_SIGMOID, FUNC_TANH, FUNC_SOFTMAX, FUNC_NONE };
enum { GATE_WEIGHTED, GATE_ADDITIVE };
enum { SAMPLE_AUX_LOSS, SAMPLE_AUX_ROUTER, SAMPLE_NONE };
enum { BAL_LOSS, BAL_LOSS_FREE };
enum { RELAX_LORA, RELAX_DORA, RELAX_ADAPTION_PROMPT, RELAX_RECURSION_ENCODING };
/* the seven projections, as PEFT's target_modules names them */
enum { MS_PROJ_Q, MS_PROJ_K, MS_PROJ_V, MS_PROJ_O, MS_PROJ_GATE, MS_PROJ_UP, MS_PROJ_DOWN, MS_PROJ_COUNT };

/* Names as written in configs and in the GGUF (index = enum value), NULL-terminated. */
extern const char *const ms_route_names[];     /* "none", "expert", "token" */
extern const char *const ms_sharing_names[];   /* "none", "cycle", "middle_cycle", "sequence", "middle_sequence" */
extern const char *const ms_arch_names[];      /* "linear", "mlp" */
extern const char *const ms_func_names[];      /* "sigmoid", "tanh", "softmax", "none" */
extern const char *const ms_gating_names[];    /* "weighted", "additive" */
extern const char *const ms_sampling_names[];  /* "aux_loss", "aux_router", "none" */
extern const char *const ms_balancing_names[]; /* "loss", "loss_free" */
extern const char *const ms_relax_names[];     /* "lora", "dora", "adaption_prompt", "recursion_encoding" */
extern const char *const ms_proj_names[];      /* "q_proj", ..., "down_proj" */

/* Index of s in a NULL-terminated name table, or -1. */
int ms_lookup(const char *const *names, const char *s);

typedef struct {
    int type;            /* ROUTE_*, -1 unset */
    int num_recursion;   /* 0 unset */
    int sharing;         /* SHARE_*, -1 unset */
    int base_depth;      /* 0 unset */
    int n_capacity;      /* 0 unset */
    double capacity[MS_MAX_REC];
    int arch;            /* ARCH_*, -1 unset */
    int func;            /* FUNC_*, -1 unset */
    int have_alpha;
    double alpha;
    int have_temp;
    double temp;
    int gating;          /* GATE_*, -1 unset */
    int sampling;        /* SAMPLE_*, -1 unset */
    int balancing;       /* BAL_*, -1 unset */
    int kv_shared;       /* 0/1, -1 unset */
    /* relaxation (relaxation.* of the official config): how a relaxed (PEFT
     * LoRA) checkpoint's deltas are scaled. PEFT multiplies B A by
     * alpha / r per module; the official code sets alpha = r * alpha_pattern
     * when alpha_pattern is given, so the scale is then alpha_pattern. */
    int relax;                      /* relaxation.enable: 0/1, -1 unset */
    int relax_method;               /* RELAX_*, -1 unset */
    int lora_r;                     /* relaxation.lora.r, 0 unset */
    int lora_rank_attn, lora_rank_ffn;   /* rank_pattern.self_attn (q, k, v) / .ffn, 0 unset */
    int have_lora_alpha;
    double lora_alpha;              /* relaxation.lora.alpha */
    int have_lora_alpha_pattern;
    double lora_alpha_pattern;      /* relaxation.lora.alpha_pattern */
    unsigned lora_targets;          /* bit MS_PROJ_* per projection target_modules selects; 0 unset */
} cv_settings;

void cv_settings_init(cv_settings *s);
/* Copy every field that is set in src over dst. */
void cv_settings_merge(cv_settings *dst, const cv_settings *src);

/* From a parsed document: the Hydra form (keys recursive, mor, kv_sharing,
 * relaxation) or the compact form of mor_config.json (key mor_type). */
int cv_settings_from_doc(cv_settings *s, const json *doc, char *err, size_t errcap);
/* From text: JSON if it starts with '{', else YAML. */
int cv_settings_parse(cv_settings *s, const char *text, size_t len, char *err, size_t errcap);
int cv_settings_load(cv_settings *s, const char *path, char *err, size_t errcap);

/* "1.0,0.6666666666666666,0.3333333333333333" -> capacities (strtod each, so
 * they are the doubles Python's float() gives). */
int cv_settings_parse_capacity(cv_settings *s, const char *str, char *err, size_t errcap);

#endif
