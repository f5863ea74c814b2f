#!/usr/bin/env python3
"""docs/tools/mor_api.py - read include/mor.h: the API reference and the ABI list.

Standard library only. One small parser of mor.h's own style (it is not a C
parser: it knows the shapes mor.h uses, and fails loudly on anything else),
used by:

  mor_api.py markdown [HEADER]          docs/API.md on stdout (make api-doc)
  mor_api.py functions [HEADER]         the MOR_API function names, one a line
  mor_api.py abi [HEADER]               the ABI entries (src/libmor.sym format)
  mor_api.py check-abi --sym FILE [--header H] (--lib SO | --exported FILE)
                                        every entry of FILE still holds (make check-abi)
  mor_api.py update-abi --sym FILE [--header H]
                                        append the entries FILE lacks; never rewrites one

The ABI list (src/libmor.sym) has one entry a line, "KIND NAME: VALUE":
  function mor_x@NODE: ret(param types)   exported at version node NODE
  struct mor_x: field; field; ...         a later header may only append fields
  constant MOR_X: value                   enum values and numeric #defines
  typedef mor_x: type
An entry may never be removed or changed: that is an ABI break (see docs/ABI.md).
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEADER = os.path.join(ROOT, "include", "mor.h")

# Macros that are not ABI: the version of the header itself and the helpers.
NOT_ABI = re.compile(r"^MOR_(VERSION_\w+|API|H|\w+_INIT)$")


class ParseError(Exception):
    pass


def read(path=HEADER):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_comments(code):
    return re.sub(r"/\*.*?\*/", " ", code, flags=re.S)


def norm(s):
    """Collapse whitespace; `*` hugs the name: `const char *p`."""
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\s*\*\s*", " *", s)
    s = re.sub(r"\* \*", "**", s)
    s = re.sub(r"\* \*", "**", s)
    s = re.sub(r"\(\s+", "(", s)
    s = re.sub(r"\s+\)", ")", s)
    return s.replace(" ,", ",")


def param_type(p):
    """`const mor_model *model` -> `const mor_model *`; `void` -> `void`."""
    p = norm(p)
    m = re.match(r"^(.*?)(\w+)$", p)
    if p == "void" or not m or not m.group(1).strip():
        return p
    return m.group(1).rstrip() if m.group(1).endswith("*") else m.group(1).strip()


def functions(text):
    """[(name, return type, [param decls], full declaration)] in header order."""
    out = []
    code = strip_comments(text)
    for m in re.finditer(r"^\s*MOR_API\s+([^;{}#]*?)\b(mor_\w+)\s*\(([^;{}]*?)\)\s*;", code, re.M):
        ret, name, params = norm(m.group(1)), m.group(2), m.group(3)
        plist = [norm(p) for p in params.split(",")] if params.strip() else []
        if "(" in params:
            raise ParseError("%s: a function-pointer parameter needs a typedef in mor.h" % name)
        out.append((name, ret, plist, norm(m.group(0).replace("MOR_API", "", 1))))
    if not out:
        raise ParseError("no MOR_API function found")
    return out


def _eval_int(expr):
    e = re.sub(r"(\d+)[uUlL]+\b", r"\1", expr.strip())
    if not re.match(r"^[-+()\d\s<>|x&a-fA-F*]+$", e):
        raise ParseError("cannot evaluate %r" % expr)
    return int(eval(e, {"__builtins__": {}}))  # digits and operators only, checked above


def constants(text):
    """{name: int} of every enum value and numeric #define (but the version)."""
    out = {}
    code = strip_comments(text)
    for body in re.findall(r"\benum\s*\w*\s*\{(.*?)\}", code, re.S):
        nxt = 0
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            m = re.match(r"^(\w+)\s*(?:=\s*(.+))?$", item, re.S)
            if not m:
                raise ParseError("enum item %r" % item)
            val = _eval_int(m.group(2)) if m.group(2) else nxt
            out[m.group(1)] = val
            nxt = val + 1
    for name, val in re.findall(r"^\s*#\s*define\s+(MOR_\w+)\s+(\(?-?[\d\s<uU]+\)?)\s*$", code, re.M):
        if not NOT_ABI.match(name):
            out[name] = _eval_int(val)
    return out


def _array_sizes(decl, consts):
    """A field's array size written with the header's constants (e.g.
    n_at_depth[MOR_MAX_RECURSIONS + 1]) as its value, so the record holds the
    ABI, not the spelling."""
    def value(m):
        expr = re.sub(r"\b[A-Z_][A-Z0-9_]*\b", lambda c: str(consts[c.group(0)]) if c.group(0) in consts else c.group(0),
                      m.group(1))
        try:
            return "[%d]" % _eval_int(expr)
        except ParseError:
            return m.group(0)
    return re.sub(r"\[([^\]]+)\]", value, decl)


