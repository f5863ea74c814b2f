"""test_python_types.py - the Python package is typed (issue 43): its stubs
(bindings/python/mor/*.pyi, with py.typed) and its docstrings.

With mypy (Debian: apt-get install mypy; any python3 that can import mypy):
  - mypy's stubtest: the stubs and the runtime package (bindings/python on
    the libmor make built) agree: names, signatures, defaults, the constants'
    values. tests/data/python/stubtest-allowlist.txt lists only what stubtest
    cannot judge, each entry with its reason;
  - mypy --strict accepts tests/data/python/typed_usage.py on the package laid
    out as pip installs it (the files the wheel carries, mor_build's
    _package_files(), in a venv's site-packages), with NumPy visible to mypy
    and without it, also for Python 3.7; and on the source tree (MYPYPATH),
    where mypy reports the stubs' own errors too;
  - mypy --strict accepts bindings/python/README.md's llama-cpp-python script;
  - mypy rejects tests/data/python/typed_wrong.py with the error each of its
    `# E: text` lines names, and reports no other line: the stubs have teeth.
Always:
  - the TypedDicts of mor/llama.pyi describe the dicts Llama really returns
    (completions, chunks, chat completions, embeddings on brown-mor.gguf):
    every required key, no key they do not name, values of their types;
  - typed_usage.py runs on brown-mor.gguf;
  - every class and function in the __all__ of mor, mor.llama and mor.chat,
    and every public method and property of those classes, has a docstring,
    and help() (pydoc) shows it;
  - the wheel's file list (mor_build._package_files()) holds every stub.
"""
import ast
import os
import pydoc
import re
import shutil
import subprocess
import sys
import tempfile

import testlib as t

t.reexec_under_asan()
t.use_bindings()
import mor  # noqa: E402
import mor.chat  # noqa: E402
import mor.llama  # noqa: E402

PKG = os.path.join(t.ROOT, "bindings", "python")
DATA = os.path.join(t.ROOT, "tests", "data", "python")
BROWN = os.path.join(t.ROOT, "models", "brown-mor.gguf")
WORK = os.path.join(t.OUT, "build", "python-types")
STUBS = ("__init__.pyi", "llama.pyi", "chat.pyi")
APT = "Debian: apt-get install mypy"


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=600, **kw)


def check(cond, what, output):
    """t.check, with the command's output (its end) shown when it failed."""
    return t.check(cond, what if cond else "%s\n%s" % (what, output[-3000:]))


def package_files():
    sys.path.insert(0, os.path.join(PKG, "_build"))
    try:
        import mor_build
        return mor_build._package_files()
    finally:
        sys.path.pop(0)


# ---------------------------------------------------------------------------
# mypy
# ---------------------------------------------------------------------------
def mypy_python():
    """A python3 that can import mypy (this one, Debian's, or the one the
    mypy command runs on), or None."""
    cands = [sys.executable, "/usr/bin/python3"]
    exe = shutil.which("mypy")
    if exe:
        with open(exe, "rb") as f:
            first = f.readline().decode("utf-8", "replace")
        if first.startswith("#!"):
            cands.append(first[2:].strip().split()[0])
    for py in cands:
        if os.path.exists(py) and run([py, "-c", "import mypy.stubtest"]).returncode == 0:
            return py
    return None


def installed_layout(py, path, system_site):
    """A venv of py (no pip) holding mor as the wheel installs it (its .py,
    .pyi and py.typed; no library: mypy does not load it). Its python."""
    shutil.rmtree(path, ignore_errors=True)
    p = run([py, "-m", "venv", "--without-pip"] + (["--system-site-packages"] if system_site else []) + [path])
    vpy = os.path.join(path, "bin", "python")
    if p.returncode != 0:
        return None, p.stdout
    q = run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    site = q.stdout.strip()
    for arc, src in package_files():
        dst = os.path.join(site, arc)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
    return vpy, ""


def mypy(py, args, cache, env=None):
    """mypy --strict args (its exit code, output)."""
    p = run([py, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
             "--cache-dir", os.path.join(WORK, "cache-" + cache)] + args, cwd=t.ROOT, env=env)
    return p.returncode, p.stdout


def has_numpy(py):
    return run([py, "-c", "import numpy"]).returncode == 0


