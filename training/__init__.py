"""Training and evaluation of the bundled starter pair (:mod:`decoding.weights.starter` holds the weights).

Not part of the runtime: :mod:`decoding` and :mod:`lsp_server` import nothing from here.
``speclsp train-starter`` (:mod:`training.train`) and ``speclsp eval models`` (:mod:`training.evaluate`)
are registered with the CLI through the ``speclsp.commands`` entry point. The training log, recipes and
measurements are in ``training/README.md``.
"""
