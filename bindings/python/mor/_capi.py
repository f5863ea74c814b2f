"""mor._capi - the raw C API of libmor through ctypes: loading, prototypes, structs.

Everything here mirrors include/mor.h by hand. Three guards keep the mirror
honest: on load, the library's version must be the one these bindings were
written for and every params struct must have the size the library reports
(mor_sizeof_*()); tests/test_python_bindings.py checks that every MOR_API
function of mor.h has a prototype here whose types match the header.
"""
import ctypes
import ctypes.util
import glob
import numbers
import os
import sys
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_float, c_int32, c_int64,
                    c_size_t, c_uint32, c_uint64, c_void_p)

# The ABI these bindings mirror: while libmor is at 0.x a minor release may
# break the ABI (SONAME libmor.so.0.MINOR), so major and minor must match.
ABI_VERSION = (0, 1)
SONAME = "libmor.so.%d.%d" % ABI_VERSION
MAX_RECURSIONS = 16   # MOR_MAX_RECURSIONS
SAMPLERS_MAX = 16     # MOR_SAMPLERS_MAX

mor_status = c_int32
mor_token = c_int32
mor_pos = c_int32
mor_seq_id = c_int32
handle = c_void_p          # every opaque handle: mor_model *, mor_context *, ...
handle_out = POINTER(c_void_p)

LOG_FN = CFUNCTYPE(None, c_int32, c_char_p, c_void_p)
PROGRESS_FN = CFUNCTYPE(c_int32, c_float, c_void_p)
ABORT_FN = CFUNCTYPE(c_int32, c_void_p)
SERVER_TOKEN_FN = CFUNCTYPE(None, c_int32, c_int32, c_int32, c_void_p)
SERVER_TOKEN_LOGITS_FN = CFUNCTYPE(None, c_int32, c_int32, c_int32, POINTER(c_float), c_int32, c_void_p)


class ModelParams(Structure):
    _fields_ = [("size", c_uint32), ("flags", c_uint32),
                ("progress", PROGRESS_FN), ("progress_user_data", c_void_p)]


class ContextParams(Structure):
    _fields_ = [("size", c_uint32), ("flags", c_uint32), ("n_ctx", c_uint32), ("n_batch", c_uint32),
                ("n_seq_max", c_uint32), ("kv_mode", c_int32), ("n_threads", c_int32),
                ("abort_callback", ABORT_FN), ("abort_user_data", c_void_p), ("max_pos", c_int32),
                ("kv_type", c_int32), ("n_outputs", c_uint32)]


class SamplerParams(Structure):
    _fields_ = [("size", c_uint32), ("seed", c_uint64), ("temperature", c_float), ("top_k", c_int32),
                ("top_p", c_float), ("min_p", c_float), ("repeat_penalty", c_float),
                ("repeat_last_n", c_int32),
                ("presence_penalty", c_float), ("frequency_penalty", c_float), ("min_keep", c_int32),
                ("typical_p", c_float), ("top_n_sigma", c_float), ("dynatemp_range", c_float),
                ("dynatemp_exponent", c_float), ("xtc_probability", c_float), ("xtc_threshold", c_float),
                ("mirostat", c_int32), ("mirostat_tau", c_float), ("mirostat_eta", c_float),
                ("dry_multiplier", c_float), ("dry_base", c_float), ("dry_allowed_length", c_int32),
                ("dry_penalty_last_n", c_int32), ("n_samplers", c_int32), ("samplers", c_int32 * SAMPLERS_MAX)]


class ServerParams(Structure):
    _fields_ = [("size", c_uint32), ("mode", c_int32), ("n_slots", c_uint32), ("n_ctx", c_uint32),
                ("n_batch", c_uint32), ("n_threads", c_int32), ("kv_mode", c_int32), ("exit_mode", c_int32),
                ("exit_threshold", c_float), ("on_token", SERVER_TOKEN_FN), ("user_data", c_void_p),
                ("abort_callback", ABORT_FN), ("abort_user_data", c_void_p), ("flags", c_uint32),
                ("on_token_logits", SERVER_TOKEN_LOGITS_FN), ("n_ctx_seq", c_uint32)]


class RouterStats(Structure):
    _fields_ = [("size", c_uint32), ("n_tokens", c_uint64), ("mean_depth", c_double),
                ("n_at_depth", c_uint64 * (MAX_RECURSIONS + 1))]


