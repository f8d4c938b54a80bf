"""Settings are declared once (lsp_server/settings/spec.py); every manifest that lists them is generated
from that declaration or checked against it, so adding a setting is one field plus
``python -m lsp_server.settings``."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from lsp_server.settings import Settings, parse_settings, settings_from_flags
from lsp_server.settings.manifests import (
    ARTEFACTS,
    CLIENT_SETTINGS,
    stale_artefacts,
    vscode_capabilities,
    vscode_properties,
    vscode_renamed,
    write_artefacts,
)
from lsp_server.settings.spec import (
    BY_KEY,
    GROUPS,
    RESTRICTED_SETTINGS,
    old_key,
    setting_key,
)
from lsp_server.settings.values import check_value

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
KEYS = list(BY_KEY)


def test_every_setting_has_a_group_and_one_key_and_every_group_has_settings():
    assert len(KEYS) == len(fields(Settings)) == len(set(KEYS))
    assert {key.split(".")[0] for key in KEYS} == set(GROUPS)
    assert "completion.maxNewTokens" in KEYS and "model.target" in KEYS and "nextEdit.regionLines" in KEYS


@pytest.mark.parametrize("name", list(ARTEFACTS))
def test_each_generated_file_is_in_sync_with_the_spec(name):
    """Regenerate with: python -m lsp_server.settings"""
    path = ROOT / name
    assert path.exists(), name
    text = path.read_text(encoding="utf-8")
    assert ARTEFACTS[name](text) == text, f"{name} is out of date: run python -m lsp_server.settings"


@pytest.mark.parametrize("name, edit", [
    ("editors/vscode/package.json", lambda text: text.replace('"Most tokens per completion."', '"Most tokens."')),
    ("README.md", lambda text: text.replace("`maxNewTokens`, `prefixTokens`", "`prefixTokens`")),
    ("docs/settings.md", lambda text: text.replace("| `completion.maxNewTokens` |", "| `completion.maxTokens` |")),
])
def test_the_sync_check_finds_a_hand_edited_generated_file_and_the_writer_mends_it(tmp_path, name, edit):
    for artefact in ARTEFACTS:
        (tmp_path / artefact).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / artefact, tmp_path / artefact)
    text = (tmp_path / name).read_text(encoding="utf-8")
    assert edit(text) != text  # the edit applies
    (tmp_path / name).write_text(edit(text), encoding="utf-8")
    assert stale_artefacts(tmp_path) == [name]
    assert write_artefacts(tmp_path) == [name]
    assert (tmp_path / name).read_text(encoding="utf-8") == text and stale_artefacts(tmp_path) == []


def test_the_command_checks_and_writes_the_generated_files(tmp_path, monkeypatch, capsys):
    from lsp_server.settings.__main__ import main

    monkeypatch.chdir(ROOT)
    assert main(["--check"]) == 0 and main(["--vscode", "x"]) == 2
    for artefact in ARTEFACTS:
        (tmp_path / artefact).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / artefact, tmp_path / artefact)
    (tmp_path / "docs/settings.md").unlink()
    monkeypatch.chdir(tmp_path)
    assert main(["--check"]) == 1 and "docs/settings.md is out of date" in capsys.readouterr().err
    assert main([]) == 0 and main(["--check"]) == 0


def test_the_vscode_manifest_holds_the_grouped_keys_the_deprecated_flat_names_and_the_client_settings():
    manifest = json.loads((ROOT / "editors/vscode/package.json").read_text())
    properties = manifest["contributes"]["configuration"]["properties"]
    assert set(properties) == {*CLIENT_SETTINGS, *(f"speclsp.{key}" for key in KEYS),
                               *(f"speclsp.{old}" for old in vscode_renamed())}
    assert properties["speclsp.completion.maxNewTokens"]["default"] == 64
    assert "speclsp.completion.maxNewTokens" in properties["speclsp.maxNewTokens"]["deprecationMessage"]
    assert "default" not in properties["speclsp.maxNewTokens"]  # forwarded only where the user set it
    # "model" is a group now: VS Code's tree of settings cannot also hold the old flat speclsp.model.
    assert "speclsp.model" not in properties and vscode_renamed()["draftModel"] == "model.draft"
    assert manifest["capabilities"] == vscode_capabilities()


def test_an_untrusted_workspace_may_not_set_what_runs_loads_or_sends_code_by_either_name():
    """VS Code's Restricted Mode ignores a workspace's values of these (tests/editors/test_vscode_e2e.py
    shows it in a real VS Code); without the capability the extension did not run there at all."""
    assert set(RESTRICTED_SETTINGS) <= {spec.name for spec in fields(Settings)}
    restricted = set(vscode_capabilities()["untrustedWorkspaces"]["restrictedConfigurations"])
    assert {"speclsp.server.command", "speclsp.server.pythonPath", "speclsp.model.target", "speclsp.model.draft",
            "speclsp.model.trustRemoteCode", "speclsp.remote.backend", "speclsp.remote.endpoint",
            "speclsp.trace.file", "speclsp.draftModel", "speclsp.trustRemoteCode", "speclsp.traceFile"} <= restricted
    assert "speclsp.completion.maxNewTokens" not in restricted and "speclsp.maxNewTokens" not in restricted
    docs = (ROOT / "docs/editors.md").read_text()
    paragraph = docs[docs.index("In a folder VS Code does not trust"):]
    paragraph = paragraph[: paragraph.index("\n\n")]
    named = set(re.findall(r"`(speclsp\.[A-Za-z.]+)`", paragraph))
    assert named == {key for key in restricted if key.count(".") > 1 or key in CLIENT_SETTINGS}


def test_the_vscode_extension_forwards_every_server_setting_and_the_renamed_ones():
    source = (ROOT / "editors/vscode/src/config.ts").read_text()
    listed = re.search(r"SERVER_SETTINGS = \[(.*?)\] as const", source, re.DOTALL).group(1)
    assert re.findall(r'"([A-Za-z.]+)"', listed) == KEYS  # each once, in the spec's order
    renamed = re.search(r"RENAMED_SETTINGS: .*? = \{(.*?)\};", source, re.DOTALL).group(1)
    assert dict(re.findall(r'(\w+): "([A-Za-z.]+)"', renamed)) == vscode_renamed()


def _lua_value(tokens: list[str]):
    """The value of a Lua table constructor or literal at the head of ``tokens`` (consumed)."""
    token = tokens.pop(0)
    if token != "{":
        return json.loads('"' + token[1:-1] + '"') if token[0] in "'\"" else json.loads(token)
    table = {}
    while tokens[0] != "}":
        name = tokens.pop(0)
        assert tokens.pop(0) == "=", name
        table[name] = _lua_value(tokens)
        if tokens[0] == ",":
            tokens.pop(0)
    tokens.pop(0)
    return table


def lua_settings_examples(text: str) -> list[dict]:
    """Every ``settings = { ... }`` table and every quoted one (``"{ model = ... }"``, demo.sh's
    ``SPECLSP_DEMO_SETTINGS``) in ``text``, Lua and shell comment markers at line starts dropped, as dicts."""
    text = re.sub(r"(?m)^\s*(--|#)\s?", "", text)
    examples = []
    for match in re.finditer(r"(?:\bsettings = |\")(\{)(?=\s*(?:\w+\s*=|\}))", text):
        tokens = re.findall(r"'[^']*'|\"[^\"]*\"|[\w.]+|[{}=,]", text[match.start(1):])
        examples.append(_lua_value(tokens))
    return examples


@pytest.mark.parametrize("name", ["editors/neovim/lua/speclsp/init.lua", "editors/neovim/demo.sh",
                                  "docs/editors.md", "README.md"])
def test_the_neovim_plugins_documented_settings_are_grouped_keys_of_the_spec(name):
    examples = [example for example in lua_settings_examples((ROOT / name).read_text()) if example]
    assert examples, name
    for example in examples:
        assert parse_settings(example)[1] == [], (name, example)


def test_the_lua_example_check_finds_a_flat_old_name():
    examples = lua_settings_examples('-- setup({ settings = { drafter = "auto", completion = { maxNewTokens = 8 } } })')
    assert examples == [{"drafter": "auto", "completion": {"maxNewTokens": 8}}]
    assert "decoding.drafter" in parse_settings(examples[0])[1][0]


def test_every_default_is_valid_and_each_bound_rejects_a_value():
    for spec in fields(Settings):
        assert check_value(spec, spec.default) is None, spec.name
    by_name = {spec.name: spec for spec in fields(Settings)}
    assert check_value(by_name["max_new_tokens"], 0) is not None
    assert check_value(by_name["max_new_tokens"], 4097) is not None
    assert check_value(by_name["max_new_tokens"], True) is not None  # a bool is no number
    assert check_value(by_name["top_p"], 0.0) is not None  # exclusive minimum
    assert check_value(by_name["drafter"], "magic") is not None
    assert check_value(by_name["device"], "cuda:1") is None and check_value(by_name["device"], "gpu") is not None
    assert check_value(by_name["model"], "  ") is not None
    assert check_value(by_name["index_include"], ("a", 1)) is not None
    with pytest.raises(ValueError, match="completion.maxNewTokens"):
        Settings(max_new_tokens=0)


def test_a_setting_given_as_its_manifest_default_parses_to_the_dataclass_default():
    defaults = {key.split(".", 1)[1]: value["default"] for key, value in vscode_properties().items()
                if "default" in value}
    assert len(defaults) == len(KEYS)
    assert parse_settings(defaults) == (Settings(), [])


def test_nested_groups_and_dotted_keys_set_the_same_settings():
    nested = {"completion": {"maxNewTokens": 9, "ahead": False}, "model": {"target": "starter"},
              "nextEdit": {"regionLines": 7}, "index": {"include": ["src/"]}}
    dotted = {"completion.maxNewTokens": 9, "completion.ahead": False, "model.target": "starter",
              "nextEdit.regionLines": 7, "index.include": ["src/"]}
    expected = Settings(max_new_tokens=9, complete_ahead=False, model="starter", next_edit_region_lines=7,
                        index_include=("src/",))
    assert parse_settings(nested) == (expected, []) == parse_settings({"speclsp": dotted})


def _another_valid_value(spec):
    """A value of the setting ``spec`` other than its default, as JSON gives it."""
    schema, default = spec.metadata["schema"], spec.default
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1 if isinstance(default, int) else (default / 2 if default else 0.5)
    if isinstance(default, tuple):
        return ["build/"]
    if "enum" in schema:
        return next(value for value in schema["enum"] if value != default)
    patterns = {"device": "cpu", "endpoint": "http://gpu-box:8000", "api_key_env": "KEY"}
    return patterns.get(spec.name, schema.get("examples", ["some-name"])[-1])


@pytest.mark.parametrize("spec", fields(Settings), ids=lambda spec: old_key(spec))
def test_each_flat_old_name_still_works_with_one_deprecation_message_naming_its_new_key(spec):
    value = _another_valid_value(spec)
    settings, warnings = parse_settings({old_key(spec): value})
    assert getattr(settings, spec.name) == (tuple(value) if isinstance(value, list) else value) != spec.default
    assert len(warnings) == 1 and f"speclsp.{old_key(spec)} is deprecated" in warnings[0]
    assert f"speclsp.{setting_key(spec)}" in warnings[0]
    assert parse_settings({setting_key(spec): value}) == (settings, [])  # the new key: the same, no warning


def test_a_new_key_wins_over_the_old_name_of_the_same_setting_whatever_the_order():
    for options in ({"maxNewTokens": 5, "completion": {"maxNewTokens": 9}},
                    {"completion.maxNewTokens": 9, "maxNewTokens": 5}):
        settings, warnings = parse_settings(options)
        assert settings.max_new_tokens == 9
        assert len(warnings) == 1 and "both are set" in warnings[0]


@pytest.mark.parametrize("options, warning", [
    ({"completion": {"colour": 1}}, "unknown setting speclsp.completion.colour"),
    ({"index": True}, "speclsp.index must be an object"),
    ({"completion.colour": 1}, "unknown setting speclsp.completion.colour"),
    ({"model": 3}, "invalid value 3 for speclsp.model"),  # a flat old name, not a group
])
def test_unknown_keys_in_a_group_and_a_group_that_is_no_object_are_warnings(options, warning):
    settings, warnings = parse_settings(options)
    assert settings == Settings() and any(warning in w for w in warnings), warnings


def test_the_complete_command_flags_are_the_settings_marked_for_it():
    from lsp_server.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["complete", "f.py:1:1"])
    assert settings_from_flags(args) == Settings()  # the same defaults
    marked = {spec.name for spec in fields(Settings) if spec.metadata["cli"]}
    assert marked and all(hasattr(args, name) for name in marked)
    args = parser.parse_args(["complete", "f.py:1:1", "--max-new-tokens", "9", "--drafter", "ngram",
                              "--trust-remote-code"])
    assert settings_from_flags(args) == Settings(max_new_tokens=9, drafter="ngram", trust_remote_code=True)
    with pytest.raises(ValueError, match="maxNewTokens"):
        settings_from_flags(parser.parse_args(["complete", "f.py:1:1", "--max-new-tokens", "0"]))


def test_the_flags_help_lists_them_by_group_with_the_setting_key():
    from lsp_server.cli import build_parser

    complete = build_parser()._subparsers._group_actions[0].choices["complete"]
    text = complete.format_help()
    assert "settings completion.*:" in text and "settings model.*:" in text
    assert "(setting completion.maxNewTokens)" in re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("key, value", [("decoding.topP", float("nan")), ("decoding.temperature", float("inf")),
                                        ("decoding.draftMinConfidence", float("nan")), ("index.include", ["!"]),
                                        ("index.exclude", ["ok/", "!"])])
def test_non_finite_numbers_and_broken_patterns_are_refused_and_the_old_value_kept(key, value):
    base = Settings(top_p=0.9)
    settings, warnings = parse_settings({key: value}, base=base)
    assert settings == base and len(warnings) == 1 and key in warnings[0]
