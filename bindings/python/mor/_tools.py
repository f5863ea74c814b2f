"""OpenAI function calling for mor.Llama: the format a chat template writes
tool calls in, the grammar that constrains a call, and the parser that finds
the calls in a reply. The same rules as mor-server's (src/tools/mor-server/
tools.c, docs/SERVING.md "Function calling"):

  hermes   <tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>
           (Hermes 2 Pro, Qwen 2.5; one block per call)
  llama3   {"name": ..., "parameters": {...}} as the whole reply, optionally
           after <|python_tag|>, several separated by ';' (Llama 3.1 - 3.3)
  mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
  generic  the whole reply a JSON object: {"tool_calls": [...]},
           {"tool_call": {...}}, {"name", "arguments"}, or {"response": "text"}
"""
import json
import re
import secrets
import string

from . import json_schema_to_grammar

FORMATS = ("generic", "hermes", "llama3", "mistral")
_TRIGGER = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name"', "generic": '{"tool_calls"'}
_MARKER = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": "<|python_tag|>"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SPACE = " \n\t\r"


def detect(template_source):
    """The format a template writes calls in, from its text (as llama.cpp's
    chat parsers pick one)."""
    src = template_source or ""
    if "<tool_call>" in src:
        return "hermes"
    if "[TOOL_CALLS]" in src:
        return "mistral"
    if "<|python_tag|>" in src or ("<|start_header_id|>" in src and "ipython" in src):
        return "llama3"
    return "generic"


def trigger(fmt):
    """The text a call begins with: under tool_choice "auto" the grammar
    constrains the reply from there on (a lazy grammar)."""
    return _TRIGGER[fmt]


def check_tools(tools):
    """The tools as OpenAI's [{"type": "function", "function": {...}}]; a
    ValueError naming what is wrong."""
    if not isinstance(tools, list) or len(tools) > 128:
        raise ValueError("tools must be a list of at most 128 tools")
    seen = set()
    for tl in tools:
        fn = tl.get("function") if isinstance(tl, dict) and tl.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError("tools: each is {\"type\": \"function\", \"function\": {\"name\": [A-Za-z0-9_.-]+, ...}}")
        if name in seen:
            raise ValueError("tools: the function %r is given twice" % name)
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise ValueError("tools: function %r: parameters must be a JSON Schema object" % name)
        seen.add(name)
    return tools


def _prefix_rules(g, pre):
    """GBNF text g with every rule name prefixed by pre (names outside
    "...", [...], {...} and comments)."""
    out, i, n = [], 0, len(g)
    while i < n:
        c = g[i]
        if c in '"[':
            end, j = '"' if c == '"' else "]", i + 1
            while j < n and g[j] != end:
                j += 2 if g[j] == "\\" and j + 1 < n else 1
            j = min(j + 1, n)
        elif c in "{#":
            j = g.find("}" if c == "{" else "\n", i)
            j = n if j < 0 else j + (c == "{")
        elif c.isascii() and c.isalpha():
            j = i
            while j < n and (g[j].isascii() and (g[j].isalnum() or g[j] in "-_")):
                j += 1
            out.append(pre)
        else:
            j = i + 1
        out.append(g[i:j])
        i = j
    return "".join(out)


def grammar(fmt, tools, name=None, parallel=True):
    """GBNF text (root `root`) accepting only calls in fmt of the tools
    (only `name` when given), their arguments valid under each one's
    parameters schema; more than one call when parallel."""
    argkey = "parameters" if fmt == "llama3" else "arguments"
    rules, calls = [], []
    for i, tl in enumerate(tools):
        fn = tl["function"]
        if name is not None and fn["name"] != name:
            continue
        try:
            g = json_schema_to_grammar(fn.get("parameters", {"type": "object"}))
        except Exception as e:
            raise ValueError("tools: function %r parameters: %s" % (fn["name"], e))
        rules.append(_prefix_rules(g, "t%d-" % i))
        calls.append('"{\\"name\\": \\"%s\\", \\"%s\\": " t%d-root "}"' % (fn["name"], argkey, i))
    rules.append("call ::= %s" % (" | ".join(calls) or '""'))
    if fmt == "hermes":
        root = 'root ::= "<tool_call>\\n" call "\\n</tool_call>"'
        root += ' ("\\n<tool_call>\\n" call "\\n</tool_call>")*' if parallel else ""
    elif fmt == "mistral":
        root = 'root ::= "[TOOL_CALLS][" call %s"]"' % ('(", " call)* ' if parallel else "")
    elif fmt == "llama3":
        root = "root ::= call"
    else:
        root = 'root ::= "{\\"tool_calls\\": [" call %s"]}"' % ('(", " call)* ' if parallel else "")
    return "\n".join(rules + [root]) + "\n"


def _call_id():
    return "call_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(24))


def _call(v):
    """(name, arguments as JSON text) of a call object, or None."""
    if not isinstance(v, dict):
        return None
    name, args = v.get("name"), v.get("arguments", v.get("parameters"))
    if not isinstance(name, str) or not name or "\0" in name:
        return None
    if args is None:
        args = {}
    elif isinstance(args, str):   # already JSON text (some models): kept if it is an object
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return name, json.dumps(args, ensure_ascii=False)


def _value_at(text, i):
    """(the JSON object or array that text[i:] begins with, its end), or
    (None, i)."""
    if i >= len(text) or text[i] not in "{[":
        return None, i
    try:
        v, end = json.JSONDecoder().raw_decode(text, i)
    except ValueError:
        return None, i
    return v, end


def _skip(text, i):
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i


