# Type stubs of mor (PEP 561: the package ships py.typed). They describe
# mor/__init__.py; tests/test_python_types.py checks the two agree (mypy's
# stubtest) and that mypy --strict accepts typed code using them.
import array
import os
from typing import Any, Callable, Generator, Iterable, Mapping, NamedTuple, Sequence, TypeVar, overload

from typing_extensions import Final, Literal   # typing's from Python 3.8 on

# NumPy is optional: with it installed, numpy=True methods are typed as
# float32 ndarrays; without it (the import below then fails) as Any.
import numpy  # type: ignore[import]
import numpy.typing  # type: ignore[import]

from .llama import LLAMA_DEFAULT_SEED as LLAMA_DEFAULT_SEED, Llama as Llama, LlamaGrammar as LlamaGrammar

__all__ = [
    "Model", "Context", "Batch", "Sampler", "Router", "KVCache", "Token", "RouterStats", "Server",
    "logprobs", "Logprobs", "json_schema_to_grammar", "truncate_prompt",
    "MorError", "LibraryError", "version", "build_info", "set_log", "max_recursions", "ABI_VERSION",
    "have_numpy", "Llama", "LlamaGrammar", "ChatTemplate",
]

_T = TypeVar("_T")
_H = TypeVar("_H", bound="_Handle")
_B = TypeVar("_B", bound="_Borrowed")
_S = TypeVar("_S", bound="Sampler")
_M = TypeVar("_M", bound="Model")

# What a numpy=True method returns: a float32 ndarray, or array('f') when
# NumPy is not installed.
_FloatArray = numpy.typing.NDArray[numpy.float32] | array.array[float]
# Logits as the sampling functions take them: any sequence of floats
# (array('f') and float32 ndarrays without a copy), or (context, row) for a
# row of the context's last decode.
_LogitsIn = Iterable[float] | tuple[Context, int]
# A JSON Schema: JSON text, or the parsed value (json.dumps'd).
_JsonSchema = str | dict[str, Any] | list[Any] | bool
# A file name as os.fsencode takes it.
_PathLike = str | bytes | os.PathLike[str] | os.PathLike[bytes]

# the library these bindings mirror: (MAJOR, MINOR)
ABI_VERSION: tuple[int, int]

# constants of mor.h
OK: Final = 0
LOG_ERROR: Final = 0
LOG_WARN: Final = 1
LOG_INFO: Final = 2
LOG_DEBUG: Final = 3
MODEL_NO_MMAP: Final = 1
MODEL_VOCAB_ONLY: Final = 2
MODEL_FOLD_LORA: Final = 4
MODEL_CHECK_TENSORS: Final = 8
ROUTER_TYPE_NONE: Final = 0
ROUTER_TYPE_EXPERT: Final = 1
ROUTER_TYPE_TOKEN: Final = 2
CTX_CAPTURE_HIDDEN: Final = 1
CTX_FAST_BF16: Final = 2
POOL_MEAN: Final = 1
POOL_LAST: Final = 2
EMBD_NORMALIZE: Final = 1
GRAMMAR_CAN_END: Final = 1
GRAMMAR_MUST_END: Final = 2
KV_MODEL_DEFAULT: Final = 0
KV_RECURSION_WISE: Final = 1
KV_SHARED: Final = 2
KV_DENSE: Final = 3
KV_TYPE_F32: Final = 0
KV_TYPE_F16: Final = 1
KV_TYPE_Q8_0: Final = 8
MAX_RECURSIONS: Final = 16
ROUTE_DEFAULT: Final = 0
ROUTE_TOPK: Final = 1
ROUTE_THRESHOLD: Final = 2
ROUTE_FORCED: Final = 3
ROUTE_TOKEN: Final = 4
TOKENIZE_ADD_BOS: Final = 1
TOKENIZE_PARSE_SPECIAL: Final = 2
TOKENIZE_PARSE_USER_DEFINED: Final = 4
KV_UNIQUE_LAYERS: Final = -1
KV_ALL: Final = -2
SERVE_SERIAL: Final = 0
SERVE_SEQUENCE: Final = 1
SERVE_DEPTHWISE: Final = 2
EXIT_NONE: Final = 0
EXIT_MARGIN: Final = 1
EXIT_SATURATION: Final = 2
EXIT_LEARNED: Final = 3
REQ_QUEUED: Final = 0
REQ_RUNNING: Final = 1
REQ_DONE: Final = 2
REQ_CANCELLED: Final = 3
SERVE_NO_PROMPT_REUSE: Final = 1
STAGE_PENALTIES: Final = 1
STAGE_DRY: Final = 2
STAGE_TOP_N_SIGMA: Final = 3
STAGE_TOP_K: Final = 4
STAGE_TYPICAL_P: Final = 5
STAGE_TOP_P: Final = 6
STAGE_MIN_P: Final = 7
STAGE_XTC: Final = 8
STAGE_TEMPERATURE: Final = 9
STAGES: dict[str, int]
SERVE_FAST_BF16: Final = 2
SERVE_CONTEXT_SHIFT: Final = 4

