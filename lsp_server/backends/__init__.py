"""Generation backends: what serves the completer's prompts (see :mod:`lsp_server.backends.base`).

:func:`load_backend` builds the one the settings name: the local engine (:mod:`.local`) or a remote
serving engine over HTTP (:mod:`.openai`, :mod:`.llamacpp_infill`).
"""