def _objects(text, i, calls, semicolon):
    """Calls from one object or array of objects at text[i:] and nothing
    after but space (';' between objects when semicolon); False if not."""
    i = _skip(text, i)
    if i == len(text):
        return False
    while i < len(text):
        v, end = _value_at(text, i)
        items = v if isinstance(v, list) else [v]
        got = [_call(x) for x in items] if v is not None and items else [None]
        if None in got:
            return False
        calls.extend(got)
        i = _skip(text, end)
        if semicolon and i < len(text) and text[i] == ";":
            i = _skip(text, i + 1)
    return True


def _hermes(text, calls):
    content, i, n = [], 0, len(text)
    while i < n:
        o = text.find("<tool_call>", i)
        if o < 0:
            content.append(text[i:])
            break
        content.append(text[i:o].rstrip(_SPACE))
        b = _skip(text, o + len("<tool_call>"))
        v, end = _value_at(text, b)
        c = _call(v) if isinstance(v, dict) else None
        if c is None:
            return None
        calls.append(c)
        i = _skip(text, end)
        if text.startswith("</tool_call>", i):
            i += len("</tool_call>")
        elif i != n:
            return None   # unclosed: only at the end
        i = _skip(text, i)
    return "".join(content)


def _generic(text, calls):
    v, end = _value_at(text, _skip(text, 0))
    if not isinstance(v, dict) or _skip(text, end) != len(text):
        return None
    many, one, resp = v.get("tool_calls"), v.get("tool_call"), v.get("response")
    if isinstance(many, list) and many:
        got = [_call(x) for x in many]
    elif isinstance(one, dict):
        got = [_call(one)]
    elif isinstance(resp, str) and len(v) == 1:
        return resp
    elif "name" in v and ("arguments" in v or "parameters" in v):
        got = [_call(v)]
    else:
        return None
    if None in got:
        return None
    calls.extend(got)
    return ""


def parse(fmt, text):
    """(content, [(id, name, arguments JSON text)]) of a reply: the calls
    in fmt and the text beside them (without the space next to them). A
    call that does not parse leaves the whole text as content, no calls."""
    calls = []
    if fmt == "hermes":
        content = _hermes(text, calls)
    elif fmt in ("mistral", "llama3"):
        m = _MARKER[fmt]
        o = text.find(m)
        if o >= 0:
            ok = _objects(text, o + len(m), calls, fmt == "llama3")
            content = text[:o].rstrip(_SPACE) if ok else None
        elif fmt == "llama3" and text[_skip(text, 0):].startswith("{"):
            content = "" if _objects(text, 0, calls, True) else None
        else:
            content = None
    else:
        content = _generic(text, calls)
    if content is None:
        return text, []
    return content, [(_call_id(), n, a) for n, a in calls]


def stream_safe(fmt, text):
    """How much of a reply's text so far can be streamed as content: none of
    a call's marker, of an end that may begin one, of the space before them,
    nor (llama3, generic) of a reply that begins with '{'."""
    if fmt in ("llama3", "generic"):
        b = _skip(text, 0)
        if b == len(text) or text[b] == "{":
            return 0
    safe = len(text)
    m = _MARKER.get(fmt)
    if m:
        o = text.find(m)
        if o >= 0:
            safe = o
        else:
            for i in range(max(0, len(text) - len(m) + 1), len(text)):
                if m.startswith(text[i:]):
                    safe = i
                    break
    while safe > 0 and text[safe - 1] in _SPACE:
        safe -= 1
    return safe


def request(tools, tool_choice, functions, function_call):
    """(tools or None, choice) of create_chat_completion's arguments: choice
    "auto", "none", "required", or a function's name (forced). The older
    functions / function_call are OpenAI's first spelling of the same."""
    if functions is not None:
        if tools is not None:
            raise ValueError("give tools or functions, not both")
        tools = [{"type": "function", "function": f} for f in functions]
    if function_call is not None:
        if tool_choice is not None:
            raise ValueError("give tool_choice or function_call, not both")
        tool_choice = function_call if isinstance(function_call, str) else {"type": "function",
                                                                             "function": function_call}
    if not tools:   # [] or None: nothing to call (OpenAI accepts an empty list)
        if tool_choice not in (None, "none", "auto"):
            raise ValueError("tool_choice %r needs tools" % (tool_choice,))
        return None, "none"
    check_tools(tools)
    if tool_choice is None or tool_choice in ("auto", "none", "required"):
        return tools, tool_choice or "auto"
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if name not in [tl["function"]["name"] for tl in tools]:
        raise ValueError("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                         "\"function\": {\"name\": one of the tools}}, not %r" % (tool_choice,))
    return tools, name


def constraint(fmt, tools, choice, parallel, user_gbnf):
    """The grammar of a reply with tools: GBNF text, (text, [trigger]) for a
    lazy one, or None. A forced call cannot be given with another grammar."""
    if choice == "auto":
        if user_gbnf is not None:   # the caller's grammar wins: no call is constrained
            return user_gbnf
        return grammar(fmt, tools, None, parallel), [trigger(fmt)]
    if user_gbnf is not None:
        raise ValueError("give grammar/response_format or a tool_choice that forces a call, not both")
    return grammar(fmt, tools, None if choice == "required" else choice, parallel)


def template_messages(messages):
    """messages as a template reads them: a call's arguments, a JSON string
    in OpenAI's API, as the object it holds (templates iterate it as a
    mapping; llama.cpp's server does the same)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if calls:
            m = dict(m, tool_calls=[_template_call(c) for c in calls])
        out.append(m)
    return out


def _template_call(c):
    fn = c.get("function") if isinstance(c, dict) else None
    args = fn.get("arguments") if isinstance(fn, dict) else None
    if isinstance(args, str):
        try:
            v = json.loads(args)
        except ValueError:
            return c
        if isinstance(v, dict):
            return dict(c, function=dict(fn, arguments=v))
    return c
