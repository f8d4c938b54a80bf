"""A broken model cache and two editors on a cold one (issue 53, items 4 and 5), with real processes.

Each case runs :mod:`tests.cache_child` (a model pack of a tiny random Qwen2 GGUF file, 2.7 MB in
three parts; assembly, the lock, the dequantisation, safetensors, the record and loading are the real
code) in a cache of its own (``$SPECLSP_CACHE_DIR`` under ``tmp_path``, never the user's): a process killed with SIGKILL while
assembling and while converting, converted weights cut short, an assembled GGUF cut short, a disk
that fills up (a small tmpfs), and two processes, then two servers, started together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from decoding.errors import ModelLoadError
from decoding.weights import model_packs
from decoding.weights.gguf_files import pack_gguf_path
from decoding.weights.gguf_models import MARKER, is_converted
from tests.cache_child import NAME, fake_pack, install_parts, split, write_tiny_gguf
from tests.raw_lsp import RawServer, notification

pytestmark = pytest.mark.adversarial

ROOT = Path(__file__).resolve().parents[1]
CHILD = (sys.executable, "-m", "tests.cache_child")
DEADLINE_S = 120.0  # for one child: it imports torch and transformers (seconds) and converts about 1 MB


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    """The pack's parts: the tiny GGUF file, written once, in three."""
    return split(write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: list[bytes]) -> Path:
    """An empty cache of this test's own, with the fake pack's parts installed beside it."""
    install_parts(tmp_path / "site", parts)
    monkeypatch.setenv("SPECLSP_TEST_SITE", str(tmp_path / "site"))
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def pack_of(cache: Path):
    """The pack whose parts :func:`cache` installed beside ``cache``."""
    from tests.cache_child import installed_parts

    return fake_pack(installed_parts(cache.parent / "site"))


def model_dir(cache: Path) -> Path:
    pack = pack_of(cache)
    return cache / "models" / f"{pack.name}-{pack.sha256[:12]}"


def run_child(**env: str) -> tuple[int, list[str]]:
    """Run ``cache_child load`` to its end: (exit code, its stdout lines)."""
    done = subprocess.run(CHILD + ("load",), cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=DEADLINE_S)
    assert done.returncode in (0, 2), done.stderr[-3000:]
    return done.returncode, done.stdout.splitlines()


def kill_at(point: str, tmp_path: Path) -> None:
    """Start ``cache_child load`` paused at ``point`` and kill it there with SIGKILL."""
    signal_file = tmp_path / f"reached-{point}"
    child = subprocess.Popen(CHILD + ("load",), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env={**os.environ, "SPECLSP_TEST_PAUSE": point, "SPECLSP_TEST_SIGNAL": str(signal_file)})
    deadline = time.monotonic() + DEADLINE_S
    while not signal_file.exists():
        assert child.poll() is None, child.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, f"the child never reached {point}"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    assert child.wait(DEADLINE_S) == -signal.SIGKILL
    child.stderr.close()


def rebuilt_with_one_message(lines: list[str], words: str) -> None:
    """The start after a broken cache: exactly one stage line says what was found (``words``) and that it
    converts again; the model was converted and loaded."""
    said = [line for line in lines if words in line]
    assert len(said) == 1 and "again" in said[0], lines
    assert any(line.startswith("stage: fake-coder converted into") for line in lines), lines
    assert lines[-1].startswith("loaded "), lines


def test_a_start_killed_while_assembling_is_rebuilt_with_one_message(cache, tmp_path):
    kill_at("assemble", tmp_path)
    work = [p for p in (cache / "models").iterdir() if p.is_dir()]
    assert len(work) == 1 and work[0].name.startswith(".fake-coder-"), "the half-assembled file is in a work folder"
    half = work[0] / f"{NAME}.gguf"
    assert 0 < half.stat().st_size < pack_of(cache).size
    assert not is_converted(model_dir(cache), pack_of(cache).sha256)
    code, lines = run_child()
    assert code == 0
    rebuilt_with_one_message(lines, "an earlier conversion of fake-coder was interrupted")
    assert not work[0].exists(), "a killed start's work folder is removed"
    assert is_converted(model_dir(cache), pack_of(cache).sha256)


def test_a_start_killed_while_converting_is_rebuilt_and_unrecorded_weights_never_load(cache, tmp_path):
    kill_at("convert", tmp_path)
    work = [p for p in (cache / "models").iterdir() if p.is_dir()]
    assert len(work) == 1 and (work[0] / "model" / "model.safetensors").stat().st_size > 0
    assert not (work[0] / "model" / MARKER).exists(), "killed before the record, which is written last"
    # What a build without the work folder would have left: the weights in place, with no record.
    (work[0] / "model").rename(model_dir(cache))
    code, lines = run_child()
    assert code == 0
    rebuilt_with_one_message(lines, f"is unusable: it has no {MARKER}")
    assert not any("was interrupted" in line for line in lines), "one message, not two"
    assert not work[0].exists() and is_converted(model_dir(cache), pack_of(cache).sha256)


