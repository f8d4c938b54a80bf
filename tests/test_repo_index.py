"""The repository index (.gitignore, defaults, secrets, binary/huge/undecodable files, budget), its
watchdog watcher, cross-file snippet selection, the repository-level prompt, and the rules on roots
and secret documents (hostile workspaces: tests/test_adversarial_workspace.py)."""

from __future__ import annotations

import os
import re
import tempfile
import time
import unittest.mock
from pathlib import Path

import pytest
from lsprotocol import types

from lsp_server.workspace.documents import Document
from lsp_server.workspace.file_rules import refused_root, uri_looks_secret
from lsp_server.workspace.file_watch import IndexWatcher
from lsp_server.workspace.index_service import _summary, choose_roots
from lsp_server.workspace.positions import codec_for
from lsp_server.completion.prompt import build_prompt
from lsp_server.completion.related_files import Candidate, candidates, select_snippets
from lsp_server.workspace.repo_index import IndexConfig, RepoIndex, identifiers, is_secret
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.settings.spec import BY_KEY, BY_OLD_KEY

pytestmark = pytest.mark.unit


def write(root: Path, relative: str, data: str | bytes) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    write(root, "app/main.py", "def main():\n    return helper_value()\n")
    write(root, "app/util.py", "def helper_value():\n    return 42\r\n")
    write(root, "README.md", "# proj\n")
    write(root, ".gitignore", "generated/\n*.log\n")
    write(root, "generated/out.py", "x = 1\n")
    write(root, "debug.log", "log line\n")
    write(root, "lib/.gitignore", "local_only.py\n")
    write(root, "lib/local_only.py", "y = 2\n")
    write(root, "lib/shared.py", "z = 3\n")
    write(root, "node_modules/pkg/index.js", "module.exports = 1;\n")
    write(root, ".venv/lib/site.py", "import os\n")
    write(root, ".git/config", "[core]\n")
    write(root, "image.png", b"\x89PNG\r\n\x1a\n\0\0\0")
    write(root, "latin1.py", "caf\xe9 = 1\n".encode("latin-1"))
    write(root, "huge.py", "a = 1\n" * 400)  # 2400 bytes: over the test's limit
    for secret in (".env", ".env.local", "id_rsa", "keys/server.pem", "deploy.key", "credentials.json",
                   ".ssh/config", "config/secrets.yaml", ".npmrc"):
        write(root, secret, "TOKEN=hunter2\n")
    return root


def indexed(index: RepoIndex) -> set[str]:
    return {index.relative(p) for p in index.paths()}


def test_scan_respects_gitignore_defaults_secrets_and_text_only(workspace):
    index = RepoIndex([workspace], IndexConfig(max_file_bytes=2000))
    index.scan()
    assert indexed(index) == {"app/main.py", "app/util.py", "README.md", ".gitignore", "lib/.gitignore",
                              "lib/shared.py"}
    assert index.text(workspace / "app/util.py") == "def helper_value():\n    return 42\n"  # \n line breaks
    assert index.skipped["binary"] == 1 and index.skipped["undecodable"] == 1 and index.skipped["large"] == 1
    assert index.skipped["secret"] >= 7
    assert not any("hunter2" in entry.text for entry in index.entries())


@pytest.mark.parametrize("path", [".env", ".env.production", "a/b/.env", "id_rsa", "id_ed25519.pub", "x/server.pem",
                                  "tls.key", "credentials.json", ".aws/credentials", ".ssh/known_hosts",
                                  "client_secret_123.json", ".git-credentials",
                                  # backup, swap and lock copies of secrets (editors leave them beside the file)
                                  ".env~", ".env.swp", "#.env#", ".#.env", "server.key.bak", "app/.env.orig",
                                  "id_rsa.old", "credentials~", "tls.key.dpkg-old"])
def test_secret_looking_paths(path):
    assert is_secret(path)


@pytest.mark.parametrize("path", ["src/env.py", "keyboard.py", "docs/secrets_handling.md", "tokenizer.py",
                                  "main.py~", "notes.bak", "a.py.orig", "~"])
def test_ordinary_paths_are_not_secret(path):
    assert not is_secret(path)


def test_secrets_stay_out_even_when_included(workspace):
    index = RepoIndex([workspace], IndexConfig(include=("*",), exclude=("README.md",)))
    index.scan()
    files = indexed(index)
    assert ".env" not in files and "id_rsa" not in files and "README.md" not in files
    only_py = RepoIndex([workspace], IndexConfig(include=("*.py",)))
    only_py.scan()
    assert indexed(only_py) == {"app/main.py", "app/util.py", "lib/shared.py", "huge.py"}


def test_token_budget_drops_the_least_recently_modified(workspace):
    index = RepoIndex([workspace], IndexConfig(include=("app/*.py",), max_tokens=12))
    old, new = workspace / "app/main.py", workspace / "app/util.py"
    os.utime(old, ns=(1_000_000_000, 1_000_000_000))
    index.scan()
    assert indexed(index) == {"app/util.py"} and index.tokens <= 12
    assert new.exists() and index.text(old) is None


