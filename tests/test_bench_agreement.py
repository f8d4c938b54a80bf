"""``speclsp bench agreement`` (bench/agreement.py) on the starter pair: the reference's own one-pass
floor, a quantization of the same weights, and another model as the control that must score lower."""

from __future__ import annotations

import pytest

from bench.agreement import REFERENCE, _row, greedy_continuation, measure
from bench.workloads import workloads
from decoding.weights.loading import load_model

pytestmark = pytest.mark.model


def test_int8_weights_agree_with_the_model_and_another_model_does_not():
    starter = load_model("starter", device="cpu", dtype="float32")
    prompts = workloads(starter.tokenizer, quick=True, seed=0, names=("edit", "fim"))
    rows = measure(starter, ["int8-hybrid"], prompts, dtype="float32", new_tokens=24)
    assert [row["weights"] for row in rows] == [REFERENCE, "int8-hybrid"]
    reference, int8 = rows
    assert reference["positions"] == int8["positions"] == 6 * 24
    assert reference["agreement"] >= 0.97  # float32: one pass and step by step part only at exact near-ties
    assert int8["agreement"] >= 0.8
    # The control: another model's choices on the same continuations score far lower, so the measure can fail.
    other = load_model("starter-draft", device="cpu", dtype="float32").model
    continuations = {(w, i): greedy_continuation(starter.model, p, 24)
                     for w, cases in prompts.items() for i, (p, _) in enumerate(cases)}
    control = _row("starter-draft", "another model", other, prompts, continuations)
    assert control["agreement"] < int8["agreement"] - 0.1, (control["agreement"], int8["agreement"])
    for row in rows + [control]:
        assert all(0 <= p["first_difference"] <= p["positions"] == 24 for p in row["prompts"].values())
