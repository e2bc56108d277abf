"""Shooter credit (`--shooter-credit C`): the training game pays the shooter C x the kill
reward for a kill's worth of damage dealt and charges the agent that dies C x the kill reward,
through the game's own damage and agent-disabled terms (rules §4.10)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import gigastep
from baselines.buffer import signal_rewards
from baselines.config import PPOConfig, validate
from baselines.envs import shooter_credit_weights, training_env
from gigastep.game.rewards import RewardInputs, total_reward

SCENARIO = "identical_2_vs_2_fobs_vec_void_disc"  # agents 0, 1 in team 0; 2, 3 in team 1


def _kill_step(config):
    """Agent 0 deals agent 2 a whole kill's damage in one step; agent 2 dies."""
    n = 4
    damage = np.zeros((n, n), np.float32)
    # damage[i, j]: units j deals to i; a kill takes max_health / damage_per_second units
    # over the step's dt
    damage[2, 0] = config.max_health[2] / config.damage_per_second / config.dt
    alive_pre = jnp.ones(n, bool)
    alive = jnp.asarray([True, True, False, True])
    false = jnp.zeros(n, bool)
    return RewardInputs(
        alive_pre=alive_pre,
        alive=alive,
        hit_waypoint=false,
        collided=false,
        hazard_death=false,
        detected=jnp.zeros((n, n), bool),
        damage=jnp.asarray(damage),
    )


def test_the_shooter_of_a_whole_kill_earns_c_times_the_kill_reward_and_the_victim_pays_it():
    game = gigastep.make(SCENARIO).config
    c = 0.25
    shaped = game.replace(**shooter_credit_weights(game, c))
    step = _kill_step(game)
    aux = jnp.ones(())
    credit = np.asarray(total_reward(shaped, step, aux) - total_reward(game, step, aux))
    kill, size = game.reward_defeat_one_opponent, 2  # rewards are divided by the team size
    # hand calculation: shooter +C*K; victim -C*K at death (its damage term, -0.5 x the
    # damage taken, is multiplied by alive' and so is 0 on the step it dies); nobody else
    assert credit[0] == pytest.approx(c * kill / size, rel=1e-5)
    assert credit[2] == pytest.approx(-c * kill / size, rel=1e-5)
    assert credit[1] == 0 and credit[3] == 0


def test_under_the_team_signal_the_credit_stays_with_the_shooter():
    game = gigastep.make(SCENARIO).config
    shaped = game.replace(**shooter_credit_weights(game, 0.25))
    step = _kill_step(game)
    own = torch.tensor(np.asarray(total_reward(game, step, jnp.ones(())))[None])
    trained = torch.tensor(np.asarray(total_reward(shaped, step, jnp.ones(())))[None])
    teams = torch.tensor([0, 0, 1, 1])
    r = signal_rewards("team", trained, own, teams)[0]
    team0 = float(own[0, :2].sum())
    assert float(r[0]) == pytest.approx(team0 + 12.5, rel=1e-5)  # + C*K/size, its own
    assert float(r[1]) == pytest.approx(team0, rel=1e-5)


def test_the_training_game_carries_the_weights_and_the_rest_of_the_scenario():
    env = training_env(SCENARIO, "max_episode_length=50", 0.2)
    own = gigastep.make(SCENARIO).config
    assert env.config.reward_damage == pytest.approx(0.2 * 100 * own.damage_per_second)
    assert env.config.reward_agent_disabled == pytest.approx(20.0)
    assert env.config.max_episode_length == 50
    assert training_env(SCENARIO).config == own


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(shooter_credit=-1.0), "--shooter-credit must be >= 0"),
        (dict(shooter_credit=float("nan")), "--shooter-credit must be >= 0"),
        (dict(shooter_credit=0.2, env="reward_damage=1"), "--env 'reward_damage=1' sets them"),
        (dict(signal="teams"), "--signal must be individual or team, got 'teams'"),
        (dict(action_head="split"), "--action-head must be joint or factored"),
    ],
)
def test_bad_signal_options_are_refused_before_any_compute(fields, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        validate(PPOConfig(**fields))
