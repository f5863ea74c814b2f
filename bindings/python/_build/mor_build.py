"""mor_build - the PEP 517 build backend of the `libmor` Python package.

`pip install ./bindings/python` (or `pip wheel`) calls this: it builds libmor's
shared library from the C sources with the project's own Makefile, puts it
inside the `mor` package, and packs a wheel. Standard library only, and
pyproject.toml requires nothing, so the build needs no network and no
setuptools: a C compiler, make and the sources are enough.

The C sources are the repository around bindings/python (a checkout), or the
`csrc/` folder an sdist carries. The objects go to `<csrc>/build/python`
(or $MOR_BUILD_OUT), so a rebuild compiles only what changed. Settings
(`pip install --config-settings make-args="OMP=1"` or $MOR_MAKE_ARGS): extra
make arguments; $CC and $CFLAGS reach make as usual.

The wheel is tagged py3-none-<platform>: the Python code runs on any Python 3,
the library is native code for this platform. Its version is mor.h's.
"""
import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

NAME = "libmor"
SUMMARY = "Mixture-of-Recursions language models on CPUs (libmor and its Python bindings)"
REQUIRES_PYTHON = ">=3.7"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # bindings/python (or the sdist root)
# what an sdist carries of the C tree: enough for `make lib`
C_TREE = ("Makefile", "include", "src", "pkgconfig", "README.md", "LICENSE")


def _csrc():
    """The C source tree: an sdist's csrc/, else the checkout around us."""
    for d in (os.path.join(HERE, "csrc"), os.path.dirname(os.path.dirname(HERE))):
        if os.path.isfile(os.path.join(d, "include", "mor.h")) and os.path.isfile(os.path.join(d, "Makefile")):
            return d
    raise RuntimeError("libmor build: no C sources (include/mor.h and Makefile) in %s/csrc or two folders up"
                       % HERE)


def version(csrc=None):
    """MAJOR.MINOR.PATCH of include/mor.h."""
    with open(os.path.join(csrc or _csrc(), "include", "mor.h")) as f:
        text = f.read()
    parts = [re.search(r"#define MOR_VERSION_%s (\d+)" % k, text) for k in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise RuntimeError("libmor build: include/mor.h has no MOR_VERSION_MAJOR/MINOR/PATCH")
    return ".".join(p.group(1) for p in parts)


def _make_args(config_settings):
    args = shlex.split(os.environ.get("MOR_MAKE_ARGS", ""))
    extra = (config_settings or {}).get("make-args")
    if extra:
        args += shlex.split(extra) if isinstance(extra, str) else list(extra)
    return args


def _build_library(config_settings):
    """Run make for the shared library; return (its path, version)."""
    csrc = _csrc()
    ver = version(csrc)
    out = os.path.abspath(os.environ.get("MOR_BUILD_OUT") or os.path.join(csrc, "build", "python"))
    target = os.path.join(out, "lib", "libmor.so." + ver)
    jobs = str(max(1, min(os.cpu_count() or 1, 8)))
    cmd = ["make", "-C", csrc, "-j" + jobs, "OUT=" + out] + _make_args(config_settings) + [target]
    sys.stderr.write("libmor build: %s\n" % " ".join(shlex.quote(c) for c in cmd))
    try:
        subprocess.check_call(cmd, stdout=sys.stderr)
    except OSError as e:
        raise RuntimeError("libmor build: cannot run make (%s); install a C compiler and make "
                           "(Debian: apt-get install build-essential)" % e)
    return target, ver


def _soname(ver):
    """The name mor._capi loads: libmor.so.0.MINOR while at 0.x, else
    libmor.so.MAJOR (the Makefile's SONAME)."""
    major, minor, _ = ver.split(".")
    return "libmor.so.0.%s" % minor if major == "0" else "libmor.so.%s" % major


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def _metadata(ver):
    readme = os.path.join(HERE, "README.md")
    body = open(readme).read() if os.path.exists(readme) else ""
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (NAME, ver, SUMMARY, REQUIRES_PYTHON, body))


