"""test_python_bindings.py - the Python package bindings/python/mor (ctypes).

A stdlib unittest suite, each test one check of tests/testlib.py:
  - every MOR_API function of include/mor.h has a prototype in mor._capi whose
    ctypes types match the header's, and the package uses it; every mirrored
    struct has the header's fields in order and the library's size;
  - the import refuses a library of another version, a struct of another size,
    and a MOR_LIB_PATH that does not exist, with a clear message;
  - every converted fp32 fixture ($OUT/build/fixtures/*.st.gguf) reproduces the
    official code's greedy tokens (reference.json generation.greedy_cached),
    from a file and from bytes;
  - statuses become exceptions with the library's message; close(), `with`
    and the finalizers free every handle, children before their model;
  - tokenize / detokenize / streamed text on a vocab-only model written here;
  - Server (mor_server_*): 5 requests on 3 slots give the tokens of each
    request decoded alone (DEPTHWISE, and tokens and depths equal to
    SERIAL), streamed in order through on_token; abort leaves the server as
    it was; an exception in a callback reaches the caller.
The library is $OUT/lib/libmor.so.VERSION, given through MOR_LIB_PATH.
Under SANITIZE=1 the interpreter is re-run with the ASan runtime preloaded.
"""
import ctypes
import re
import gc
import json
import math
import os
import struct
import subprocess
import sys
import unittest

import testlib as t

sys.path.insert(0, os.path.join(t.ROOT, "docs", "tools"))
import mor_api  # noqa: E402

HEADER_TEXT = mor_api.read(os.path.join(t.ROOT, "include", "mor.h"))
MAJOR, MINOR = (int(x) for x in re.search(
    r"MOR_VERSION_MAJOR (\d+)\n#define MOR_VERSION_MINOR (\d+)", HEADER_TEXT).groups())
PATCH = int(re.search(r"MOR_VERSION_PATCH (\d+)", HEADER_TEXT).group(1))
LIB = os.path.join(t.OUT, "lib", "libmor.so.%d.%d.%d" % (MAJOR, MINOR, PATCH))
FIXTURES = os.path.join(t.OUT, "build", "fixtures")
FIXDATA = os.path.join(t.ROOT, "tests", "data", "fixtures")


t.reexec_under_asan()
t.use_bindings()
import mor  # noqa: E402
from mor import _capi  # noqa: E402


# ---------------------------------------------------------------------------
# header type -> the ctypes type a prototype must use
# ---------------------------------------------------------------------------
SCALARS = {"int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
           "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "float": ctypes.c_float,
           "double": ctypes.c_double, "mor_status": ctypes.c_int32, "mor_token": ctypes.c_int32,
           "mor_pos": ctypes.c_int32, "mor_seq_id": ctypes.c_int32, "void": None,
           "mor_request_id": ctypes.c_int32,
           "mor_log_fn": _capi.LOG_FN}
HANDLES = {"mor_model", "mor_context", "mor_kv_cache", "mor_router", "mor_batch", "mor_sampler", "mor_server", "mor_grammar",
           "mor_chat_template"}
STRUCT_TYPES = {name: s for name, (s, _) in _capi.STRUCTS.items()}


def expected_ctypes(ctype, is_return):
    """The ctypes types acceptable for a C type of mor.h."""
    c = ctype.replace("const ", "").strip()
    if c in SCALARS:
        return [SCALARS[c]]
    if c == "char *":
        # a string in, or a buffer the library writes into
        return [ctypes.c_char_p] if is_return else [ctypes.c_char_p, ctypes.c_void_p]
    if c == "void *":
        return [ctypes.c_void_p]
    if c == "char **":   # an array of strings in (mor_grammar_set_triggers' words)
        return [ctypes.POINTER(ctypes.c_char_p)]
    m = re.match(r"^(\w+) (\*+)$", c)
    if m:
        base, stars = m.group(1), len(m.group(2))
        if base in HANDLES:
            return [ctypes.c_void_p] if stars == 1 else [ctypes.POINTER(ctypes.c_void_p)]
        if stars == 1 and base in STRUCT_TYPES:
            return [ctypes.POINTER(STRUCT_TYPES[base])]
        if stars == 1 and base in SCALARS and SCALARS[base] is not None:
            return [ctypes.POINTER(SCALARS[base])]
    return ["no mapping for %r" % ctype]


def field_ctype(decl):
    """`uint32_t size` -> (name, ctypes type) for a struct field of mor.h."""
    fp = re.match(r"^(\w+) \(\*(\w+)\)\((.*)\)$", decl)
    if fp:
        return fp.group(2), ("fnptr", SCALARS[fp.group(1)])
    arr = re.match(r"^(\w+) (\w+)\[(\d+)\]$", decl)
    if arr:
        return arr.group(2), SCALARS[arr.group(1)] * int(arr.group(3))
    m = re.match(r"^(.*?) ?\b(\w+)$", decl)
    ty = m.group(1).replace("const ", "").strip()
    if ty == "char *":   # a string in (mor_chat_params)
        return m.group(2), ctypes.c_char_p
    base = ty[:-1].strip() if ty.endswith("*") else None
    if base in HANDLES:   # a handle (mor_request_params.grammar)
        return m.group(2), ctypes.c_void_p
    if base in STRUCT_TYPES:   # a struct read by the library (mor_request_params.sampling)
        return m.group(2), ctypes.POINTER(STRUCT_TYPES[base])
    if base in SCALARS and SCALARS[base] is not None:   # an array in (mor_request_params.stop)
        return m.group(2), ctypes.POINTER(SCALARS[base])
    return m.group(2), (ctypes.c_void_p if ty == "void *" else SCALARS[ty])


