"""Adaptive draft length: pick k per round from online acceptance estimates and draft cost.

With per-token acceptance rate alpha and draft length k, a verify pass commits on average
(1 - alpha^(k+1)) / (1 - alpha) tokens (Leviathan et al. 2022, eq. 1); drafting and verifying k
tokens costs about 1 + k * c target passes, c being the cost of one draft token relative to one
target pass. The policy picks the k in [1, max_k] that maximises their ratio, so a source whose
drafts keep failing gets short drafts, and a source that keeps hitting gets long ones.

Alpha per source is an exponential moving average of accept/reject outcomes, starting from a prior;
the model drafter's c is measured online (draft ms per token over verify ms per pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): expected committed tokens per verify pass."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_gain(alpha: float, k: int, cost_per_token: float) -> float:
    """Expected tokens per target-pass-equivalent of work for draft length k."""
    return expected_tokens_per_pass(alpha, k) / (1.0 + k * cost_per_token)


@dataclass
class SourceEstimate:
    """Online estimates for one draft source."""

    alpha: float  # per-token acceptance probability (EMA)
    cost_per_token: float  # draft + verify cost of one more draft token, in target passes


@dataclass
class DraftLengthPolicy:
    """Chooses the draft length per source.

    Args:
        max_k: the longest draft ever proposed (tokens); callers pass a lower ``limit`` per round.
        prior_alpha: acceptance assumed before any evidence.
        decay: EMA weight kept per observed token outcome (closer to 1 = slower to adapt).
        verify_cost_per_token: extra cost of verifying one more token in a pass, in target passes
            (measured on this CPU: about 0.04-0.1, see shared FACTS).
    """

    max_k: int = 64
    prior_alpha: float = 0.6
    decay: float = 0.9
    verify_cost_per_token: float = 0.05
    estimates: dict[str, SourceEstimate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_k < 0:
            raise ValueError(f"max_k must be >= 0, got {self.max_k}")

    def estimate(self, source: str) -> SourceEstimate:
        return self.estimates.setdefault(source, SourceEstimate(self.prior_alpha, self.verify_cost_per_token))

    def choose(self, source: str, limit: int | None = None) -> int:
        """The draft length in [1, min(max_k, limit)] with the best expected gain (0 when that is 0)."""
        top = self.max_k if limit is None else min(self.max_k, limit)
        if top <= 0:
            return 0
        est = self.estimate(source)
        return max(range(1, top + 1), key=lambda k: expected_gain(min(est.alpha, 0.999), k, est.cost_per_token))

    def best_gain(self, source: str, limit: int | None = None) -> float:
        """Expected gain of ``source`` at its best draft length (1.0, plain decoding, when it may not draft)."""
        est = self.estimate(source)
        k = self.choose(source, limit)
        return expected_gain(min(est.alpha, 0.999), k, est.cost_per_token) if k else 1.0

    def update(self, source: str, num_drafted: int, num_accepted: int) -> None:
        """Fold one round's outcome in: ``num_accepted`` accepts, then a reject if any token was refused."""
        est = self.estimate(source)
        outcomes = [1.0] * num_accepted + ([0.0] if num_accepted < num_drafted else [])
        for outcome in outcomes:
            est.alpha = self.decay * est.alpha + (1 - self.decay) * outcome

    def update_cost(self, source: str, draft_ms_per_token: float, verify_ms_per_pass: float) -> None:
        """Measured draft cost for a model drafter, as a fraction of a verify pass (EMA)."""
        if verify_ms_per_pass <= 0:
            return
        est = self.estimate(source)
        measured = draft_ms_per_token / verify_ms_per_pass + self.verify_cost_per_token
        est.cost_per_token = 0.8 * est.cost_per_token + 0.2 * measured
