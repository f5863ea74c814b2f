"""mor.chat - chat messages to a prompt in a model family's format.

The built-in formats of mor-server (src/tools/mor-server/chat.c), byte for
byte the same text: chatml, llama-2, llama-3, gemma, zephyr, phi3, vicuna.
detect() picks one from a model's own template (tokenizer.chat_template) by
its markers, as the server does.
"""

__all__ = ["FORMATS", "detect", "render", "end_marker", "normalize_name"]

_ENDS = {"chatml": "<|im_end|>", "llama-2": "</s>", "llama-3": "<|eot_id|>", "gemma": "<end_of_turn>",
         "zephyr": "</s>", "phi3": "<|end|>", "vicuna": "</s>"}
FORMATS = tuple(_ENDS)
# llama-cpp-python's and mor-server's spellings of the same formats
_ALIASES = {"llama2": "llama-2", "llama3": "llama-3", "phi-3": "phi3"}


def normalize_name(name):
    """The format's canonical name, or None when it is not one of FORMATS."""
    name = _ALIASES.get(name, name)
    return name if name in _ENDS else None


def end_marker(name):
    """The text that ends an assistant turn in the format."""
    return _ENDS[normalize_name(name)]


def detect(template):
    """The built-in format a Jinja chat template is written for, or None."""
    t = template or ""
    if "<|im_start|>" in t:
        return None if "<|im_sep|>" in t or "<end_of_utterance>" in t else "chatml"
    if "<|start_header_id|>" in t and "<|end_header_id|>" in t:
        return "llama-3"
    if "<start_of_turn>" in t:
        return "gemma"
    if "<|assistant|>" in t and "<|end|>" in t:
        return "phi3"
    if "<|user|>" in t and "<|assistant|>" in t and "+ eos_token" in t:
        return "zephyr"
    if "[INST]" in t:
        return None if "[SYSTEM_PROMPT]" in t or "[AVAILABLE_TOOLS]" in t else "llama-2"
    if "USER: " in t and "ASSISTANT: " in t:
        return "vicuna"
    return None


def content_text(message):
    """A message's content as text: a string, None (""), or a list of parts
    whose "text" parts are joined (other parts, images, are refused)."""
    c = message.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        out = []
        for part in c:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("messages: only text content parts are supported, got %r" % (part,))
            out.append(part["text"])
        return "".join(out)
    raise ValueError("messages: content must be a string, null or a list of text parts")


def _ws_strip(s):
    return s.strip(" \t\n\r")


def render(name, messages):
    """The prompt for messages (dicts with "role" and "content") in format
    name, ending where the assistant's answer begins."""
    f = normalize_name(name)
    if f is None:
        raise ValueError("chat format %r is not one of %s" % (name, ", ".join(FORMATS)))
    msgs = [(m["role"], content_text(m)) for m in messages]
    if f == "chatml":
        return "".join("<|im_start|>%s\n%s<|im_end|>\n" % m for m in msgs) + "<|im_start|>assistant\n"
    if f == "llama-3":
        return "".join("<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>" % (r, _ws_strip(c))
                       for r, c in msgs) + "<|start_header_id|>assistant<|end_header_id|>\n\n"
    if f == "gemma":
        return _gemma(msgs)
    if f in ("zephyr", "phi3"):
        end = "</s>\n" if f == "zephyr" else "<|end|>\n"
        return "".join("<|%s|>\n%s%s" % (r, c, end) for r, c in msgs) + "<|assistant|>\n"
    if f == "llama-2":
        return _llama2(msgs)
    return _vicuna(msgs)


def _gemma(msgs):
    out, system = [], None   # no system role: its text opens the next user turn
    for role, c in msgs:
        if role == "system":
            system = c
            continue
        model = role == "assistant"
        out.append("<start_of_turn>%s\n" % ("model" if model else "user"))
        if system is not None and not model:
            out.append(_ws_strip(system) + "\n\n")
            system = None
        out.append(_ws_strip(c) + "<end_of_turn>\n")
    return "".join(out) + "<start_of_turn>model\n"


def _llama2(msgs):
    out, open_ = ["[INST] "], True
    for role, c in msgs:
        if not open_:
            out.append("[INST] ")
            open_ = True
        if role == "system":
            out.append("<<SYS>>\n%s\n<</SYS>>\n\n" % c)
        elif role == "user":
            out.append(c + " [/INST]")
        else:
            out.append(" %s</s>" % c)
            open_ = False
    return "".join(out)


def _vicuna(msgs):
    out = []
    for role, c in msgs:
        if role == "system":
            out.append(c + "\n\n")
        elif role == "user":
            out.append("USER: %s\n" % c)
        else:
            out.append("ASSISTANT: %s</s>\n" % c)
    return "".join(out) + "ASSISTANT:"