class Bound(unittest.TestCase):
    def test_every_api_function_has_a_matching_prototype(self):
        funcs = mor_api.functions(HEADER_TEXT)
        self.assertGreater(len(funcs), 60)
        bad = []
        for name, ret, params, _ in funcs:
            if name not in _capi.PROTOTYPES:
                bad.append("%s: no prototype" % name)
                continue
            res, args = _capi.PROTOTYPES[name]
            if res not in expected_ctypes(ret, True):
                bad.append("%s: returns %s, header %s" % (name, res, ret))
            ptypes = [mor_api.param_type(p) for p in params if p != "void"]
            if len(args) != len(ptypes):
                bad.append("%s: %d arguments, header %d" % (name, len(args), len(ptypes)))
                continue
            for i, (a, p) in enumerate(zip(args, ptypes)):
                if a not in expected_ctypes(p, False):
                    bad.append("%s: argument %d is %s, header %s" % (name, i, a, p))
        self.assertEqual(bad, [])

    def test_no_prototype_outside_the_header(self):
        names = {f[0] for f in mor_api.functions(HEADER_TEXT)}
        self.assertEqual(sorted(set(_capi.PROTOTYPES) - names), [])

    def test_every_function_is_used_by_the_package(self):
        with open(os.path.join(t.ROOT, "bindings", "python", "mor", "__init__.py")) as f:
            src = f.read()
        unused = [n for n in _capi.PROTOTYPES
                  if not re.search(r"\b%s\b" % n, src) and n not in _capi.RAW_ONLY]
        self.assertEqual(unused, [], "functions bound but not reachable from the package")

    def test_struct_mirrors_match_the_header(self):
        structs = mor_api.structs(HEADER_TEXT)
        self.assertEqual(sorted(structs), sorted(_capi.STRUCTS))
        for name, fields in structs.items():
            mirror = _capi.STRUCTS[name][0]._fields_
            want = [field_ctype(f) for f in fields]
            got = []
            for fname, fty in mirror:
                if hasattr(fty, "_restype_"):       # a CFUNCTYPE
                    fty = ("fnptr", fty._restype_)
                got.append((fname, fty))
            self.assertEqual(len(got), len(want), name)
            for (gn, gt), (wn, wt) in zip(got, want):
                self.assertEqual(gn, wn, name)
                if isinstance(wt, tuple) or isinstance(gt, tuple):
                    self.assertEqual(gt, wt, "%s.%s" % (name, gn))
                else:
                    self.assertEqual((ctypes.sizeof(gt), getattr(gt, "_type_", None)),
                                     (ctypes.sizeof(wt), getattr(wt, "_type_", None)), "%s.%s" % (name, gn))
            lib_size = getattr(_capi.lib, _capi.STRUCTS[name][1])()
            self.assertEqual(ctypes.sizeof(_capi.STRUCTS[name][0]), lib_size, name)

    def test_abi_version_is_the_headers(self):
        self.assertEqual(mor.ABI_VERSION, (MAJOR, MINOR))
        self.assertEqual(mor.version(), "%d.%d.%d" % (MAJOR, MINOR, PATCH))

    def test_constants_match_the_header(self):
        consts = mor_api.constants(HEADER_TEXT)
        bad = []
        for cname, val in consts.items():
            py = cname[4:]   # MOR_ROUTE_TOPK -> ROUTE_TOPK
            if cname.startswith("MOR_E_"):
                cls = mor.ERRORS.get(val)
                if cls is None or _capi.lib.mor_status_str(val).decode() != cname:
                    bad.append(cname)
            elif getattr(mor, py, None) != val:
                bad.append("%s (mor.%s = %r, header %d)" % (cname, py, getattr(mor, py, None), val))
        self.assertEqual(bad, [])


