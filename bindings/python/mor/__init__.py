"""mor - Python bindings of libmor (Mixture-of-Recursions language models on CPUs).

Pure ctypes and the standard library. The library is found through
$MOR_LIB_PATH (the file or its directory), then next to this package, then the
system's loader path; importing refuses a library of another ABI version or
whose params structs differ in size from the mirror here.

    import mor
    with mor.Model("model.gguf") as model:
        for tok in model.generate("The capital of France is", max_tokens=16):
            print(tok.text, tok.depth)

Every failing call raises a MorError subclass carrying the status and the
library's message (mor_last_error()). Every handle has close() and works as a
context manager; a handle that is never closed is freed when it is collected.
A Model may be shared by threads; a Context (with its kv cache and router), a
Batch and a Sampler are used by one thread at a time.
"""
import array
import codecs
import collections
import ctypes
import json
import threading
import weakref

from . import _capi
from ._capi import ABI_VERSION, LibraryError

_lib = _capi.lib

__all__ = [
    "Model", "Context", "Batch", "Sampler", "Router", "KVCache", "Token", "RouterStats", "Server",
    "logprobs", "Logprobs", "json_schema_to_grammar", "truncate_prompt",
    "MorError", "LibraryError", "version", "build_info", "set_log", "max_recursions", "ABI_VERSION",
    "have_numpy", "Llama", "LlamaGrammar", "ChatTemplate",
]

# ---------------------------------------------------------------------------
# constants of mor.h
# ---------------------------------------------------------------------------
OK = 0
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
MODEL_NO_MMAP, MODEL_VOCAB_ONLY, MODEL_FOLD_LORA, MODEL_CHECK_TENSORS = 1, 2, 4, 8
ROUTER_TYPE_NONE, ROUTER_TYPE_EXPERT, ROUTER_TYPE_TOKEN = 0, 1, 2
CTX_CAPTURE_HIDDEN, CTX_FAST_BF16 = 1, 2
POOL_MEAN, POOL_LAST = 1, 2
EMBD_NORMALIZE = 1
GRAMMAR_CAN_END, GRAMMAR_MUST_END = 1, 2
KV_MODEL_DEFAULT, KV_RECURSION_WISE, KV_SHARED, KV_DENSE = 0, 1, 2, 3
KV_TYPE_F32, KV_TYPE_F16, KV_TYPE_Q8_0 = 0, 1, 8
MAX_RECURSIONS = _capi.MAX_RECURSIONS   # MOR_MAX_RECURSIONS
SAMPLERS_MAX = _capi.SAMPLERS_MAX       # MOR_SAMPLERS_MAX
ROUTE_DEFAULT, ROUTE_TOPK, ROUTE_THRESHOLD, ROUTE_FORCED, ROUTE_TOKEN = 0, 1, 2, 3, 4
TOKENIZE_ADD_BOS, TOKENIZE_PARSE_SPECIAL, TOKENIZE_PARSE_USER_DEFINED = 1, 2, 4
KV_UNIQUE_LAYERS, KV_ALL = -1, -2
SERVE_SERIAL, SERVE_SEQUENCE, SERVE_DEPTHWISE = 0, 1, 2
EXIT_NONE, EXIT_MARGIN, EXIT_SATURATION, EXIT_LEARNED = 0, 1, 2, 3
REQ_QUEUED, REQ_RUNNING, REQ_DONE, REQ_CANCELLED = 0, 1, 2, 3
SERVE_NO_PROMPT_REUSE, SERVE_FAST_BF16, SERVE_CONTEXT_SHIFT = 1, 2, 4


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------
class MorError(Exception):
    """A libmor call failed: .status (the negative mor_status), .name
    ("MOR_E_..."), .message (mor_last_error() of the failing call)."""

    def __init__(self, status, message):
        self.status = status
        self.name = _lib.mor_status_str(status).decode()
        self.message = message
        Exception.__init__(self, "%s: %s" % (self.name, message) if message else self.name)


class InvalidArgError(MorError, ValueError): pass          # noqa: E701
class NoMemError(MorError, MemoryError): pass              # noqa: E701
class IOFailedError(MorError, OSError): pass               # noqa: E701
class FormatError(MorError): pass                          # noqa: E701
class UnsupportedError(MorError): pass                     # noqa: E701
class KVFullError(MorError): pass                          # noqa: E701
class AbortedError(MorError): pass                         # noqa: E701
class ABIError(MorError): pass                             # noqa: E701
class OutOfRangeError(MorError, IndexError): pass          # noqa: E701
class PositionError(MorError, ValueError): pass            # noqa: E701
class BufferTooSmallError(MorError): pass                  # noqa: E701
class InternalError(MorError): pass                        # noqa: E701


ERRORS = {-1: InvalidArgError, -2: NoMemError, -3: IOFailedError, -4: FormatError, -5: UnsupportedError,
          -6: KVFullError, -7: AbortedError, -8: ABIError, -9: OutOfRangeError, -10: PositionError,
          -11: BufferTooSmallError, -12: InternalError}


def _error(status):
    msg = (_lib.mor_last_error() or b"").decode("utf-8", "replace")
    return ERRORS.get(status, MorError)(status, msg)   # an unknown status is a plain MorError


def _check(status):
    if status < 0:
        raise _error(status)
    return status


_numpy_mod = []


def _numpy():
    """NumPy, imported on first use, or None when it is not installed."""
    if not _numpy_mod:
        try:
            import numpy
        except ImportError:
            numpy = None
        _numpy_mod.append(numpy)
    return _numpy_mod[0]


def have_numpy():
    """True when NumPy can be imported: the numpy=True methods then return
    numpy.ndarray (float32) instead of array('f')."""
    return _numpy() is not None


def _floats(ptr, n, numpy, owner):
    """n floats at ptr: a read-only float32 ndarray over that memory (no
    copy; it keeps owner alive) when numpy and NumPy is installed, else a
    copy as array('f')."""
    np = _numpy() if numpy else None
    if np is None:
        return array.array("f", ctypes.string_at(ptr, 4 * n))
    buf = (ctypes.c_float * n).from_address(ctypes.cast(ptr, ctypes.c_void_p).value)
    buf._mor_owner = owner   # the context must outlive the view
    a = np.frombuffer(buf, dtype=np.float32)
    a.flags.writeable = False
    return a


class ClosedError(ValueError):
    """A handle was used after close()."""


def _check_count(what, v):
    """A non-negative int32: TypeError, OverflowError or ValueError."""
    _capi.check_value(ctypes.c_int32, v, what)
    if v < 0:
        raise ValueError("%s must be >= 0, got %d" % (what, v))


# The ranges of mor-run's sampling flags (mor-run --help): a value the CLI
# refuses is refused here too, with ValueError naming it (libmor itself would
# take temperature=-1 as greedy and top_p=2 as off, hiding a caller's mistake).
_SAMPLING_RANGES = (("temperature", 0.0, 1e6), ("top_k", 0, 2 ** 31 - 1), ("top_p", 0.0, 1.0),
                    ("min_p", 0.0, 1.0), ("repeat_penalty", 0.0, 1e6), ("repeat_last_n", 0, 1 << 20))


# The stages of a sampler's order (MOR_STAGE_*), by llama.cpp's names and aliases.
STAGE_PENALTIES, STAGE_DRY, STAGE_TOP_N_SIGMA, STAGE_TOP_K, STAGE_TYPICAL_P, STAGE_TOP_P, STAGE_MIN_P, \
    STAGE_XTC, STAGE_TEMPERATURE = range(1, 10)
STAGES = {"penalties": STAGE_PENALTIES, "dry": STAGE_DRY, "top_n_sigma": STAGE_TOP_N_SIGMA,
          "top_k": STAGE_TOP_K, "typ_p": STAGE_TYPICAL_P, "typical_p": STAGE_TYPICAL_P, "typ": STAGE_TYPICAL_P,
          "top_p": STAGE_TOP_P, "nucleus": STAGE_TOP_P, "min_p": STAGE_MIN_P, "xtc": STAGE_XTC,
          "temperature": STAGE_TEMPERATURE, "temp": STAGE_TEMPERATURE}
for _k in list(STAGES):
    STAGES.setdefault(_k.replace("_", "-"), STAGES[_k])
    STAGES.setdefault(_k.replace("_", ""), STAGES[_k])

