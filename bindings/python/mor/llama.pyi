# Type stubs of mor.llama (llama-cpp-python's API). The returned dicts are
# TypedDicts named as llama-cpp-python's llama_types names them, with mor's
# extra "mor" entry in each choice. tests/test_python_types.py checks them.
import os
from typing import Any, Iterable, Iterator, Mapping, Sequence, TypeVar, overload

from typing_extensions import Final, Literal, NotRequired, TypedDict   # for Python 3.7 too

from . import Model, _JsonSchema

__all__ = ["Llama", "LlamaGrammar", "LLAMA_DEFAULT_SEED"]

LLAMA_DEFAULT_SEED: Final = 0xFFFFFFFF

_G = TypeVar("_G", bound="LlamaGrammar")
_L = TypeVar("_L", bound="Llama")

class MorTokens(TypedDict):
    """libmor's own entry of each choice: the generated token ids and the
    recursions each ran."""

    token_ids: list[int]
    depths: list[int]

# -- text completions ----------------------------------------------------------
class CompletionLogprobs(TypedDict):
    text_offset: list[int]
    token_logprobs: list[float]
    tokens: list[str]
    top_logprobs: list[dict[str, float]]

class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"]
    mor: MorTokens

class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

class CreateCompletionResponse(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage

class CompletionStreamChoice(TypedDict):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length"] | None
    mor: NotRequired[MorTokens]

class CreateCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionStreamChoice]

# -- chat completions ----------------------------------------------------------
class ChatCompletionRequestMessageContentPartText(TypedDict):
    type: Literal["text"]
    text: str

class ChatCompletionRequestMessage(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[ChatCompletionRequestMessageContentPartText] | None
    tool_calls: NotRequired[list[ChatCompletionMessageToolCall]]
    tool_call_id: NotRequired[str]

class ChatCompletionToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[_JsonSchema]

class ChatCompletionTool(TypedDict):
    type: Literal["function"]
    function: ChatCompletionToolFunction

class ChatCompletionNamedToolChoiceFunction(TypedDict):
    name: str

class ChatCompletionNamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction

class ChatCompletionMessageToolCallFunction(TypedDict):
    name: str
    arguments: str

class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatCompletionMessageToolCallFunction

class ChatCompletionMessageToolCallChunkFunction(TypedDict):
    name: NotRequired[str]
    arguments: str

class ChatCompletionMessageToolCallChunk(TypedDict):
    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: ChatCompletionMessageToolCallChunkFunction

class ChatCompletionRequestResponseFormat(TypedDict):
    type: Literal["text", "json_object", "json_schema"]
    schema: NotRequired[_JsonSchema]
    json_schema: NotRequired[Mapping[str, Any]]

class ChatCompletionResponseMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[ChatCompletionMessageToolCall]]

class ChatCompletionTopLogprobToken(TypedDict):
    token: str
    logprob: float
    bytes: list[int]

class ChatCompletionLogprobToken(TypedDict):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[ChatCompletionTopLogprobToken]

class ChatCompletionLogprobs(TypedDict):
    content: list[ChatCompletionLogprobToken]

class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: ChatCompletionLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"]
    mor: MorTokens

class CreateChatCompletionResponse(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatCompletionResponseChoice]
    usage: CompletionUsage

class ChatCompletionStreamResponseDelta(TypedDict):
    role: NotRequired[Literal["assistant"]]
    content: NotRequired[str]
    tool_calls: NotRequired[list[ChatCompletionMessageToolCallChunk]]

class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: ChatCompletionStreamResponseDelta
    logprobs: ChatCompletionLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls"] | None
    mor: NotRequired[MorTokens]

class CreateChatCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatCompletionStreamResponseChoice]

# -- embeddings ------------------------------------------------------------------
class Embedding(TypedDict):
    object: Literal["embedding"]
    embedding: list[float]
    index: int

class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int

class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: list[Embedding]
    usage: EmbeddingUsage

# -- the API ---------------------------------------------------------------------
class LlamaGrammar:
    gbnf: str
    def __init__(self, gbnf: str) -> None: ...
    @classmethod
    def from_string(cls: type[_G], grammar: str, verbose: bool = True) -> _G: ...
    @classmethod
    def from_file(cls: type[_G], file: str | os.PathLike[str], verbose: bool = True) -> _G: ...
    @classmethod
    def from_json_schema(cls: type[_G], json_schema: _JsonSchema, verbose: bool = True) -> _G: ...

_PromptArg = str | bytes | Sequence[int]
_StopArg = str | Sequence[str] | None
_GrammarArg = LlamaGrammar | str | None
_MessagesArg = Sequence[ChatCompletionRequestMessage | Mapping[str, object]]