def structs(text):
    """{name: [field decl]} of every typedef struct with a body."""
    out = {}
    code = strip_comments(text)
    consts = constants(text)
    for name, body in re.findall(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*\w+\s*;", code, re.S):
        out[name] = [_array_sizes(norm(f), consts) for f in body.split(";") if f.strip()]
    return out


def typedefs(text):
    """{name: type} of the scalar and function-pointer typedefs."""
    out = {}
    code = strip_comments(text)
    for m in re.finditer(r"^\s*typedef\s+([^;{}]*?)\s*;", code, re.M):
        d = norm(m.group(1))
        if d.startswith("struct "):
            continue  # opaque handles: no layout
        fp = re.match(r"^(.*)\( \*(\w+)\)\s*\((.*)\)$", d) or re.match(r"^(.*)\(\*(\w+)\)\s*\((.*)\)$", d)
        if fp:
            out[fp.group(2)] = "%s(*)(%s)" % (fp.group(1).strip(),
                                              ", ".join(param_type(p) for p in fp.group(3).split(",")))
        else:
            mm = re.match(r"^(.*?)\s*\b(\w+)$", d)
            out[mm.group(2)] = mm.group(1)
    return out


def version_node(text):
    major = re.search(r"#define MOR_VERSION_MAJOR (\d+)", text).group(1)
    minor = re.search(r"#define MOR_VERSION_MINOR (\d+)", text).group(1)
    return "MOR_%s.%s" % (major, minor) if major == "0" else "MOR_%s" % major


def abi_entries(text, node=None):
    """[(key, value)] with key "KIND NAME"; functions get `node` (default: the
    header's current version node) for newly listed ones."""
    node = node or version_node(text)
    out = []
    for name, val in typedefs(text).items():
        out.append(("typedef " + name, val))
    for name, fields in structs(text).items():
        out.append(("struct " + name, "; ".join(fields)))
    for name, val in constants(text).items():
        out.append(("constant " + name, str(val)))
    for name, ret, params, _ in functions(text):
        sig = "%s(%s)" % (ret, ", ".join(param_type(p) for p in params) or "void")
        out.append(("function " + name, (node, sig)))
    return out


def format_entry(key, val):
    if key.startswith("function "):
        return "%s@%s: %s" % (key, val[0], val[1])
    return "%s: %s" % (key, val)


def parse_sym(path):
    """[(key, value, line number)] of an ABI list."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            m = re.match(r"^(function|struct|constant|typedef) (\w+)(?:@([\w.]+))?: (.*)$", line)
            if not m:
                raise ParseError("%s:%d: not an ABI entry: %r" % (path, n, line))
            key = m.group(1) + " " + m.group(2)
            val = (m.group(3), m.group(4)) if m.group(1) == "function" else m.group(4)
            out.append((key, val, n))
    return out


def exported_symbols(lib):
    """{name: version node} of the functions a shared library exports."""
    p = subprocess.run(["nm", "-D", "--defined-only", lib], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        raise ParseError("nm -D %s: %s" % (lib, p.stderr.strip()))
    return parse_exported(p.stdout)


def parse_exported(text):
    out = {}
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        m = re.match(r"^(\w+)@@?([\w.]+)$", f[-1])
        if m:
            out[m.group(1)] = m.group(2)
        elif re.match(r"^\w+$", f[-1]):
            out[f[-1]] = ""
    return out


def check_abi(sym_path, header_path, exported):
    """Problems (list of str) and notes (list of str): every listed entry must
    hold in the header and (for functions) in `exported` ({name: node})."""
    text = read(header_path)
    current = dict(abi_entries(text))
    problems, notes = [], []
    listed = set()
    for key, val, n in parse_sym(sym_path):
        listed.add(key)
        where = "%s:%d %s" % (os.path.basename(sym_path), n, key)
        if key not in current:
            problems.append("%s was removed from mor.h" % where)
            continue
        cur = current[key]
        if key.startswith("function "):
            node, sig = val
            if cur[1] != sig:
                problems.append("%s changed: %s -> %s" % (where, sig, cur[1]))
            name = key.split()[1]
            if exported is not None:
                if name not in exported:
                    problems.append("%s is not exported by the library" % where)
                elif exported[name] != node:
                    problems.append("%s is exported at version node '%s', listed at '%s'"
                                    % (where, exported[name], node))
        elif key.startswith("struct "):
            old = [f.strip() for f in val.split(";")]
            new = [f.strip() for f in cur.split(";")]
            if new[:len(old)] != old:
                problems.append("%s changed (fields may only be appended): %s -> %s" % (where, val, cur))
            elif len(new) > len(old):
                notes.append("%s has appended fields: %s" % (key, "; ".join(new[len(old):])))
        elif cur != val:
            problems.append("%s changed: %s -> %s" % (where, val, cur))
    for key, val in current.items():
        if key not in listed:
            notes.append("new, not yet in %s (make update-abi): %s"
                         % (os.path.basename(sym_path), format_entry(key, val)))
    return problems, notes


def update_abi(sym_path, header_path):
    text = read(header_path)
    listed = {k for k, _, _ in parse_sym(sym_path)} if os.path.exists(sym_path) else set()
    new = [format_entry(k, v) for k, v in abi_entries(text) if k not in listed]
    with open(sym_path, "a", encoding="utf-8") as f:
        for line in new:
            f.write(line + "\n")
    return new


# ---------------------------------------------------------------------------
# docs/API.md
# ---------------------------------------------------------------------------

def _comment_text(block):
    """The prose of a /* ... */ block, without the comment markers."""
    lines = []
    for line in block.strip().splitlines():
        line = line.strip()
        line = re.sub(r"^/\*+ ?", "", line)
        line = re.sub(r"\*+/$", "", line)
        line = re.sub(r"^\* ?", "", line)
        lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def _units(para):
    """Split a paragraph into (prose, code) units: a comment that stands on
    its own lines outside any braces is the prose of the code after it."""
    units = []
    prose, code = [], []
    depth = 0
    lines = para.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if depth == 0 and line.strip().startswith("/*"):
            block = [line]
            while "*/" not in block[-1] and i + 1 < len(lines):
                i += 1
                block.append(lines[i])
            if code or prose:
                units.append(("\n".join(prose), "\n".join(code)))
            prose, code = block, []
        else:
            code.append(line)
            s = re.sub(r"/\*.*?\*/", "", line)
            depth += s.count("{") - s.count("}")
        i += 1
    if code or prose:
        units.append(("\n".join(prose), "\n".join(code)))
    return [(_comment_text("\n".join(p.split("\n"))) if p else "", c) for p, c in units]


def _anchor(title):
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def markdown(text):
    """docs/API.md: the header's comments as prose, its declarations as code,
    section by section, with an index of the functions."""
    start = text.index("#include <stdint.h>")
    end = text.rindex("#ifdef __cplusplus")
    intro = re.match(r"\s*/\*(.*?)\*/", text, re.S).group(0)
    intro_txt = _comment_text(intro)
    intro_txt = intro_txt.split("Copyright")[0].rstrip()
    body = text[start:end]
    # the MOR_API visibility machinery is not something a user reads
    body = body[body.index("/* ---"):]
    sections = re.split(r"/\* -{20,} \*/\s*\n/\* (.*?)\s*\*/\s*\n/\* -{20,} \*/", body)
    out = ["# libmor API reference", "",
           "<!-- Generated from include/mor.h by docs/tools/mor_api.py (make api-doc); do not edit. -->", "",
           "Version %s. The header is the contract; this page is its text, arranged for reading."
           % re.search(r'#define MOR_VERSION_STRING "([^"]*)"', text).group(1), ""]
    titles = sections[1::2]
    out.append("Sections: " + " · ".join("[%s](#%s)" % (t, _anchor(t)) for t in titles))
    out.append("")
    out.append("## Overview")
    out.append("")
    out.append("```text")
    out.append(intro_txt.split("\n", 1)[1].strip("\n") if "\n" in intro_txt else intro_txt)
    out.append("```")
    out.append("")
    fn_by_section = []
    for title, chunk in zip(titles, sections[2::2]):
        out.append("## " + title)
        out.append("")
        names = []
        for para in re.split(r"\n\s*\n", chunk.strip("\n")):
            for prose, code in _units(para):
                if "MOR_API" in code:
                    names.extend(f[0] for f in functions(code))
                if prose:
                    out.append(prose)
                    out.append("")
                if code.strip():
                    out.append("```c")
                    out.append(code.rstrip())
                    out.append("```")
                    out.append("")
        fn_by_section.append((title, names))
    out.append("## Index of functions")
    out.append("")
    for title, names in fn_by_section:
        if names:
            out.append("- [%s](#%s): %s" % (title, _anchor(title), ", ".join("`%s`" % n for n in names)))
    out.append("")
    return "\n".join(out)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    opts = {}
    pos = []
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args):
            opts[args[i][2:]] = args[i + 1]
            i += 2
        else:
            pos.append(args[i])
            i += 1
    header = opts.get("header") or (pos[0] if pos else HEADER)
    try:
        if cmd == "markdown":
            sys.stdout.write(markdown(read(header)))
        elif cmd == "functions":
            for f in functions(read(header)):
                print(f[0])
        elif cmd == "abi":
            for k, v in abi_entries(read(header)):
                print(format_entry(k, v))
        elif cmd == "check-abi":
            if "lib" in opts:
                exported = exported_symbols(opts["lib"])
            elif "exported" in opts:
                with open(opts["exported"]) as f:
                    exported = parse_exported(f.read())
            else:
                exported = None
            problems, notes = check_abi(opts["sym"], header, exported)
            for n in notes:
                print("note: " + n)
            for p in problems:
                print("ABI BREAK: " + p)
            n = len(parse_sym(opts["sym"]))
            print("check-abi: %d listed entries, %d broken" % (n, len(problems)))
            return 1 if problems else 0
        elif cmd == "update-abi":
            for line in update_abi(opts["sym"], header):
                print("appended: " + line)
        else:
            sys.stderr.write(__doc__)
            return 2
    except (ParseError, OSError, ValueError) as e:
        sys.stderr.write("mor_api.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