def stubtest(py):
    env = dict(os.environ, PYTHONPATH=PKG, MOR_LIB_PATH=t.libmor_path())
    p = run([py, "-m", "mypy.stubtest", "--concise", "--allowlist", os.path.join(DATA, "stubtest-allowlist.txt"),
             "mor"], cwd=PKG, env=env)
    check(p.returncode == 0 and "error" not in p.stdout,
          "stubtest: mor's stubs and the runtime package agree (allowlist: what stubtest cannot judge)", p.stdout)


def wrong_program(py, vpy):
    """typed_wrong.py: an error on each `# E: text` line, containing text;
    none elsewhere."""
    path = os.path.join(DATA, "typed_wrong.py")
    want = {}
    with open(path) as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"\S  # E: (.*)$", line)
            if m:
                want[i] = m.group(1).strip()
    rc, out = mypy(py, ["--python-executable", vpy, path], "wrong")
    errors = {}
    for line in out.splitlines():
        m = re.match(r"^(.*?):(\d+): error: (.*)$", line)
        if m and os.path.abspath(os.path.join(t.ROOT, m.group(1))) == path:
            errors.setdefault(int(m.group(2)), []).append(m.group(3))
    t.check(rc == 1 and len(want) >= 10, "mypy rejects typed_wrong.py (exit %d, %d marked lines)" % (rc, len(want)))
    for line, text in sorted(want.items()):
        got = errors.get(line, [])
        check(any(text in e for e in got), "mypy rejects typed_wrong.py:%d: %s" % (line, text), "\n".join(got) or out)
    extra = {k: v for k, v in errors.items() if k not in want}
    check(not extra, "mypy reports no unmarked line of typed_wrong.py", repr(extra))


def readme_script():
    with open(os.path.join(PKG, "README.md")) as f:
        m = re.search(r"<!-- llama-cpp-python script -->\n```python\n(.*?)```", f.read(), re.S)
    return m.group(1) if m else None


def mypy_checks():
    names = ("stubtest", "mypy --strict on typed_usage.py, NumPy visible",
             "mypy --strict on typed_usage.py, no NumPy", "mypy --strict --python-version 3.7 on typed_usage.py",
             "mypy --strict on the source tree's stubs", "mypy --strict on the README's script",
             "mypy rejects typed_wrong.py")
    py = mypy_python()
    if py is None:
        for n in names:
            t.skip("%s: no python3 with mypy here (%s)" % (n, APT))
        return
    v = run([py, "-m", "mypy", "--version"]).stdout.strip()
    print("# %s (%s)" % (v, py))
    os.makedirs(WORK, exist_ok=True)
    stubtest(py)
    usage = os.path.join(DATA, "typed_usage.py")
    plain, err = installed_layout(py, os.path.join(WORK, "venv-plain"), False)
    if not check(plain is not None, "a venv (python3 -m venv --without-pip) with mor laid out as installed", err):
        return
    with_np = None
    if has_numpy(py):
        with_np, err = installed_layout(py, os.path.join(WORK, "venv-numpy"), True)
        check(with_np is not None and has_numpy(with_np), "a venv with mor installed and NumPy visible", err)
        rc, out = mypy(py, ["--python-executable", with_np, usage], "numpy")
        check(rc == 0, "mypy --strict accepts typed_usage.py on the installed package, NumPy visible", out)
    else:
        t.skip("mypy --strict with NumPy visible: %s has no NumPy (Debian: apt-get install python3-numpy)" % py)
    rc, out = mypy(py, ["--python-executable", plain, usage], "plain")
    check(rc == 0, "mypy --strict accepts typed_usage.py on the installed package, no NumPy", out)
    # the package runs on Python 3.7: its stubs take from typing only what 3.7 has
    rc, out = mypy(py, ["--python-version", "3.7", "--python-executable", plain, usage], "py37")
    if rc == 2 and "3.7" in out and "not supported" in out:
        t.skip("mypy --strict --python-version 3.7: this mypy (%s) no longer checks for 3.7" % v)
    else:
        check(rc == 0, "mypy --strict --python-version 3.7 accepts typed_usage.py (no NumPy)", out)
    # the source tree: mypy reports the stubs' own errors, as it does not for
    # an installed package; only the "unused type: ignore" of the optional
    # NumPy import (used when NumPy is missing) is allowed
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "mypy.ini")
        with open(cfg, "w") as f:
            f.write("[mypy]\n[mypy-mor]\nwarn_unused_ignores = False\n")
        rc, out = mypy(py, ["--config-file", cfg, usage], "tree", env=dict(os.environ, MYPYPATH=PKG))
        check(rc == 0, "mypy --strict on typed_usage.py with MYPYPATH=bindings/python: no error in the stubs", out)
        script = readme_script()
        if t.check(script is not None, "the README marks its llama-cpp-python script"):
            path = os.path.join(d, "readme_script.py")
            with open(path, "w") as f:
                f.write(script)
            rc, out = mypy(py, ["--python-executable", with_np or plain, path], "readme")
            check(rc == 0, "mypy --strict accepts the README's llama-cpp-python script", out)
    wrong_program(py, with_np or plain)


