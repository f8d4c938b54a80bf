import sys
sys.path.insert(0, '.')  # run from the repository root: python docs/bench/next-edit-2026-12-06/learning_ab.py on|off ARGS
if sys.argv[1] == 'off':
    from decoding.drafters import substitutions
    substitutions.Substitutions.learn = lambda self, left, replaced, written: None
from lsp_server.cli import main
sys.exit(main(['bench', 'edits', *sys.argv[2:]]))