# the fields after repeat_last_n (mor.h documents each); checked by the library
_SAMPLER_MORE = ("presence_penalty", "frequency_penalty", "min_keep", "typical_p", "top_n_sigma",
                 "dynatemp_range", "dynatemp_exponent", "xtc_probability", "xtc_threshold", "mirostat",
                 "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
                 "dry_penalty_last_n")


def _stage_ids(what, samplers):
    ids = []
    for x in samplers:
        if isinstance(x, str):
            if x.lower() not in STAGES:
                raise ValueError("%s: samplers: unknown stage %r (known: %s)" % (what, x, ", ".join(sorted(STAGES))))
            ids.append(STAGES[x.lower()])
        else:
            ids.append(x)
    if not ids:
        raise ValueError("%s: samplers: give at least one stage (an empty order would be the default one)" % what)
    if len(ids) > _capi.SAMPLERS_MAX:
        raise ValueError("%s: samplers: at most %d stages, got %d" % (what, _capi.SAMPLERS_MAX, len(ids)))
    return ids


def _sampler_params(what, seed, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, more=None):
    """SamplerParams with libmor's defaults and the given fields (None: the
    default): TypeError, OverflowError, or ValueError out of range. more:
    the newer fields by name (_SAMPLER_MORE) and samplers (names or ids)."""
    sp = _capi.SamplerParams()
    _lib.mor_sampler_params_init(ctypes.byref(sp), ctypes.sizeof(sp))
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p,
             "repeat_penalty": repeat_penalty, "repeat_last_n": repeat_last_n}
    _capi.set_fields(sp, (("seed", seed),) + tuple(given.items()), what)
    for name, lo, hi in _SAMPLING_RANGES:
        v = given[name]
        if v is not None and not lo <= v <= hi:   # NaN fails too
            raise ValueError("%s: %s must be in [%g, %g], got %r" % (what, name, lo, hi, v))
    more = dict(more or {})
    samplers = more.pop("samplers", None)
    unknown = sorted(set(more) - set(_SAMPLER_MORE))
    if unknown:
        raise TypeError("%s: unexpected sampling argument %s" % (what, ", ".join(unknown)))
    _capi.set_fields(sp, tuple(more.items()), what)
    if samplers is not None:
        ids = _stage_ids(what, samplers)
        for i, v in enumerate(ids):
            sp.samplers[i] = _capi.check_value(ctypes.c_int32, v, "%s: samplers[%d]" % (what, i))
        sp.n_samplers = len(ids)
    return sp


def _set_extras(smp, what, logit_bias, dry_breakers):
    """mor_sampler_set_logit_bias / _set_dry_breakers on a raw sampler."""
    if logit_bias is not None:
        pairs = list(logit_bias.items()) if isinstance(logit_bias, dict) else [tuple(x) for x in logit_bias]
        ids = _capi.int32_array([int(t) for t, _ in pairs], what + ": logit_bias ids")
        vals = (ctypes.c_float * max(1, len(pairs)))(*[float(b) for _, b in pairs])
        _check(_lib.mor_sampler_set_logit_bias(smp, ids, vals, len(pairs)))
    if dry_breakers is not None:
        seqs = [list(b) for b in dry_breakers]
        flat = _capi.int32_array([t for b in seqs for t in b], what + ": dry_breakers")
        lens = _capi.int32_array([len(b) for b in seqs], what + ": dry_breakers lengths")
        _check(_lib.mor_sampler_set_dry_breakers(smp, flat, lens, len(seqs)))


def _check_token(model, t):
    _capi.check_value(ctypes.c_int32, t, "token id")


# ---------------------------------------------------------------------------
# library-wide functions
# ---------------------------------------------------------------------------
def version():
    """The linked library's "MAJOR.MINOR.PATCH"."""
    return _lib.mor_version_string().decode()


def version_number():
    """The linked library's version as MAJOR * 10000 + MINOR * 100 + PATCH."""
    return _lib.mor_version_number()


def build_info():
    """One line describing the library's build: compiler, kernels compiled in, OpenMP."""
    return _lib.mor_build_info().decode()


def status_str(status):
    """The name of a mor_status ("MOR_E_..."), as MorError.name gives it."""
    return _lib.mor_status_str(status).decode()


def last_error():
    """The message of this thread's last libmor call that could fail ("" if it succeeded)."""
    return (_lib.mor_last_error() or b"").decode("utf-8", "replace")


def max_recursions():
    """The most recursions a model may have in this build (MOR_MAX_RECURSIONS)."""
    return _lib.mor_max_recursions()


_log_lock = threading.Lock()
_log_keep = [None]   # the ctypes callback must outlive its registration


def set_log(fn, max_level=LOG_INFO):
    """Send libmor's log messages of level <= max_level to fn(level, message);
    fn=None silences the library (the default). An exception raised by fn is
    swallowed: the log must never break a call into the library."""
    with _log_lock:
        if fn is None:
            _lib.mor_log_set(_capi.LOG_FN(), None, 0)
            _log_keep[0] = None
            return

        def trampoline(level, msg, _user):
            try:
                fn(level, msg.decode("utf-8", "replace"))
            except Exception:   # noqa: BLE001 - a log sink must not unwind into C
                pass
        cb = _capi.LOG_FN(trampoline)
        _lib.mor_log_set(cb, None, max_level)
        _log_keep[0] = cb


# ---------------------------------------------------------------------------
# ownership: one C pointer, freed once; a parent frees its live children first
# ---------------------------------------------------------------------------
class _Owned(object):
    __slots__ = ("ptr", "free", "children", "keep", "__weakref__")

    def __init__(self, ptr, free, parent=None, keep=None):
        self.ptr = ptr
        self.free = free
        self.children = weakref.WeakSet()
        self.keep = keep          # objects C borrows from (a model's buffer, callbacks)
        if parent is not None:
            parent.children.add(self)

    def release(self):
        for c in list(self.children):
            c.release()
        p, self.ptr = self.ptr, None
        if p:
            self.free(p)
        self.keep = None


