"""BenchMARL adapter: `task(name, **config)`, a Gigastep scenario as a BenchMARL task.

    >>> from benchmarl.algorithms import MappoConfig
    >>> from benchmarl.experiment import Experiment, ExperimentConfig
    >>> from benchmarl.models import MlpConfig
    >>> experiment = Experiment(
    ...     task=task("identical_5_vs_5_fobs_vec_void_disc", opponent="pursuit"),
    ...     algorithm_config=MappoConfig.get_from_yaml(),
    ...     model_config=MlpConfig.get_from_yaml(),
    ...     critic_model_config=MlpConfig.get_from_yaml(),
    ...     seed=0,
    ...     config=ExperimentConfig.get_from_yaml(),
    ... )
    >>> experiment.run()

Every BenchMARL algorithm, model and experiment option runs on it unchanged: the task builds
`gigastep.adapters.torchrl.GigastepTorchRLEnv` (one batched environment of `num_envs` games,
stepped in one compiled call) and tells BenchMARL what to read in it. Needs the `benchmarl`
extra (`pip install "torch==2.13.0" -e ".[benchmarl]"`, docs/install.md); `import gigastep`
never imports BenchMARL.

What BenchMARL sees:

- Groups: one per team, `team0` and `team1`, with agents `team{t}_agent{k}` (k counting
  within the team; the names of the JaxMARL and PettingZoo adapters). With `opponent` (a
  scripted policy of `gigastep.opponents`, played inside the same compiled step) only
  group `f"team{team}"` exists. Both groups learn when both are there, each with its own
  policy (BenchMARL trains every group).
- Actions: the scenario's own. A `..._disc` scenario (or `discrete_actions=True`) has 27
  discrete actions, and BenchMARL runs it with algorithms that support discrete actions;
  a `..._cont` one has continuous (heading, dive, throttle) in [-1, 1]. BenchMARL picks the
  kind from `supports_continuous_actions()` / `supports_discrete_actions()`; an algorithm
  without it (QMIX on a continuous scenario) is refused by BenchMARL's own check. Every
  action is available to every agent: no `action_mask`.
- Observations (`observation_spec`): a group's "observation" (L,) float32 (vector scenarios;
  (entity_size,) for entity ones) and/or "pixels" (res_x, res_y, 3) uint8 (RGB scenarios,
  for BenchMARL's `CnnConfig`, which reads images as (X, Y, C) and vectors beside them, so
  "rgb_vector" works too).
- State (`state_spec`, default `state=True`): the root "state" (S,) float32, the game's
  global state vector (`gigastep.game.observations.global_state`) seen from team `team`
  (its agents first), which MAPPO's critic and QMIX's / VDN's mixers read. BenchMARL takes
  one state for every group: with both teams as groups, both critics read team `team`'s
  view of the same state.
- Info (`info_spec`): a group's `("info", "mask")` (bool, the agent is alive), which
  BenchMARL keeps out of its models and training batches and logs as
  `collection/<group>/info/mask` (the fraction of agents alive).
- `max_steps`: the scenario's `max_episode_length` (evaluation rollouts); `render` draws
  game 0's top view for BenchMARL's evaluation videos (`ExperimentConfig.render`).

Dead agents. BenchMARL's losses have no per-agent mask: every agent row of a group counts in
every step. A Gigastep agent that dies stays in its group until the episode ends: from the
step after its death its observation is all zeros, its reward 0 and its action ignored; its
done, terminated and truncated are the episode's (False until the episode ends, then True
for every agent), and its `("info", "mask")` is False. That is the right content for those
rows: a dead agent's return from then on is exactly 0 and nothing it does changes it, so its
value targets are 0 (IPPO's critic learns V(zero observation) = 0; MAPPO's reads the state,
whose `alive` entries say who is dead), its advantages are 0 up to the critic's error, and its
ignored actions get no policy gradient in expectation. Per-agent dones that turned True at
death would be wrong in TorchRL: a True done in a group makes TorchRL reset that group, i.e.
the whole game. The rows still count in the means of the losses (they dilute the per-step
loss by the fraction of dead agents) and in BenchMARL's per-agent reward means.

Config (`task(name, **config)`; also `Experiment.task.config`):
    opponent: None, or the name of a scripted policy of `gigastep.opponents` (or a module-level
        function: the task is pickled into BenchMARL's experiment folder) playing team
        `1 - team`.
    team: the controlled team with `opponent`; the view of the state vector (default 0).
    state: give BenchMARL the global state (default True).
    any other key: an `EnvConfig` field (`max_episode_length=100`, `obs_type="rgb"`, ...).
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import torch
from torchrl.data import Composite
from torchrl.envs import EnvBase

from gigastep._util.checks import check_team
from gigastep.adapters.torchrl import GigastepTorchRLEnv
from gigastep.opponents import get_policy
from gigastep.versus import resolve_env

try:
    from benchmarl.environments.common import TaskClass
except ImportError as error:
    raise ImportError(
        f"gigastep.benchmarl needs BenchMARL, which could not be imported ({error}); install "
        'the extra: pip install "torch==2.13.0" -e ".[benchmarl]" (docs/install.md)'
    ) from error

__all__ = ["GigastepTask", "task"]

_TASK_KEYS = ("opponent", "team", "state")


class GigastepTask(TaskClass):
    """A Gigastep scenario as a BenchMARL `TaskClass` (see the module docstring).

    Args:
        name: the scenario name (`gigastep.registry`).
        config: `opponent`, `team`, `state` and `EnvConfig` overrides; see `task`.
    """

    def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
        config = dict(config or {})
        super().__init__(name=name, config=config)
        self._check()

    # --- the config ---------------------------------------------------------------------
    def _check(self) -> None:
        c = self.config
        check_team(c.get("team", 0))
        if not isinstance(c.get("state", True), bool):
            raise TypeError(f"state must be True or False, got {c['state']!r}")
        if c.get("opponent") is not None:
            get_policy(c["opponent"])  # a known name or a callable
        try:
            pickle.dumps(c)
        except Exception as error:  # pickle raises several kinds
            raise TypeError(
                "the task config must be picklable, since BenchMARL saves the task in its "
                f"experiment folder: {error}. Give the opponent as a name of "
                "gigastep.opponents or a module-level function, not a lambda or closure"
            ) from error
        self.game_config = resolve_env(self.name, **self.overrides).config  # checks the fields

    @property
    def overrides(self) -> dict[str, Any]:
        """The config's `EnvConfig` fields."""
        return {k: v for k, v in self.config.items() if k not in _TASK_KEYS}

    @property
    def with_state(self) -> bool:
        return bool(self.config.get("state", True))

    # --- making environments ------------------------------------------------------------
    def get_env_fun(
        self,
        num_envs: int,
        continuous_actions: bool,
        seed: int | None,
        device: torch.device | str,
    ) -> Callable[[], EnvBase]:
        discrete = self.game_config.discrete_actions
        if continuous_actions == discrete:
            have = "discrete" if discrete else "continuous"
            raise ValueError(
                f"{self.name} has {have} actions but BenchMARL asked for "
                f"{'continuous' if continuous_actions else 'discrete'} ones; pick the "
                "scenario (_disc / _cont) or set discrete_actions in the task config"
            )
        name, overrides = self.name, copy.deepcopy(self.overrides)
        opponent, team = self.config.get("opponent"), int(self.config.get("team", 0))
        state = self.with_state
        return lambda: GigastepTorchRLEnv(
            name,
            num_envs=num_envs,
            device=device,
            seed=0 if seed is None else int(seed),
            opponent=opponent,
            team=team,
            state=state,
            **overrides,
        )

    def supports_continuous_actions(self) -> bool:
        return not self.game_config.discrete_actions

    def supports_discrete_actions(self) -> bool:
        return bool(self.game_config.discrete_actions)

    def max_steps(self, env: EnvBase) -> int:
        limit = self.game_config.max_episode_length
        if limit is None:
            raise ValueError(
                f"{self.name} has no time limit (max_episode_length=None), so BenchMARL's "
                "evaluation rollouts would have no length: set max_episode_length in the task "
                "config"
            )
        return int(limit)

    def has_render(self, env: EnvBase) -> bool:
        return True

    def group_map(self, env: EnvBase) -> dict[str, list[str]]:
        return dict(env.group_map)

    # --- specs (without the batch of games, as BenchMARL wants them) --------------------
    def observation_spec(self, env: EnvBase) -> Composite:
        spec = env.full_observation_spec_unbatched.clone()
        if "state" in spec.keys():
            del spec["state"]
        for group in self.group_map(env):
            del spec[(group, "info")]
        return spec

    def info_spec(self, env: EnvBase) -> Composite | None:
        spec = env.full_observation_spec_unbatched.clone()
        if "state" in spec.keys():
            del spec["state"]
        for group in self.group_map(env):
            for key in list(spec[group].keys()):
                if key != "info":
                    del spec[(group, key)]
        return spec

    def state_spec(self, env: EnvBase) -> Composite | None:
        if not self.with_state:
            return None
        return Composite({"state": env.full_observation_spec_unbatched["state"].clone()})

    def action_mask_spec(self, env: EnvBase) -> Composite | None:
        return None  # every action is available to every agent

    def action_spec(self, env: EnvBase) -> Composite:
        return env.full_action_spec_unbatched

    @staticmethod
    def env_name() -> str:
        return "gigastep"


def task(name: str, **config: Any) -> GigastepTask:
    """The Gigastep scenario `name` as a BenchMARL task (the module docstring says what
    BenchMARL sees).

    Args:
        name: a scenario name, e.g. "identical_5_vs_5_fobs_vec_void_disc".
        **config: `opponent` (a policy name of `gigastep.opponents`: BenchMARL then trains
            team `team` alone), `team` (0 or 1), `state` (default True: the global state for
            centralised critics and mixers), and `EnvConfig` fields to change (e.g.
            `max_episode_length=100`, `obs_type="rgb"`).

    Raises:
        TypeError / ValueError: an unknown scenario or field, a team other than 0 or 1, or a
            config BenchMARL cannot save (pickle).
    """
    return GigastepTask(name, config)
