"""What the server knows of the user's files: open documents and their coordinates, the repository
index, its service and its watcher, the file rules (secret, binary, ignored), the edit history, syntax
trees (tree-sitter) and the short names of documents in logs. It imports nothing else of ``lsp_server``
(tests/test_import_layers.py)."""