class ChatParams(Structure):
    _fields_ = [("size", c_uint32), ("messages_json", c_char_p), ("messages_len", c_size_t),
                ("tools_json", c_char_p), ("tools_len", c_size_t), ("extra_json", c_char_p),
                ("extra_len", c_size_t), ("add_generation_prompt", c_int32), ("bos_token", c_char_p),
                ("eos_token", c_char_p), ("now", c_int64)]


class RequestParams(Structure):
    _fields_ = [("size", c_uint32), ("sampling", POINTER(SamplerParams)), ("max_tokens", c_int32),
                ("n_stop", c_int32), ("stop", POINTER(mor_token)), ("grammar", c_void_p), ("n_draft", c_int32),
                ("draft_depth", c_int32), ("exit_threshold", c_float), ("n_keep", c_int32)]


# struct -> the function that reports its size in the library
STRUCTS = {
    "mor_model_params": (ModelParams, "mor_sizeof_model_params"),
    "mor_context_params": (ContextParams, "mor_sizeof_context_params"),
    "mor_sampler_params": (SamplerParams, "mor_sizeof_sampler_params"),
    "mor_router_stats": (RouterStats, "mor_sizeof_router_stats"),
    "mor_server_params": (ServerParams, "mor_sizeof_server_params"),
    "mor_chat_params": (ChatParams, "mor_sizeof_chat_params"),
    "mor_request_params": (RequestParams, "mor_sizeof_request_params"),
}

P_i32 = POINTER(c_int32)
P_f32 = POINTER(c_float)
P_size = POINTER(c_size_t)
P_u64 = POINTER(c_uint64)