class _Handle(object):
    """close(), with, and a finalizer for a handle that owns a C pointer."""
    _kind = "handle"

    def _own(self, ptr, free, parent=None, keep=None):
        self._h = _Owned(ptr, free, parent, keep)
        self._fin = weakref.finalize(self, self._h.release)

    @property
    def _p(self):
        h = getattr(self, "_h", None)
        if h is None or not h.ptr:
            raise ClosedError("this %s is closed" % self._kind)
        return h.ptr

    @property
    def closed(self):
        """True once close() has freed the C object."""
        h = getattr(self, "_h", None)
        return h is None or not h.ptr

    def close(self):
        """Free the C object now (and, for a model, its contexts). Idempotent."""
        h = getattr(self, "_h", None)
        if h is not None:
            h.release()

    def __enter__(self):
        self._p   # raises if closed
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------
class Model(_Handle):
    """An immutable model loaded from a GGUF file (path) or from bytes (data).
    Thread-safe. Closing it closes every Context made from it first.
    check_tensors=True checks every weight for NaN and infinity (FormatError;
    the norms and routers are always checked)."""
    _kind = "model"

    def __init__(self, path=None, data=None, no_mmap=False, vocab_only=False, progress=None, check_tensors=False):
        if (path is None) == (data is None):
            raise TypeError("Model() takes a path or data=, not both")
        mp = _capi.ModelParams()
        _lib.mor_model_params_init(ctypes.byref(mp), ctypes.sizeof(mp))
        mp.flags |= (MODEL_NO_MMAP if no_mmap else 0) | (MODEL_VOCAB_ONLY if vocab_only else 0) | \
            (MODEL_CHECK_TENSORS if check_tensors else 0)
        raised = []
        if progress is not None:
            def cb(frac, _user):
                try:
                    return 1 if progress(frac) is False else 0
                except BaseException as e:   # noqa: BLE001 - re-raised after the load
                    raised.append(e)
                    return 1
            mp.progress = _capi.PROGRESS_FN(cb)
        out = ctypes.c_void_p()
        keep = None
        if path is not None:
            st = _lib.mor_model_load_file(_fsencode(path), ctypes.byref(mp), ctypes.byref(out))
        else:
            # the library borrows the buffer until mor_model_free: keep a private copy alive
            keep = ctypes.create_string_buffer(bytes(data), len(data))
            st = _lib.mor_model_load_memory(keep, len(data), ctypes.byref(mp), ctypes.byref(out))
        if raised:
            raise raised[0]
        _check(st)
        self._own(out.value, _lib.mor_model_free, keep=keep)

    @classmethod
    def from_bytes(cls, data, **kw):
        """A Model of a GGUF file's bytes (a private copy lives as long as the
        model); keyword arguments as Model()'s."""
        return cls(data=data, **kw)

    def _get(f):             # noqa: N805 - a property factory
        return property(lambda self: f(self._p), doc=f.__name__ + "()")

    n_vocab = _get(_lib.mor_model_n_vocab)
    n_embd = _get(_lib.mor_model_n_embd)
    n_layer = _get(_lib.mor_model_n_layer)
    n_recursion = _get(_lib.mor_model_n_recursion)
    n_head = _get(_lib.mor_model_n_head)
    n_head_kv = _get(_lib.mor_model_n_head_kv)
    head_dim = _get(_lib.mor_model_head_dim)
    n_ctx_train = _get(_lib.mor_model_n_ctx_train)
    router_type = _get(_lib.mor_model_router_type)
    n_boundaries = _get(_lib.mor_model_n_boundaries)
    size_bytes = _get(_lib.mor_model_size_bytes)
    token_bos = _get(_lib.mor_model_token_bos)
    token_eos = _get(_lib.mor_model_token_eos)
    add_bos = _get(_lib.mor_model_add_bos)
    del _get

    def meta(self, key, default=KeyError):
        """A metadata value as text; KeyError (or default) if the key is absent."""
        n = ctypes.c_size_t()
        cap = 256
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _lib.mor_model_meta_str(self._p, key.encode(), buf, cap, ctypes.byref(n))
            if st == -9:   # MOR_E_OUT_OF_RANGE: no such key
                if default is KeyError:
                    raise KeyError(key)
                return default
            if st == -11 and n.value + 1 > cap:
                cap = n.value + 1
                continue
            _check(st)
            return buf.raw[:n.value].decode("utf-8", "replace")

    def tokenize(self, text, add_bos=False, parse_special=False, parse_user_defined=False):
        """Token ids of text (str, or bytes taken as they are). parse_special
        matches every added token, parse_user_defined only the user-defined
        ones (see mor_tokenize)."""
        if isinstance(text, str):
            b = text.encode("utf-8")
        elif isinstance(text, (bytes, bytearray, memoryview)):
            b = bytes(text)
        else:   # bytes(123) would be 123 zero bytes
            raise TypeError("tokenize: text must be str or bytes, not %s" % type(text).__name__)
        flags = (TOKENIZE_ADD_BOS if add_bos else 0) | (TOKENIZE_PARSE_SPECIAL if parse_special else 0) | \
            (TOKENIZE_PARSE_USER_DEFINED if parse_user_defined else 0)
        n = ctypes.c_int32()
        cap = len(b) + 2
        while True:
            out = (ctypes.c_int32 * cap)()
            st = _lib.mor_tokenize(self._p, b, len(b), flags, out, cap, ctypes.byref(n))
            if st == -11 and n.value > cap:
                cap = n.value
                continue
            _check(st)
            return list(out[:n.value])

    def detokenize(self, tokens):
        """The bytes of the tokens, concatenated (bytes: a token may end inside
        a UTF-8 character; decode the whole, or use generate())."""
        if isinstance(tokens, (str, bytes)):
            raise TypeError("detokenize: tokens must be a sequence of token ids, not %s" % type(tokens).__name__)
        toks = list(tokens)
        arr = _capi.int32_array(toks, "detokenize: tokens")
        n = ctypes.c_size_t()
        cap = 16 * len(toks) + 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _lib.mor_detokenize(self._p, arr, len(toks), buf, cap, ctypes.byref(n))
            if st == -11 and n.value > cap:
                cap = n.value
                continue
            _check(st)
            return buf.raw[:n.value]

    def token_to_piece(self, token):
        """The bytes of one token as they appear inside a text (for printing
        tokens one at a time; detokenize drops a SentencePiece prefix space)."""
        n = ctypes.c_size_t()
        cap = 64
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = _lib.mor_token_to_piece(self._p, token, buf, cap, ctypes.byref(n))
            if st == -11 and n.value > cap:
                cap = n.value
                continue
            _check(st)
            return buf.raw[:n.value]

    def context(self, **params):
        """A new Context on this model (see Context for the parameters)."""
        return Context(self, **params)

    def generate(self, prompt, max_tokens=64, n_ctx=None, n_threads=None, routing=None, forced_depth=0,
                 max_pos=None, context_shift=True, n_keep=0, **sampling):
        """Stream Token(id, text, depth) for a prompt (str or token ids) in a
        fresh context that is closed at the end. The context holds
        min(n_ctx, max_pos) tokens (defaults: min(training context, 4096) cells,
        positions below the training context; a larger max_pos allows
        positions past it); generation shifts it when full (see
        Context.generate). routing None: for an expert-choice model THRESHOLD
        (causal: each token's depth decided as it is generated; ROUTE_TOPK is
        the official expert-choice, under which every generated token runs all
        recursions), else the model's own."""
        ids = self.tokenize(prompt, add_bos=True, parse_special=True) if isinstance(prompt, str) else list(prompt)
        _check_count("max_tokens", max_tokens)
        if n_ctx is None and max_pos is not None and max_pos > 0:
            n_ctx = max_pos
        rows = max(len(ids), sampling.get("speculate", 0) + 1)   # a speculative step's rows fit one batch
        ctx = Context(self, n_ctx=n_ctx, max_pos=max_pos, n_batch=max(1, min(rows, 512)), n_threads=n_threads)
        try:
            if routing is None and self.router_type == ROUTER_TYPE_EXPERT:
                routing = ROUTE_THRESHOLD
            if routing is not None:
                ctx.router.set_mode(routing, forced_depth)
            for tok in ctx.generate(ids, max_tokens=max_tokens, context_shift=context_shift, n_keep=n_keep,
                                    **sampling):
                yield tok
        finally:
            ctx.close()


def _fsencode(path):
    import os
    return os.fsencode(path)


# ---------------------------------------------------------------------------
# Batch, Sampler
# ---------------------------------------------------------------------------
class Batch(_Handle):
    """Up to `capacity` tokens, each with its position and sequence."""
    _kind = "batch"

    def __init__(self, capacity):
        out = ctypes.c_void_p()
        _check(_lib.mor_batch_create(capacity, ctypes.byref(out)))
        self._own(out.value, _lib.mor_batch_free)
        self.capacity = capacity

    def add(self, token, pos, seq=0, logits=False):
        """Append token at position pos of sequence seq; logits=True asks the
        decode for this row's logits."""
        _check(_lib.mor_batch_add(self._p, token, pos, seq, 1 if logits else 0))

    def clear(self):
        """Empty the batch (its capacity stays)."""
        _lib.mor_batch_clear(self._p)

    def __len__(self):
        return _lib.mor_batch_size(self._p)


class Sampler(_Handle):
    """A seeded sampler (mor_sampler_params in mor.h): logit bias, penalties,
    then greedy (temperature <= 0) or the stages in order and a draw. None
    keeps libmor's default. Keyword arguments: llama.cpp's sampling set,
    presence_penalty, frequency_penalty, min_keep, typical_p, top_n_sigma,
    dynatemp_range, dynatemp_exponent, xtc_probability, xtc_threshold,
    mirostat (0, 1, 2), mirostat_tau, mirostat_eta, dry_multiplier, dry_base,
    dry_allowed_length, dry_penalty_last_n, samplers (the order: stage names
    as llama.cpp's "top_k", "typ_p", ... or STAGE_* ids); logit_bias (a dict
    token id -> bias, or (id, bias) pairs; -inf bans); dry_breakers (token id
    sequences, mor_sampler_set_dry_breakers)."""
    _kind = "sampler"

    def __init__(self, seed=None, temperature=None, top_k=None, top_p=None, min_p=None,
                 repeat_penalty=None, repeat_last_n=None, logit_bias=None, dry_breakers=None, **more):
        sp = _sampler_params("Sampler", seed, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n,
                             more)
        out = ctypes.c_void_p()
        _check(_lib.mor_sampler_create(ctypes.byref(sp), ctypes.byref(out)))
        self._own(out.value, _lib.mor_sampler_free)
        self.params = sp
        _set_extras(self._p, "Sampler", logit_bias, dry_breakers)

    def set_logit_bias(self, logit_bias):
        """Replace the logit bias: {id: bias} or [(id, bias), ...]; {} clears it."""
        _set_extras(self._p, "Sampler.set_logit_bias", logit_bias, None)

    def set_dry_breakers(self, breakers):
        """Replace DRY's sequence breakers: a list of token id sequences."""
        _set_extras(self._p, "Sampler.set_dry_breakers", None, breakers)

    @classmethod
    def greedy(cls):
        """A sampler that always picks the most likely token (temperature 0)."""
        return cls(temperature=0.0)

    def sample(self, logits, grammar=None):
        """A token from logits: a sequence of floats, or (context, row) to
        sample the row of the last decode without copying it. With a
        Grammar, only tokens it allows are drawn, and the grammar takes the
        token (Grammar.accept)."""
        if grammar is not None:
            masked, n = grammar._masked(logits)
            t = ctypes.c_int32()
            _check(_lib.mor_sampler_sample(self._p, masked, n, ctypes.byref(t)))
            grammar.accept(t.value)
            return t.value
        ptr, n, _keep = _logits_ptr(logits, "Sampler.sample")
        t = ctypes.c_int32()
        _check(_lib.mor_sampler_sample(self._p, ptr, n, ctypes.byref(t)))
        return t.value

    def accept(self, token):
        """Add a token to the repetition-penalty history without sampling it
        (e.g. the prompt's); sample() adds the tokens it draws."""
        _lib.mor_sampler_accept(self._p, token)

    def reset(self):
        """Forget the history and re-seed the draws with the sampler's seed."""
        _lib.mor_sampler_reset(self._p)


