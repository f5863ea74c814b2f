/* chat.c - see chat.h. The formats follow each family's reference template
 * (the published Jinja), as llama.cpp's llama-chat.cpp does. */
#include "chat.h"

#include <string.h>

static const char *const names[CHAT_N] = { "chatml", "llama2", "llama3", "gemma", "zephyr", "phi3", "vicuna" };
static const char *const ends[CHAT_N] = { "<|im_end|>", "</s>", "<|eot_id|>", "<end_of_turn>", "</s>", "<|end|>", "</s>" };

static int has(const char *t, size_t n, const char *s)
{
    size_t k = strlen(s);
    if (k > n) return 0;
    for (size_t i = 0; i + k <= n; i++)
        if (t[i] == s[0] && memcmp(t + i, s, k) == 0) return 1;
    return 0;
}

int chat_detect(const char *t, size_t n)
{
    int f = chat_from_name(t);
    if (f != CHAT_UNKNOWN && strlen(t) == n) return f;
    /* Families whose markers others reuse come first or are told apart:
     * phi-4 and SmolVLM use <|im_start|> with other separators; phi-3's
     * <|user|> with <|end|>, zephyr's with an end-of-sequence. */
    if (has(t, n, "<|im_start|>"))
        return has(t, n, "<|im_sep|>") || has(t, n, "<end_of_utterance>") ? CHAT_UNKNOWN : CHAT_CHATML;
    if (has(t, n, "<|start_header_id|>") && has(t, n, "<|end_header_id|>")) return CHAT_LLAMA3;
    if (has(t, n, "<start_of_turn>")) return CHAT_GEMMA;
    if (has(t, n, "<|assistant|>") && has(t, n, "<|end|>")) return CHAT_PHI3;
    /* zephyr ends each turn with the end-of-sequence token; Falcon 3 and
     * GLM-Edge use the same role markers without it */
    if (has(t, n, "<|user|>") && has(t, n, "<|assistant|>") && has(t, n, "+ eos_token")) return CHAT_ZEPHYR;
    /* Mistral's newer formats use [INST] too, without <<SYS>> and with
     * their own system markers: not llama-2's. */
    if (has(t, n, "[INST]"))
        return has(t, n, "[SYSTEM_PROMPT]") || has(t, n, "[AVAILABLE_TOOLS]") ? CHAT_UNKNOWN : CHAT_LLAMA2;
    if (has(t, n, "USER: ") && has(t, n, "ASSISTANT: ")) return CHAT_VICUNA;
    return CHAT_UNKNOWN;
}

int chat_from_name(const char *name)
{
    for (int f = 0; f < CHAT_N; f++) if (!strcmp(name, names[f])) return f;
    return CHAT_UNKNOWN;
}

const char *chat_name(int f) { return f >= 0 && f < CHAT_N ? names[f] : "unknown"; }

const char *chat_names(void) { return "chatml, llama2, llama3, gemma, zephyr, phi3, vicuna"; }

const char *chat_end_marker(int f) { return f >= 0 && f < CHAT_N ? ends[f] : ""; }

/* content without leading and trailing whitespace (gemma and llama-3 trim) */
static void put_trimmed(buf *out, const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) { s++; n--; }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    buf_put(out, s, n);
}

void chat_format(int f, const api_message *m, int n, buf *out)
{
    switch (f) {
    case CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            buf_printf(out, "<|im_start|>%s\n", m[i].role);
            buf_put(out, m[i].content, m[i].content_len);
            buf_puts(out, "<|im_end|>\n");
        }
        buf_puts(out, "<|im_start|>assistant\n");
        break;
    case CHAT_LLAMA3:
        for (int i = 0; i < n; i++) {
            buf_printf(out, "<|start_header_id|>%s<|end_header_id|>\n\n", m[i].role);
            put_trimmed(out, m[i].content, m[i].content_len);
            buf_puts(out, "<|eot_id|>");
        }
        buf_puts(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case CHAT_GEMMA: {
        /* no system role: its text opens the next user turn */
        const api_message *sys = NULL;
        for (int i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) { sys = &m[i]; continue; }
            int model = !strcmp(m[i].role, "assistant");
            buf_printf(out, "<start_of_turn>%s\n", model ? "model" : "user");
            if (sys && !model) {
                put_trimmed(out, sys->content, sys->content_len);
                buf_puts(out, "\n\n");
                sys = NULL;
            }
            put_trimmed(out, m[i].content, m[i].content_len);
            buf_puts(out, "<end_of_turn>\n");
        }
        buf_puts(out, "<start_of_turn>model\n");
        break;
    }
    case CHAT_ZEPHYR:
    case CHAT_PHI3:
        for (int i = 0; i < n; i++) {
            buf_printf(out, "<|%s|>\n", m[i].role);
            buf_put(out, m[i].content, m[i].content_len);
            buf_puts(out, f == CHAT_ZEPHYR ? "</s>\n" : "<|end|>\n");
        }
        buf_puts(out, "<|assistant|>\n");
        break;
    case CHAT_LLAMA2: {
        /* [INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer</s>[INST] ... */
        int open = 1;
        buf_puts(out, "[INST] ");
        for (int i = 0; i < n; i++) {
            if (!open) { buf_puts(out, "[INST] "); open = 1; }
            if (!strcmp(m[i].role, "system")) {
                buf_puts(out, "<<SYS>>\n");
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, "\n<</SYS>>\n\n");
            } else if (!strcmp(m[i].role, "user")) {
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, " [/INST]");
            } else {
                buf_puts(out, " ");
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, "</s>");
                open = 0;
            }
        }
        break;
    }
    case CHAT_VICUNA:
        for (int i = 0; i < n; i++) {
            if (!strcmp(m[i].role, "system")) {
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, "\n\n");
            } else if (!strcmp(m[i].role, "user")) {
                buf_puts(out, "USER: ");
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, "\n");
            } else {
                buf_puts(out, "ASSISTANT: ");
                buf_put(out, m[i].content, m[i].content_len);
                buf_puts(out, "</s>\n");
            }
        }
        buf_puts(out, "ASSISTANT:");
        break;
    default:
        break;
    }
}
