"""speclsp's language server: documents, context, features, tracing. Model work goes through
:mod:`decoding.engine` on one worker thread."""

__version__ = "0.1.0"