def test_converted_weights_cut_short_are_named_and_converted_again(cache):
    assert run_child()[0] == 0
    weights = model_dir(cache) / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as cut:
        cut.truncate(size // 2)
    code, lines = run_child()
    assert code == 0
    rebuilt_with_one_message(lines, f"model.safetensors holds {size // 2} bytes, not the {size} recorded")
    assert weights.stat().st_size == size


def test_an_assembled_gguf_cut_short_or_left_half_written_is_assembled_again(cache, monkeypatch, parts):
    monkeypatch.syspath_prepend(str(cache.parent / "site"))
    monkeypatch.setitem(model_packs.PACKS, NAME, pack_of(cache))
    path = pack_gguf_path(NAME)
    with open(path, "r+b") as cut:
        cut.truncate(1000)
    stages: list[str] = []
    assert pack_gguf_path(NAME, stages.append) == path and path.read_bytes() == b"".join(parts)
    assert stages == [f"the assembled {NAME} in {path} is unusable: it holds 1000 bytes, not the "
                      f"{pack_of(cache).size} pinned (cut short or altered); assembling it again"]
    path.unlink()
    killed = path.with_name(f".{path.name}.99999")  # a killed assembly's temporary file
    killed.write_bytes(b"GGUF half")
    stages.clear()
    assert pack_gguf_path(NAME, stages.append) == path and not killed.exists()
    assert len(stages) == 1 and "interrupted" in stages[0]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 100 KB (smaller than the pack's 2.7 MB GGUF file), unmounted afterwards. Needs root and
    ``mount``; skipped where mounting is refused."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100k", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def resize(mount_point: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount_point)], check=True)


def assert_full_disk_error(lines: list[str]) -> None:
    assert lines[-1].startswith("error: cannot ") and "No space left on device" in lines[-1], lines
    assert "free some space or set SPECLSP_CACHE_DIR" in lines[-1], lines


def test_a_disk_that_fills_while_assembling_or_converting_is_a_clear_error_and_leaves_nothing(cache, small_disk):
    env = {"SPECLSP_CACHE_DIR": str(small_disk)}
    code, lines = run_child(**env)  # 100 KB: the assembled GGUF does not fit
    assert code == 2
    assert_full_disk_error(lines)
    resize(small_disk, "3m")  # the 2.7 MB GGUF fits, the 1.2 MB of weights do not: safetensors hits ENOSPC
    code, lines = run_child(**env)
    assert code == 2 and any("converting fake-coder" in line for line in lines)
    assert_full_disk_error(lines)
    left = [p.name for p in small_disk.rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    assert left == [], f"a failed conversion left {left}"
    resize(small_disk, "16m")  # space freed: the next start converts and loads
    code, lines = run_child(**env)
    assert code == 0 and lines[-1].startswith("loaded ")
    assert is_converted(small_disk / "models" / model_dir(cache).name, pack_of(cache).sha256)


def test_two_processes_on_a_cold_cache_convert_once_and_the_waiting_one_says_why(cache, tmp_path):
    conversions = tmp_path / "conversions"
    env = {**os.environ, "SPECLSP_TEST_READ_S": "4", "SPECLSP_TEST_CONVERSIONS": str(conversions)}
    children = [subprocess.Popen(CHILD + ("load",), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [child.communicate(timeout=DEADLINE_S) for child in children]
    for child, (out, err) in zip(children, outputs):
        assert child.returncode == 0 and out.splitlines()[-1].startswith("loaded "), err[-3000:]
    assert len(conversions.read_text().splitlines()) == 1, "two processes converted the same model"
    waited = [out for out, _ in outputs if "another speclsp process is converting fake-coder" in out]
    assert len(waited) == 1, [out for out, _ in outputs]
    assert "waiting for it to finish" in waited[0] and "the other process finished after" in waited[0]


def test_two_servers_started_together_on_a_cold_cache_convert_once_and_both_answer(cache, tmp_path):
    conversions = tmp_path / "conversions"
    env = {**os.environ, "SPECLSP_TEST_READ_S": "6", "SPECLSP_TEST_CONVERSIONS": str(conversions)}
    servers = [RawServer(CHILD + ("serve",), env=env) for _ in range(2)]
    try:
        for server in servers:
            server.initialize(**{"model.target": NAME, "model.draft": "none", "completion.maxNewTokens": 4})
        for n, server in enumerate(servers):
            server.wait_ready(timeout=DEADLINE_S)
            uri = f"file:///editor{n}/a.py"
            server.send(notification("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": "def add(a, b):\n    return "}}))
            answer = server.response(server.call("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri}, "position": {"line": 1, "character": 11}, "context": {"triggerKind": 1}}))
            assert "result" in answer and "error" not in answer, answer
        assert len(conversions.read_text().splitlines()) == 1, "two servers converted the same model"
        logs = [[m["params"]["message"] for m in s.messages if m.get("method") == "window/logMessage"] for s in servers]
        waited = [log for log in logs if any("another speclsp process is converting fake-coder" in line for line in log)]
        assert len(waited) == 1, logs
    finally:
        for server in servers:
            server.close()


def test_assembly_errors_keep_reading_and_writing_apart(tmp_path, parts):
    pack = fake_pack(parts)
    with pytest.raises(ModelLoadError, match="cannot read its part"):
        model_packs.assemble([tmp_path / "missing.bin"], tmp_path / "out.gguf", pack.size, pack.sha256, NAME)
    (tmp_path / "part.bin").write_bytes(b"".join(parts))
    with pytest.raises(OSError):  # the caller names its cache and what to do (gguf_models.cache_write_error)
        model_packs.assemble([tmp_path / "part.bin"], tmp_path / "no-dir" / "out.gguf", pack.size, pack.sha256, NAME)
    assert not (tmp_path / "out.gguf").exists()
