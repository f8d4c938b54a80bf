"""The packages' layering, read from the source with ``ast`` (nothing is imported).

* The runtime (``decoding``, ``lsp_server``) imports nothing from ``training`` or ``bench``: those
  depend on the runtime, never the other way; the CLI reaches them only through entry points.
* No import cycle among the project's modules, counting imports inside functions (a lazy import is
  still a dependency), and none in the runtime even counting those under ``if TYPE_CHECKING:`` (a
  type-only import is not executed, but a circle through it still ties two rooms together).
* The server's rooms keep to their rules (:data:`PACKAGE_RULES`, :data:`FORBIDDEN_RULES`).
* No runtime function is longer than :data:`MAX_FUNCTION_LINES` lines.

Each check is a function run on the real tree and on a small synthetic tree that breaks it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGES = ("decoding", "lsp_server", "training", "bench")
RUNTIME_PACKAGES = ("decoding", "lsp_server")
NOT_FROM_RUNTIME = ("training", "bench")


def project_modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_names(path: Path, module: str, type_checking: bool = False) -> set[str]:
    """Every module name ``path`` (module ``module``) imports, at any depth, relative imports resolved;
    ``from a import b`` gives ``a.b`` as well as ``a`` (``b`` may be a submodule). Imports under
    ``if TYPE_CHECKING:`` count only with ``type_checking``."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"), str(path))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _type_checking_only(node) and not type_checking:
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        pending.extend(ast.iter_child_nodes(node))
    return names


