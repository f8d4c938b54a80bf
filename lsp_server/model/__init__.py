"""The model thread and what runs on it: the thread (``worker.py``), the model session it owns
(``session.py``: every engine operation goes through it), one completion or rewrite (``completer.py``)
and the texts the n-gram store drafts from (``draft_sources.py``). Never imports ``requests/``.
"""
