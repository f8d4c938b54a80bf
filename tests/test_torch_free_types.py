"""The engine's value types import without torch or transformers (decoding/types.py), checked in a fresh
interpreter: an import finder there refuses torch and transformers and records who asked, so the check
also sees an import made deep inside a dependency, and a module that does import torch fails fast
(nothing heavy is loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers")
#: Modules that callers import without loading a model (settings, remote backends, option parsing).
TORCH_FREE = ("decoding.types", "decoding.stats", "decoding.weights.capabilities", "decoding.weights.model_names",
              "decoding.errors")

# Run with `python -c PROBE HEAVY_JSON MODULES_JSON`; prints a JSON list of "importer imports name", plus
# "<module> failed: <error>" for a module that did not import, plus "sys.modules holds <name>".
PROBE = r"""
import importlib, json, sys
heavy, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = []

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in heavy:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back  # importlib's own frames: the importer is the first other one
        importer = frame.f_globals.get("__name__", "?") if frame is not None else "?"
        found.append(f"{importer} imports {name}")
        raise ModuleNotFoundError(f"{name} refused by the torch-free check")

sys.meta_path.insert(0, Refuse())
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as exc:
        found.append(f"{module} failed: {type(exc).__name__}: {exc}")
found += [f"sys.modules holds {name}" for name in heavy if name in sys.modules]
print(json.dumps(found))
"""


def heavy_imports(modules: tuple[str, ...], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """What importing ``modules`` in a fresh interpreter (cwd: the repository) tried to import of
    ``heavy`` (see PROBE); empty when they are free of it."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(heavy), json.dumps(modules)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_the_value_types_and_their_dependencies_import_without_torch_or_transformers():
    assert heavy_imports(TORCH_FREE) == []


def test_the_check_reports_a_module_that_imports_torch():
    found = heavy_imports(("decoding.types", "decoding.generate"))
    assert found[0] == "decoding.generate imports torch"
    assert found[1].startswith("decoding.generate failed: ModuleNotFoundError: torch refused")


#: What a server on a remote backend imports to start and serve (transformers is allowed there: the
#: tokenizer; torch is not).
REMOTE_SERVER = ("lsp_server.cli", "lsp_server.server", "lsp_server.features", "lsp_server.backends.loading",
                 "lsp_server.backends.openai", "lsp_server.backends.llamacpp_infill", "lsp_server.backends.remote",
                 "lsp_server.model.session")


def loads_torch(modules: tuple[str, ...]) -> bool:
    """Whether importing ``modules`` in a fresh interpreter puts torch in ``sys.modules``. Plainly imported,
    not refused: transformers asks whether torch could be imported without importing it."""
    probe = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stdout.split()[-1] == "True"


def test_the_server_and_its_remote_backends_import_without_torch():
    """The fast check of tests/test_remote_no_torch.py (a served completion under -X importtime)."""
    assert not loads_torch(REMOTE_SERVER)


def test_the_check_sees_torch_under_the_local_backend():
    assert loads_torch(("lsp_server.backends.local",))
