"""speclsp's decoding engine: exact speculative decoding with n-gram and draft-model drafters.

Entry point: :class:`decoding.engine.Engine`. The pieces: :mod:`decoding.verify` (the acceptance
rule), :mod:`decoding.sampling`, :mod:`decoding.kv_cache` (rollback), :mod:`decoding.generate` (the
loop), :mod:`decoding.drafters`, :mod:`decoding.draft_length` (draft length
and its cost model), :mod:`decoding.choices` (the choices made from figures measured on this machine),
:mod:`decoding.weights.loading`; :mod:`decoding.types` holds the configuration and result
types, importable without torch.
"""