# name: (restype, argtypes), in the order of mor.h
PROTOTYPES = {
    "mor_version_number": (c_uint32, []),
    "mor_version_string": (c_char_p, []),
    "mor_build_info": (c_char_p, []),
    "mor_status_str": (c_char_p, [mor_status]),
    "mor_last_error": (c_char_p, []),
    "mor_log_set": (None, [LOG_FN, c_void_p, c_int32]),
    "mor_model_params_init": (None, [POINTER(ModelParams), c_size_t]),
    "mor_model_load_file": (mor_status, [c_char_p, POINTER(ModelParams), handle_out]),
    "mor_model_load_memory": (mor_status, [c_void_p, c_size_t, POINTER(ModelParams), handle_out]),
    "mor_model_free": (None, [handle]),
    "mor_model_n_vocab": (c_int32, [handle]),
    "mor_model_n_embd": (c_int32, [handle]),
    "mor_model_n_layer": (c_int32, [handle]),
    "mor_model_n_recursion": (c_int32, [handle]),
    "mor_model_n_head": (c_int32, [handle]),
    "mor_model_n_head_kv": (c_int32, [handle]),
    "mor_model_head_dim": (c_int32, [handle]),
    "mor_model_n_ctx_train": (c_int32, [handle]),
    "mor_model_router_type": (c_int32, [handle]),
    "mor_model_n_boundaries": (c_int32, [handle]),
    "mor_model_size_bytes": (c_uint64, [handle]),
    "mor_model_token_bos": (mor_token, [handle]),
    "mor_model_token_eos": (mor_token, [handle]),
    "mor_model_add_bos": (c_int32, [handle]),
    "mor_model_meta_str": (mor_status, [handle, c_char_p, c_void_p, c_size_t, P_size]),
    "mor_context_params_init": (None, [POINTER(ContextParams), c_size_t]),
    "mor_context_create": (mor_status, [handle, POINTER(ContextParams), handle_out]),
    "mor_context_free": (None, [handle]),
    "mor_context_model": (handle, [handle]),
    "mor_batch_create": (mor_status, [c_int32, handle_out]),
    "mor_batch_free": (None, [handle]),
    "mor_batch_clear": (None, [handle]),
    "mor_batch_size": (c_int32, [handle]),
    "mor_batch_add": (mor_status, [handle, mor_token, mor_pos, mor_seq_id, c_int32]),
    "mor_decode": (mor_status, [handle, handle]),
    "mor_get_logits": (P_f32, [handle, c_int32]),
    "mor_speculate": (mor_status, [handle, mor_seq_id, mor_token, mor_pos, c_int32, c_int32, handle, handle,
                                   P_i32, c_int32, P_i32, P_i32]),
    "mor_get_hidden": (P_f32, [handle, c_int32, c_int32]),
    "mor_embeddings_seq": (mor_status, [handle, mor_seq_id, c_int32, c_uint32, P_f32, c_int32]),
    "mor_context_router": (handle, [handle]),
    "mor_router_set_mode": (mor_status, [handle, c_int32, c_int32]),
    "mor_router_get_mode": (c_int32, [handle]),
    "mor_router_set_threshold": (mor_status, [handle, c_int32, c_float]),
    "mor_router_get_threshold": (c_float, [handle, c_int32]),
    "mor_router_set_max_depth": (mor_status, [handle, c_int32]),
    "mor_router_set_exit": (mor_status, [handle, c_int32, c_float]),
    "mor_router_get_depths": (c_int32, [handle, P_i32, c_int32]),
    "mor_router_get_scores": (c_int32, [handle, c_int32, P_f32, c_int32]),
    "mor_router_get_logits": (c_int32, [handle, c_int32, P_f32, c_int32]),
    "mor_router_get_stats": (mor_status, [handle, POINTER(RouterStats)]),
    "mor_router_reset_stats": (None, [handle]),
    "mor_context_kv": (handle, [handle]),
    "mor_kv_clear": (None, [handle]),
    "mor_kv_seq_rm": (mor_status, [handle, mor_seq_id, mor_pos, mor_pos]),
    "mor_kv_seq_cp": (mor_status, [handle, mor_seq_id, mor_seq_id, mor_pos, mor_pos]),
    "mor_kv_seq_keep": (mor_status, [handle, mor_seq_id]),
    "mor_kv_seq_add": (mor_status, [handle, mor_seq_id, mor_pos, mor_pos, mor_pos]),
    "mor_kv_seq_pos_max": (mor_pos, [handle, mor_seq_id]),
    "mor_prompt_truncate": (c_int32, [POINTER(mor_token), c_int32, c_int32, c_int32]),
    "mor_kv_bytes": (mor_status, [handle, c_int32, P_u64, P_u64]),
    "mor_kv_n_cells_used": (c_int64, [handle, c_int32]),
    "mor_kv_mode": (c_int32, [handle]),
    "mor_sampler_params_init": (None, [POINTER(SamplerParams), c_size_t]),
    "mor_sampler_create": (mor_status, [POINTER(SamplerParams), handle_out]),
    "mor_sampler_free": (None, [handle]),
    "mor_sampler_sample": (mor_status, [handle, P_f32, c_int32, POINTER(mor_token)]),
    "mor_sampler_accept": (None, [handle, mor_token]),
    "mor_sampler_reset": (None, [handle]),
    "mor_sampler_set_logit_bias": (mor_status, [handle, POINTER(mor_token), P_f32, c_int32]),
    "mor_sampler_set_dry_breakers": (mor_status, [handle, POINTER(mor_token), P_i32, c_int32]),
    "mor_logprobs": (mor_status, [P_f32, c_int32, mor_token, P_f32, c_int32, POINTER(mor_token), P_f32]),
    "mor_grammar_create": (mor_status, [handle, c_char_p, c_size_t, c_char_p, POINTER(mor_token), c_int32,
                                        handle_out]),
    "mor_grammar_free": (None, [handle]),
    "mor_grammar_apply": (mor_status, [handle, P_f32, c_int32]),
    "mor_grammar_accept": (mor_status, [handle, mor_token]),
    "mor_grammar_state": (c_int32, [handle]),
    "mor_grammar_reset": (None, [handle]),
    "mor_grammar_set_triggers": (mor_status, [handle, POINTER(c_char_p), c_int32]),
    "mor_server_set_grammar": (mor_status, [handle, c_int32, handle]),
    "mor_json_schema_to_grammar": (mor_status, [c_char_p, c_size_t, c_void_p, c_size_t, P_size]),
    "mor_tokenize": (mor_status, [handle, c_char_p, c_size_t, c_uint32, POINTER(mor_token), c_int32, P_i32]),
    "mor_detokenize": (mor_status, [handle, POINTER(mor_token), c_int32, c_void_p, c_size_t, P_size]),
    "mor_token_to_piece": (mor_status, [handle, mor_token, c_void_p, c_size_t, P_size]),
    "mor_server_params_init": (None, [POINTER(ServerParams), c_size_t]),
    "mor_server_create": (mor_status, [handle, POINTER(ServerParams), handle_out]),
    "mor_server_free": (None, [handle]),
    "mor_server_router": (handle, [handle]),
    "mor_server_submit": (mor_status, [handle, POINTER(mor_token), c_int32, POINTER(SamplerParams), c_int32,
                                       POINTER(mor_token), c_int32, P_i32]),
    "mor_server_step": (mor_status, [handle, P_i32]),
    "mor_server_run": (mor_status, [handle]),
    "mor_server_cancel": (mor_status, [handle, c_int32]),
    "mor_server_request_state": (c_int32, [handle, c_int32]),
    "mor_server_request_cached": (c_int32, [handle, c_int32]),
    "mor_server_request_slot": (c_int32, [handle, c_int32]),
    "mor_server_set_speculate": (mor_status, [handle, c_int32, c_int32, c_int32]),
    "mor_server_set_exit": (mor_status, [handle, c_int32, c_float]),
    "mor_server_request_sampler": (handle, [handle, c_int32]),
    "mor_server_request_speculation": (mor_status, [handle, c_int32, POINTER(c_int64), POINTER(c_int64)]),
    "mor_server_set_keep": (mor_status, [handle, c_int32, c_int32]),
    "mor_server_request_shift": (mor_status, [handle, c_int32, P_i32, P_i32, P_i32]),
    "mor_server_get_tokens": (mor_status, [handle, c_int32, POINTER(mor_token), P_i32, c_int32, P_i32]),
    "mor_server_release": (mor_status, [handle, c_int32]),
    "mor_request_params_init": (None, [POINTER(RequestParams), c_size_t]),
    "mor_server_submit_request": (mor_status, [handle, POINTER(mor_token), c_int32, POINTER(RequestParams), P_i32]),
    "mor_sizeof_model_params": (c_size_t, []),
    "mor_sizeof_context_params": (c_size_t, []),
    "mor_sizeof_sampler_params": (c_size_t, []),
    "mor_sizeof_router_stats": (c_size_t, []),
    "mor_sizeof_server_params": (c_size_t, []),
    "mor_chat_template_create": (mor_status, [c_char_p, c_size_t, handle_out]),
    "mor_chat_template_free": (None, [handle]),
    "mor_chat_params_init": (None, [POINTER(ChatParams), c_size_t]),
    "mor_chat_template_render": (mor_status, [handle, POINTER(ChatParams), c_void_p, c_size_t, P_size]),
    "mor_sizeof_chat_params": (c_size_t, []),
    "mor_sizeof_request_params": (c_size_t, []),
    "mor_max_recursions": (c_int32, []),
}