def test_updates_removals_moves_and_gitignore_changes(workspace):
    index = RepoIndex([workspace])
    index.scan()
    path = write(workspace, "app/new.py", "fresh = True\n")
    assert index.update(path) and index.text(path) == "fresh = True\n"
    path.write_text("fresh = False\n")
    index.update(path)
    assert index.text(path) == "fresh = False\n"
    moved = workspace / "app/moved.py"
    path.rename(moved)
    index.move(path, moved)
    assert index.text(path) is None and index.text(moved) == "fresh = False\n"
    moved.unlink()
    index.remove(moved)
    assert index.text(moved) is None
    write(workspace, ".gitignore", "generated/\n*.log\napp/\n")
    index.update(workspace / ".gitignore")
    assert not index.update(workspace / "app/main.py")
    assert index.text(workspace / "app/main.py") is None


#: How long a watcher test waits for the index to follow the disk (s): generous, as a loaded machine
#: can be slow; a working watcher needs milliseconds (the deadline is not a latency requirement).
WATCH_DEADLINE_S = 30.0


def wait_until(predicate, what: str, timeout: float = WATCH_DEADLINE_S) -> None:
    """Poll ``predicate`` every 10 ms until it holds; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"the index did not follow the disk within {timeout:.0f} s: {what}")
        time.sleep(0.01)


def wait_until_watching(index: RepoIndex, workspace: Path) -> None:
    """The observer thread adds its watches after ``start()`` returns: write a probe until the index
    sees it, then remove it."""
    probe = workspace / "app/probe.py"
    deadline = time.monotonic() + WATCH_DEADLINE_S
    while index.text(probe) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"the watcher did not start within {WATCH_DEADLINE_S:.0f} s")
        write(workspace, "app/probe.py", f"probe = {time.monotonic()}\n")
        time.sleep(0.05)
    probe.unlink()
    wait_until(lambda: index.text(probe) is None, "probe removed")


def test_watcher_follows_disk_changes(workspace):
    index = RepoIndex([workspace])
    index.scan()
    changed: list[Path] = []
    watcher = IndexWatcher(index, changed.append)
    watcher.start()
    try:
        wait_until_watching(index, workspace)
        created = write(workspace, "app/created.py", "created = 1\n")
        wait_until(lambda: index.text(created) == "created = 1\n", "file created")
        created.write_text("created = 2\n")
        wait_until(lambda: index.text(created) == "created = 2\n", "file modified")
        target = workspace / "app/renamed.py"
        created.rename(target)
        wait_until(lambda: index.text(created) is None and index.text(target) == "created = 2\n", "file renamed")
        target.unlink()
        wait_until(lambda: index.text(target) is None, "file deleted")
        write(workspace, ".env", "SECRET=2\n")
        write(workspace, "node_modules/x.js", "x\n")
        # Events are handled in order: once a file written after them is indexed, they were handled.
        sentinel = write(workspace, "app/sentinel.py", "after = True\n")
        wait_until(lambda: index.text(sentinel) is not None, "sentinel file created")
        assert ".env" not in indexed(index) and "node_modules/x.js" not in indexed(index)
        assert any(p.name == "renamed.py" for p in changed)
    finally:
        watcher.stop()


def test_snippets_prefer_similar_text_and_open_buffers_take_precedence(workspace):
    index = RepoIndex([workspace])
    index.scan()
    query = identifiers("value = helper_value()\nprint(value)")
    open_buffer = Candidate("file:///open.py", "open.py", "def unrelated():\n    pass\n", 1)
    pool = candidates([open_buffer], index, query, open_paths=set())
    assert pool[0] is open_buffer and any(c.label == "app/util.py" for c in pool)
    snippets = select_snippets(pool, query, budget_chars=10_000)
    assert snippets and snippets[0].label in ("app/util.py", "app/main.py")
    assert all(s.label != "open.py" for s in snippets)  # no shared identifiers: not a snippet
    pool = candidates([], index, query, open_paths={workspace / "app/util.py"})
    assert all(c.label != "app/util.py" for c in pool)  # open: the buffer's text, not the disk's
    assert select_snippets(pool, query, budget_chars=5) == []


def test_repository_prompt_format_and_budget():
    from transformers import AutoTokenizer

    from decoding.weights.starter import TARGET_DIR
    from lsp_server.completion.related_files import Snippet

    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)
    document = Document("file:///proj/app/main.py", "def main():\n    return \n", 1, "python")
    snippets = [Snippet("app/util.py", "def helper_value():\n    return 42", 0.5),
                Snippet("lib/big.py", "x = 1\n" * 400, 0.4)]
    position = types.Position(line=1, character=11)
    context = build_prompt(resolve_request(document, position, codec_for("utf-16"), Settings(extra_tokens=64)),
                            tokenizer, snippets, ("proj", "app/main.py"))
    text = tokenizer.decode(context.prompt_ids)
    assert text.startswith("<|repo_name|>proj\n<|file_sep|>app/util.py\ndef helper_value():\n    return 42\n"
                           "<|file_sep|>app/main.py\n<|fim_prefix|>def main():")
    assert "lib/big.py" not in text and context.snippets == ("app/util.py",)  # over the budget
    plain = build_prompt(resolve_request(document, position, codec_for("utf-16")), tokenizer, snippets, None)
    assert tokenizer.decode(plain.prompt_ids).startswith("<|fim_prefix|>")


# Roots and secret documents (lsp_server.workspace.file_rules, lsp_server.workspace.index_service) ----------------------------------

@pytest.fixture()
def home(tmp_path, monkeypatch) -> Path:
    """A home directory under ``tmp_path`` (``$HOME``, which ``Path.home()`` reads)."""
    path = tmp_path / "users" / "me"
    path.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(path))
    return path


def test_home_its_parents_the_filesystem_root_and_the_temporary_directory_are_refused_roots(home, tmp_path):
    assert refused_root(home) == "your home directory"
    assert refused_root(home.parent) == refused_root(tmp_path) == "a parent of your home directory"
    assert refused_root("/") == "the filesystem root"
    assert refused_root(tempfile.gettempdir()) == "the temporary directory"
    link = tmp_path / "home_link"
    link.symlink_to(home)
    assert refused_root(link) == "your home directory"  # judged on the resolved path
    (home / "project").mkdir()
    assert refused_root(home / "project") is None  # below home: a project
    assert refused_root(Path(tempfile.gettempdir()) / "scratch") is None  # below the temp directory
    for system in ("/proc", "/proc/self", "/sys/kernel", "/dev"):  # files without end, devices
        assert refused_root(system) == "a system directory of devices or kernel state"


def test_a_partial_index_names_the_setting_that_narrows_it_by_its_key(tmp_path):
    for i in range(10):
        write(tmp_path / f"d{i}", "f.py", "x = 1\n")
    config = IndexConfig(max_entries=5)
    index = RepoIndex([tmp_path], config)
    message = _summary(index, index.scan(), 1, 0.0, config)
    named = re.search(r"exclude large directories with ([\w.]+)\)", message).group(1)
    assert index.partial and "stopped after 5 directory entries" in message
    assert named == "index.exclude" and named in BY_KEY and named not in BY_OLD_KEY  # not a deprecated flat name


def test_choose_roots_keeps_projects_and_reports_each_refusal(home):
    project = home / "code" / "proj"
    project.mkdir(parents=True)
    roots, refused = choose_roots([home, project, project, Path("/")])
    assert roots == [project]
    assert refused == [(home, "your home directory"), (Path("/"), "the filesystem root")]


def test_secret_documents_are_judged_by_name_and_by_resolved_path(tmp_path):
    (tmp_path / ".env").write_text("KEY=1\n")
    (tmp_path / "notes.txt").symlink_to(".env")
    (tmp_path / "app.py").write_text("x = 1\n")
    assert uri_looks_secret((tmp_path / ".env").as_uri())
    assert uri_looks_secret((tmp_path / "notes.txt").as_uri())  # a link to .env
    assert uri_looks_secret((tmp_path / ".ssh" / "config").as_uri())  # a directory above counts
    assert uri_looks_secret("untitled:.env.production") and uri_looks_secret("file:///srv/tls/server.key")
    assert not uri_looks_secret((tmp_path / "app.py").as_uri())
    assert not uri_looks_secret("untitled:Untitled-1") and not uri_looks_secret("untitled:")


def test_hard_links_are_neither_indexed_nor_context(tmp_path):
    (tmp_path / ".env").write_text("DATABASE_PASSWORD=hard_linked_s3cret\n")
    os.link(tmp_path / ".env", tmp_path / "config.txt")  # another name for the secret
    (tmp_path / "app.py").write_text("import os\n")
    index = RepoIndex([tmp_path])
    index.scan()
    assert indexed(index) == {"app.py"} and index.skipped["hardlink"] == 1
    assert uri_looks_secret((tmp_path / "config.txt").as_uri())
    assert not uri_looks_secret((tmp_path / "app.py").as_uri())


def test_a_uri_that_cannot_name_a_local_file_is_never_context():
    assert uri_looks_secret("file:///tmp/x%00.py")  # a NUL: no such path (realpath would raise)


@pytest.mark.parametrize("gitignore", ["special", "large"])
def test_a_gitignore_that_cannot_be_read_excludes_its_directory(tmp_path, gitignore):
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "notes.py").write_text("PRIVATE = 1\n")
    (tmp_path / "main.py").write_text("x = 1\n")
    if gitignore == "special":
        os.mkfifo(tmp_path / ".gitignore")
    else:
        (tmp_path / ".gitignore").write_text("#" * 300 + "\nprivate/\n")
    index = RepoIndex([tmp_path], IndexConfig(max_file_bytes=200))
    with unittest.mock.patch("lsp_server.workspace.repo_index.GITIGNORE_MAX_BYTES", 100):
        index.scan()
    assert indexed(index) == set(), "what the unread .gitignore would ignore is unknown: nothing is indexed"
    assert index.skipped["gitignore-unreadable"] >= 1
