#!/usr/bin/env python3
"""chat_template_ref.py - the expected renderings of tests/data/chat_templates/.

Renders every template (*.jinja) for every conversation
(conversations/<name>/: messages.json,
tools.json and extra.json if any, add_generation_prompt holding 1 or 0) with Python's jinja2 set up as Hugging Face
transformers sets it up for apply_chat_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension and a `generation` block, transformers' own `tojson`
filter (json.dumps with ensure_ascii=False, indent, separators, sort_keys) and
the globals raise_exception and strftime_now (at the fixed time NOW, UTC),
called with messages, tools (None when absent), documents (None),
add_generation_prompt, bos_token, eos_token and the conversation's extra
variables. Writes expected/<template>.<conversation>.txt (the output) or
.err (first line "raise_exception" or the exception's class, then its
message). Run once (needs jinja2 3.x); the outputs are committed and
tests/test_chat_template.c compares libmor's renderings with them byte for
byte, without jinja2.
"""
import datetime
import glob
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1721995200  # 2024-07-26 12:00:00 UTC; libmor's test passes the same `now`
BOS, EOS = "<s>", "</s>"
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "chat_templates")


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)


class Generation(Extension):
    """transformers' AssistantTracker without the tracking: the body renders."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, conv):
    try:
        t = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any failure is an expected error
        return None, (type(e).__name__, str(e))
    ctx = dict(messages=conv["messages"], tools=conv.get("tools"), documents=None,
               add_generation_prompt=conv["add_generation_prompt"], bos_token=BOS, eos_token=EOS)
    ctx.update(conv.get("extra", {}))
    try:
        return t.render(**ctx), None
    except TemplateError as e:
        return None, ("raise_exception", str(e))
    except Exception as e:  # noqa: BLE001
        return None, (type(e).__name__, str(e))


def main():
    env = environment()
    convs = {}
    for d in sorted(glob.glob(os.path.join(HERE, "conversations", "*"))):
        conv = {}
        for part in ("messages", "tools", "extra"):
            if os.path.exists(os.path.join(d, part + ".json")):
                with open(os.path.join(d, part + ".json"), encoding="utf-8") as f:
                    conv[part] = json.load(f)
        with open(os.path.join(d, "add_generation_prompt"), encoding="utf-8") as f:
            conv["add_generation_prompt"] = f.read().strip() == "1"
        convs[os.path.basename(d)] = conv
    out = os.path.join(HERE, "expected")
    os.makedirs(out, exist_ok=True)
    n_ok = n_err = 0
    for path in sorted(glob.glob(os.path.join(HERE, "*.jinja"))):
        name = os.path.basename(path)[:-6]
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        for cname, conv in convs.items():
            text, err = render(env, source, conv)
            base = os.path.join(out, "%s.%s" % (name, cname))
            for ext in (".txt", ".err"):
                if os.path.exists(base + ext):
                    os.remove(base + ext)
            if err is None:
                with open(base + ".txt", "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                n_ok += 1
            else:
                with open(base + ".err", "w", encoding="utf-8", newline="") as f:
                    f.write("%s\n%s\n" % err)
                n_err += 1
    print("%d renderings, %d errors (jinja2 %s)" % (n_ok, n_err, jinja2.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