class FakeLib(object):
    """Stands in for a libmor of another build, for the import-time guard."""
    _name = "fake-libmor.so"

    def __init__(self, version, sizes):
        self.v, self.sizes = version, sizes

    def mor_version_number(self):
        return self.v

    def mor_version_string(self):
        return b"%d.%d.%d" % (self.v // 10000, self.v // 100 % 100, self.v % 100)

    def __getattr__(self, name):
        if name.startswith("mor_sizeof_"):
            return lambda: self.sizes[name]
        raise AttributeError(name)


class Guard(unittest.TestCase):
    def sizes(self):
        return {fn: ctypes.sizeof(s) for s, fn in _capi.STRUCTS.values()}

    def test_the_real_library_passes(self):
        _capi._verify(_capi.lib)

    def test_another_minor_version_is_refused(self):
        with self.assertRaisesRegex(mor.LibraryError, "ABI mismatch"):
            _capi._verify(FakeLib(MAJOR * 10000 + (MINOR + 1) * 100, self.sizes()))

    def test_a_patch_release_is_accepted(self):
        _capi._verify(FakeLib(MAJOR * 10000 + MINOR * 100 + PATCH + 1, self.sizes()))

    def test_struct_skew_is_refused(self):
        for fn in self.sizes():
            s = self.sizes()
            s[fn] += 8
            with self.assertRaisesRegex(mor.LibraryError, "struct skew: mor_\\w+ is %d bytes" % s[fn]):
                _capi._verify(FakeLib(MAJOR * 10000 + MINOR * 100, s))

    def test_missing_library_path_is_a_clear_import_error(self):
        env = dict(os.environ, MOR_LIB_PATH="/nonexistent/libmor.so", LD_PRELOAD="")
        p = subprocess.run([sys.executable, "-c", "import mor"], cwd=os.path.join(t.ROOT, "bindings", "python"),
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("LibraryError: MOR_LIB_PATH=/nonexistent/libmor.so does not exist", p.stderr)

    def test_library_found_through_a_directory(self):
        env = dict(os.environ, MOR_LIB_PATH=os.path.dirname(LIB))
        p = subprocess.run([sys.executable, "-c", "import mor; print(mor.version(), mor._capi.lib._name)"],
                           cwd=os.path.join(t.ROOT, "bindings", "python"), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith("%d.%d.%d " % (MAJOR, MINOR, PATCH)), p.stdout)

    def test_library_found_next_to_the_package(self):
        import shutil
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(os.path.join(t.ROOT, "bindings", "python", "mor"), os.path.join(d, "mor"))
            shutil.copy(LIB, os.path.join(d, "mor", _capi.SONAME))
            env = dict(os.environ)
            env.pop("MOR_LIB_PATH", None)
            env.pop("LD_LIBRARY_PATH", None)
            p = subprocess.run([sys.executable, "-c", "import mor; print(mor._capi.lib._name)"], cwd=d, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), os.path.join(d, "mor", _capi.SONAME))


def fixtures():
    out = []
    for v in sorted(os.listdir(FIXDATA)):
        ref = os.path.join(FIXDATA, v, "reference.json")
        if os.path.isfile(ref):
            with open(ref) as f:
                r = json.load(f)
            out.append((v, r))
    return out


class Fixtures(unittest.TestCase):
    def test_greedy_tokens_of_every_fp32_fixture(self):
        done = 0
        for v, ref in fixtures():
            if ref["spec"]["precision"] != "fp32":
                continue   # bf16 has an exact argmax tie; test_fixtures.py handles it
            path = os.path.join(FIXTURES, v + ".st.gguf")
            with self.subTest(fixture=v):
                self.assertTrue(os.path.isfile(path), "%s (make fixtures)" % path)
                want = ref["generation"]["greedy_cached"]["tokens"]
                routing = mor.ROUTE_TOPK if ref["forward"]["routing"]["type"] == "expert" else None
                with mor.Model(path) as m:
                    got = [tok.id for tok in m.generate(ref["input_ids"], max_tokens=len(want), routing=routing)]
                    self.assertEqual(got, want)
                with open(path, "rb") as f:
                    m2 = mor.Model.from_bytes(f.read())
                ctx = m2.context(n_threads=2)
                if routing is not None:
                    ctx.router.set_mode(routing)
                toks = list(ctx.generate(ref["input_ids"], max_tokens=len(want)))
                self.assertEqual([x.id for x in toks], want, "from bytes")
                n_r = m2.n_recursion
                self.assertTrue(all(0 <= x.depth <= n_r for x in toks), [x.depth for x in toks])
                self.assertTrue(all(x.text is None for x in toks), "no tokenizer: no text")
                self.assertEqual(ctx.kv.seq_pos_max(0), len(ref["input_ids"]) + len(want) - 1)
                m2.close()
                self.assertTrue(ctx.closed, "closing the model closed its context")
                done += 1
        self.assertGreaterEqual(done, 5)

    def test_depths_and_logits_of_a_forward(self):
        v, ref = [f for f in fixtures() if f[0] == "expert_mc3_fix_perturbed"][0]
        ids = ref["input_ids"]
        with mor.Model(os.path.join(FIXTURES, v + ".st.gguf")) as m, m.context() as ctx:
            ctx.router.set_mode(mor.ROUTE_TOPK)
            with mor.Batch(len(ids)) as b:
                for i, tok in enumerate(ids):
                    b.add(tok, i, 0, True)
                self.assertEqual(len(b), len(ids))
                ctx.decode(b)
            self.assertEqual(ctx.router.depths(), ref["forward"]["routing"]["depth"])
            lg = ctx.logits(len(ids) - 1)
            self.assertEqual(len(lg), m.n_vocab)
            with open(os.path.join(FIXDATA, v, "logits.npy"), "rb") as f:
                raw = f.read()
            hl = struct.unpack("<H", raw[8:10])[0]
            flat = struct.unpack("<%df" % (len(raw[10 + hl:]) // 4), raw[10 + hl:])
            last = flat[(len(ids) - 1) * m.n_vocab:len(ids) * m.n_vocab]
            self.assertLess(max(abs(a - b) for a, b in zip(lg, last)), 1e-4)
            st = ctx.router.stats()
            self.assertEqual(st.n_tokens, len(ids))
            self.assertEqual(sum(st.n_at_depth), len(ids))
            alloc, used = ctx.kv.bytes()
            self.assertGreater(used, 0)
            self.assertGreaterEqual(alloc, used)
            self.assertEqual(ctx.kv.mode, mor.KV_RECURSION_WISE)
            self.assertEqual(len(ctx.router.scores(0)), m.n_recursion)

    def test_fast_bf16_changes_nothing_but_bf16_weights(self):
        # the fixtures hold F32 weights: MOR_CTX_FAST_BF16 must leave their logits bitwise as they are
        v, ref = [f for f in fixtures() if f[0] == "expert_mc3_fix_perturbed"][0]
        ids = ref["input_ids"]
        with mor.Model(os.path.join(FIXTURES, v + ".st.gguf")) as m:
            out = []
            for fast in (False, True):
                with m.context(fast_bf16=fast) as ctx, mor.Batch(len(ids)) as b:
                    for i, tok in enumerate(ids):
                        b.add(tok, i, 0, i == len(ids) - 1)
                    ctx.decode(b)
                    out.append(list(ctx.logits(len(ids) - 1)))
            self.assertEqual(out[0], out[1])

    def test_embeddings_pool_the_final_hidden_states(self):
        v, ref = [f for f in fixtures() if f[0] == "expert_mc3_fix_perturbed"][0]
        ids = ref["input_ids"]
        with mor.Model(os.path.join(FIXTURES, v + ".st.gguf")) as m, m.context(capture_hidden=True) as ctx:
            e = ctx.embed(ids, normalize=False)
            self.assertEqual(ctx.kv.seq_pos_max(0), -1, "embed empties its sequence again")
            last = m.n_boundaries - 1
            mean = [sum(ctx.hidden(last, i)[j] for i in range(len(ids))) / len(ids) for j in range(m.n_embd)]
            self.assertLess(max(abs(a - b) for a, b in zip(e, mean)), 1e-6)
            self.assertEqual(list(ctx.embeddings(0, "last", False)), list(ctx.hidden(last, len(ids) - 1)))
            n = ctx.embed(ids)
            self.assertAlmostEqual(sum(x * x for x in n), 1.0, places=5)
            with self.assertRaises(ValueError):
                ctx.embeddings(0, "max")
            with self.assertRaises(ValueError):
                ctx.embed([])
            with mor.Batch(1) as b:
                b.add(ids[0], 0, 0, False)
                ctx.decode(b)
            with self.assertRaises(ValueError):
                ctx.embed(ids)   # sequence 0 holds a token: refused, kept
            self.assertEqual(ctx.kv.seq_pos_max(0), 0)
        with mor.Model(os.path.join(FIXTURES, v + ".st.gguf")) as m, m.context() as ctx:
            with self.assertRaises(mor.InvalidArgError) as cm:
                ctx.embed(ids)
            self.assertIn("MOR_CTX_CAPTURE_HIDDEN", str(cm.exception))
            self.assertEqual(ctx.kv.seq_pos_max(0), -1)


class Errors(unittest.TestCase):
    def model(self):
        return mor.Model(os.path.join(FIXTURES, "token_mc3_perturbed.st.gguf"))

    def test_missing_file(self):
        with self.assertRaises(mor.IOFailedError) as cm:
            mor.Model("/nonexistent/model.gguf")
        e = cm.exception
        self.assertEqual((e.status, e.name), (-3, "MOR_E_IO"))
        self.assertIn("/nonexistent/model.gguf", e.message)
        self.assertIsInstance(e, OSError)

    def test_corrupt_bytes(self):
        with self.assertRaises(mor.FormatError) as cm:
            mor.Model.from_bytes(b"GGUF" + b"\0" * 60)
        self.assertTrue(cm.exception.message)

    def test_status_of_a_wrong_routing_mode(self):
        with self.model() as m, m.context() as ctx:
            with self.assertRaises(mor.UnsupportedError) as cm:
                ctx.router.set_mode(mor.ROUTE_TOPK)
            self.assertEqual(cm.exception.status, -5)
            self.assertTrue(cm.exception.message)
            with self.assertRaises(mor.UnsupportedError):
                m.tokenize("no tokenizer")
            with self.assertRaises(mor.OutOfRangeError):
                with mor.Batch(1) as b:
                    b.add(m.n_vocab + 5, 0)
                    ctx.decode(b)
            with self.assertRaises(mor.BufferTooSmallError):
                with mor.Batch(1) as b:
                    b.add(1, 0)
                    b.add(2, 1)
            with self.assertRaises(KeyError):
                m.meta("no.such.key")

    def test_unknown_status_maps_to_the_base_class(self):
        e = mor._error(-999)
        self.assertIs(type(e), mor.MorError)
        self.assertEqual((e.status, e.name), (-999, "MOR_E_UNKNOWN"))


class Lifetimes(unittest.TestCase):
    def path(self):
        return os.path.join(FIXTURES, "expert_mc3_fix_perturbed.st.gguf")

    def test_close_and_with(self):
        m = mor.Model(self.path())
        ctx = m.context()
        r, kv = ctx.router, ctx.kv
        with mor.Sampler.greedy() as s:
            pass
        self.assertTrue(s.closed)
        ctx.close()
        ctx.close()   # idempotent
        self.assertRaises(mor.ClosedError, lambda: r.mode)
        self.assertRaises(mor.ClosedError, kv.clear)
        self.assertRaises(mor.ClosedError, lambda: ctx.logits(0))
        m.close()
        self.assertRaises(mor.ClosedError, lambda: m.n_vocab)
        with self.assertRaises(mor.ClosedError):
            with m:
                pass

    def test_finalizers_free_what_is_dropped(self):
        fins = []
        for _ in range(20):
            m = mor.Model(self.path())
            ctx = m.context(n_ctx=64)
            b = mor.Batch(4)
            fins += [m._fin, ctx._fin, b._fin]
            del m, ctx, b
        gc.collect()
        self.assertEqual([f for f in fins if f.alive], [])

    def test_model_freed_after_its_context_in_a_cycle(self):
        # a cycle holding both: the collector may finalize the model first,
        # which must free the context before the model
        m = mor.Model(self.path())
        ctx = m.context(n_ctx=64)
        ctx_h = ctx._h
        m.cycle = ctx
        ctx.cycle = m
        del m, ctx
        gc.collect()
        self.assertIsNone(ctx_h.ptr)

    def test_context_keeps_its_model_alive(self):
        ctx = mor.Model(self.path()).context(n_ctx=64)
        gc.collect()
        self.assertFalse(ctx.model.closed)
        self.assertEqual(len(list(ctx.generate([1, 2, 3], max_tokens=2))), 2)
        ctx.close()


# ---------------------------------------------------------------------------
# a vocab-only model with a tokenizer: 256 byte tokens, two merges, an EOS
# ---------------------------------------------------------------------------
def gguf_vocab_only():
    alpha = t.gpt2_byte_chars()
    tokens = [alpha[b] for b in range(256)] + ["he", "ll", "<|end|>"]
    types = [1] * 258 + [3]
    merges = ["h e", "l l"]

    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    kv = [("general.architecture", 8, s("mor")), ("mor.format_version", 4, struct.pack("<I", 1)),
          ("mor.vocab_size", 4, struct.pack("<I", len(tokens))),
          ("tokenizer.ggml.model", 8, s("gpt2")), ("tokenizer.ggml.pre", 8, s("gpt2")),
          ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(tokens)) + b"".join(s(x) for x in tokens)),
          ("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(types)) + struct.pack("<%di" % len(types), *types)),
          ("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, len(merges)) + b"".join(s(x) for x in merges)),
          ("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 258))]
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv))
    for k, ty, v in kv:
        out += s(k) + struct.pack("<I", ty) + v
    return out + b"\0" * (-len(out) % 32)


class Serving(unittest.TestCase):
    PATH = os.path.join(FIXTURES, "expert_mc3_fix_perturbed.st.gguf")

    def prompts(self, n_vocab):
        return [[(i * 31 + k * 17 + 3) % n_vocab for k in range(1 + i % 4)] for i in range(5)]

    def serve(self, m, mode, **kw):
        streamed = []
        with mor.Server(m, mode=mode, n_slots=3, n_ctx=256, n_batch=32,
                        on_token=lambda rid, tok, d: streamed.append((rid, tok, d)), **kw) as srv:
            ids = [srv.submit(p, max_tokens=6, temperature=0) for p in self.prompts(m.n_vocab)]
            self.assertEqual(srv.state(ids[-1]), mor.REQ_QUEUED)   # 5 requests, 3 slots
            self.assertEqual(srv.slot(ids[-1]), -1)
            srv.step()
            running = [srv.slot(rid) for rid in ids if srv.state(rid) == mor.REQ_RUNNING]
            self.assertEqual(sorted(running), list(range(len(running))) if mode != mor.SERVE_SERIAL else [0])
            srv.run()
            self.assertEqual([srv.slot(rid) for rid in ids], [-1] * len(ids))   # over: no slot
            out = [srv.tokens(rid) for rid in ids]
            self.assertEqual([srv.state(rid) for rid in ids], [mor.REQ_DONE] * len(ids))
            for rid, (toks, deps) in zip(ids, out):
                self.assertEqual([(t, d) for (i, t, d) in streamed if i == rid], list(zip(toks, deps)))
            srv.release(ids[0])
            with self.assertRaises(mor.OutOfRangeError):
                srv.state(ids[0])
        return out

    def test_server_gives_the_tokens_of_each_request_alone(self):
        with mor.Model(self.PATH) as m:
            ref = []
            for p in self.prompts(m.n_vocab):
                with m.context(n_ctx=64) as ctx:
                    ctx.router.set_mode(mor.ROUTE_THRESHOLD)
                    ref.append([tok.id for tok in ctx.generate(p, max_tokens=6, temperature=0.0, stop_at_eos=False)])
            depthwise = self.serve(m, mor.SERVE_DEPTHWISE)
            serial = self.serve(m, mor.SERVE_SERIAL)
            self.assertEqual([toks for toks, _ in depthwise], ref)
            self.assertEqual(depthwise, serial)   # tokens and depths
            self.assertTrue(any(d != depthwise[0][1][0] for _, deps in depthwise for d in deps))

    def test_context_shift_goes_past_the_context(self):
        self.assertEqual(mor.truncate_prompt(range(100), 64, 4), list(range(4)) + list(range(64, 100)))
        with self.assertRaises(mor.InvalidArgError):
            mor.truncate_prompt(range(100), 64, 63)
        with mor.Model(self.PATH) as m:
            p = self.prompts(m.n_vocab)[3] * 5   # 20 tokens
            with mor.Server(m, n_ctx=64, context_shift=True, n_ctx_seq=16) as srv:
                rid = srv.submit(p, max_tokens=30, temperature=0, n_keep=2)
                srv.run()
                toks, _ = srv.tokens(rid)
                n_prompt, shifts, dropped = srv.shift(rid)
            self.assertEqual(len(toks), 30)   # past the 16 positions of its sequence
            self.assertEqual(n_prompt, len(mor.truncate_prompt(p, 16, 2)))
            self.assertGreaterEqual(shifts, 2)
            self.assertEqual(dropped, 7 * shifts)   # (16 - 2) / 2 each time
            with mor.Server(m, n_ctx=64, n_ctx_seq=16) as srv:   # without the flag: refused
                with self.assertRaises(mor.KVFullError):
                    srv.submit(p, max_tokens=30)

    def test_prompt_reuse_gives_the_same_tokens(self):
        with mor.Model(self.PATH) as m:
            p = self.prompts(m.n_vocab)[3] + [7, 9, 11]
            got = {}
            for reuse in (True, False):
                with mor.Server(m, n_slots=2, n_ctx=256, prompt_reuse=reuse) as srv:
                    first = srv.submit(p, max_tokens=5, temperature=0)
                    srv.run()
                    again = srv.submit(p, max_tokens=5, temperature=0)
                    srv.run()
                    got[reuse] = (srv.tokens(first), srv.tokens(again), srv.cached(first), srv.cached(again))
            self.assertEqual(got[True][2:], (0, len(p) - 1))   # all but the last prompt token reused
            self.assertEqual(got[False][2:], (0, 0))
            self.assertEqual(got[True][:2], got[False][:2])
            self.assertEqual(got[True][0], got[True][1])

    def test_abort_and_callback_errors_reach_the_caller(self):
        with mor.Model(self.PATH) as m:
            stop = [True]
            with mor.Server(m, n_slots=2, abort=lambda: stop[0]) as srv:
                rid = srv.submit([1, 2, 3], max_tokens=4, temperature=0)
                with self.assertRaises(mor.AbortedError):
                    srv.step()
                self.assertEqual(srv.state(rid), mor.REQ_QUEUED)   # a failed step changes nothing
                self.assertEqual(srv.tokens(rid), ([], []))
                stop[0] = False
                srv.run()
                self.assertEqual(len(srv.tokens(rid)[0]), 4)

            def boom(rid, tok, depth):
                raise RuntimeError("from on_token")
            with mor.Server(m, on_token=boom) as srv:
                srv.submit([5, 6], max_tokens=2)
                with self.assertRaises(RuntimeError):
                    srv.run()
                srv.router.set_max_depth(1)
                self.assertEqual(srv.router.mode, mor.ROUTE_THRESHOLD)


class Logprobs(unittest.TestCase):
    def test_the_log_softmax_and_the_top_tokens(self):
        logits = [1.0, 2.0, 3.0, float("-inf"), 2.0, -40.0, 0.5]
        z = math.log(sum(math.exp(v) for v in logits if v != float("-inf")))
        for tok, v in enumerate(logits):
            r = mor.logprobs(logits, token=tok)
            if v == float("-inf"):
                self.assertEqual(r.logprob, float("-inf"))
            else:
                self.assertAlmostEqual(r.logprob, v - z, delta=1e-6 * max(1.0, abs(v - z)))
            self.assertEqual(r.top, [])
        r = mor.logprobs(logits, top=7)
        self.assertIsNone(r.logprob)
        self.assertEqual([t for t, _ in r.top], [2, 1, 4, 0, 6, 5, 3])   # ties (1, 4): the lower id first
        for t, v in r.top:
            self.assertEqual(v, mor.logprobs(logits, token=t).logprob)
        self.assertEqual(mor.logprobs(logits, 2, top=1), (mor.logprobs(logits, 2).logprob, [(2, r.top[0][1])]))
        big = [((i * 7919) % 1000) / 37.0 for i in range(5000)]   # many ties, heap order
        r = mor.logprobs(big, top=20)
        want = sorted(range(len(big)), key=lambda i: (-big[i], i))[:20]
        self.assertEqual([t for t, _ in r.top], want)
        self.assertAlmostEqual(sum(math.exp(v) for _, v in mor.logprobs(big, top=5000).top), 1.0, delta=1e-5)

    def test_bad_input(self):
        with self.assertRaises(mor.InvalidArgError):
            mor.logprobs([0.0, float("nan")], top=1)
        with self.assertRaises(mor.InvalidArgError):
            mor.logprobs([float("-inf")] * 3, token=0)
        with self.assertRaises(mor.OutOfRangeError):
            mor.logprobs([0.0, 1.0], token=2)
        with self.assertRaises(mor.InvalidArgError):
            mor.logprobs([0.0, 1.0], top=3)
        with self.assertRaises(mor.InvalidArgError):
            mor.logprobs([0.0, 1.0], top=-1)
        with self.assertRaises(ValueError):
            mor.logprobs([])

    def bf16_model(self, d):
        """The fixture with its matrices in BF16 (mor-quantize), in directory d."""
        bf = os.path.join(d, "bf16.gguf")
        p = subprocess.run([os.path.join(t.OUT, "bin", "mor-quantize"), Serving.PATH, bf, "bf16"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        self.assertEqual(p.returncode, 0, "mor-quantize bf16: " + p.stderr[:200])
        return bf

    def alone(self, m, prompt, toks, fast):
        """The logits of prompt, then toks but the last, one mor_decode each, on a context alone."""
        with m.context(n_ctx=64, fast_bf16=fast) as ctx:
            ctx.router.set_mode(mor.ROUTE_THRESHOLD)
            ref = [ctx.logits(ctx.decode_tokens(prompt))]
            for k, tok in enumerate(toks[:-1]):
                ref.append(ctx.logits(ctx.decode_tokens([tok], pos=len(prompt) + k)))
        return ref

    def test_fast_bf16_server_is_a_fast_bf16_context(self):
        # BF16 weights: Server(fast_bf16=True) gives, bitwise, the logits of context(fast_bf16=True); where that
        # flag runs other kernels (test_fast_bf16_differs_where_bf16_kernels_run) a server ignoring it fails here
        import tempfile
        with tempfile.TemporaryDirectory() as d, mor.Model(self.bf16_model(d)) as m:
            prompt, seen = [3, 17, 40, 2], []
            with mor.Server(m, n_slots=2, fast_bf16=True,
                            on_token_logits=lambda rid, tok, dp, lg: seen.append((rid, tok, lg))) as srv:
                rid = srv.submit(prompt, max_tokens=5, temperature=0)
                srv.submit([9, 8], max_tokens=3, temperature=0)
                srv.run()
                toks = srv.tokens(rid)[0]
            self.assertEqual(len(toks), 5)
            self.assertEqual([lg for r, _, lg in seen if r == rid], self.alone(m, prompt, toks, True))   # bitwise

    def test_fast_bf16_differs_where_bf16_kernels_run(self):
        # MOR_CTX_FAST_BF16 picks the avx512-bf16 set on AVX-512 CPUs with AVX512_BF16 and without AMX
        # (kernels_fast_bf16); there BF16 weights give other logits than the default set's
        try:
            with open("/proc/cpuinfo") as f:
                flags = set(next((ln for ln in f if ln.startswith("flags")), "").split())
        except OSError:
            flags = set()
        if not ({"avx512f", "avx512_bf16"} <= flags) or "amx_tile" in flags:
            self.skipTest("needs the avx512-bf16 kernel set: a CPU with AVX-512 and AVX512_BF16, without AMX "
                          "(no avx512_bf16, or amx_tile, in /proc/cpuinfo here)")
        import tempfile
        with tempfile.TemporaryDirectory() as d, mor.Model(self.bf16_model(d)) as m:
            prompt = [3, 17, 40, 2]
            self.assertNotEqual(self.alone(m, prompt, [5], True), self.alone(m, prompt, [5], False))

    def test_server_logits_are_those_of_a_decode_alone(self):
        with mor.Model(Serving.PATH) as m:
            prompt = [3, 17, 40, 2]
            seen = []
            with mor.Server(m, n_slots=2, on_token_logits=lambda rid, tok, d, lg: seen.append((rid, tok, lg))) as srv:
                rid = srv.submit(prompt, max_tokens=5, temperature=0)
                srv.submit([9, 8], max_tokens=3, temperature=0)
                srv.run()
                toks = srv.tokens(rid)[0]
            self.assertEqual(len(seen), 8)
            mine = [(tok, lg) for r, tok, lg in seen if r == rid]
            self.assertEqual([tok for tok, _ in mine], toks)
            with m.context(n_ctx=64) as ctx:
                ctx.router.set_mode(mor.ROUTE_THRESHOLD)
                ref = [ctx.logits(ctx.decode_tokens(prompt))]
                for k, tok in enumerate(toks[:-1]):
                    ref.append(ctx.logits(ctx.decode_tokens([tok], pos=len(prompt) + k)))
            self.assertEqual([lg for _, lg in mine], ref)   # bitwise
            for tok, lg in mine:
                self.assertEqual(mor.logprobs(lg, top=1).top[0][0], tok)   # greedy: the most likely


class Grammars(unittest.TestCase):
    JSONISH = ('root ::= "{" pair ("," pair){0,2} "}"\n'
               'pair ::= "\\"" [a-z]{1,8} "\\":" ("true" | "false" | [0-9]{1,4})\n')
    RE = r'\{"[a-z]{1,8}":(true|false|[0-9]{1,4})(,"[a-z]{1,8}":(true|false|[0-9]{1,4})){0,2}\}'

    def test_generation_follows_the_grammar(self):
        import re
        with mor.Model(os.path.join(t.ROOT, "models", "brown-mor.gguf")) as m:
            for seed in range(4):
                g = mor.Grammar(m, self.JSONISH)
                toks = list(m.generate("The answer is", max_tokens=120, grammar=g, seed=seed,
                                       temperature=0.0 if seed == 0 else 1.0, top_k=0, top_p=1.0, min_p=0.0))
                text = b"".join(m.token_to_piece(t.id) for t in toks if t.id != m.token_eos).decode()
                self.assertTrue(g.must_end or toks[-1].id == m.token_eos, text)
                self.assertTrue(re.fullmatch(self.RE, text), text)
            # GBNF text works too, and an unconstrained run is unchanged by the grammar machinery
            a = [t.id for t in m.generate("The answer is", max_tokens=8)]
            b = [t.id for t in m.generate("The answer is", max_tokens=8, grammar=None)]
            self.assertEqual(a, b)
            # through a server: the same tokens as generated alone
            with mor.Server(m, n_slots=2) as srv:
                r0 = srv.submit("The answer is", max_tokens=120, grammar=self.JSONISH, seed=1, temperature=1.0,
                                stop=[m.token_eos])
                r1 = srv.submit("The answer is", max_tokens=8, seed=2, temperature=1.0)
                srv.run()
                got0, got1 = srv.tokens(r0)[0], srv.tokens(r1)[0]
            want0 = [t.id for t in m.generate("The answer is", max_tokens=120, grammar=self.JSONISH, seed=1,
                                              temperature=1.0)]
            want1 = [t.id for t in m.generate("The answer is", max_tokens=8, seed=2, temperature=1.0)]
            self.assertEqual((got0, got1), (want0, want1))
            schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
            for seed in range(3):
                out = [t.id for t in m.generate("Data:", max_tokens=60, json_schema=schema, seed=seed, temperature=1.0)]
                text = b"".join(m.token_to_piece(t) for t in out if t != m.token_eos).decode()
                self.assertIsInstance(json.loads(text)["ok"], bool, text)
            with mor.Server(m, n_slots=2) as srv:
                rid = srv.submit("Data:", max_tokens=60, json_schema=schema, seed=1, temperature=1.0, stop=[m.token_eos])
                srv.run()
                self.assertEqual(srv.tokens(rid)[0], [t.id for t in m.generate("Data:", max_tokens=60, json_schema=schema,
                                                                                 seed=1, temperature=1.0)])
            c = [t.id for t in m.generate("The answer is", max_tokens=50, grammar='root ::= "yes" | "no"')]
            self.assertIn(b"".join(m.token_to_piece(t) for t in c if t != m.token_eos), (b"yes", b"no"))

    def test_mask_and_errors(self):
        with mor.Model.from_bytes(gguf_vocab_only(), vocab_only=True) as m:
            g = mor.Grammar(m, 'root ::= "he" [l]+ "o"')
            masked = g.apply([0.0] * m.n_vocab)
            ok = [i for i, v in enumerate(masked) if v == 0.0]
            self.assertEqual(ok, [ord("h"), 256])           # "h" and "he"
            g.accept(256)
            g.accept(257)                                   # "ll"
            self.assertFalse(g.can_end)
            with self.assertRaises(mor.InvalidArgError):
                g.accept(ord("x"))
            g.accept(ord("o"))
            self.assertTrue(g.can_end and g.must_end)
            self.assertEqual([i for i, v in enumerate(g.apply([0.0] * m.n_vocab)) if v == 0.0], [m.token_eos])
            g.reset()
            self.assertEqual(g.state, 0)
            with self.assertRaises(mor.InvalidArgError) as e:
                mor.Grammar(m, 'root ::= "a" root2')
            self.assertIn("root2", str(e.exception))
            with self.assertRaises(mor.InvalidArgError):
                mor.Grammar(m, 'root ::= root "a" | "b"')
            done = mor.Grammar(m, 'root ::= "o"', end_tokens=[])
            done.accept(ord("o"))
            with self.assertRaises(mor.InvalidArgError) as e:
                done.apply([0.0] * m.n_vocab)
            self.assertIn("complete", str(e.exception))
            # lazy: free until "he", then the grammar from its "h"
            lazy = mor.Grammar(m, 'root ::= "he" [l]+ "o"', triggers=["he"])
            self.assertTrue(all(v == 0.0 for v in lazy.apply([0.0] * m.n_vocab)))
            lazy.accept(ord("x"))
            lazy.accept(ord("h"))
            self.assertEqual(lazy.state, mor.GRAMMAR_CAN_END)
            lazy.accept(ord("e"))                           # "he" begins the grammar
            self.assertEqual([i for i, v in enumerate(lazy.apply([0.0] * m.n_vocab)) if v == 0.0], [ord("l"), 257])
            self.assertFalse(lazy.can_end)
            lazy.reset()
            self.assertEqual(lazy.state, mor.GRAMMAR_CAN_END)
            with self.assertRaises(mor.InvalidArgError) as e:
                mor.Grammar(m, 'root ::= "o"', triggers=[""])
            self.assertIn("empty", str(e.exception))

class Speculation(unittest.TestCase):
    def test_same_tokens_as_plain_decoding(self):
        with mor.Model(os.path.join(t.ROOT, "models", "brown-mor.gguf")) as m:
            for seed, temp in ((0, 0.0), (1, 1.0), (2, 0.7)):
                kw = dict(max_tokens=50, seed=seed, temperature=temp, top_k=0, top_p=1.0, min_p=0.0)
                want = [(x.id, x.depth) for x in m.generate("The jury said that", **kw)]
                for n, d in ((1, 1), (4, 1), (6, 2)):
                    got = [(x.id, x.depth) for x in m.generate("The jury said that", speculate=n, speculate_depth=d,
                                                               **kw)]
                    self.assertEqual(got, want, (seed, n, d))
            # a grammar, sampled: the same output
            want = [x.id for x in m.generate("The answer is", max_tokens=80, grammar=Grammars.JSONISH, seed=3,
                                             temperature=1.0)]
            got = [x.id for x in m.generate("The answer is", max_tokens=80, grammar=Grammars.JSONISH, seed=3,
                                            temperature=1.0, speculate=4)]
            self.assertEqual(got, want)
            # one step by hand: drafts accepted, logits readable, the cache holds the kept inputs
            with m.context(n_ctx=64, n_batch=8) as c:
                c.router.set_mode(mor.ROUTE_THRESHOLD)
                row = c.decode_tokens(m.tokenize("The jury said that", add_bos=True))
                n_prompt = c.kv.seq_pos_max(0) + 1
                s = mor.Sampler.greedy()
                first = s.sample((c, row))
                toks, acc = c.speculate(first, n_prompt, s, n_draft=6)
                self.assertTrue(1 <= len(toks) <= 7 and 0 <= acc <= len(toks))
                self.assertEqual(c.kv.seq_pos_max(0), n_prompt + len(toks) - 1)
                self.assertEqual(len(c.logits(len(toks) - 1)), m.n_vocab)
                with self.assertRaises(mor.OutOfRangeError):
                    c.speculate(first, n_prompt + 10, s, draft_depth=0)

    def test_server_requests_speculate_with_the_same_tokens(self):
        with mor.Model(os.path.join(t.ROOT, "models", "brown-mor.gguf")) as m:
            prompts = ["The jury said that", "It was the first time", "He went to the"]
            for mode in (mor.SERVE_SEQUENCE, mor.SERVE_DEPTHWISE):
                got = {}
                for n in (0, 3):
                    with mor.Server(m, mode=mode, n_slots=3, n_ctx=512) as srv:
                        ids = [srv.submit(p, max_tokens=30, seed=i, temperature=0.8 if i else 0.0, speculate=n,
                                          speculate_depth=1) for i, p in enumerate(prompts)]
                        srv.run()
                        got[n] = ([srv.tokens(i) for i in ids], [srv.speculation(i) for i in ids])
                self.assertEqual(got[3][0], got[0][0], mode)
                self.assertEqual(got[0][1], [(0, 0)] * 3)
                drafted = sum(d for d, _ in got[3][1])
                accepted = sum(a for _, a in got[3][1])
                self.assertTrue(0 < accepted <= drafted, got[3][1])
            with mor.Server(m) as srv:
                with self.assertRaises(mor.OutOfRangeError):
                    srv.submit("The", speculate=2, speculate_depth=9)
                # one call (mor_server_submit_request): a refused setting queues nothing, and the
                # grammar copy it carried is freed by the binding
                with self.assertRaises(mor.OutOfRangeError):
                    srv.submit("The", grammar='root ::= "a"', speculate=2, speculate_depth=9)
                with self.assertRaises(mor.UnsupportedError):
                    srv.submit("The", grammar='root ::= "a"', exit_threshold=0.5)
                self.assertEqual(srv.submit("The", max_tokens=2, grammar='root ::= " a"'), 0)   # the first id
                srv.run()


class JsonSchema(unittest.TestCase):
    SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["name"]}

    def test_a_dict_and_its_json_text_give_the_same_grammar(self):
        g = mor.json_schema_to_grammar(self.SCHEMA)
        self.assertIsInstance(g, str)
        self.assertEqual(g, mor.json_schema_to_grammar(json.dumps(self.SCHEMA)))
        self.assertTrue(g.startswith("root ::= "), g)
        self.assertIn('"\\"name\\""', g)
        self.assertIn("integer ::= ", g)
        # every rule named is defined, once
        names = [line.split(" ::= ")[0] for line in g.splitlines()]
        self.assertEqual(len(names), len(set(names)))
        used = set()
        for line in g.splitlines():
            body = re.sub(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[0-9,]*\}', " ", line.split(" ::= ", 1)[1])
            used |= set(re.findall(r"[a-zA-Z0-9-]+", body))
        self.assertTrue(used <= set(names), used - set(names))

    def test_a_long_grammar_grows_the_buffer(self):
        big = {"type": "object", "properties": {"p%d" % i: {"type": "string"} for i in range(300)}}
        g = mor.json_schema_to_grammar(big)
        self.assertGreater(len(g), 4096)
        self.assertIn('"\\"p299\\""', g)

    def test_any_value_and_unicode(self):
        self.assertIn("value ::= ", mor.json_schema_to_grammar({}))
        self.assertIn("value ::= ", mor.json_schema_to_grammar(True))
        self.assertIn("\u00e9t\u00e9", mor.json_schema_to_grammar({"const": "\u00e9t\u00e9"}))

    def test_errors_name_the_part(self):
        with self.assertRaises(mor.InvalidArgError) as e:
            mor.json_schema_to_grammar('{"type": "object",}')
        self.assertIn("invalid JSON", str(e.exception))
        with self.assertRaises(mor.InvalidArgError) as e:
            mor.json_schema_to_grammar({"properties": {"a": {"type": "array", "minItems": 3, "maxItems": 1}}})
        self.assertIn("#/properties/a", str(e.exception))
        with self.assertRaises(mor.InvalidArgError) as e:
            mor.json_schema_to_grammar({"$ref": "#/$defs/missing"})
        self.assertIn("does not resolve", str(e.exception))
        with self.assertRaises(TypeError):
            mor.json_schema_to_grammar(3)


class SamplingStages(unittest.TestCase):
    """The llama.cpp sampling set through Sampler and Server.submit."""
    LOGITS = [((i * 7919) % 1000) / 150.0 for i in range(500)]

    def draws(self, n=40, **kw):
        s = mor.Sampler(seed=3, **kw)
        return [s.sample(self.LOGITS) for _ in range(n)]

    def test_the_new_fields_reach_the_library(self):
        s = mor.Sampler(presence_penalty=0.5, frequency_penalty=0.25, min_keep=3, typical_p=0.9, top_n_sigma=2.0,
                        dynatemp_range=0.2, dynatemp_exponent=1.5, xtc_probability=0.3, xtc_threshold=0.05,
                        mirostat=0, mirostat_tau=4.0, mirostat_eta=0.2, dry_multiplier=0.8, dry_base=1.5,
                        dry_allowed_length=3, dry_penalty_last_n=32, samplers=["penalties", "dry", "top-k", "temp"])
        p = s.params
        self.assertEqual((p.presence_penalty, p.frequency_penalty, p.min_keep, p.typical_p, p.dry_allowed_length,
                          p.dry_penalty_last_n), (0.5, 0.25, 3, 0.8999999761581421, 3, 32))
        self.assertEqual(list(p.samplers[:p.n_samplers]),
                         [mor.STAGE_PENALTIES, mor.STAGE_DRY, mor.STAGE_TOP_K, mor.STAGE_TEMPERATURE])
        self.assertEqual(self.draws(typical_p=0.5, xtc_probability=0.5), self.draws(typical_p=0.5, xtc_probability=0.5))
        self.assertNotEqual(self.draws(), self.draws(mirostat=2))
        default = self.draws()
        self.assertEqual(default, self.draws(samplers=["penalties", "dry", "top_n_sigma", "temperature", "top_k",
                                                       "typ_p", "top_p", "min_p", "xtc"]))

    def test_logit_bias_and_breakers(self):
        best = max(range(len(self.LOGITS)), key=lambda i: (self.LOGITS[i], -i))
        g = mor.Sampler(temperature=0, logit_bias={best: float("-inf")})
        self.assertNotEqual(g.sample(self.LOGITS), best)
        g.set_logit_bias([(7, 100.0)])
        self.assertEqual(g.sample(self.LOGITS), 7)
        g.set_logit_bias({})
        self.assertEqual(g.sample(self.LOGITS), best)
        with self.assertRaises(mor.OutOfRangeError):
            g.set_logit_bias({-1: 1.0})
        with self.assertRaises(mor.InvalidArgError):
            g.set_logit_bias({1: float("nan")})
        with self.assertRaises(mor.InvalidArgError):
            mor.Sampler(temperature=0, logit_bias={i: float("-inf") for i in range(3)}).sample([1.0, 2.0, 3.0])
        s = mor.Sampler(dry_multiplier=1.0, dry_breakers=[[1], [2, 3]])
        s.set_dry_breakers([])
        with self.assertRaises(mor.InvalidArgError):
            s.set_dry_breakers([[1], []])

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            mor.Sampler(no_such_thing=1)
        with self.assertRaises(ValueError):
            mor.Sampler(samplers=["top_k", "nonsense"])
        with self.assertRaises(mor.InvalidArgError) as cm:
            mor.Sampler(mirostat=3)
        self.assertIn("mirostat", str(cm.exception))
        with self.assertRaises(mor.InvalidArgError):
            mor.Sampler(samplers=[42])
        with self.assertRaises(ValueError):
            mor.Sampler(samplers=["top_k"] * 17)
        with self.assertRaises(ValueError):
            mor.Sampler(samplers=[])

    def test_server_requests_take_them_too(self):
        with mor.Model(Serving.PATH) as m:
            kw = dict(seed=5, temperature=0.9, presence_penalty=0.6, dry_multiplier=0.8, mirostat=0, top_k=0,
                      logit_bias={3: float("-inf"), 4: 2.0}, dry_breakers=[[9]])
            with m.context(n_ctx=64) as ctx:
                ctx.router.set_mode(mor.ROUTE_THRESHOLD)
                ref = [tok.id for tok in ctx.generate([5, 6, 7], max_tokens=12, stop_at_eos=False, **kw)]
            with mor.Server(m, n_ctx=64) as srv:
                rid = srv.submit([5, 6, 7], max_tokens=12, **kw)
                srv.run()
                got = srv.tokens(rid)[0]
            self.assertEqual(got, ref)
            self.assertNotIn(3, got)


class Tokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = mor.Model.from_bytes(gguf_vocab_only(), vocab_only=True)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def test_tokenize_merges_and_round_trips(self):
        ids = self.m.tokenize("hello")
        self.assertEqual(ids, [256, 257, ord("o")])     # "he" "ll" "o"
        self.assertEqual(self.m.detokenize(ids), b"hello")
        text = "caf\u00e9 \u2603 <|end|>"
        self.assertEqual(self.m.detokenize(self.m.tokenize(text)).decode(), text)
        self.assertEqual(self.m.tokenize("<|end|>", parse_special=True), [258])
        self.assertEqual(self.m.token_eos, 258)
        self.assertEqual(self.m.meta("tokenizer.ggml.model"), "gpt2")

    def test_long_text_grows_the_buffers(self):
        text = "x\u00e9" * 5000
        ids = self.m.tokenize(text)
        self.assertEqual(len(ids), 15000)
        self.assertEqual(self.m.detokenize(ids).decode(), text)

    def test_streamed_text_holds_back_a_split_character(self):
        ids = self.m.tokenize("\u00e9!")
        self.assertEqual(len(ids), 3)      # two byte tokens for the e-acute
        ts = mor._TextStream(self.m)
        self.assertEqual([ts.push(i) for i in ids], ["", "\u00e9", "!"])

    def test_out_of_range_id(self):
        with self.assertRaises(mor.OutOfRangeError):
            self.m.detokenize([100000])


class NumPy(unittest.TestCase):
    """numpy=True: ndarrays over the library's memory (or written by it),
    array('f') copies without NumPy; float32 arrays taken without a copy."""

    @classmethod
    def setUpClass(cls):
        cls.m = mor.Model(os.path.join(t.ROOT, "models", "brown-mor.gguf"))
        cls.ctx = cls.m.context(n_ctx=64, capture_hidden=True)
        cls.row = cls.ctx.decode_tokens(cls.m.tokenize("The jury said", add_bos=True))

    @classmethod
    def tearDownClass(cls):
        cls.ctx.close()
        cls.m.close()

    def need_numpy(self, what):
        try:
            import numpy
        except ImportError:
            self.skipTest("%s: NumPy is not installed for %s (Debian: apt-get install python3-numpy)" % (what, sys.executable))
        return numpy

    def test_without_numpy_arrays(self):
        saved = list(mor._numpy_mod)
        mor._numpy_mod[:] = [None]   # as without NumPy (MOR_TEST_NO_NUMPY=1 runs hide it for real)
        try:
            self.assertFalse(mor.have_numpy())
            a = self.ctx.logits(self.row, numpy=True)
            self.assertIsInstance(a, __import__("array").array)
            self.assertEqual(list(a), list(self.ctx.logits(self.row)))
            e = self.ctx.embeddings(0, numpy=True)
            self.assertEqual((e.typecode, len(e)), ("f", self.m.n_embd))
            self.assertEqual(list(e), list(self.ctx.embeddings(0)))
        finally:
            mor._numpy_mod[:] = saved

    def test_views(self):
        np = self.need_numpy("NumPy views of logits and hidden states")
        a = self.ctx.logits(self.row, numpy=True)
        self.assertIsInstance(a, np.ndarray)
        self.assertEqual((a.dtype, a.shape), (np.float32, (self.m.n_vocab,)))
        self.assertEqual(a.tolist(), list(self.ctx.logits(self.row)))
        # no copy: the array's data is the context's own logits row
        ptr = mor._lib.mor_get_logits(self.ctx._p, self.row)
        self.assertEqual(a.ctypes.data, ctypes.cast(ptr, ctypes.c_void_p).value)
        self.assertFalse(a.flags.writeable)
        h = self.ctx.hidden(0, self.row, numpy=True)
        self.assertEqual(h.tolist(), list(self.ctx.hidden(0, self.row)))
        e = self.ctx.embeddings(0, numpy=True)
        self.assertIsInstance(e, np.ndarray)
        self.assertEqual(e.tolist(), list(self.ctx.embeddings(0)))
        self.assertTrue(e.flags.writeable)

    def test_arrays_in(self):
        np = self.need_numpy("float32 arrays given to Sampler.sample and logprobs")
        logits = self.ctx.logits(self.row, numpy=True)
        ref = list(self.ctx.logits(self.row))
        with mor.Sampler(seed=3, temperature=1.0) as a, mor.Sampler(seed=3, temperature=1.0) as b:
            self.assertEqual([a.sample(logits) for _ in range(5)], [b.sample(ref) for _ in range(5)])
        self.assertEqual(mor.logprobs(logits, 5, 3), mor.logprobs(ref, 5, 3))
        self.assertEqual(mor.logprobs(logits.astype(np.float64), 5, 3), mor.logprobs(ref, 5, 3))   # converted
        with self.assertRaises(ValueError):
            mor.logprobs(np.zeros(0, dtype=np.float32))


class Checks(unittest.TestResult):
    """Each test is one check of testlib."""

    def addSuccess(self, test):
        t.check(True, test.id())

    def addFailure(self, test, err):
        t.check(False, "%s\n%s" % (test.id(), self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        self.addFailure(test, err)

    def addSkip(self, test, reason):   # counted, with why (unittest would drop it)
        t.skip("%s: %s" % (test.id(), reason))

    def addSubTest(self, test, sub, err):
        if err is not None:
            self.addFailure(sub, err)


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    t.check(suite.countTestCases() > 20, "found %d tests" % suite.countTestCases())
    suite.run(Checks())
    t.finish()