def _package_files():
    """(archive name, path) of the pure-Python part: mor/*.py, the type stubs
    mor/*.pyi and py.typed."""
    pkg = os.path.join(HERE, "mor")
    names = sorted(n for n in os.listdir(pkg) if n.endswith((".py", ".pyi")) or n == "py.typed")
    return [("mor/" + n, os.path.join(pkg, n)) for n in names]


def _stripped(path):
    """The library's bytes without debug sections (1 MB instead of 9), when
    strip is there; else as built."""
    tmp = tempfile.mkdtemp()
    try:
        dst = os.path.join(tmp, "libmor.so")
        if shutil.which("strip") and subprocess.call(["strip", "--strip-debug", "-o", dst, path]) == 0:
            path = dst
        with open(path, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(tmp)


class _Wheel(object):
    """A wheel being written: every file is added with its RECORD line."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, name, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))   # reproducible
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (name, digest, len(data)))

    def close(self, record_name):
        self.record.append("%s,," % record_name)
        self.add_raw(record_name, "\n".join(self.record) + "\n")
        self.zip.close()

    def add_raw(self, name, text):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, text.encode(), zipfile.ZIP_DEFLATED)


# ---------------------------------------------------------------------------
# PEP 517 hooks
# ---------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib, ver = _build_library(config_settings)
    tag = "py3-none-" + _platform_tag()
    dist_info = "%s-%s.dist-info" % (NAME, ver)
    name = "%s-%s-%s.whl" % (NAME, ver, tag)
    w = _Wheel(os.path.join(wheel_directory, name))
    try:
        for arc, path in _package_files():
            with open(path, "rb") as f:
                w.add(arc, f.read())
        w.add("mor/" + _soname(ver), _stripped(lib), 0o755)   # found next to the package (mor._capi)
        w.add(dist_info + "/METADATA", _metadata(ver))
        w.add(dist_info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: mor_build\nRoot-Is-Purelib: false\n"
                                    "Tag: %s\n" % tag)
        w.add(dist_info + "/top_level.txt", "mor\n")
        w.close(dist_info + "/RECORD")
    except BaseException:
        w.zip.close()
        os.unlink(os.path.join(wheel_directory, name))
        raise
    return name


def _tar_add(tar, arc, data, mode=0o644, mtime=None):
    """A file into the sdist, with its own time: make, building from the
    sdist into an existing output folder, must see sources newer than
    objects made from older ones."""
    info = tarfile.TarInfo(arc)
    info.size, info.mode = len(data), mode
    info.mtime = int(time.time() if mtime is None else mtime)
    tar.addfile(info, io.BytesIO(data))


def _tar_tree(tar, root, arc_root, rel):
    """Add root/rel (a file or a folder, recursively) as arc_root/rel;
    build outputs and caches are left out."""
    path = os.path.join(root, rel)
    if os.path.isdir(path):
        for n in sorted(os.listdir(path)):
            if n not in ("__pycache__", "build") and not n.endswith((".o", ".d", ".pyc")):
                _tar_tree(tar, root, arc_root, os.path.join(rel, n))
    elif os.path.isfile(path):
        with open(path, "rb") as f:
            _tar_add(tar, arc_root + "/" + rel, f.read(), 0o755 if os.access(path, os.X_OK) else 0o644,
                     os.stat(path).st_mtime)


def build_sdist(sdist_directory, config_settings=None):
    """A source archive that builds anywhere: the Python package, this
    backend, and the C tree under csrc/."""
    csrc = _csrc()
    ver = version(csrc)
    base = "%s-%s" % (NAME, ver)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, base + "/PKG-INFO", _metadata(ver).encode())
        for rel in ("pyproject.toml", "README.md", "mor", "_build"):
            _tar_tree(tar, HERE, base, rel)
        for rel in C_TREE:
            _tar_tree(tar, csrc, base + "/csrc", rel)
    return name