class Grammar(_Handle):
    """A GBNF grammar constraint on what a model generates (mor_grammar in
    mor.h): Sampler.sample(logits, grammar) draws only tokens that keep the
    output a prefix of a string of the grammar. end_tokens (ids) end a
    generation where the output is complete; None: the model's EOS.
    triggers (strings): a lazy grammar (mor_grammar_set_triggers), free
    until the output's text holds one of them, the grammar from there on."""
    _kind = "grammar"

    def __init__(self, model, gbnf, root=None, end_tokens=None, triggers=None):
        words = [w.encode("utf-8") if isinstance(w, str) else bytes(w) for w in (triggers or [])]
        self._args = (gbnf.encode("utf-8") if isinstance(gbnf, str) else bytes(gbnf), root,
                      None if end_tokens is None else list(end_tokens), words)
        self.model = model
        self._own(self._copy(), _lib.mor_grammar_free)

    def _copy(self):
        """A new mor_grammar of the same text and triggers (a raw handle the
        caller owns)."""
        data, root, ends, words = self._args
        arr = None if ends is None else (_capi.mor_token * max(1, len(ends)))(*ends)
        out = ctypes.c_void_p()
        _check(_lib.mor_grammar_create(self.model._p, data, len(data), root.encode() if root else None, arr,
                                       0 if ends is None else len(ends), ctypes.byref(out)))
        if words:
            st = _lib.mor_grammar_set_triggers(out.value, (ctypes.c_char_p * len(words))(*words), len(words))
            if st < 0:
                e = _error(st)
                _lib.mor_grammar_free(out.value)
                raise e
        return out.value

    def _masked(self, logits):
        """(a masked copy of logits as a ctypes array, n_vocab)."""
        ptr, n, _keep = _logits_ptr(logits, "Grammar")
        a = (ctypes.c_float * n)()
        ctypes.memmove(a, ptr, 4 * n)
        _check(_lib.mor_grammar_apply(self._p, a, n))
        return a, n

    def apply(self, logits):
        """The logits (a sequence, or (context, row)) with -inf for every token
        the grammar does not allow next, as a list."""
        a, n = self._masked(logits)
        return list(a)

    def accept(self, token):
        _check(_lib.mor_grammar_accept(self._p, token))

    @property
    def state(self):
        return _lib.mor_grammar_state(self._p)

    @property
    def can_end(self):
        return bool(self.state & GRAMMAR_CAN_END)

    @property
    def must_end(self):
        return bool(self.state & GRAMMAR_MUST_END)

    def reset(self):
        _lib.mor_grammar_reset(self._p)


def _float_buffer(obj):
    """(pointer, n, keep) over a 1-D C-contiguous float32 buffer (array('f'),
    a numpy.float32 array, ...) without copying it; None for anything else."""
    try:
        mv = memoryview(obj)
    except TypeError:
        return None
    if mv.format != "f" or mv.ndim != 1 or not mv.c_contiguous:
        return None
    n = mv.shape[0]
    if not mv.readonly:
        return (ctypes.c_float * n).from_buffer(mv), n, mv
    np = _numpy()
    if np is not None and isinstance(obj, np.ndarray):   # a read-only view: its address, kept alive
        return ctypes.cast(obj.ctypes.data, ctypes.POINTER(ctypes.c_float)), n, obj
    return None


def _logits_ptr(logits, what):
    """(pointer, n_vocab, keep) of logits: a sequence of floats or (context, row)."""
    if isinstance(logits, tuple):
        ctx, row = logits
        ptr = _lib.mor_get_logits(ctx._p, row)
        if not ptr:
            raise InvalidArgError(-1, "row %d of the last decode has no logits" % row)
        return ptr, ctx.model.n_vocab, None
    direct = _float_buffer(logits)
    if direct is not None:
        if direct[1] == 0:
            raise ValueError("%s: no logits" % what)
        return direct
    try:
        a = array.array("f", logits)
    except TypeError as e:
        raise TypeError("%s: logits must be a sequence of numbers (%s)" % (what, e))
    if len(a) == 0:
        raise ValueError("%s: no logits" % what)
    return (ctypes.c_float * len(a)).from_buffer(a), len(a), a


Logprobs = collections.namedtuple("Logprobs", "logprob top")
Logprobs.__doc__ = """mor_logprobs: logprob, the log-probability of the token asked for
(None when none was), and top, the k most likely (token, logprob) pairs,
most likely first (ties: lower id first)."""


def logprobs(logits, token=None, top=0):
    """The log-softmax of logits (a sequence of floats, or (context, row) for
    a row of the last decode), as the model's distribution: the
    log-probability of `token` and the `top` most likely tokens (mor_logprobs).
    Raises InvalidArgError for NaN or +inf logits, OutOfRangeError for a
    token outside the vocabulary."""
    ptr, n, _keep = _logits_ptr(logits, "logprobs")
    _capi.check_value(ctypes.c_int32, top, "top")
    if token is not None:
        _check_token(None, token)
    lp = ctypes.c_float()
    k = top
    room = max(1, min(k, n))   # k outside [0, n]: refused by the library before it writes
    ids = (ctypes.c_int32 * room)()
    vals = (ctypes.c_float * room)()
    _check(_lib.mor_logprobs(ptr, n, token if token is not None else 0,
                             ctypes.byref(lp) if token is not None else None, k, ids, vals))
    return Logprobs(lp.value if token is not None else None, [(ids[i], vals[i]) for i in range(k)])


class ChatTemplate(_Handle):
    """A Jinja chat template (mor_chat_template in mor.h), parsed once:
    render(messages) gives the prompt text as Hugging Face transformers'
    jinja2 renders it. ChatTemplate.from_model(model) is the model's own
    (tokenizer.chat_template), or None. A syntax error raises
    InvalidArgError naming the line. May be rendered from several threads."""
    _kind = "chat template"

    def __init__(self, source):
        src = source.encode("utf-8") if isinstance(source, str) else bytes(source)
        out = ctypes.c_void_p()
        _check(_lib.mor_chat_template_create(src, len(src), ctypes.byref(out)))
        self._own(out.value, _lib.mor_chat_template_free)
        self.source = src.decode("utf-8", "replace")

    @classmethod
    def from_model(cls, model):
        """The model's own template, or None when it has none."""
        src = model.meta("tokenizer.chat_template", None)
        return None if src is None else cls(src)

    def render(self, messages, add_generation_prompt=True, tools=None, bos_token=None, eos_token=None, now=0,
               **extra):
        """The prompt for messages (OpenAI-style dicts), with tools (a list
        of tool definitions, or None), add_generation_prompt, bos_token and
        eos_token (str or None: undefined), now (the seconds since the epoch
        strftime_now formats; 0: the current time) and extra template
        variables by name (enable_thinking=False, ...). A template that
        raises gives InvalidArgError with its message."""
        def js(v):
            return None if v is None else json.dumps(v, ensure_ascii=False).encode("utf-8")
        msgs, tl, ex = js(list(messages)), js(tools), js(extra) if extra else None
        p = _capi.ChatParams()
        _lib.mor_chat_params_init(ctypes.byref(p), ctypes.sizeof(p))
        p.messages_json, p.messages_len = msgs, len(msgs)
        if tl is not None:
            p.tools_json, p.tools_len = tl, len(tl)
        if ex is not None:
            p.extra_json, p.extra_len = ex, len(ex)
        p.add_generation_prompt = 1 if add_generation_prompt else 0
        p.bos_token = None if bos_token is None else bos_token.encode("utf-8")
        p.eos_token = None if eos_token is None else eos_token.encode("utf-8")
        p.now = _capi.check_value(ctypes.c_int64, now, "now")
        n = ctypes.c_size_t()
        st = _lib.mor_chat_template_render(self._p, ctypes.byref(p), None, 0, ctypes.byref(n))
        if st == -11:
            buf = ctypes.create_string_buffer(max(1, n.value))
            st = _lib.mor_chat_template_render(self._p, ctypes.byref(p), buf, n.value, ctypes.byref(n))
            _check(st)
            return buf.raw[:n.value].decode("utf-8", "replace")
        _check(st)
        return ""


