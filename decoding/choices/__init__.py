"""The choices made from figures measured on this machine, in one home.

* :mod:`decoding.choices.auto`: what each ``auto`` setting chooses (``quantization``, ``drafter``,
  ``completionModel``), each logged in one line with the figures that decided it;
* :mod:`decoding.choices.pass_costs`: the pass costs measured at load (they also seed the draft-length
  cost model, :mod:`decoding.draft_length`);
* :mod:`decoding.choices.figures`: the one cache file of measured figures (versioned, written atomically
  across processes), and the pin that stands in for it (tests pin every choice this way).

What each default is and the measurement behind it: docs/decisions.md.
"""
