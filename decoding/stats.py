"""Per-generation statistics: target passes, draft acceptance per source, milliseconds per stage."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class SourceStats:
    """Draft counts of one draft source (e.g. ``ngram:context``, ``model``)."""

    rounds: int = 0  # verify rounds that used a draft from this source
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted and committed (a stop cut excludes what follows it)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@dataclass
class GenerationStats:
    """What one generation cost. Times are wall-clock milliseconds."""

    prompt_tokens: int = 0
    prefill_computed: int = 0  # prompt tokens run through the target in prefill or the first pass
    prefill_reused: int = 0  # prompt tokens whose KV entries were already cached
    new_tokens: int = 0  # tokens committed to the output (including a stop token)
    target_passes: int = 0  # verify forward passes of the target, prefill excluded
    sources: dict[str, SourceStats] = field(default_factory=dict)
    # Per verify pass, in order: (tokens fed, tokens the cache kept of them, a tree pass); what a replay
    # needs to compute the same logits in the same pass shapes (bench.noise.run_shaped_logits).
    passes: list[tuple[int, int, bool]] = field(default_factory=list, repr=False)
    # The same for the passes that computed the cached prompt but its last token, over this and earlier
    # requests (KVCacheState.history after the prefill); empty where the engine keeps no history.
    prompt_passes: list[tuple[int, int, bool]] = field(default_factory=list, repr=False)
    ms: dict[str, float] = field(default_factory=lambda: {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "total": 0.0})

    @property
    def drafted(self) -> int:
        return sum(s.drafted for s in self.sources.values())

    @property
    def accepted(self) -> int:
        return sum(s.accepted for s in self.sources.values())

    @property
    def tokens_per_pass(self) -> float:
        """Mean committed tokens per target verify pass (1.0 for plain decoding)."""
        return self.new_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_s(self) -> float:
        """New tokens per second over the whole generation, prefill included."""
        return 1000.0 * self.new_tokens / self.ms["total"] if self.ms["total"] else 0.0

    def record_draft(self, source: str, drafted: int, accepted: int) -> None:
        entry = self.sources.setdefault(source, SourceStats())
        entry.rounds += 1
        entry.drafted += drafted
        entry.accepted += accepted

    def to_dict(self) -> dict:
        """JSON-ready figures, derived ones included."""
        data = asdict(self)
        del data["passes"], data["prompt_passes"]  # one entry per pass: for replays, not for logs
        data["ms"] = {k: round(v, 2) for k, v in self.ms.items()}
        for name, source in self.sources.items():
            data["sources"][name]["acceptance_rate"] = round(source.acceptance_rate, 4)
        data.update(drafted=self.drafted, accepted=self.accepted, tokens_per_pass=round(self.tokens_per_pass, 3),
                    acceptance_rate=round(self.acceptance_rate, 4), tokens_per_s=round(self.tokens_per_s, 2))
        return data

    def summary(self) -> str:
        """One log line: passes, acceptance and stage times."""
        per_source = " ".join(f"{n}={s.accepted}/{s.drafted}" for n, s in sorted(self.sources.items()))
        stages = " ".join(f"{k}={v:.1f}ms" for k, v in self.ms.items())
        return (f"tokens={self.new_tokens} passes={self.target_passes} tokens/pass={self.tokens_per_pass:.2f} "
                f"prefill={self.prefill_computed}+{self.prefill_reused}reused accepted[{per_source or '-'}] {stages}")