def truncate_prompt(tokens, n_ctx, n_keep=0):
    """llama.cpp's truncation of a prompt longer than a context of n_ctx
    positions (mor_prompt_truncate): its first n_keep tokens, then whole
    blocks of (n_ctx - n_keep) / 2 dropped until the rest fits. Returns a new
    list (the same tokens when they fit)."""
    ids = list(tokens)
    if not ids:
        return ids
    arr = _capi.int32_array(ids, "truncate_prompt: tokens")
    n = _check(_lib.mor_prompt_truncate(arr, len(ids), n_ctx, n_keep))
    return list(arr[:n])


def json_schema_to_grammar(schema):
    """A GBNF grammar (str; its rule `root`) accepting the JSON texts valid
    under a JSON Schema: a str of JSON, or a dict/list/bool (json.dumps'd).
    Raises InvalidArgError, naming the schema's part, for invalid JSON or a
    schema the converter refuses (mor_json_schema_to_grammar)."""
    if isinstance(schema, (dict, list, bool)):
        schema = json.dumps(schema)
    if not isinstance(schema, str):
        raise TypeError("json_schema_to_grammar: schema must be a str or a dict, not %s" % type(schema).__name__)
    b = schema.encode("utf-8", "surrogatepass")
    n = ctypes.c_size_t()
    cap = 4096
    while True:
        buf = ctypes.create_string_buffer(cap)
        st = _lib.mor_json_schema_to_grammar(b, len(b), buf, cap, ctypes.byref(n))
        if st == -11 and n.value > cap:
            cap = n.value
            continue
        _check(st)
        return buf.raw[:n.value].decode("utf-8")


# ---------------------------------------------------------------------------
# Context, with its Router and KVCache
# ---------------------------------------------------------------------------
Token = collections.namedtuple("Token", "id text depth")
Token.__doc__ = """One generated token: id, its text (str; "" while a UTF-8
character is incomplete; None if the model has no tokenizer) and its depth
(the number of recursions it ran)."""

RouterStats = collections.namedtuple("RouterStats", "n_tokens mean_depth n_at_depth")
RouterStats.__doc__ = """Router.stats(): n_tokens routed since the last reset, their mean_depth
(recursions per token), and n_at_depth[d], the tokens that ran exactly d
recursions (d = 0 .. MAX_RECURSIONS)."""