# Bound, but with no method of their own in the package: why.
RAW_ONLY = {
    "mor_context_model": "Context.model is the Python Model the context was made from",
    "mor_sizeof_model_params": "the import-time struct check",
    "mor_sizeof_context_params": "the import-time struct check",
    "mor_sizeof_sampler_params": "the import-time struct check",
    "mor_sizeof_router_stats": "the import-time struct check",
    "mor_sizeof_server_params": "the import-time struct check",
    "mor_sizeof_chat_params": "the import-time struct check",
    "mor_sizeof_request_params": "the import-time struct check",
    "mor_server_submit": "Server.submit queues through mor_server_submit_request (one call, all settings)",
    "mor_server_set_grammar": "Server.submit passes the grammar in mor_request_params",
}


# ctypes converts a Python int to a C integer silently modulo 2^bits (2**40
# becomes 0): every integer argument and struct field is checked instead.
_INT_BITS = {c_int32: (32, True), c_uint32: (32, False), c_int64: (64, True), c_uint64: (64, False),
             c_size_t: (8 * ctypes.sizeof(c_size_t), False)}
_FLOATS = (c_float, c_double)


def check_value(ctype, v, what):
    """v as an argument of C type ctype: TypeError if it is not a number of
    the right kind, OverflowError if it does not fit. Returns v."""
    if ctype in _INT_BITS:
        if isinstance(v, ctypes._SimpleCData):
            return v
        if not isinstance(v, numbers.Integral):
            raise TypeError("%s must be an integer, not %s" % (what, type(v).__name__))
        bits, signed = _INT_BITS[ctype]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise OverflowError("%s is %d, outside the range of a C %s%d [%d, %d]"
                                % (what, v, "int" if signed else "uint", bits, lo, hi))
    elif ctype in _FLOATS:
        if isinstance(v, ctypes._SimpleCData):
            return v
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            raise TypeError("%s must be a number, not %s" % (what, type(v).__name__))
    return v


