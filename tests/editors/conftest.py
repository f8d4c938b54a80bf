"""Editor-client tests need external programs (nvim, npm). They are skipped when a program is
missing, unless SPECLSP_REQUIRE_EDITORS=1 (set by .ci/run), which turns a missing program into a failure."""

import os
import shutil

import pytest


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("SPECLSP_REQUIRE_EDITORS") == "1":
            pytest.fail(f"{name} is required (SPECLSP_REQUIRE_EDITORS=1) but not on PATH")
        pytest.skip(f"{name} not on PATH")
    return path
