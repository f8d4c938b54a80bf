"""speclsp's measurements: ``speclsp bench cuts|lsp|decode`` and the held-out corpus they (and the
training's evaluation) read.

Not part of the runtime: :mod:`decoding` and :mod:`lsp_server` import nothing from here. The commands
are registered with the CLI through the ``speclsp.commands`` entry point (:mod:`bench.commands`).
"""
