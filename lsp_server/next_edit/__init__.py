"""Next-edit suggestions: the rewrite prompt and its region (``prompt.py``), its formats (``formats.py``),
the edits named in words (``edit_summary.py``), the answer's lines aligned with the region (``span.py``),
the rewrites withheld (``guard.py``) and the answer as LSP text edits (``text_edits.py``).

Imports only the workspace, the resolved request, the settings and the backend protocol
(``tests/test_import_layers.py``).
"""
