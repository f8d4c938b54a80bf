"""``speclsp complete`` on a held-out standard-library file, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.corpus import stdlib_root
from tests.conftest import STARTER_FLAGS


pytestmark = pytest.mark.e2e

HELD_OUT_FILE = stdlib_root() / "json" / "decoder.py"


def speclsp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", *args], capture_output=True, text=True, timeout=600)


def complete(*args: str) -> subprocess.CompletedProcess:
    """``speclsp complete`` on the starter pair."""
    return speclsp("complete", *args, *STARTER_FLAGS)


def body_location() -> str:
    """FILE:LINE:COL (1-based) at the indentation of the first line after the first 'def'."""
    lines = HELD_OUT_FILE.read_text(encoding="utf-8").split("\n")
    line = next(i for i, text in enumerate(lines) if text.startswith("def ")) + 1
    return f"{HELD_OUT_FILE}:{line + 1}:{len(lines[line]) - len(lines[line].lstrip()) + 1}"


def test_complete_prints_a_completion_and_stats():
    result = complete(body_location(), "--cut-lines", "2", "--max-new-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert "tokens/pass=" in result.stderr and "accepted[" in result.stderr and "verify=" in result.stderr


def test_complete_json_and_plain_reference_equal_speculative():
    outputs = {}
    for drafter in ("none", "ngram", "model", "auto"):
        result = complete(body_location(), "--cut-lines", "2", "--max-new-tokens", "24",
                         "--drafter", drafter, "--json", "--dtype", "float32")  # exact equality: fp32
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        (completion,) = payload["completions"]
        assert completion["insert_text"].strip(), completion
        assert completion["stats"]["new_tokens"] == len(completion["token_ids"]) > 0
        assert completion["stats"]["target_passes"] >= 1
        assert payload["removed"]
        outputs[drafter] = completion["token_ids"]
        if drafter == "none":
            assert completion["stats"]["drafted"] == 0
            assert completion["stats"]["target_passes"] == completion["stats"]["new_tokens"]
    assert outputs["ngram"] == outputs["model"] == outputs["auto"] == outputs["none"]


def test_sampling_with_seed_is_reproducible_and_num_samples():
    args = ("complete", body_location(), "--cut-lines", "2", "--max-new-tokens", "12", "--temperature", "0.8",
            "--top-k", "20", "--top-p", "0.95", "--seed", "7", "--num-samples", "2", "--json", *STARTER_FLAGS)
    first, second = speclsp(*args), speclsp(*args)
    assert first.returncode == 0, first.stderr
    runs = [[c["token_ids"] for c in json.loads(r.stdout)["completions"]] for r in (first, second)]
    assert runs[0] == runs[1] and len(runs[0]) == 2
    texts = [c["insert_text"] for c in json.loads(first.stdout)["completions"]]
    assert all(text.strip() for text in texts), texts


@pytest.mark.parametrize("location,message", [
    ("nowhere.py:1:1", "cannot read"),
    ("decoder.py", "expected FILE:LINE:COL"),
    (f"{HELD_OUT_FILE}:0:1", "1-based"),
    (f"{HELD_OUT_FILE}:99999:1", "past the last line"),
    (f"{HELD_OUT_FILE}:1:999", "past the end of line"),
])
def test_bad_locations_give_clear_errors(location, message):
    result = complete(location)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_binary_and_undecodable_files_are_refused(tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02")
    latin = tmp_path / "latin.py"
    latin.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))
    for path, message in ((binary, "binary"), (latin, "not UTF-8")):
        result = complete(f"{path}:1:1")
        assert result.returncode == 2 and message in result.stderr


def test_missing_model_is_a_clear_error(tmp_path):
    result = speclsp("complete", body_location(), "--model", str(tmp_path / "no-such-model"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


def test_without_model_packs_the_defaults_fall_back_to_the_starter_and_say_how_to_install():
    from decoding.weights.model_packs import INSTALL_COMMAND

    hidden = ("import sys, decoding.weights.model_names as names; names.pack_available = lambda name: False; "
              "from lsp_server.cli import main; raise SystemExit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", hidden, "complete", body_location(), "--cut-lines", "2",
                             "--max-new-tokens", "4"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), result.stderr
    assert "loading target model starter" in result.stderr and "loading draft model starter-draft" in result.stderr
    assert "note: the real code models" in result.stderr and INSTALL_COMMAND in result.stderr


def test_bench_eval_and_train_commands_come_from_their_entry_points():
    """The installed ``speclsp.commands`` entry points register every command and its subcommands
    (a stale install without them fails here: reinstall with pip install -e .)."""
    from bench import cuts, decode, lsp
    from lsp_server.cli import build_parser
    from training import evaluate

    parser = build_parser()
    assert parser.parse_args(["bench", "cuts", "--cuts", "2"]).run is cuts.run
    assert parser.parse_args(["bench", "lsp", "--quick"]).run is lsp.run
    assert parser.parse_args(["bench", "decode", "--quick", "--methods", "ngram"]).run is decode.run
    assert parser.parse_args(["eval", "models", "--quick", "--json"]).run is evaluate.run_models
    train = parser.parse_args(["train-starter", "--target-minutes", "1", "--help"])  # all for training.train
    assert train.train_args == ["--target-minutes", "1", "--help"] and callable(train.run)


class _FailingRegistration:
    """An entry point whose module loads but whose ``add_parser`` fails after adding its command."""

    name = "half"

    def load(self):
        def add_parser(commands):
            commands.add_parser("half")
            raise RuntimeError("registration failed")
        return add_parser


def test_a_command_whose_plugin_fails_reports_it_and_the_other_commands_work(monkeypatch, capsys):
    import importlib.metadata

    from lsp_server import cli

    group = cli.COMMANDS_GROUP
    installed = [importlib.metadata.EntryPoint(name="broken", value="no_such_speclsp_plugin:add_parser", group=group),
                 importlib.metadata.EntryPoint(name="bench", value="bench.commands:add_parser", group=group),
                 _FailingRegistration()]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: installed)
    parser = cli.build_parser()
    assert parser.parse_args(["serve"]).run is cli.run_serve
    assert parser.parse_args(["bench", "cuts"]).run.__module__ == "bench.cuts"
    assert cli.main(["broken", "--any", "flags"]) == 2
    error = capsys.readouterr().err
    assert "the 'broken' command is not available: ModuleNotFoundError" in error and "no_such_speclsp_plugin" in error
    assert "pip install 'speclsp[bench,training]'" in error
    assert cli.main(["half"]) == 2
    assert "the 'half' command is not available: RuntimeError: registration failed" in capsys.readouterr().err


def test_import_warnings_of_torchao_stay_off_stderr_unless_verbose():
    """torchao (imported by transformers whenever installed) warns at import that its CUDA extensions do
    not load on a CPU build: off the server's stderr by default, shown with ``--verbose``; errors always."""
    import logging

    from lsp_server.cli import LOGGER_LEVELS, set_logger_levels

    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    root, levels = logging.getLogger(), {name: logging.getLogger(name).level for name in LOGGER_LEVELS}
    old_root_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        set_logger_levels(verbose=False)
        logging.getLogger("torchao").warning("Failed to load _C_mxfp8.so")
        logging.getLogger("torchao").error("a real error")
        assert seen == ["a real error"]
        set_logger_levels(verbose=True)
        logging.getLogger("torchao").warning("Failed to load _C_mxfp8.so")
        assert seen[-1] == "Failed to load _C_mxfp8.so"
    finally:
        root.removeHandler(handler)
        root.setLevel(old_root_level)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
