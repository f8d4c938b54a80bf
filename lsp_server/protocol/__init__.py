"""The LSP wire: stdio transport, message framing, the JSON-RPC envelope and lifecycle checks, the
parent-process watch and work-done progress. It knows no model and no feature (tests/test_import_layers.py)."""