def set_fields(struct, pairs, what):
    """Set (name, value) fields of a ctypes Structure, None skipped, each
    checked as check_value does (ctypes would wrap 2**40 to 0)."""
    types = dict(struct._fields_)
    for name, v in pairs:
        if v is not None:
            setattr(struct, name, check_value(types[name], v, "%s: %s" % (what, name)))


def int32_array(values, what):
    """A ctypes int32 array of values (at least one element), each checked."""
    vals = list(values)
    for i, v in enumerate(vals):
        check_value(c_int32, v, "%s[%d]" % (what, i))
    return (c_int32 * max(1, len(vals)))(*vals)


def _guard(lib, name):
    """Wrap lib.name so that its integer and float arguments are checked."""
    f = getattr(lib, name)
    checks = [(i, t) for i, t in enumerate(f.argtypes or []) if t in _INT_BITS or t in _FLOATS]
    if not checks:
        return

    def call(*args):
        for i, t in checks:
            if i < len(args):
                check_value(t, args[i], "%s: argument %d" % (name, i + 1))
        return f(*args)
    call.__name__ = name
    call.argtypes, call.restype = f.argtypes, f.restype
    setattr(lib, name, call)


class LibraryError(ImportError):
    """libmor could not be found, or is not the library these bindings mirror."""


def _candidates():
    """Where to look, in order: $MOR_LIB_PATH (a file or a directory), next to
    the package, then the system's loader path."""
    names = [SONAME, "libmor.so", "libmor.dylib", "libmor.%d.%d.dylib" % ABI_VERSION, "mor.dll", "libmor.dll"]
    env = os.environ.get("MOR_LIB_PATH")
    if env:
        if os.path.isdir(env):
            found = [os.path.join(env, n) for n in names if os.path.exists(os.path.join(env, n))]
            if not found:
                raise LibraryError("MOR_LIB_PATH=%s is a directory without %s" % (env, " or ".join(names[:2])))
            return found[:1]
        if not os.path.exists(env):
            raise LibraryError("MOR_LIB_PATH=%s does not exist" % env)
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    for d in (here, os.path.dirname(here)):
        out += [os.path.join(d, n) for n in names if os.path.exists(os.path.join(d, n))]
        out += sorted(glob.glob(os.path.join(d, "libmor.so.*")))
    out.append(SONAME)     # the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache)
    sys_name = ctypes.util.find_library("mor")
    if sys_name:
        out.append(sys_name)
    return out


def _declare(lib, names):
    missing = []
    for name in names:
        res, args = PROTOTYPES[name]
        try:
            f = getattr(lib, name)
        except AttributeError:
            missing.append(name)
            continue
        f.restype = res
        f.argtypes = args
    if missing:
        raise LibraryError("%s does not export %s" % (lib._name, ", ".join(missing)))


def _verify_version(lib):
    v = lib.mor_version_number()
    got = (v // 10000, v // 100 % 100)
    if got != ABI_VERSION:
        raise LibraryError("%s is libmor %s; these bindings are for libmor %d.%d.x (ABI mismatch)"
                           % (lib._name, lib.mor_version_string().decode(), ABI_VERSION[0], ABI_VERSION[1]))


def _verify(lib):
    """Refuse a library whose version or struct sizes differ from the mirror."""
    _verify_version(lib)
    for cname, (struct, fn) in STRUCTS.items():
        want = getattr(lib, fn)()
        if ctypes.sizeof(struct) != want:
            raise LibraryError("struct skew: %s is %d bytes in %s but %d bytes in the Python mirror "
                               "(bindings/python/mor/_capi.py must be updated with mor.h)"
                               % (cname, want, lib._name, ctypes.sizeof(struct)))


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        # the version first: an older or newer library may lack or add functions
        _declare(lib, ["mor_version_number", "mor_version_string"])
        _verify_version(lib)
        _declare(lib, PROTOTYPES)
        _verify(lib)
        for name in PROTOTYPES:
            _guard(lib, name)
        return lib
    raise LibraryError("libmor not found (set MOR_LIB_PATH to the library or its directory): "
                       + "; ".join(errors))


lib = load()