# ---------------------------------------------------------------------------
# the TypedDicts of llama.pyi against the dicts Llama returns
# ---------------------------------------------------------------------------
def typed_dicts():
    """{name: {key: (annotation, required)}} of the TypedDicts of llama.pyi."""
    with open(os.path.join(PKG, "mor", "llama.pyi")) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "TypedDict"
                                                  for b in node.bases):
            fields = {}
            for st in node.body:
                if isinstance(st, ast.AnnAssign):
                    ann, req = st.annotation, True
                    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and \
                            ann.value.id == "NotRequired":
                        ann, req = ann.slice, False
                    fields[st.target.id] = (ann, req)
            out[node.name] = fields
    return out


TD = typed_dicts()


def conforms(v, ann, where):
    """Problems of value v against a stub annotation (an ast node)."""
    if isinstance(ann, ast.Constant) and ann.value is None:
        return [] if v is None else ["%s: %r is not None" % (where, v)]
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        a, b = conforms(v, ann.left, where), conforms(v, ann.right, where)
        return [] if not a or not b else a + b
    if isinstance(ann, ast.Name):
        simple = {"str": str, "int": int, "float": float, "bool": bool}
        if ann.id in simple:
            ok = isinstance(v, simple[ann.id]) and (ann.id == "bool" or not isinstance(v, bool))
            return [] if ok else ["%s: %r is not %s" % (where, v, ann.id)]
        if ann.id in TD:
            return conforms_td(v, ann.id, where)
        return []   # an alias of the stub (a JSON schema, ...): not judged here
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name):
        kind, args = ann.value.id, ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if kind == "Literal":
            vals = [a.value for a in args]
            return [] if v in vals else ["%s: %r is not one of %r" % (where, v, vals)]
        if kind == "list":
            if not isinstance(v, list):
                return ["%s: %r is not a list" % (where, v)]
            return [p for i, x in enumerate(v) for p in conforms(x, args[0], "%s[%d]" % (where, i))]
        if kind == "dict":
            if not isinstance(v, dict):
                return ["%s: %r is not a dict" % (where, v)]
            return [p for k, x in v.items() for p in conforms(k, args[0], where + " key") +
                    conforms(x, args[1], "%s[%r]" % (where, k))]
    return []


def conforms_td(v, name, where=None):
    where = where or name
    if not isinstance(v, dict):
        return ["%s: %r is not a dict (%s)" % (where, v, name)]
    fields = TD[name]
    probs = ["%s: no key %r (%s)" % (where, k, name) for k, (_, req) in fields.items() if req and k not in v]
    probs += ["%s: key %r that %s does not name" % (where, k, name) for k in v if k not in fields]
    for k, x in v.items():
        if k in fields:
            probs += conforms(x, fields[k][0], "%s[%r]" % (where, k))
    return probs


def check_shape(what, values, name):
    probs = [p for v in values for p in conforms_td(v, name)]
    check(values and not probs, "%s is a %s (llama.pyi), %d dict(s)" % (what, name, len(values)), "\n".join(probs[:20]))


