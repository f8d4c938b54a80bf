"""Adaptive draft length: pick k per round from online acceptance estimates and measured costs.

With per-token acceptance rate alpha and draft length k, a verify pass commits on average
(1 - alpha^(k+1)) / (1 - alpha) tokens (Leviathan et al. 2022, eq. 1); drafting and verifying k
tokens costs about 1 + k * c target passes, c being the cost of one more draft token relative to a
one-token target pass. The policy picks the k in [0, max_k] that maximises their ratio (k = 0 is plain
decoding, gain 1), so a source whose drafts keep failing gets short drafts or none, and a source that
keeps hitting gets long ones.

c has two parts, both measured online:

* verifying: :class:`VerifyCost` fits the target's pass time against the number of tokens fed,
  ``ms(n) = base + per_token * (n - 1)``, so c_verify = per_token / base. It is small on a GPU (a pass
  is memory-bound) and larger on a CPU;
* drafting: a model drafter's ms per draft token over the ms of a verify pass (0 for n-gram lookup).

Alpha per source is an exponential moving average of accept/reject outcomes, starting from a prior.
A source the policy has stopped drafting from drifts back toward the prior while it idles, so it is
tried again later instead of being written off for good.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median


def expected_tokens_per_pass(alpha: float, k: int) -> float:
    """(1 - alpha^(k+1)) / (1 - alpha): expected committed tokens per verify pass."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_gain(alpha: float, k: int, cost_per_token: float) -> float:
    """Expected tokens per target-pass-equivalent of work for draft length k."""
    return expected_tokens_per_pass(alpha, k) / (1.0 + k * cost_per_token)


class VerifyCost:
    """Measured wall time of target passes against the number of tokens each one fed.

    Keeps the last ``window`` passes. The fit is a least-squares line through the median time of each
    distinct token count (weighted by how often it occurred), robust to a stray slow pass.

    Args:
        window: passes remembered.
        min_passes: passes needed before :meth:`cost_per_token` answers.
    """

    def __init__(self, window: int = 64, min_passes: int = 8):
        self.samples: deque[tuple[int, float]] = deque(maxlen=window)
        self.min_passes = min_passes

    def record(self, tokens_fed: int, ms: float) -> None:
        """One pass that fed ``tokens_fed`` (>= 1) tokens and took ``ms`` milliseconds."""
        if tokens_fed >= 1 and ms > 0:
            self.samples.append((tokens_fed, ms))

    def cost_per_token(self) -> float | None:
        """Cost of one more fed token as a fraction of a one-token pass, or ``None`` while unknown
        (too few passes, or all of one size). Clipped to [0.001, 2]."""
        if len(self.samples) < self.min_passes:
            return None
        by_size: dict[int, list[float]] = {}
        for size, ms in self.samples:
            by_size.setdefault(size, []).append(ms)
        if len(by_size) < 2:
            return None
        points = [(size, median(times), len(times)) for size, times in by_size.items()]
        total = sum(w for _, _, w in points)
        mean_x = sum(x * w for x, _, w in points) / total
        mean_y = sum(y * w for _, y, w in points) / total
        var_x = sum(w * (x - mean_x) ** 2 for x, _, w in points)
        slope = sum(w * (x - mean_x) * (y - mean_y) for x, y, w in points) / var_x
        one_token = mean_y + slope * (1 - mean_x)  # the fitted time of a plain one-token pass
        if one_token <= 0:
            return None
        return min(2.0, max(0.001, slope / one_token))


@dataclass
class SourceEstimate:
    """Online estimates for one draft source."""

    alpha: float  # per-token acceptance probability (EMA)
    draft_cost_per_token: float = 0.0  # drafting one token, in target passes (0 for a lookup)


@dataclass
class DraftLengthPolicy:
    """Chooses the draft length per source.

    Args:
        max_k: the longest draft ever proposed (tokens); callers pass a lower ``limit`` per round.
        prior_alpha: acceptance assumed before any evidence.
        decay: EMA weight kept per observed token outcome (closer to 1 = slower to adapt).
        verify_cost_per_token: extra cost of verifying one more token in a pass, in target passes;
            a starting value, replaced by measurements (:meth:`set_verify_cost`).
        idle_relax: per round a source sits out, the fraction of the way its alpha moves back to the prior.
    """

    max_k: int = 64
    prior_alpha: float = 0.6
    decay: float = 0.9
    verify_cost_per_token: float = 0.05
    idle_relax: float = 0.05
    estimates: dict[str, SourceEstimate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_k < 0:
            raise ValueError(f"max_k must be >= 0, got {self.max_k}")

    def estimate(self, source: str) -> SourceEstimate:
        return self.estimates.setdefault(source, SourceEstimate(self.prior_alpha))

    def cost_per_token(self, source: str) -> float:
        """Drafting plus verifying one more token from ``source``, in target passes."""
        return self.verify_cost_per_token + self.estimate(source).draft_cost_per_token

    def _gain(self, source: str, k: int) -> float:
        return expected_gain(min(self.estimate(source).alpha, 0.999), k, self.cost_per_token(source))

    def choose(self, source: str, limit: int | None = None) -> int:
        """The draft length in [0, min(max_k, limit)] with the best expected gain; 0 (no draft) when
        no length beats plain decoding."""
        top = self.max_k if limit is None else min(self.max_k, limit)
        if top <= 0:
            return 0
        best = max(range(1, top + 1), key=lambda k: self._gain(source, k))
        return best if self._gain(source, best) > 1.0 else 0

    def best_gain(self, source: str, limit: int | None = None) -> float:
        """Expected gain of ``source`` at its best draft length (1.0, plain decoding, when it does not draft)."""
        k = self.choose(source, limit)
        return self._gain(source, k) if k else 1.0

    def update(self, source: str, num_drafted: int, num_accepted: int) -> None:
        """Fold one round's outcome in: ``num_accepted`` accepts, then a reject if any token was refused."""
        est = self.estimate(source)
        outcomes = [1.0] * num_accepted + ([0.0] if num_accepted < num_drafted else [])
        for outcome in outcomes:
            est.alpha = self.decay * est.alpha + (1 - self.decay) * outcome

    def idle(self, source: str) -> None:
        """A round in which ``source`` was not asked to draft: its alpha relaxes toward the prior."""
        est = self.estimate(source)
        est.alpha += self.idle_relax * (self.prior_alpha - est.alpha)

    def set_verify_cost(self, cost_per_token: float) -> None:
        """The measured verify cost of one more token (see :class:`VerifyCost`)."""
        self.verify_cost_per_token = cost_per_token

    def update_cost(self, source: str, draft_ms_per_token: float, verify_ms_per_pass: float) -> None:
        """Measured draft cost of a model drafter, as a fraction of a verify pass (EMA)."""
        if verify_ms_per_pass <= 0:
            return
        est = self.estimate(source)
        est.draft_cost_per_token = 0.8 * est.draft_cost_per_token + 0.2 * draft_ms_per_token / verify_ms_per_pass
