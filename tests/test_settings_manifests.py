"""Settings are declared once (lsp_server.settings.Settings); every manifest that lists them is checked
against that declaration, so adding a setting is one field plus regenerating the VS Code manifest."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest

from lsp_server.settings import (RESTRICTED_SETTINGS, Settings, camel, check_value, parse_settings, vscode_capabilities,
                                 vscode_properties)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
KEYS = [camel(spec.name) for spec in fields(Settings)]


def test_the_vscode_manifest_is_the_generated_one():
    """Regenerate with: python -m lsp_server.settings --vscode"""
    manifest = json.loads((ROOT / "editors/vscode/package.json").read_text())
    properties = manifest["contributes"]["configuration"]["properties"]
    server = {key: value for key, value in properties.items() if key.split(".", 1)[1] in KEYS}
    assert server == vscode_properties()
    client_only = set(properties) - set(server)
    assert client_only == {"speclsp.server.command", "speclsp.server.pythonPath", "speclsp.trace.server"}
    assert manifest["capabilities"] == vscode_capabilities()


def test_an_untrusted_workspace_may_not_set_what_runs_loads_or_sends_code():
    """VS Code's Restricted Mode ignores a workspace's values of these (tests/editors/test_vscode_e2e.py
    shows it in a real VS Code); without the capability the extension did not run there at all."""
    assert set(RESTRICTED_SETTINGS) <= {spec.name for spec in fields(Settings)}
    restricted = set(vscode_capabilities()["untrustedWorkspaces"]["restrictedConfigurations"])
    assert {"speclsp.server.command", "speclsp.server.pythonPath", "speclsp.model", "speclsp.draftModel",
            "speclsp.trustRemoteCode", "speclsp.backend", "speclsp.endpoint", "speclsp.traceFile"} <= restricted
    assert "speclsp.maxNewTokens" not in restricted


def test_the_vscode_extension_forwards_every_server_setting():
    source = (ROOT / "editors/vscode/src/config.ts").read_text()
    listed = re.search(r"SERVER_SETTINGS = \[(.*?)\] as const", source, re.S).group(1)
    names = re.findall(r'"([A-Za-z]+)"', listed)
    assert sorted(names) == sorted(KEYS)  # each once


def test_the_readme_lists_every_setting_and_no_other():
    readme = (ROOT / "README.md").read_text()
    paragraph = readme[readme.index("Language server settings go in"):]
    paragraph = paragraph[: paragraph.index("\n\n")]
    listed = re.findall(r"`([a-z][A-Za-z]+)`", paragraph.split("camelCase:", 1)[1])
    assert listed == KEYS


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
    with pytest.raises(ValueError, match="maxNewTokens"):
        Settings(max_new_tokens=0)


def test_a_setting_given_as_its_manifest_default_parses_to_the_dataclass_default():
    defaults = {key.split(".", 1)[1]: value["default"] for key, value in vscode_properties().items()}
    assert parse_settings(defaults) == (Settings(), [])


def test_the_complete_command_flags_are_the_settings_marked_for_it():
    from lsp_server.cli import build_parser
    from lsp_server.settings import settings_from_flags

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


@pytest.mark.parametrize("key, value", [("topP", float("nan")), ("temperature", float("inf")),
                                        ("draftMinConfidence", float("nan")), ("indexInclude", ["!"]),
                                        ("indexExclude", ["ok/", "!"])])
def test_non_finite_numbers_and_broken_patterns_are_refused_and_the_old_value_kept(key, value):
    base = Settings(top_p=0.9)
    settings, warnings = parse_settings({key: value}, base=base)
    assert settings == base and len(warnings) == 1 and key in warnings[0]
