"""What an inline completion asks the model, and what comes back: the FIM prompt (``prompt.py``), its tokens
reused from key to key (``prompt_tokens.py``), the typed tail's anchor (``anchor.py``), snippets of other
files (``related_files.py``), single line or block (``mode.py``) and trimming the answer (``postprocess.py``).

Imports only the workspace, the resolved request, the settings and the backend protocol
(``tests/test_import_layers.py``).
"""