# errors
class LibraryError(ImportError): ...

class MorError(Exception):
    status: int
    name: str
    message: str
    def __init__(self, status: int, message: str) -> None: ...

class InvalidArgError(MorError, ValueError): ...
class NoMemError(MorError, MemoryError): ...
class IOFailedError(MorError, OSError): ...
class FormatError(MorError): ...
class UnsupportedError(MorError): ...
class KVFullError(MorError): ...
class AbortedError(MorError): ...
class ABIError(MorError): ...
class OutOfRangeError(MorError, IndexError): ...
class PositionError(MorError, ValueError): ...
class BufferTooSmallError(MorError): ...
class InternalError(MorError): ...

ERRORS: dict[int, type[MorError]]

class ClosedError(ValueError): ...

# library-wide functions
def have_numpy() -> bool: ...
def version() -> str: ...
def version_number() -> int: ...
def build_info() -> str: ...
def status_str(status: int) -> str: ...
def last_error() -> str: ...
def max_recursions() -> int: ...
def set_log(fn: Callable[[int, str], object] | None, max_level: int = 2) -> None: ...

# handles
class _Handle:
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def __enter__(self: _H) -> _H: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

class Model(_Handle):
    def __init__(
        self,
        path: _PathLike | None = None,
        data: bytes | bytearray | memoryview | None = None,
        no_mmap: bool = False,
        vocab_only: bool = False,
        progress: Callable[[float], bool | None] | None = None,
        check_tensors: bool = False,
    ) -> None: ...
    @classmethod
    def from_bytes(
        cls: type[_M],
        data: bytes | bytearray | memoryview,
        *,
        no_mmap: bool = ...,
        vocab_only: bool = ...,
        progress: Callable[[float], bool | None] | None = ...,
        check_tensors: bool = ...,
    ) -> _M: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_embd(self) -> int: ...
    @property
    def n_layer(self) -> int: ...
    @property
    def n_recursion(self) -> int: ...
    @property
    def n_head(self) -> int: ...
    @property
    def n_head_kv(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def n_ctx_train(self) -> int: ...
    @property
    def router_type(self) -> int: ...
    @property
    def n_boundaries(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def token_bos(self) -> int: ...
    @property
    def token_eos(self) -> int: ...
    @property
    def add_bos(self) -> int: ...
    @overload
    def meta(self, key: str) -> str: ...
    @overload
    def meta(self, key: str, default: _T) -> str | _T: ...
    def tokenize(
        self,
        text: str | bytes | bytearray | memoryview,
        add_bos: bool = False,
        parse_special: bool = False,
        parse_user_defined: bool = False,
    ) -> list[int]: ...
    def detokenize(self, tokens: Iterable[int]) -> bytes: ...
    def token_to_piece(self, token: int) -> bytes: ...
    def context(
        self,
        *,
        n_ctx: int | None = ...,
        n_batch: int | None = ...,
        n_seq_max: int | None = ...,
        kv_mode: int | None = ...,
        n_threads: int | None = ...,
        max_pos: int | None = ...,
        capture_hidden: bool = ...,
        abort: Callable[[], object] | None = ...,
        n_outputs: int | None = ...,
        fast_bf16: bool = ...,
        kv_type: int | None = ...,
    ) -> Context: ...
    def generate(
        self,
        prompt: str | Iterable[int],
        max_tokens: int = 64,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        routing: int | None = None,
        forced_depth: int = 0,
        max_pos: int | None = None,
        context_shift: bool = True,
        n_keep: int = 0,
        *,
        sampler: Sampler | None = ...,
        seq: int = ...,
        stop_at_eos: bool = ...,
        grammar: Grammar | str | bytes | None = ...,
        json_schema: _JsonSchema | None = ...,
        speculate: int = ...,
        speculate_depth: int = ...,
        seed: int | None = ...,
        temperature: float | None = ...,
        top_k: int | None = ...,
        top_p: float | None = ...,
        min_p: float | None = ...,
        repeat_penalty: float | None = ...,
        repeat_last_n: int | None = ...,
    ) -> Generator[Token, None, None]: ...

class Batch(_Handle):
    capacity: int
    def __init__(self, capacity: int) -> None: ...
    def add(self, token: int, pos: int, seq: int = 0, logits: bool = False) -> None: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...

class Sampler(_Handle):
    def __init__(
        self,
        seed: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repeat_penalty: float | None = None,
        repeat_last_n: int | None = None,
        logit_bias: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
        dry_breakers: Iterable[Sequence[int]] | None = None,
        *,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        min_keep: int | None = None,
        typical_p: float | None = None,
        top_n_sigma: float | None = None,
        dynatemp_range: float | None = None,
        dynatemp_exponent: float | None = None,
        xtc_probability: float | None = None,
        xtc_threshold: float | None = None,
        mirostat: int | None = None,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        dry_multiplier: float | None = None,
        dry_base: float | None = None,
        dry_allowed_length: int | None = None,
        dry_penalty_last_n: int | None = None,
        samplers: Iterable[str | int] | None = None,
    ) -> None: ...
    def set_logit_bias(self, logit_bias: Mapping[int, float] | Iterable[tuple[int, float]]) -> None: ...
    def set_dry_breakers(self, breakers: Iterable[Sequence[int]]) -> None: ...
    @classmethod
    def greedy(cls: type[_S]) -> _S: ...
    def sample(self, logits: _LogitsIn, grammar: Grammar | None = None) -> int: ...
    def accept(self, token: int) -> None: ...
    def reset(self) -> None: ...

class ChatTemplate(_Handle):
    source: str
    def __init__(self, source: str | bytes) -> None: ...
    @classmethod
    def from_model(cls, model: Model) -> ChatTemplate | None: ...
    def render(
        self,
        messages: Iterable[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[Any] | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
        now: int = 0,
        **extra: Any,
    ) -> str: ...

class Grammar(_Handle):
    model: Model
    def __init__(
        self,
        model: Model,
        gbnf: str | bytes,
        root: str | None = None,
        end_tokens: Iterable[int] | None = None,
        triggers: Iterable[str | bytes] | None = None,
    ) -> None: ...
    def apply(self, logits: _LogitsIn) -> list[float]: ...
    def accept(self, token: int) -> None: ...
    @property
    def state(self) -> int: ...
    @property
    def can_end(self) -> bool: ...
    @property
    def must_end(self) -> bool: ...
    def reset(self) -> None: ...

class Logprobs(NamedTuple):
    logprob: float | None
    top: list[tuple[int, float]]

def logprobs(logits: _LogitsIn, token: int | None = None, top: int = 0) -> Logprobs: ...
def json_schema_to_grammar(schema: _JsonSchema) -> str: ...
def truncate_prompt(tokens: Iterable[int], n_ctx: int, n_keep: int = 0) -> list[int]: ...

class Token(NamedTuple):
    id: int
    text: str | None
    depth: int

class RouterStats(NamedTuple):
    n_tokens: int
    mean_depth: float
    n_at_depth: list[int]

class Context(_Handle):
    model: Model
    n_batch: int
    n_ctx: int
    max_pos: int
    def __init__(
        self,
        model: Model,
        n_ctx: int | None = None,
        n_batch: int | None = None,
        n_seq_max: int | None = None,
        kv_mode: int | None = None,
        n_threads: int | None = None,
        max_pos: int | None = None,
        capture_hidden: bool = False,
        abort: Callable[[], object] | None = None,
        n_outputs: int | None = None,
        fast_bf16: bool = False,
        kv_type: int | None = None,
    ) -> None: ...
    @property
    def router(self) -> Router: ...
    @property
    def kv(self) -> KVCache: ...
    def decode(self, batch: Batch) -> None: ...
    @overload
    def logits(self, row: int, numpy: Literal[False] = False) -> array.array[float]: ...
    @overload
    def logits(self, row: int, numpy: bool) -> _FloatArray: ...
    def speculate(
        self,
        token: int,
        pos: int,
        sampler: Sampler,
        n_draft: int = 4,
        draft_depth: int = 1,
        grammar: Grammar | None = None,
        n_max: int | None = None,
        seq: int = 0,
    ) -> tuple[list[int], int]: ...
    @overload
    def hidden(self, boundary: int, row: int, numpy: Literal[False] = False) -> array.array[float]: ...
    @overload
    def hidden(self, boundary: int, row: int, numpy: bool) -> _FloatArray: ...
    @overload
    def embeddings(
        self,
        seq: int = 0,
        pooling: Literal["mean", "last"] = "mean",
        normalize: bool = True,
        numpy: Literal[False] = False,
    ) -> array.array[float]: ...
    @overload
    def embeddings(
        self, seq: int = 0, pooling: Literal["mean", "last"] = "mean", normalize: bool = True, *, numpy: bool
    ) -> _FloatArray: ...
    @overload
    def embeddings(self, seq: int, pooling: Literal["mean", "last"], normalize: bool, numpy: bool) -> _FloatArray: ...
    @overload
    def embed(
        self,
        tokens: Iterable[int],
        seq: int = 0,
        pooling: Literal["mean", "last"] = "mean",
        normalize: bool = True,
        numpy: Literal[False] = False,
    ) -> array.array[float]: ...
    @overload
    def embed(
        self,
        tokens: Iterable[int],
        seq: int = 0,
        pooling: Literal["mean", "last"] = "mean",
        normalize: bool = True,
        *,
        numpy: bool,
    ) -> _FloatArray: ...
    @overload
    def embed(
        self, tokens: Iterable[int], seq: int, pooling: Literal["mean", "last"], normalize: bool, numpy: bool
    ) -> _FloatArray: ...
    def decode_tokens(self, tokens: Iterable[int], pos: int = 0, seq: int = 0, batch: Batch | None = None) -> int: ...
    @property
    def limit(self) -> int: ...
    def generate(
        self,
        prompt: str | Iterable[int],
        max_tokens: int = 64,
        sampler: Sampler | None = None,
        seq: int = 0,
        stop_at_eos: bool = True,
        context_shift: bool = True,
        n_keep: int = 0,
        grammar: Grammar | str | bytes | None = None,
        json_schema: _JsonSchema | None = None,
        speculate: int = 0,
        speculate_depth: int = 1,
        *,
        seed: int | None = ...,
        temperature: float | None = ...,
        top_k: int | None = ...,
        top_p: float | None = ...,
        min_p: float | None = ...,
        repeat_penalty: float | None = ...,
        repeat_last_n: int | None = ...,
    ) -> Generator[Token, None, None]: ...

class _Borrowed:
    def __init__(self, ctx: Context | Server) -> None: ...
    def close(self) -> None: ...
    def __enter__(self: _B) -> _B: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...

class Router(_Borrowed):
    def set_mode(self, mode: int, forced_depth: int = 0) -> None: ...
    @property
    def mode(self) -> int: ...
    def set_threshold(self, recursion: int, threshold: float) -> None: ...
    def threshold(self, recursion: int) -> float: ...
    def set_max_depth(self, max_depth: int) -> None: ...
    def set_exit(self, exit_mode: int, threshold: float) -> None: ...
    def depths(self) -> list[int]: ...
    def scores(self, row: int) -> list[float]: ...
    def logits(self, row: int) -> list[float]: ...
    def stats(self) -> RouterStats: ...
    def reset_stats(self) -> None: ...

class KVCache(_Borrowed):
    def clear(self) -> None: ...
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_keep(self, seq: int) -> None: ...
    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None: ...
    def seq_pos_max(self, seq: int) -> int: ...
    def bytes(self, recursion: int = -2) -> tuple[int, int]: ...
    def n_cells_used(self, recursion: int = -2) -> int: ...
    @property
    def mode(self) -> int: ...

class Server(_Handle):
    model: Model
    def __init__(
        self,
        model: Model,
        mode: int | None = None,
        n_slots: int | None = None,
        n_ctx: int | None = None,
        n_batch: int | None = None,
        n_threads: int | None = None,
        kv_mode: int | None = None,
        exit_mode: int | None = None,
        exit_threshold: float | None = None,
        on_token: Callable[[int, int, int], object] | None = None,
        abort: Callable[[], object] | None = None,
        prompt_reuse: bool = True,
        on_token_logits: Callable[[int, int, int, array.array[float]], object] | None = None,
        fast_bf16: bool = False,
        context_shift: bool = False,
        n_ctx_seq: int | None = None,
    ) -> None: ...
    @property
    def router(self) -> Router: ...
    def submit(
        self,
        prompt: str | Iterable[int],
        max_tokens: int = 64,
        stop: Iterable[int] = (),
        seed: int | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        repeat_penalty: float | None = None,
        repeat_last_n: int | None = None,
        grammar: Grammar | str | bytes | None = None,
        json_schema: _JsonSchema | None = None,
        speculate: int = 0,
        speculate_depth: int = 1,
        logit_bias: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
        dry_breakers: Iterable[Sequence[int]] | None = None,
        exit_threshold: float | None = None,
        n_keep: int | None = None,
        *,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        min_keep: int | None = None,
        typical_p: float | None = None,
        top_n_sigma: float | None = None,
        dynatemp_range: float | None = None,
        dynatemp_exponent: float | None = None,
        xtc_probability: float | None = None,
        xtc_threshold: float | None = None,
        mirostat: int | None = None,
        mirostat_tau: float | None = None,
        mirostat_eta: float | None = None,
        dry_multiplier: float | None = None,
        dry_base: float | None = None,
        dry_allowed_length: int | None = None,
        dry_penalty_last_n: int | None = None,
        samplers: Iterable[str | int] | None = None,
    ) -> int: ...
    def step(self) -> int: ...
    def run(self) -> None: ...
    def cancel(self, rid: int) -> None: ...
    def state(self, rid: int) -> int: ...
    def cached(self, rid: int) -> int: ...
    def slot(self, rid: int) -> int: ...
    def speculation(self, rid: int) -> tuple[int, int]: ...
    def shift(self, rid: int) -> tuple[int, int, int]: ...
    def tokens(self, rid: int) -> tuple[list[int], list[int]]: ...
    def release(self, rid: int) -> None: ...