class Llama:
    model_path: str
    verbose: bool
    model: Model
    last_n_tokens_size: int
    embedding: bool
    chat_format: str
    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        seed: int = 0xFFFFFFFF,
        chat_format: str | None = None,
        verbose: bool = True,
        embedding: bool = False,
        use_mmap: bool = True,
        vocab_only: bool = False,
        last_n_tokens_size: int = 64,
        type_k: int | None = None,
        type_v: int | None = None,
        routing: Literal["default", "topk", "threshold", "forced", "token"] | int | None = None,
        forced_depth: int = 0,
        exit_thresholds: Sequence[float] | None = None,
        speculate: int = 0,
        speculate_depth: int = 1,
        # llama-cpp-python's arguments that have no effect here
        n_gpu_layers: int = ...,
        split_mode: int = ...,
        main_gpu: int = ...,
        tensor_split: Sequence[float] | None = ...,
        use_mlock: bool = ...,
        n_ubatch: int = ...,
        flash_attn: bool = ...,
        offload_kqv: bool = ...,
        op_offload: bool | None = ...,
        swa_full: bool | None = ...,
        numa: bool | int = ...,
        mul_mat_q: bool = ...,
        logits_all: bool = ...,
        kv_overrides: dict[str, bool | int | float | str] | None = ...,
        rpc_servers: str | None = ...,
        no_perf: bool = ...,
        embd_normalize: int = ...,
    ) -> None: ...
    def n_ctx(self) -> int: ...
    def n_vocab(self) -> int: ...
    def n_embd(self) -> int: ...
    def token_bos(self) -> int: ...
    def token_eos(self) -> int: ...
    def tokenize(self, text: bytes | str, add_bos: bool = True, special: bool = False) -> list[int]: ...
    def detokenize(
        self, tokens: Iterable[int], prev_tokens: Sequence[int] | None = None, special: bool = False
    ) -> bytes: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self: _L) -> _L: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
    @overload
    def __call__(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: Literal[False] = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> CreateCompletionResponse: ...
    @overload
    def __call__(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        *,
        stream: Literal[True],
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> Iterator[CreateCompletionStreamResponse]: ...
    @overload
    def __call__(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> CreateCompletionResponse | Iterator[CreateCompletionStreamResponse]: ...
    @overload
    def create_completion(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: Literal[False] = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> CreateCompletionResponse: ...
    @overload
    def create_completion(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        *,
        stream: Literal[True],
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> Iterator[CreateCompletionStreamResponse]: ...
    @overload
    def create_completion(
        self,
        prompt: _PromptArg,
        suffix: None = None,
        max_tokens: int | None = 16,
        temperature: float = 0.8,
        top_p: float = 0.95,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        logprobs: int | None = None,
        echo: bool = False,
        stop: _StopArg = None,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        top_k: int = 40,
        stream: bool = False,
        seed: int | None = None,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        stopping_criteria: None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
    ) -> CreateCompletionResponse | Iterator[CreateCompletionStreamResponse]: ...
    @overload
    def create_chat_completion(
        self,
        messages: _MessagesArg,
        functions: Sequence[ChatCompletionToolFunction] | None = None,
        function_call: Literal["auto", "none"] | ChatCompletionNamedToolChoiceFunction | None = None,
        tools: Sequence[ChatCompletionTool] | None = None,
        tool_choice: Literal["auto", "none", "required"] | ChatCompletionNamedToolChoice | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: Literal[False] = False,
        stop: _StopArg = None,
        seed: int | None = None,
        response_format: ChatCompletionRequestResponseFormat | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        parallel_tool_calls: bool = True,
    ) -> CreateChatCompletionResponse: ...
    @overload
    def create_chat_completion(
        self,
        messages: _MessagesArg,
        functions: Sequence[ChatCompletionToolFunction] | None = None,
        function_call: Literal["auto", "none"] | ChatCompletionNamedToolChoiceFunction | None = None,
        tools: Sequence[ChatCompletionTool] | None = None,
        tool_choice: Literal["auto", "none", "required"] | ChatCompletionNamedToolChoice | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        *,
        stream: Literal[True],
        stop: _StopArg = None,
        seed: int | None = None,
        response_format: ChatCompletionRequestResponseFormat | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        parallel_tool_calls: bool = True,
    ) -> Iterator[CreateChatCompletionStreamResponse]: ...
    @overload
    def create_chat_completion(
        self,
        messages: _MessagesArg,
        functions: Sequence[ChatCompletionToolFunction] | None = None,
        function_call: Literal["auto", "none"] | ChatCompletionNamedToolChoiceFunction | None = None,
        tools: Sequence[ChatCompletionTool] | None = None,
        tool_choice: Literal["auto", "none", "required"] | ChatCompletionNamedToolChoice | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: _StopArg = None,
        seed: int | None = None,
        response_format: ChatCompletionRequestResponseFormat | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        tfs_z: float = 1.0,
        mirostat_mode: int = 0,
        mirostat_tau: float = 5.0,
        mirostat_eta: float = 0.1,
        model: str | None = None,
        logits_processor: None = None,
        grammar: _GrammarArg = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        parallel_tool_calls: bool = True,
    ) -> CreateChatCompletionResponse | Iterator[CreateChatCompletionStreamResponse]: ...
    @overload
    def embed(
        self, input: str, normalize: bool = False, truncate: bool = True, return_count: Literal[False] = False
    ) -> list[float]: ...
    @overload
    def embed(
        self, input: str, normalize: bool = False, truncate: bool = True, *, return_count: Literal[True]
    ) -> tuple[list[float], int]: ...
    @overload
    def embed(
        self, input: list[str], normalize: bool = False, truncate: bool = True, return_count: Literal[False] = False
    ) -> list[list[float]]: ...
    @overload
    def embed(
        self, input: list[str], normalize: bool = False, truncate: bool = True, *, return_count: Literal[True]
    ) -> tuple[list[list[float]], int]: ...
    def create_embedding(self, input: str | list[str], model: str | None = None) -> CreateEmbeddingResponse: ...
