"""test_python_package.py - `pip install ./bindings/python` as a user does it.

Offline, in fresh virtual environments under $OUT/build/python-pkg:
  - `pip wheel` builds the wheel through the in-tree backend (the C library
    compiled by the Makefile): named libmor-VERSION-py3-none-PLATFORM.whl with
    mor.h's version, the library inside the package, py.typed and the type
    stubs (mor/*.pyi), and a RECORD whose hashes and sizes are the files';
  - the sdist carries the C sources: `make -n` of the library in its csrc/
    finds every file it needs;
  - the wheel installs with pip --no-index, and the binding tests
    (test_python_bindings.py, test_python_input.py, test_python_llama.py) run
    against the installed package (MOR_TEST_INSTALLED=1): once with NumPy hidden,
    once with NumPy visible (an interpreter with NumPy, e.g. Debian's
    python3-numpy, through --system-site-packages; a counted skip without one).
Each check of the runs inside is relayed as a check here, prefixed with the run.
"""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import testlib as t

PKG = os.path.join(t.ROOT, "bindings", "python")
WORK = os.path.join(t.OUT, "build", "python-pkg")
SUITES = ("test_python_bindings.py", "test_python_input.py", "test_python_llama.py")


def version():
    with open(os.path.join(t.ROOT, "include", "mor.h")) as f:
        h = f.read()
    return ".".join(re.search(r"#define MOR_VERSION_%s (\d+)" % k, h).group(1) for k in ("MAJOR", "MINOR", "PATCH"))


def check(cond, what, output):
    """t.check, with the command's output (its end) shown when it failed."""
    return t.check(cond, what if cond else "%s\n%s" % (what, output[-1500:]))


def run(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, **kw)


def make_venv(python, path, system_site):
    """A fresh venv with pip (ensurepip, offline); its python, or None."""
    shutil.rmtree(path, ignore_errors=True)
    p = run([python, "-m", "venv"] + (["--system-site-packages"] if system_site else []) + [path])
    py = os.path.join(path, "bin", "python")
    if p.returncode != 0 or run([py, "-m", "pip", "--version"]).returncode != 0:
        t.skip("virtual environments of %s: python3 -m venv failed (Debian: apt-get install python3-venv)\n%s"
               % (python, p.stdout[-400:]))
        return None
    return py


def check_wheel(path, ver):
    name = os.path.basename(path)
    t.check(re.match(r"^libmor-%s-py3-none-[a-z0-9_]+\.whl$" % re.escape(ver), name) is not None,
            "the wheel is named for mor.h's version %s and tagged py3-none-<platform>: %s" % (ver, name))
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        so = "mor/libmor.so.%s" % (".".join(ver.split(".")[:2]) if ver.startswith("0.") else ver.split(".")[0])
        for want in ("mor/__init__.py", "mor/_capi.py", "mor/llama.py", "mor/chat.py", "mor/py.typed", so,
                     "mor/__init__.pyi", "mor/llama.pyi", "mor/chat.pyi"):
            t.check(want in names, "the wheel holds %s" % want)
        dist = "libmor-%s.dist-info/" % ver
        meta = z.read(dist + "METADATA").decode()
        t.check("\nVersion: %s\n" % ver in meta and "\nName: libmor\n" in meta, "METADATA names libmor %s" % ver)
        t.check("Root-Is-Purelib: false" in z.read(dist + "WHEEL").decode(), "WHEEL: not pure (native code inside)")
        bad = []
        for row in csv.reader(io.StringIO(z.read(dist + "RECORD").decode())):
            if not row or row[0] == dist + "RECORD":
                continue
            data = z.read(row[0])
            digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if row[1] != digest or int(row[2]) != len(data):
                bad.append(row[0])
        t.check(not bad and len(names) > 6, "RECORD's hashes and sizes are the files' (%s)" % (bad or "all"))