class Context(_Handle):
    """Scratch, outputs, a KV cache and a router on a model; one thread at a
    time. Parameters left None keep libmor's defaults (mor_context_params):
    n_ctx (KV cells), n_batch (tokens per decode), n_seq_max, kv_mode
    (KV_*), n_threads, max_pos (positions must stay below it; 0: the
    model's training context, < 0: no limit), n_outputs (rows of one
    decode that may ask for logits; default n_batch), kv_type (KV_TYPE_F32,
    KV_TYPE_F16 or KV_TYPE_Q8_0; default F32); capture_hidden keeps
    hidden states for hidden(); fast_bf16 runs BF16 weights on bfloat16-rounded
    activations (MOR_CTX_FAST_BF16); abort() returning true stops a decode."""
    _kind = "context"

    def __init__(self, model, n_ctx=None, n_batch=None, n_seq_max=None, kv_mode=None, n_threads=None,
                 max_pos=None, capture_hidden=False, abort=None, n_outputs=None, fast_bf16=False, kv_type=None):
        cp = _capi.ContextParams()
        _lib.mor_context_params_init(ctypes.byref(cp), ctypes.sizeof(cp))
        _capi.set_fields(cp, (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_seq_max", n_seq_max),
                              ("kv_mode", kv_mode), ("n_threads", n_threads), ("max_pos", max_pos),
                              ("n_outputs", n_outputs), ("kv_type", kv_type)), "Context")
        if capture_hidden:
            cp.flags |= CTX_CAPTURE_HIDDEN
        if fast_bf16:
            cp.flags |= CTX_FAST_BF16
        cb = None
        if abort is not None:
            # an exception in the callback stops the decode (MOR_E_ABORTED)
            def trampoline(_user):
                try:
                    return 1 if abort() else 0
                except Exception:   # noqa: BLE001
                    return 1
            cb = cp.abort_callback = _capi.ABORT_FN(trampoline)
        out = ctypes.c_void_p()
        _check(_lib.mor_context_create(model._p, ctypes.byref(cp), ctypes.byref(out)))
        self._own(out.value, _lib.mor_context_free, parent=model._h, keep=cb)
        self.model = model          # keeps the model alive as long as the context
        self.n_batch = cp.n_batch
        # the values mor_context_create resolved 0 to
        self.n_ctx = cp.n_ctx or min(model.n_ctx_train, 4096)
        self.max_pos = cp.max_pos if cp.max_pos > 0 else model.n_ctx_train if cp.max_pos == 0 else 2 ** 31 - 1
        self._router = Router(self)
        self._kv = KVCache(self)

    @property
    def router(self):
        """The context's Router (borrowed: valid while the context is open)."""
        return self._router

    @property
    def kv(self):
        """The context's KVCache (borrowed: valid while the context is open)."""
        return self._kv

    def decode(self, batch):
        """Run the model over a Batch, appending to the KV cache."""
        _check(_lib.mor_decode(self._p, batch._p))

    def logits(self, row, numpy=False):
        """Row's logits from the last decode: a copy as array('f'); with
        numpy=True (and NumPy installed) a read-only numpy.ndarray over the
        context's own memory, no copy, valid until the next decode on this
        context or its close() (copy it to keep it longer)."""
        ptr = _lib.mor_get_logits(self._p, row)
        if not ptr:
            raise OutOfRangeError(-9, "row %d of the last decode has no logits" % row)
        return _floats(ptr, self.model.n_vocab, numpy, self)

    def speculate(self, token, pos, sampler, n_draft=4, draft_depth=1, grammar=None, n_max=None, seq=0):
        """One step of self-speculative decoding (mor_speculate): token (sampled,
        not yet decoded) at pos is decoded with up to n_draft drafts made at
        draft_depth recursions; returns (tokens, accepted): the tokens plain
        decoding with this sampler (and Grammar) would give next, at least
        one; the last is the next input, at pos + len(tokens). logits(i)
        then gives the logits tokens[i] was drawn from. An empty list means
        the first position could not be sampled: sampling logits(0) says why."""
        n_max = n_draft + 1 if n_max is None else n_max
        _check_count("n_max", n_max)
        cap = max(1, n_max)
        out = (ctypes.c_int32 * cap)()
        n_out, acc = ctypes.c_int32(), ctypes.c_int32()
        _check(_lib.mor_speculate(self._p, seq, token, pos, n_draft, draft_depth, sampler._p,
                                  grammar._p if grammar is not None else None, out, n_max,
                                  ctypes.byref(n_out), ctypes.byref(acc)))
        return list(out[:n_out.value]), acc.value

    def hidden(self, boundary, row, numpy=False):
        """Row's hidden state at a capture point (capture_hidden=True): a copy
        as array('f'), or with numpy=True a read-only ndarray view valid as
        logits(numpy=True)'s."""
        ptr = _lib.mor_get_hidden(self._p, boundary, row)
        if not ptr:
            raise OutOfRangeError(-9, "no hidden state for boundary %d row %d" % (boundary, row))
        return _floats(ptr, self.model.n_embd, numpy, self)

    def embeddings(self, seq=0, pooling="mean", normalize=True, numpy=False):
        """Sequence seq's embedding (n_embd float32) from the last decode: its
        rows' final hidden states pooled ("mean" or "last"), scaled to unit
        length when normalize (capture_hidden=True). array('f'), or with
        numpy=True (and NumPy installed) a new ndarray the library wrote."""
        pools = {"mean": POOL_MEAN, "last": POOL_LAST}
        if pooling not in pools:
            raise ValueError("pooling must be 'mean' or 'last', not %r" % (pooling,))
        _capi.check_value(ctypes.c_int32, seq, "seq")
        n = self.model.n_embd
        np = _numpy() if numpy else None
        out = np.empty(n, dtype=np.float32) if np is not None else array.array("f", bytes(4 * n))
        _check(_lib.mor_embeddings_seq(self._p, seq, pools[pooling], EMBD_NORMALIZE if normalize else 0,
                                       (ctypes.c_float * n).from_buffer(out), n))
        return out

    def embed(self, tokens, seq=0, pooling="mean", normalize=True, numpy=False):
        """The embedding of token ids: decoded in one batch under seq (which
        must be empty and is emptied again), then pooled as embeddings()."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("embed: no tokens")
        if len(tokens) > self.n_batch:
            raise ValueError("embed: %d tokens exceed n_batch %d (one decode)" % (len(tokens), self.n_batch))
        if self.kv.seq_pos_max(seq) >= 0:
            raise ValueError("embed: sequence %d is not empty" % seq)
        b = Batch(len(tokens))
        try:
            for i, t in enumerate(tokens):
                b.add(t, i, seq, False)
            self.decode(b)   # a failed decode leaves the cache as it was: seq empty
            try:
                return self.embeddings(seq, pooling, normalize, numpy)
            finally:
                self.kv.seq_rm(seq, -1, -1)
        finally:
            b.close()

    def decode_tokens(self, tokens, pos=0, seq=0, batch=None):
        """Decode tokens at positions pos, pos+1, ... of seq in chunks of
        n_batch; only the last row asks for logits (row index returned)."""
        tokens = list(tokens)
        if not tokens:
            raise InvalidArgError(-1, "decode_tokens: no tokens")
        own = batch is None
        b = batch or Batch(self.n_batch)
        try:
            last = 0
            for i in range(0, len(tokens), self.n_batch):
                chunk = tokens[i:i + self.n_batch]
                b.clear()
                for j, t in enumerate(chunk):
                    b.add(t, pos + i + j, seq, i + j == len(tokens) - 1)
                self.decode(b)
                last = len(chunk) - 1
            return last
        finally:
            if own:
                b.close()

    @property
    def limit(self):
        """Tokens a sequence can hold: min(n_ctx, max_pos)."""
        return min(self.n_ctx, self.max_pos)

    def _shift(self, seq, pos, n_keep, n_discard):
        """Context shift: keep n_keep tokens, drop the next n_discard, move
        the rest down (their cached keys re-rotated). Returns the new end."""
        self.kv.seq_rm(seq, n_keep, n_keep + n_discard)
        self.kv.seq_add(seq, n_keep + n_discard, -1, -n_discard)
        return pos - n_discard

    def generate(self, prompt, max_tokens=64, sampler=None, seq=0, stop_at_eos=True, context_shift=True, n_keep=0,
                 grammar=None, json_schema=None, speculate=0, speculate_depth=1, **sampling):
        """Stream Token(id, text, depth): decode the prompt (token ids) after
        what seq already holds in the cache, then sample and decode one token
        at a time. sampler: a Sampler (default greedy, or one built from the
        keyword arguments: seed, temperature, top_k, ...). grammar: a Grammar
        or GBNF text; the output then follows it and ends where the grammar
        ends it (an end token, or MUST_END). json_schema: a JSON Schema (dict
        or str), as the grammar json_schema_to_grammar gives.

        The sequence holds at most self.limit tokens. When it is full the
        context shifts, as llama.cpp does: the first n_keep tokens stay, the
        oldest half of the rest is dropped and the remainder moved down
        (KVCache.seq_add), so generation goes on; a prompt that does not fit
        keeps its first n_keep tokens and its end (a RuntimeWarning says so).
        context_shift=False stops instead when full, and refuses (ValueError)
        a prompt that does not fit.

        speculate=N drafts N tokens per step at speculate_depth recursions
        and verifies them in one pass (Context.speculate): the same tokens,
        often several per step."""
        m = self.model
        ids = m.tokenize(prompt, add_bos=True, parse_special=True) if isinstance(prompt, str) else list(prompt)
        _check_count("max_tokens", max_tokens)
        _check_count("n_keep", n_keep)
        for t in ids:
            _check_token(m, t)
        if not ids:
            raise ValueError("generate: the prompt has no tokens")
        limit = self.limit
        if context_shift and max_tokens > 0 and n_keep > limit - 2:
            raise ValueError("generate: n_keep %d leaves nothing to drop in a context of %d tokens" % (n_keep, limit))
        pos = self.kv.seq_pos_max(seq) + 1
        if pos + len(ids) > limit:
            if not context_shift:
                raise ValueError("generate: %d cached + %d prompt tokens do not fit the context of %d (raise n_ctx "
                                 "and max_pos, or context_shift=True)" % (pos, len(ids), limit))
            if pos > 0:   # drop cached tokens after the kept ones first
                k = min(n_keep, pos)
                pos = self._shift(seq, pos, k, min(pos - k, pos + len(ids) - limit))
            if pos + len(ids) > limit:   # the prompt alone does not fit: its start and its end
                keep = min(n_keep, len(ids)) if pos == 0 else 0
                room = limit - pos
                block = max(1, (room - keep) // 2)
                erased = (len(ids) - keep - block) // block
                import warnings
                warnings.warn("generate: the prompt has %d tokens, more than the %d the context has room for: kept "
                              "its first %d and its last %d" % (len(ids), room, keep, len(ids) - keep - erased * block),
                              RuntimeWarning, stacklevel=2)
                ids = ids[:keep] + ids[keep + erased * block:]
        own = sampler is None
        if json_schema is not None:
            if grammar is not None:
                raise ValueError("generate: give grammar or json_schema, not both")
            grammar = json_schema_to_grammar(json_schema)
        if isinstance(grammar, (str, bytes)):
            grammar = Grammar(m, grammar)
        s = sampler or Sampler(**(sampling or {"temperature": 0.0}))
        b = Batch(max(1, self.n_batch))
        text = _TextStream(m)
        try:
            for t in ids:
                s.accept(t)
            row = self.decode_tokens(ids, pos, seq, b)
            pos += len(ids)
            eos = m.token_eos
            _check_count("speculate", speculate)
            if speculate:
                for tok in self._generate_speculative(s, grammar, row, pos, seq, max_tokens, speculate,
                                                      speculate_depth, stop_at_eos, context_shift, n_keep, b, text):
                    yield tok
                return
            for _ in range(max_tokens):
                if pos >= limit:
                    if not context_shift:
                        break
                    k = min(n_keep, pos - 2)
                    pos = self._shift(seq, pos, k, max(1, (pos - k) // 2))
                if grammar is not None and grammar.must_end:
                    break
                t = s.sample((self, row), grammar)
                b.clear()
                b.add(t, pos, seq, True)
                self.decode(b)
                pos += 1
                row = 0
                depth = self.router.depths()[0]
                yield Token(t, text.push(t), depth)
                if stop_at_eos and eos >= 0 and t == eos:
                    break
        finally:
            b.close()
            if own:
                s.close()


    def _generate_speculative(self, s, grammar, row, pos, seq, max_tokens, n_draft, depth, stop_at_eos,
                              context_shift, n_keep, b, text):
        """generate() with speculate: the same tokens and samples as its
        plain loop. pending is the token sampled and not yet decoded."""
        eos, limit, n, pending = self.model.token_eos, self.limit, 0, None
        while n < max_tokens:
            if pos >= limit:
                if not context_shift:
                    break
                k = min(n_keep, pos - 2)
                pos = self._shift(seq, pos, k, max(1, (pos - k) // 2))
            if pending is None:
                if grammar is not None and grammar.must_end:
                    break
                pending = s.sample((self, row), grammar)
            room = min(max_tokens - n - 1, limit - pos)   # tokens this step may sample
            ended = (grammar is not None and grammar.must_end) or (stop_at_eos and eos >= 0 and pending == eos)
            if room >= 1 and not ended:
                out, _ = self.speculate(pending, pos, s, n_draft, depth, grammar, room, seq)
                depths = self.router.depths()
                if not out:   # the first position cannot be sampled: say why
                    s.sample((self, 0), grammar)
                for i, t in enumerate([pending] + out[:-1]):
                    yield Token(t, text.push(t), depths[i])
                    n += 1
                    pos += 1
                pending = out[-1]
                continue
            b.clear()
            b.add(pending, pos, seq, True)
            self.decode(b)
            pos += 1
            row = 0
            yield Token(pending, text.push(pending), self.router.depths()[0])
            n += 1
            if stop_at_eos and eos >= 0 and pending == eos:
                break
            pending = None


class _TextStream(object):
    """Token bytes to text, holding back an incomplete UTF-8 character."""

    def __init__(self, model):
        self.model = model
        self.dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.ok = True

    def push(self, token):
        if not self.ok:
            return None
        try:
            return self.dec.decode(self.model.token_to_piece(token))
        except UnsupportedError:   # a model without a tokenizer
            self.ok = False
            return None


class _Borrowed(object):
    """A handle owned by a Context (its router or cache): valid while the
    context is open. close() only detaches this Python object."""

    def __init__(self, ctx):
        self._ctx = weakref.ref(ctx)

    @property
    def _p(self):
        ctx = self._ctx() if self._ctx is not None else None
        if ctx is None or ctx.closed:
            raise ClosedError("the context of this %s is closed" % self._kind)
        return self._get(ctx._p)

    def close(self):
        """Detach this Python object; the context keeps its router or cache."""
        self._ctx = None

    def __enter__(self):
        self._p
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Router(_Borrowed):
    """How deep each token goes (mor_router): mode, thresholds, depth cap, and
    what the last decode decided."""
    _kind = "router"
    _get = staticmethod(_lib.mor_context_router)

    def set_mode(self, mode, forced_depth=0):
        """Route by mode (ROUTE_DEFAULT, ROUTE_TOPK, ROUTE_THRESHOLD, ROUTE_FORCED:
        every token runs forced_depth recursions, or ROUTE_TOKEN) from the next decode."""
        _check(_lib.mor_router_set_mode(self._p, mode, forced_depth))

    @property
    def mode(self):
        """The routing mode in effect (ROUTE_*)."""
        return _lib.mor_router_get_mode(self._p)

    def set_threshold(self, recursion, threshold):
        """ROUTE_THRESHOLD: the router score a token needs at a recursion to go
        on (defaults from the model file)."""
        _check(_lib.mor_router_set_threshold(self._p, recursion, threshold))

    def threshold(self, recursion):
        """The threshold of a recursion (set_threshold)."""
        return _lib.mor_router_get_threshold(self._p, recursion)

    def set_max_depth(self, max_depth):
        """Cap every token's depth at max_depth recursions (0: no cap), in every mode."""
        _check(_lib.mor_router_set_max_depth(self._p, max_depth))

    def set_exit(self, exit_mode, threshold):
        """Exits for decode (EXIT_*: margin, saturation, or the learned exit of
        a model with an exit gate at CDF threshold q in [0, 1]); EXIT_NONE: off."""
        _check(_lib.mor_router_set_exit(self._p, exit_mode, threshold))

    def depths(self):
        """The number of recursions each row of the last decode ran."""
        p = self._p
        n = _check(_lib.mor_router_get_depths(p, None, 0))
        out = (ctypes.c_int32 * max(1, n))()
        _check(_lib.mor_router_get_depths(p, out, n))
        return list(out[:n])

    def _per_recursion(self, fn, row):
        p = self._p
        n = self._ctx().model.n_recursion
        out = (ctypes.c_float * max(1, n))()
        got = _check(fn(p, row, out, n))
        return list(out[:min(got, n)])

    def scores(self, row):
        """Row's router output per recursion (NaN where it was no candidate)."""
        return self._per_recursion(_lib.mor_router_get_scores, row)

    def logits(self, row):
        """Row's raw router logits per recursion."""
        return self._per_recursion(_lib.mor_router_get_logits, row)

    def stats(self):
        """RouterStats of the decodes since the last reset_stats(): tokens
        routed, their mean depth, and how many ran each depth."""
        st = _capi.RouterStats()
        st.size = ctypes.sizeof(st)
        _check(_lib.mor_router_get_stats(self._p, ctypes.byref(st)))
        return RouterStats(st.n_tokens, st.mean_depth, list(st.n_at_depth))

    def reset_stats(self):
        """Start the counts of stats() over."""
        _lib.mor_router_reset_stats(self._p)


