"""The draft length per source, and the cost model it is chosen by (the one owner of both).

The cost model. With per-token acceptance rate alpha and draft length k, a verify pass commits on
average (1 - alpha^(k+1)) / (1 - alpha) tokens (Leviathan et al. 2022, eq. 1,
:func:`expected_tokens_per_pass`); drafting and verifying k tokens costs cost(k) one-token target
passes, about 1 + k * c, c being the cost of one more draft token. Their ratio is the expected gain
(:func:`expected_gain`, tokens per target-pass-equivalent of work). c has two parts, both measured
online, and both kept here:

* verifying: :class:`VerifyCost` holds the target's pass times against the number of tokens fed (a
  median per size, a line fit where a size is unmeasured) and gives the cost of verifying k tokens
  over one, and the recent mean ms of one pass. It is nearly flat on a GPU (a pass is memory-bound) and
  steeper on a CPU. The generator times its verify passes and records them there
  (:mod:`decoding.generate`);
* drafting: a model drafter's ms per draft token over the ms of a verify pass (0 for n-gram lookup),
  per source in :class:`SourceEstimate`. The switching drafter times the drafts and reports them
  through :meth:`DraftLengthPolicy.update_cost` (:mod:`decoding.drafters.switching`).

The policy, :class:`DraftLengthPolicy`, picks the k in [0, max_k] with the best expected gain (k = 0
is plain decoding, gain 1), so a source whose drafts keep failing gets short drafts or none, and a
source that keeps hitting gets long ones. Alpha per source is an exponential moving average of
accept/reject outcomes, starting from a prior. A source the policy has stopped drafting from drifts
back toward the prior while it idles, so it is tried again later instead of being written off for good.
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

    Each pass size keeps its own last ``per_size`` times, so the sizes measured earlier stay in the fit
    when recent rounds use only short drafts (a fit over a narrow range of sizes is noise, and a
    noisy high cost would shorten the drafts further). The fit is a least-squares line through the
    median time of each size, weighted by how many times it holds, robust to a stray slow pass.

    Args:
        per_size: times remembered per pass size.
        min_passes: passes needed before :meth:`relative_costs` answers.
    """

    def __init__(self, per_size: int = 16, min_passes: int = 8, refresh_every: int = 8):
        self.samples: dict[int, deque[float]] = {}  # tokens fed -> the last ms of passes that fed that many
        self.mean_ms = 0.0  # EMA of one pass's ms over every size (0: none recorded yet)
        self.per_size = per_size
        self.min_passes = min_passes
        self.refresh_every = refresh_every  # passes recorded before a computed table is computed again
        self._table: dict[int, tuple[float, ...] | None] = {}  # max_k -> costs, until refreshed
        self._since_table = 0

    def seed(self, pass_ms: dict[int, float], weight: int = 3) -> None:
        """Start from a curve measured at load (``{tokens per pass: ms}``,
        :func:`decoding.choices.pass_costs.pass_costs`): each size gets ``weight`` samples, enough for its
        median to count, so the first rounds already size drafts by this engine's costs; the real passes
        recorded later push the seeded samples out (``per_size`` per size)."""
        for size, ms in sorted(pass_ms.items()):
            for _ in range(weight):
                self.record(size, ms)
        self.mean_ms = pass_ms.get(1, self.mean_ms)

    def record(self, tokens_fed: int, ms: float) -> None:
        """One pass that fed ``tokens_fed`` (>= 1) tokens and took ``ms`` milliseconds."""
        self.mean_ms = ms if self.mean_ms == 0 else 0.8 * self.mean_ms + 0.2 * ms
        if tokens_fed >= 1 and ms > 0:
            self.samples.setdefault(tokens_fed, deque(maxlen=self.per_size)).append(ms)
            self._since_table += 1

    def _fit(self) -> tuple[float, float] | None:
        """(time of a one-token pass, ms per extra token) from the line fit, or ``None``."""
        if sum(len(times) for times in self.samples.values()) < self.min_passes or len(self.samples) < 2:
            return None
        points = [(size, median(times), len(times)) for size, times in self.samples.items()]
        total = sum(w for _, _, w in points)
        mean_x = sum(x * w for x, _, w in points) / total
        mean_y = sum(y * w for _, y, w in points) / total
        var_x = sum(w * (x - mean_x) ** 2 for x, _, w in points)
        slope = sum(w * (x - mean_x) * (y - mean_y) for x, y, w in points) / var_x
        one_token = mean_y + slope * (1 - mean_x)  # the fitted time of a plain one-token pass
        return (one_token, slope) if one_token > 0 else None

    def relative_costs(self, max_k: int) -> tuple[float, ...] | None:
        """``costs[k]``: time of a pass verifying k draft tokens (k + 1 fed) over a one-token pass, for
        k = 0..max_k; measured medians where a size has at least 3 passes, the fit elsewhere (a pass
        is not linear in its size: on a CPU a pass of two tokens may cost well over one, and one of
        eight little more than two). ``None`` while unknown. Computed again after ``refresh_every`` new passes
        (medians move slowly, and this is asked every verify round)."""
        if self._since_table >= self.refresh_every or (max_k not in self._table and self._since_table):
            self._table.clear()
            self._since_table = 0
        if max_k not in self._table:
            self._table[max_k] = self._costs(max_k)
        return self._table[max_k]

    def _costs(self, max_k: int) -> tuple[float, ...] | None:
        fit = self._fit()
        if fit is None:
            return None
        one_token, slope = fit
        single = self.samples.get(1)
        base = median(single) if single is not None and len(single) >= 3 else one_token
        costs = []
        for k in range(max_k + 1):
            times = self.samples.get(k + 1)
            ms = median(times) if times is not None and len(times) >= 3 else one_token + slope * k
            costs.append(max(1.0, ms / base) if k else 1.0)
        return tuple(costs)


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
            used where no measured cost table is set (:meth:`set_verify_costs`).
        idle_relax: per round a source sits out, the fraction of the way its alpha moves back to the prior.
        priors: ``{source name: prior alpha}`` for sources expected to do better or worse than
            ``prior_alpha`` (e.g. the region of a rewrite, which copies most of its draft).
    """

    max_k: int = 64
    prior_alpha: float = 0.6
    decay: float = 0.9
    verify_cost_per_token: float = 0.05
    idle_relax: float = 0.05
    priors: dict[str, float] = field(default_factory=dict)
    estimates: dict[str, SourceEstimate] = field(default_factory=dict)
    verify_costs: tuple[float, ...] | None = None  # measured pass cost per k (see VerifyCost.relative_costs)

    def __post_init__(self) -> None:
        if self.max_k < 0:
            raise ValueError(f"max_k must be >= 0, got {self.max_k}")
        if any(not 0.0 <= alpha <= 1.0 for alpha in (self.prior_alpha, *self.priors.values())):
            raise ValueError(f"prior acceptance rates must be in [0, 1], got {self.prior_alpha} and {self.priors}")

    def prior(self, source: str) -> float:
        """The acceptance assumed for ``source`` before any evidence."""
        return self.priors.get(source, self.prior_alpha)

    def estimate(self, source: str) -> SourceEstimate:
        return self.estimates.setdefault(source, SourceEstimate(self.prior(source)))

    def cost(self, source: str, k: int) -> float:
        """Drafting k tokens from ``source`` and verifying them, in one-token target passes: the measured
        verify cost table when there is one (:meth:`set_verify_costs`), else ``1 + k * c_verify``;
        plus k times the source's draft cost."""
        table = self.verify_costs
        verify = table[k] if table is not None and k < len(table) else 1.0 + k * self.verify_cost_per_token
        return verify + k * self.estimate(source).draft_cost_per_token

    def plan(self, source: str, limit: int | None = None) -> tuple[int, float]:
        """``(k, gain)``: the draft length in [0, min(max_k, limit)] with the best expected gain, and
        that gain; ``(0, 1.0)`` (plain decoding) when no length beats it. Ties go to the shorter draft.
        One pass over k (this runs every verify round)."""
        top = self.max_k if limit is None else min(self.max_k, limit)
        alpha = min(self.estimate(source).alpha, 0.999)
        best_k, best_gain = 0, 1.0
        power = alpha  # alpha ** (k + 1), from k = 0
        for k in range(1, top + 1):
            power *= alpha
            gain = (1.0 - power) / (1.0 - alpha) / self.cost(source, k)  # expected_tokens_per_pass / cost
            if gain > best_gain:
                best_k, best_gain = k, gain
        return best_k, best_gain

    def choose(self, source: str, limit: int | None = None) -> int:
        """The draft length of :meth:`plan`."""
        return self.plan(source, limit)[0]

    def best_gain(self, source: str, limit: int | None = None) -> float:
        """The expected gain of :meth:`plan` (1.0, plain decoding, when the source does not draft)."""
        return self.plan(source, limit)[1]

    def update(self, source: str, num_drafted: int, num_accepted: int) -> None:
        """Fold one round's outcome in: ``num_accepted`` accepts, then a reject if any token was refused."""
        est = self.estimate(source)
        outcomes = [1.0] * num_accepted + ([0.0] if num_accepted < num_drafted else [])
        for outcome in outcomes:
            est.alpha = self.decay * est.alpha + (1 - self.decay) * outcome

    def idle(self, source: str) -> None:
        """A round in which ``source`` was not asked to draft: its alpha relaxes toward the prior."""
        est = self.estimate(source)
        est.alpha += self.idle_relax * (self.prior(source) - est.alpha)

    def set_verify_costs(self, costs: tuple[float, ...]) -> None:
        """The measured cost of a pass verifying k tokens over a one-token pass, for k = 0, 1, ...
        (see :meth:`VerifyCost.relative_costs`)."""
        self.verify_costs = costs

    def update_cost(self, source: str, draft_ms_per_token: float, verify_ms_per_pass: float) -> None:
        """Measured draft cost of a model drafter, as a fraction of a verify pass (EMA)."""
        if verify_ms_per_pass <= 0:
            return
        est = self.estimate(source)
        est.draft_cost_per_token = 0.8 * est.draft_cost_per_token + 0.2 * draft_ms_per_token / verify_ms_per_pass