def check_sdist(python, dist, ver):
    p = run([python, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import mor_build; "
             "print(mor_build.build_sdist(sys.argv[2]))", os.path.join(PKG, "_build"), dist])
    if not check(p.returncode == 0, "the backend writes an sdist", p.stdout):
        return
    path = os.path.join(dist, p.stdout.split()[-1])
    with tempfile.TemporaryDirectory() as d:
        with tarfile.open(path) as tar:
            tar.extractall(d)
        top = os.path.join(d, "libmor-" + ver)
        csrc = os.path.join(top, "csrc")
        lib_c = sorted(n for n in os.listdir(os.path.join(t.ROOT, "src")) if n.endswith(".c"))
        t.check(os.path.isfile(os.path.join(top, "pyproject.toml")) and
                sorted(n for n in os.listdir(os.path.join(csrc, "src")) if n.endswith(".c")) == lib_c,
                "the sdist carries pyproject.toml and every src/*.c of the library (%d)" % len(lib_c))
        out = os.path.join(d, "out")
        m = run(["make", "-n", "-C", csrc, "OUT=" + out, os.path.join(out, "lib", "libmor.so." + ver)])
        check(m.returncode == 0 and "-shared" in m.stdout,
              "make -n finds everything the library needs in the sdist's csrc/", m.stdout)


def relay(label, py, env):
    """Run the binding suites under py; each of their checks becomes one here."""
    for suite in SUITES:
        p = run([py, os.path.join(t.ROOT, "tests", suite)], env=env, cwd=t.ROOT, timeout=600)
        counted = False
        for line in p.stdout.splitlines():
            if line.startswith("ok - "):
                t.check(True, "[%s] %s: %s" % (label, suite, line[5:]))
            elif line.startswith("FAIL - "):
                t.check(False, "[%s] %s: %s" % (label, suite, line[7:]))
            elif line.startswith("skip - "):
                t.skip("[%s] %s: %s" % (label, suite, line[7:]))
            elif line.startswith("# checks: "):
                counted = True
            elif line.strip():
                print("    " + line)
        if p.returncode != 0 and not counted:
            t.check(False, "[%s] %s exited %d without its checks line:\n%s" % (label, suite, p.returncode,
                                                                                p.stdout[-1500:]))


def numpy_python():
    """An interpreter that has NumPy: this one, or Debian's."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and run([py, "-c", "import numpy"]).returncode == 0:
            return py
    return None


def main():
    if os.environ.get("SANITIZE") == "1":
        t.skip("the installed package (a plain build of libmor) is tested by make test, not under the sanitizers")
        return
    if not t.need_tool("make", "make", "building the wheel"):
        return
    ver = version()
    os.makedirs(WORK, exist_ok=True)
    dist = os.path.join(WORK, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    os.makedirs(dist)
    plain = make_venv(sys.executable, os.path.join(WORK, "venv"), False)
    if plain is None:
        return
    env = dict(os.environ, MOR_BUILD_OUT=os.path.join(WORK, "obj"), PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("MOR_LIB_PATH", None)
    env.pop("PYTHONPATH", None)
    p = run([plain, "-m", "pip", "wheel", "--no-deps", "-w", dist, PKG], env=env, timeout=900)
    wheels = [f for f in os.listdir(dist) if f.endswith(".whl")]
    if not check(p.returncode == 0 and len(wheels) == 1, "pip wheel ./bindings/python, offline", p.stdout):
        return
    wheel = os.path.join(dist, wheels[0])
    check_wheel(wheel, ver)
    check_sdist(plain, dist, ver)
    runs = [("installed, NumPy hidden", plain, dict(env, MOR_TEST_INSTALLED="1", MOR_TEST_NO_NUMPY="1"))]
    np_py = numpy_python()
    if np_py is None:
        t.skip("the installed package with NumPy: no python3 with NumPy here (Debian: apt-get install python3-numpy)")
    else:
        with_np = make_venv(np_py, os.path.join(WORK, "venv-numpy"), True)
        if with_np is not None:
            runs.append(("installed, NumPy", with_np, dict(env, MOR_TEST_INSTALLED="1")))
    for label, py, run_env in runs:
        p = run([py, "-m", "pip", "install", "--no-deps", wheel], env=run_env, timeout=300)
        if not check(p.returncode == 0, "[%s] pip install --no-index the wheel" % label, p.stdout):
            continue
        q = run([py, "-c", "import mor, os; print(os.path.dirname(mor.__file__)); print(mor._capi.lib._name)"],
                env=run_env, cwd="/")
        lines = q.stdout.split()
        t.check(q.returncode == 0 and len(lines) == 2 and lines[1].startswith(lines[0] + os.sep) and
                lines[0].startswith(os.path.dirname(os.path.dirname(py))) and not lines[0].startswith(PKG),
                "[%s] import mor loads the library inside the installed package, no MOR_LIB_PATH: %s"
                % (label, " ".join(lines)))
        relay(label, py, run_env)


main()
t.finish()