def forbidden_imports(root: Path, importers: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """``"module imports name"`` for each import of a ``forbidden`` package by a module of ``importers``."""
    found = []
    for module, path in project_modules(root, importers).items():
        for name in sorted(imported_names(path, module)):
            if name.split(".")[0] in forbidden:
                found.append(f"{module} imports {name}")
    return found


def import_graph(root: Path, packages: tuple[str, ...], type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the project modules it imports (the longest existing module name of each import)."""
    modules = project_modules(root, packages)
    graph = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module, type_checking):
            parts = name.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_runtime_imports_nothing_from_training_or_bench():
    assert forbidden_imports(ROOT, RUNTIME_PACKAGES, NOT_FROM_RUNTIME) == []


def test_the_layering_check_finds_a_runtime_module_that_imports_bench_or_training(tmp_path):
    root = _write(tmp_path, {
        "decoding/__init__.py": "",
        "decoding/ok.py": "import json\nfrom decoding import starter\n",
        "decoding/lazy.py": "def f():\n    from bench.corpus import stdlib_files\n",
        "lsp_server/__init__.py": "",
        "lsp_server/cli.py": "import training.train as t\n",
        "bench/__init__.py": "from decoding import ok\n",  # the allowed direction
    })
    assert forbidden_imports(root, RUNTIME_PACKAGES, NOT_FROM_RUNTIME) == [
        "decoding.lazy imports bench.corpus", "decoding.lazy imports bench.corpus.stdlib_files",
        "lsp_server.cli imports training.train"]


def test_the_project_has_no_import_cycles():
    graph = import_graph(ROOT, PROJECT_PACKAGES)
    assert {"decoding.engine", "lsp_server.cli", "training.evaluate", "bench.cuts"} <= set(graph)
    assert "bench.corpus" in graph["training.train"]  # the graph sees the edges it should
    assert import_cycles(graph) == []


def test_the_runtime_has_no_import_cycles_even_through_type_only_imports():
    graph = import_graph(ROOT, RUNTIME_PACKAGES, type_checking=True)
    assert "lsp_server.server" in graph["lsp_server.features.lifecycle"]  # a type-only edge is seen
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_lazy_and_relative_cycles_but_not_type_checking_ones(tmp_path):
    root = _write(tmp_path, {
        "decoding/__init__.py": "",
        "decoding/a.py": "from decoding.b import x\n",
        "decoding/b.py": "def f():\n    from . import a\n",  # lazy and relative: still a cycle
        "decoding/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from decoding.d import D\n",
        "decoding/d.py": "from decoding import c\n",  # c -> d only for type checking: no cycle
        "lsp_server/__init__.py": "",
        "lsp_server/cli.py": "from lsp_server import bench\n",
        "lsp_server/bench.py": "def add_parser():\n    from lsp_server.cli import cut_hole\n",
    })
    graph = import_graph(root, ("decoding", "lsp_server"))
    assert graph["decoding.c"] == set() and graph["decoding.d"] == {"decoding.c", "decoding"}
    assert import_cycles(graph) == [["decoding.a", "decoding.b"], ["lsp_server.bench", "lsp_server.cli"]]
    with_types = import_graph(root, ("decoding", "lsp_server"), type_checking=True)
    assert ["decoding.c", "decoding.d"] in import_cycles(with_types)


#: Torch-free value modules of the engine that any server room may name (tests/test_torch_free_types.py).
TORCH_FREE_DECODING = ("decoding.types", "decoding.errors", "decoding.stats", "decoding.weights.capabilities",
                       "decoding.weights.model_names")
#: What a room of the prompt side may import besides itself: the workspace, the resolved request, the
#: settings and the backend protocol (lsp_server.backends.base), and the engine's torch-free values.
PROMPT_SIDE = ("lsp_server.workspace", "lsp_server.request", "lsp_server.settings", "lsp_server.backends.base",
               *TORCH_FREE_DECODING)
#: Within lsp_server: (importing package, project packages it may import besides itself; None: any).
PACKAGE_RULES = {
    "lsp_server.workspace": ("lsp_server.workspace",),  # documents and files: nothing else of the server
    "lsp_server.protocol": ("lsp_server.protocol",),  # the wire: no model, no feature
    "lsp_server.completion": ("lsp_server.completion", *PROMPT_SIDE),  # the completion prompt and its trimming
    "lsp_server.next_edit": ("lsp_server.next_edit", *PROMPT_SIDE),  # the next-edit prompt, its formats and rules
}
#: Within lsp_server: (importing package, packages it never imports).
FORBIDDEN_RULES = {
    "lsp_server.model": ("lsp_server.requests", "lsp_server.features"),  # the model thread calls no request code
    "lsp_server.features": ("lsp_server.model", "lsp_server.backends"),  # handlers call services, never a model
    "lsp_server.backends": ("lsp_server.model", "lsp_server.requests", "lsp_server.features"),
}
#: The decoding modules that import torch (the engine and what it runs on) are named in lsp_server only by
#: the backends' package: a server on a remote backend never loads torch (tests/test_remote_no_torch.py).
TORCH_DECODING = ("decoding.engine", "decoding.generate", "decoding.kv_cache", "decoding.sampling", "decoding.weights.loading",
                  "decoding.choices",
                  "decoding.verify", "decoding.tree", "decoding.drafters", "decoding.weights.quantization")
ENGINE_IMPORTERS = ("lsp_server.backends",)


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def package_rule_breaks(root: Path) -> list[str]:
    """``"module imports name"`` for each import that breaks :data:`PACKAGE_RULES`, :data:`FORBIDDEN_RULES`
    or :data:`ENGINE_IMPORTERS`."""
    found = []
    for module, path in project_modules(root, RUNTIME_PACKAGES).items():
        names = sorted(imported_names(path, module))
        for package, allowed in PACKAGE_RULES.items():
            if _within(module, (package,)):
                found += [f"{module} imports {name}" for name in names
                          if name.split(".")[0] in RUNTIME_PACKAGES and name not in RUNTIME_PACKAGES
                          and not _within(name, allowed)]
        for package, forbidden in FORBIDDEN_RULES.items():
            if _within(module, (package,)):
                found += [f"{module} imports {name}" for name in names if _within(name, forbidden)]
        if module.startswith("lsp_server") and not _within(module, ENGINE_IMPORTERS):
            found += [f"{module} imports {name}" for name in names if _within(name, TORCH_DECODING)]
    return sorted(set(found), key=found.index)


def test_the_server_packages_keep_to_their_rules():
    assert {"lsp_server.workspace.documents", "lsp_server.protocol.transport"} <= set(project_modules(ROOT, RUNTIME_PACKAGES))
    assert package_rule_breaks(ROOT) == []


def test_the_package_rule_check_finds_a_workspace_module_that_reaches_out_and_an_engine_import(tmp_path):
    root = _write(tmp_path, {
        "decoding/__init__.py": "",
        "decoding/engine.py": "",
        "decoding/types.py": "",
        "lsp_server/__init__.py": "",
        "lsp_server/settings.py": "from decoding.types import EngineConfig\n",  # allowed: torch-free
        "lsp_server/model/session.py": "def f():\n    from decoding.engine import Engine\n",
        "lsp_server/workspace/__init__.py": "",
        "lsp_server/workspace/documents.py": "from lsp_server.workspace import positions\nfrom lsp_server import settings\n",
        "lsp_server/workspace/positions.py": "",
        "lsp_server/protocol/__init__.py": "",
        "lsp_server/protocol/transport.py": "from decoding.types import GenerationConfig\n",
        "lsp_server/completion/postprocess.py": "from decoding.generate import FinishReason\n",
        "lsp_server/backends/__init__.py": "",
        "lsp_server/backends/local.py": "from decoding.engine import Engine\n",  # allowed
    })
    assert package_rule_breaks(root) == [
        "lsp_server.completion.postprocess imports decoding.generate", "lsp_server.completion.postprocess imports decoding.generate.FinishReason",
        "lsp_server.model.session imports decoding.engine", "lsp_server.model.session imports decoding.engine.Engine",
        "lsp_server.protocol.transport imports decoding.types",
        "lsp_server.protocol.transport imports decoding.types.GenerationConfig",
        "lsp_server.workspace.documents imports lsp_server.settings"]


def test_the_room_rules_find_prompt_side_model_and_feature_breaks(tmp_path):
    root = _write(tmp_path, {
        "decoding/__init__.py": "",
        "decoding/types.py": "",
        "lsp_server/__init__.py": "",
        "lsp_server/completion/prompt.py": "from decoding.types import Generation\nfrom lsp_server.model import session\n",
        "lsp_server/next_edit/prompt.py": "from lsp_server.backends.base import RewritePrompt\n"
                                          "from lsp_server.requests.pipeline import RequestPipeline\n",
        "lsp_server/model/session.py": "def f():\n    from lsp_server.requests import pipeline\n",
        "lsp_server/features/lifecycle.py": "from lsp_server.backends.loading import load_backend\n"
                                            "from lsp_server.settings import parse_settings\n",  # allowed
    })
    assert package_rule_breaks(root) == [
        "lsp_server.completion.prompt imports lsp_server.model", "lsp_server.completion.prompt imports lsp_server.model.session",
        "lsp_server.features.lifecycle imports lsp_server.backends.loading",
        "lsp_server.features.lifecycle imports lsp_server.backends.loading.load_backend",
        "lsp_server.model.session imports lsp_server.requests", "lsp_server.model.session imports lsp_server.requests.pipeline",
        "lsp_server.next_edit.prompt imports lsp_server.requests.pipeline",
        "lsp_server.next_edit.prompt imports lsp_server.requests.pipeline.RequestPipeline"]


#: The longest a runtime function may be, in lines from its ``def`` to its last line.
MAX_FUNCTION_LINES = 60


def long_functions(root: Path, packages: tuple[str, ...], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``"module.qualname: N lines"`` for each function (methods and nested ones included) over ``limit``."""
    found = []
    for module, path in project_modules(root, packages).items():
        pending: list[tuple[ast.AST, str]] = [(ast.parse(path.read_text(encoding="utf-8")), module)]
        while pending:
            node, prefix = pending.pop()
            for child in ast.iter_child_nodes(node):
                name = f"{prefix}.{child.name}" if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else prefix
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = child.end_lineno - child.lineno + 1
                    if lines > limit:
                        found.append(f"{name}: {lines} lines")
                pending.append((child, name))
    return sorted(found)


def test_no_runtime_function_is_longer_than_the_limit():
    assert long_functions(ROOT, RUNTIME_PACKAGES) == []


def test_the_length_check_finds_a_long_method(tmp_path):
    method = "class A:\n    def f(self):\n" + "".join(f"        x{i} = {i}\n" for i in range(60))  # 61 lines
    function = "def g():\n" + "".join(f"    x{i} = {i}\n" for i in range(59))  # 60 lines: at the limit
    _write(tmp_path, {"decoding/__init__.py": "", "decoding/a.py": method + function})
    assert long_functions(tmp_path, ("decoding",)) == ["decoding.a.A.f: 61 lines"]