def shapes():
    msgs = [{"role": "system", "content": "You are a court reporter."}, {"role": "user", "content": "Hi"}]
    with mor.Llama(model_path=BROWN, n_ctx=256, seed=1, verbose=False) as llm:
        check_shape("llm(prompt)", [llm("The jury said that", max_tokens=6),
                                    llm("The jury said that", max_tokens=40, stop=["."])], "CreateCompletionResponse")
        check_shape("llm(prompt, logprobs=2, echo=True)",
                    [llm("The jury said", max_tokens=4, logprobs=2, echo=True)], "CreateCompletionResponse")
        check_shape("the chunks of llm(prompt, stream=True, echo=True)",
                    list(llm("The jury said", max_tokens=6, stream=True, echo=True)), "CreateCompletionStreamResponse")
        check_shape("create_chat_completion()", [llm.create_chat_completion(messages=msgs, max_tokens=6)],
                    "CreateChatCompletionResponse")
        check_shape("create_chat_completion(logprobs=True, top_logprobs=2)",
                    [llm.create_chat_completion(messages=msgs, max_tokens=4, logprobs=True, top_logprobs=2)],
                    "CreateChatCompletionResponse")
        check_shape("the chunks of create_chat_completion(stream=True)",
                    list(llm.create_chat_completion(messages=msgs, max_tokens=6, stream=True)),
                    "CreateChatCompletionStreamResponse")
        out = llm("The jury", max_tokens=2)
        del out["usage"]
        out["choices"][0]["txt"] = out["choices"][0].pop("text")
        out["choices"][0]["index"] = "0"
        probs = conforms_td(out, "CreateCompletionResponse")
        t.check(len(probs) == 4, "the shape check finds a missing key, a key not named and a wrong type: %s" % probs)
    with mor.Llama(model_path=BROWN, embedding=True, verbose=False) as llm:
        check_shape("create_embedding()", [llm.create_embedding("The jury"), llm.create_embedding(["a", "b"])],
                    "CreateEmbeddingResponse")


# ---------------------------------------------------------------------------
# docstrings
# ---------------------------------------------------------------------------
def public_members(cls):
    """(name, function or property) of cls's public methods and properties,
    its own and inherited ones (not object's or tuple's)."""
    out = {}
    for klass in reversed(cls.__mro__):
        if klass in (object, tuple):
            continue
        for name, v in vars(klass).items():
            if name.startswith("_") and name != "__call__":
                continue
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if callable(v) or isinstance(v, property):
                out[name] = v
    return sorted(out.items())


def first_line(doc):
    return doc.strip().splitlines()[0].strip()


def docstrings():
    for mod in (mor, mor.llama, mor.chat):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not (callable(obj) or isinstance(obj, type)):
                continue
            what = "%s.%s" % (mod.__name__, name)
            doc = (obj.__doc__ or "").strip()
            auto = isinstance(obj, type) and issubclass(obj, tuple) and doc.startswith(name + "(")
            if not isinstance(obj, type):
                t.check(doc != "", "%s has a docstring" % what)
                continue
            missing = [n for n, v in public_members(obj) if not (v.__doc__ or "").strip()]
            t.check(doc != "" and not auto and not missing, "%s and its public methods and properties have "
                    "docstrings%s" % (what, " (missing: %s)" % ", ".join(missing) if missing else
                                      " (the class has none)" if not doc or auto else ""))
    for cls in (mor.Llama, mor.Model, mor.Context):
        text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        text = re.sub(r"\s+", " ", text)
        absent = [n for n, v in public_members(cls) if re.sub(r"\s+", " ", first_line(v.__doc__)) not in text]
        t.check(not absent, "help(mor.%s) shows the docstring of every public method%s"
                % (cls.__name__, " (not: %s)" % ", ".join(absent) if absent else ""))


def main():
    files = [arc for arc, _ in package_files()]
    t.check(all("mor/" + s in files for s in STUBS) and "mor/py.typed" in files,
            "the wheel carries py.typed and the stubs %s" % ", ".join(STUBS))
    docstrings()
    shapes()
    env = dict(os.environ, PYTHONPATH=PKG, MOR_LIB_PATH=t.libmor_path())
    p = run([sys.executable, os.path.join(DATA, "typed_usage.py"), BROWN], cwd=t.ROOT, env=env)
    check(p.returncode == 0 and "typed_usage: ok" in p.stdout, "typed_usage.py runs on brown-mor.gguf", p.stdout)
    mypy_checks()


main()
t.finish()
