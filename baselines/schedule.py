"""The learning-rate schedule: constant, or linear decay to 0 over the run's horizon.

The horizon is `--updates`, and also `--time-budget-s` when one is set: the schedule's
progress before update k (1-based) is the larger of the fractions of the updates and of the
training wall time used so far. The schedule is checkpointed as an anchor (the update, wall
time and progress where the current horizon took over), so a run resumed with another
`--updates` or `--time-budget-s` continues from the progress it had reached instead of
jumping: the rest of the schedule is spread over the rest of the new horizon (a schedule
that already reached 0, e.g. a finished run extended with `--updates`, takes the new
horizon's own rate instead, since continuing at 0 would not train).

Exactness: the update-count schedule is a function of the update number alone, so a resumed
run's rates are those of the uninterrupted run bit for bit (the anchor of a fresh run is 0
and its rates are exactly lr * (1 - (k - 1) / updates)). The time schedule is a function of
the measured training time: a resumed run continues from the wall time recorded in the
checkpoint, so its rate is continuous across the interruption, but the rates after it follow
that machine's speed and are no more reproducible than where a time-budgeted run stops.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["LRSchedule"]


@dataclass
class LRSchedule:
    """Linear decay of `lr` to 0 over the horizon (see the module doc); constant when off."""

    lr: float
    anneal: bool
    updates: int
    """The horizon in updates (the config's `updates`)."""
    time_budget_s: float = 0.0
    """The horizon in training seconds (0: none)."""
    anchor_update: int = 0
    anchor_wall_s: float = 0.0
    anchor_progress: float = 0.0
    """Where the current horizon took over: updates done, wall time and progress then."""

    def progress(self, done: int, wall_s: float) -> float:
        """The fraction of the schedule used after `done` updates and `wall_s` seconds."""
        p = 0.0
        if self.updates > self.anchor_update:
            p = (done - self.anchor_update) / (self.updates - self.anchor_update)
        if self.time_budget_s > self.anchor_wall_s:
            spent = (wall_s - self.anchor_wall_s) / (self.time_budget_s - self.anchor_wall_s)
            p = max(p, spent)
        return min(1.0, self.anchor_progress + (1.0 - self.anchor_progress) * p)

    def rate(self, done: int, wall_s: float) -> float:
        """The learning rate of the update after `done` updates and `wall_s` seconds."""
        if not self.anneal:
            return self.lr
        return self.lr * (1.0 - self.progress(done, wall_s))

    def resumed(self, updates: int, time_budget_s: float, done: int, wall_s: float):
        """This schedule continued with a new horizon from (`done`, `wall_s`): unchanged
        when the horizon is the same, else re-anchored at the progress reached. A schedule
        that has ended (rate 0) and is extended takes the new horizon's own progress
        (`done / updates`, or the budget's share) instead: continuing at 0 would not train."""
        if (updates, time_budget_s) == (self.updates, self.time_budget_s):
            return self
        reached = self.progress(done, wall_s)
        if reached >= 1.0:
            fresh = LRSchedule(self.lr, self.anneal, updates, time_budget_s)
            reached = fresh.progress(done, wall_s)
        return LRSchedule(
            self.lr,
            self.anneal,
            updates,
            time_budget_s,
            anchor_update=done,
            anchor_wall_s=wall_s,
            anchor_progress=reached,
        )

    def state_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_state_dict(cls, state: dict) -> LRSchedule:
        return cls(**state)