class KVCache(_Borrowed):
    """The context's KV cache (mor_kv_cache): llama.cpp-style sequence
    operations on [p0, p1) (negative: open end), and byte accounting."""
    _kind = "kv cache"
    _get = staticmethod(_lib.mor_context_kv)

    def clear(self):
        """Empty the cache: every sequence."""
        _lib.mor_kv_clear(self._p)

    def seq_rm(self, seq, p0=-1, p1=-1):
        """Remove positions [p0, p1) of sequence seq (seq < 0: of every sequence)."""
        _check(_lib.mor_kv_seq_rm(self._p, seq, p0, p1))

    def seq_cp(self, src, dst, p0=-1, p1=-1):
        """Copy positions [p0, p1) of sequence src into dst (prefix reuse);
        KVFullError, copying nothing, without room."""
        _check(_lib.mor_kv_seq_cp(self._p, src, dst, p0, p1))

    def seq_keep(self, seq):
        """Remove every sequence but seq."""
        _check(_lib.mor_kv_seq_keep(self._p, seq))

    def seq_add(self, seq, p0, p1, delta):
        """Move positions [p0, p1) of seq by delta (a context shift; the
        cached keys are re-rotated). PositionError, changing nothing, if a
        position would become negative or reach one that stays."""
        _check(_lib.mor_kv_seq_add(self._p, seq, p0, p1, delta))

    def seq_pos_max(self, seq):
        """The largest cached position of sequence seq, or -1 when it has none."""
        return _lib.mor_kv_seq_pos_max(self._p, seq)

    def bytes(self, recursion=KV_ALL):
        """(allocated, used) bytes of K/V storage of a recursion, or of
        KV_UNIQUE_LAYERS, or KV_ALL."""
        a, u = ctypes.c_uint64(), ctypes.c_uint64()
        _check(_lib.mor_kv_bytes(self._p, recursion, ctypes.byref(a), ctypes.byref(u)))
        return a.value, u.value

    def n_cells_used(self, recursion=KV_ALL):
        """Cached tokens summed over the layers of a recursion, or of
        KV_UNIQUE_LAYERS, or KV_ALL."""
        return _check(_lib.mor_kv_n_cells_used(self._p, recursion))

    @property
    def mode(self):
        """The cache mode in effect: KV_RECURSION_WISE, KV_SHARED or KV_DENSE."""
        return _lib.mor_kv_mode(self._p)


# ---------------------------------------------------------------------------
# Server: many requests at once (mor_server_*)
# ---------------------------------------------------------------------------
class _ServerRouter(Router):
    _get = staticmethod(_lib.mor_server_router)


class Server(_Handle):
    """Serves many requests at once over a context of its own (mor_server):
    mode SERVE_SERIAL, SERVE_SEQUENCE or SERVE_DEPTHWISE (default). Tokens and
    depths are those of decoding each request alone. n_slots requests run at
    once; n_ctx is the KV budget (a request waits in the queue until its
    prompt + max_tokens cells are free); exit_mode / exit_threshold: the
    confidence exits (EXIT_*, DEPTHWISE only). on_token(id, token, depth) is
    called for each generated token, on the stepping thread, and
    on_token_logits(id, token, depth, logits) after it with a copy of the
    logits the token was sampled from (array of float); abort() returning
    true stops a step, which then changes nothing. An exception raised in
    either is re-raised by the step that called it. prompt_reuse=False: a
    request never takes the K/V a finished one left in its slot (the tokens
    are bitwise the same either way). fast_bf16=True: BF16 weights on
    bfloat16-rounded activations (SERVE_FAST_BF16). context_shift=True
    (SERVE_CONTEXT_SHIFT, llama-server's --context-shift): a request may be
    longer than its sequence's context of n_ctx_seq positions (default
    min(n_ctx, the training context)): its prompt is truncated and its
    sequence shifted, keeping submit's n_keep first tokens."""
    _kind = "server"

    def __init__(self, model, mode=None, n_slots=None, n_ctx=None, n_batch=None, n_threads=None, kv_mode=None,
                 exit_mode=None, exit_threshold=None, on_token=None, abort=None, prompt_reuse=True,
                 on_token_logits=None, fast_bf16=False, context_shift=False, n_ctx_seq=None):
        sp = _capi.ServerParams()
        _lib.mor_server_params_init(ctypes.byref(sp), ctypes.sizeof(sp))
        _capi.set_fields(sp, (("mode", mode), ("n_slots", n_slots), ("n_ctx", n_ctx), ("n_batch", n_batch),
                              ("n_threads", n_threads), ("kv_mode", kv_mode), ("exit_mode", exit_mode),
                              ("exit_threshold", exit_threshold), ("n_ctx_seq", n_ctx_seq)), "Server")
        if not prompt_reuse:
            sp.flags |= SERVE_NO_PROMPT_REUSE
        if fast_bf16:
            sp.flags |= SERVE_FAST_BF16
        if context_shift:
            sp.flags |= SERVE_CONTEXT_SHIFT
        self._exc = None
        keep = []
        if on_token is not None:
            def tok_trampoline(rid, token, depth, _user):
                if self._exc is None:
                    try:
                        on_token(rid, token, depth)
                    except BaseException as e:   # noqa: BLE001 - re-raised by step()
                        self._exc = e
            sp.on_token = _capi.SERVER_TOKEN_FN(tok_trampoline)
            keep.append(sp.on_token)
        if on_token_logits is not None:
            def logits_trampoline(rid, token, depth, logits, n_vocab, _user):
                if self._exc is None:
                    try:
                        on_token_logits(rid, token, depth, array.array("f", logits[:n_vocab]))
                    except BaseException as e:   # noqa: BLE001 - re-raised by step()
                        self._exc = e
            sp.on_token_logits = _capi.SERVER_TOKEN_LOGITS_FN(logits_trampoline)
            keep.append(sp.on_token_logits)
        if abort is not None:
            def abort_trampoline(_user):
                try:
                    return 1 if abort() else 0
                except BaseException as e:   # noqa: BLE001
                    self._exc = e
                    return 1
            sp.abort_callback = _capi.ABORT_FN(abort_trampoline)
            keep.append(sp.abort_callback)
        out = ctypes.c_void_p()
        _check(_lib.mor_server_create(model._p, ctypes.byref(sp), ctypes.byref(out)))
        self._own(out.value, _lib.mor_server_free, parent=model._h, keep=keep)
        self.model = model
        self._router = _ServerRouter(self)

    @property
    def router(self):
        """The server's router (thresholds, depth cap); change it between steps."""
        return self._router

    def submit(self, prompt, max_tokens=64, stop=(), seed=None, temperature=None, top_k=None, top_p=None,
               min_p=None, repeat_penalty=None, repeat_last_n=None, grammar=None, json_schema=None,
               speculate=0, speculate_depth=1, logit_bias=None, dry_breakers=None, exit_threshold=None, n_keep=None, **more):
        """Queue a request: prompt (token ids, or text: tokenized with BOS),
        at most max_tokens generated tokens, stop token ids; sampling settings
        as Sampler's, with its keyword arguments (None: libmor's default; the default temperature samples,
        temperature=0 is greedy); grammar: GBNF text, or a Grammar (its text,
        start rule and end tokens: the server gets a grammar of its own);
        json_schema: a JSON Schema instead (json_schema_to_grammar);
        speculate=N: self-speculative steps drafting N tokens at
        speculate_depth recursions (mor_server_set_speculate: the same
        tokens, up to N + 1 per step; speculation(id) counts them);
        exit_threshold: this request's threshold under the server's
        exit_mode instead of its exit_threshold (mor_server_set_exit).
        n_keep: the tokens a context shift keeps (mor_server_set_keep; -1 the
        prompt; a server made with context_shift=True).
        One call queues the request with all these settings
        (mor_server_submit_request): when one is refused, nothing is queued.
        Returns the request id."""
        if json_schema is not None:
            if grammar is not None:
                raise ValueError("Server.submit: give grammar or json_schema, not both")
            grammar = json_schema_to_grammar(json_schema)
        if grammar is not None and not isinstance(grammar, Grammar):
            grammar = Grammar(self.model, grammar)
        ids = self.model.tokenize(prompt, add_bos=True, parse_special=True) if isinstance(prompt, str) \
            else list(prompt)
        stop = list(stop)
        smp = _sampler_params("Server.submit", seed, temperature, top_k, top_p, min_p, repeat_penalty,
                              repeat_last_n, more)
        p = _capi.int32_array(ids, "Server.submit: prompt")
        s = _capi.int32_array(stop, "Server.submit: stop")
        rp = _capi.RequestParams()
        _lib.mor_request_params_init(ctypes.byref(rp), ctypes.sizeof(rp))
        rp.sampling = ctypes.pointer(smp)
        rp.stop = s
        _capi.set_fields(rp, (("max_tokens", max_tokens), ("n_stop", len(stop)), ("n_draft", speculate or None),
                              ("draft_depth", speculate_depth if speculate else None),
                              ("exit_threshold", exit_threshold), ("n_keep", n_keep)), "Server.submit")
        g = grammar._copy() if grammar is not None else None
        rp.grammar = g
        rid = ctypes.c_int32()
        # one call: on error nothing is queued and the grammar copy is still ours
        st = _lib.mor_server_submit_request(self._p, p, len(ids), ctypes.byref(rp), ctypes.byref(rid))
        if st:
            e = _error(st)
            if g:
                _lib.mor_grammar_free(g)
            raise e
        if logit_bias is not None or dry_breakers is not None:
            try:
                _set_extras(_lib.mor_server_request_sampler(self._p, rid.value), "Server.submit", logit_bias,
                            dry_breakers)
            except BaseException:
                _lib.mor_server_cancel(self._p, rid.value)
                raise
        return rid.value

    def _reraise(self):
        e, self._exc = self._exc, None
        if e is not None:
            raise e

    def step(self):
        """One step; returns the number of requests still queued or running."""
        n = ctypes.c_int32()
        try:
            _check(_lib.mor_server_step(self._p, ctypes.byref(n)))
        finally:
            self._reraise()
        return n.value

    def run(self):
        """Step until no request is queued or running."""
        try:
            _check(_lib.mor_server_run(self._p))
        finally:
            self._reraise()

    def cancel(self, rid):
        """Stop a queued or running request; its tokens so far stay readable."""
        _check(_lib.mor_server_cancel(self._p, rid))

    def state(self, rid):
        """REQ_QUEUED, REQ_RUNNING, REQ_DONE or REQ_CANCELLED."""
        return _check(_lib.mor_server_request_state(self._p, rid))

    def cached(self, rid):
        """Prompt tokens a request reused from a free slot's kept cells (prompt reuse)."""
        return _check(_lib.mor_server_request_cached(self._p, rid))

    def slot(self, rid):
        """The slot a running request holds, or -1 while queued or once over."""
        v = _lib.mor_server_request_slot(self._p, rid)
        return _check(v) if v < -1 else v

    def speculation(self, rid):
        """(drafted, accepted): the tokens a speculating request drafted so far
        and those its sampler accepted ((0, 0) without speculation)."""
        d, a = ctypes.c_int64(), ctypes.c_int64()
        _check(_lib.mor_server_request_speculation(self._p, rid, ctypes.byref(d), ctypes.byref(a)))
        return d.value, a.value

    def shift(self, rid):
        """(prompt tokens it runs on, shifts, tokens they dropped): what a
        context shift did to a request (mor_server_request_shift)."""
        n, k, d = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
        _check(_lib.mor_server_request_shift(self._p, rid, ctypes.byref(n), ctypes.byref(k), ctypes.byref(d)))
        return n.value, k.value, d.value

    def tokens(self, rid):
        """(token ids, depths) generated so far for a request."""
        n = ctypes.c_int32()
        st = _lib.mor_server_get_tokens(self._p, rid, None, None, 0, ctypes.byref(n))
        if st not in (0, -11):   # MOR_E_BUFFER_TOO_SMALL gives the count
            _check(st)
        out = (_capi.mor_token * max(1, n.value))()
        dep = (ctypes.c_int32 * max(1, n.value))()
        _check(_lib.mor_server_get_tokens(self._p, rid, out, dep, n.value, ctypes.byref(n)))
        return list(out[:n.value]), list(dep[:n.value])

    def release(self, rid):
        """Forget a finished or cancelled request."""
        _check(_lib.mor_server_release(self._p, rid))


# llama-cpp-python's API (mor.llama), built on the classes above
from .llama import Llama, LlamaGrammar, LLAMA_DEFAULT_SEED  # noqa: E402
