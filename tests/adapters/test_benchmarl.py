"""`gigastep.benchmarl.task`: BenchMARL's task contract, and BenchMARL's own `Experiment`
training on it (MAPPO, IPPO, QMIX) with nothing changed but the task."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("benchmarl")

from benchmarl.algorithms import IppoConfig, MappoConfig, QmixConfig  # noqa: E402
from benchmarl.experiment import Experiment, ExperimentConfig  # noqa: E402
from benchmarl.models import CnnConfig, MlpConfig  # noqa: E402
from torchrl.envs import EnvBase  # noqa: E402

from gigastep.benchmarl import GigastepTask, task  # noqa: E402
from gigastep.game.observations.global_state import state_vector_size  # noqa: E402

GAME = "identical_2_vs_2_fobs_vec_void_disc"
SHORT = {"max_episode_length": 4}


def _env(t: GigastepTask, num_envs: int = 2, continuous: bool = False) -> EnvBase:
    return t.get_env_fun(num_envs=num_envs, continuous_actions=continuous, seed=0, device="cpu")()


# ------------------------------------------------------------------------------------------
# The task contract
# ------------------------------------------------------------------------------------------


def test_both_teams_are_groups_with_observations_state_and_info_apart():
    t = task(GAME, **SHORT)
    env = _env(t)
    assert t.env_name() == "gigastep" and t.max_steps(env) == 4 and t.has_render(env)
    assert t.supports_discrete_actions() and not t.supports_continuous_actions()
    assert t.group_map(env) == {
        "team0": ["team0_agent0", "team0_agent1"],
        "team1": ["team1_agent0", "team1_agent1"],
    }
    L, S = env.config.vector_size, state_vector_size(env.config)
    obs = t.observation_spec(env)
    # what the models read: the observation alone, no batch of games
    assert set(obs.keys(True, True)) == {("team0", "observation"), ("team1", "observation")}
    assert obs["team0", "observation"].shape == (2, L)
    assert obs["team0", "observation"].dtype == torch.float32
    assert set(t.info_spec(env).keys(True, True)) == {
        ("team0", "info", "mask"),
        ("team1", "info", "mask"),
    }
    state = t.state_spec(env)
    assert list(state.keys()) == ["state"] and state["state"].shape == (S,)
    assert t.action_mask_spec(env) is None
    action = t.action_spec(env)
    assert set(action.keys(True, True)) == {("team0", "action"), ("team1", "action")}
    assert action["team0", "action"].shape == (2,) and action["team0", "action"].n == 27


# the first step of the game compiles it (about 20 s on 2 cores): slow tier
@pytest.mark.slow
def test_the_data_hold_what_the_specs_say_and_render_draws_game_0():
    t = task(GAME, **SHORT)
    env = _env(t)
    S = state_vector_size(env.config)
    td = env.rollout(3, break_when_any_done=False)
    assert t.observation_spec(env)["team0", "observation"].is_in(td["team0", "observation"][0, 0])
    assert td["next", "state"].shape == (2, 3, S)
    assert td["next", "team1", "info", "mask"].shape == (2, 3, 2)
    frame = t.render_callback(None, env, td)  # BenchMARL's default callback: env.render
    assert frame.shape == (env.config.resolution_y, env.config.resolution_x, 3)
    assert frame.dtype.name == "uint8" and frame.any()
    torch.testing.assert_close(torch.as_tensor(frame), torch.as_tensor(env.render(env_index=0)))


def test_an_opponent_leaves_one_group_and_the_state_can_be_left_out():
    t = task(GAME, opponent="pursuit", team=1, state=False, discrete_actions=False, **SHORT)
    env = _env(t, continuous=True)
    assert t.supports_continuous_actions() and not t.supports_discrete_actions()
    assert t.group_map(env) == {"team1": ["team1_agent0", "team1_agent1"]}
    assert t.state_spec(env) is None
    assert set(t.observation_spec(env).keys(True, True)) == {("team1", "observation")}
    action = t.action_spec(env)["team1", "action"]
    assert action.shape == (2, 3) and action.dtype == torch.float32
    with pytest.raises(ValueError, match="has continuous actions but BenchMARL asked for discrete"):
        t.get_env_fun(num_envs=1, continuous_actions=False, seed=0, device="cpu")


def test_the_task_is_saved_by_pickle_and_refuses_what_cannot_be():
    t = task(GAME, opponent="pursuit", **SHORT)
    assert pickle.loads(pickle.dumps(t)) == t  # BenchMARL pickles it into its folder
    with pytest.raises(TypeError, match="must be picklable"):
        task(GAME, opponent=lambda obs, key: obs)
    with pytest.raises(ValueError, match="unknown scripted policy 'pursuti'"):
        task(GAME, opponent="pursuti")
    with pytest.raises(ValueError, match="team must be 0 or 1"):
        task(GAME, team=2)
    with pytest.raises(TypeError, match="unknown EnvConfig field 'max_steps'"):
        task(GAME, max_steps=3)


def test_max_steps_needs_a_time_limit():
    t = task(GAME, max_episode_length=None)
    with pytest.raises(ValueError, match="no time limit"):
        t.max_steps(None)


# ------------------------------------------------------------------------------------------
# BenchMARL's Experiment, unchanged
# ------------------------------------------------------------------------------------------


def _config(tmp_path, evaluate: bool = False) -> ExperimentConfig:
    c = ExperimentConfig.get_from_yaml()
    c.sampling_device = c.train_device = c.buffer_device = "cpu"
    c.max_n_iters, c.max_n_frames = 2, None
    c.on_policy_collected_frames_per_batch = 16  # 2 games x 8 steps (2 episodes of 4)
    c.on_policy_n_envs_per_worker = 2
    c.on_policy_n_minibatch_iters = 1
    c.on_policy_minibatch_size = 16
    c.off_policy_collected_frames_per_batch = 16
    c.off_policy_n_envs_per_worker = 2
    c.off_policy_n_optimizer_steps = 2
    c.off_policy_train_batch_size = 8
    c.off_policy_memory_size = 64
    c.off_policy_init_random_frames = 0
    # evaluation: BenchMARL's batched rollouts of max_steps, with the render callback, its
    # returns written to a JSON file (no logger: no video file, which needs torchvision)
    c.evaluation = c.render = c.create_json = evaluate
    c.evaluation_interval = 16
    c.evaluation_episodes = 2
    c.loggers = []
    c.checkpoint_interval = 0
    c.checkpoint_at_end = False
    c.save_folder = str(tmp_path)
    return c


def _mlp() -> MlpConfig:
    m = MlpConfig.get_from_yaml()
    m.num_cells = [16]
    return m


def _run(t: GigastepTask, algorithm, tmp_path, model=None, critic=None, evaluate=False):
    experiment = Experiment(
        task=t,
        algorithm_config=algorithm,
        model_config=model or _mlp(),
        critic_model_config=critic or _mlp(),
        seed=0,
        config=_config(tmp_path, evaluate),
    )
    before = {
        group: [p.detach().clone() for p in experiment.losses[group].parameters()]
        for group in experiment.group_map
    }
    experiment.run()
    assert experiment.n_iters_performed == 2
    assert experiment.total_frames == 2 * 16
    for group, params in before.items():  # every group learned something
        after = list(experiment.losses[group].parameters())
        assert any(not torch.equal(a, b) for a, b in zip(after, params, strict=True)), group
    return experiment


# compiles the game (about 20 s on 2 cores, less after the tests above): slow tier
@pytest.mark.slow
def test_mappo_trains_both_teams_with_a_centralised_critic_on_the_state(tmp_path):
    experiment = _run(task(GAME, **SHORT), MappoConfig.get_from_yaml(), tmp_path)
    assert set(experiment.group_map) == {"team0", "team1"}
    assert experiment.state_spec is not None and not experiment.continuous_actions


@pytest.mark.slow
def test_ippo_trains_one_team_against_a_scripted_opponent_with_continuous_actions(tmp_path):
    t = task(GAME, opponent="pursuit", discrete_actions=False, **SHORT)
    experiment = _run(t, IppoConfig.get_from_yaml(), tmp_path, evaluate=True)
    assert list(experiment.group_map) == ["team0"] and experiment.continuous_actions
    (json_file,) = experiment.folder_name.glob("*.json")  # the evaluations' returns
    assert "team0_return" in json_file.read_text()


@pytest.mark.slow
def test_mappo_trains_on_pixels_with_benchmarl_cnn(tmp_path):
    t = task(GAME, obs_type="rgb", resolution_x=12, resolution_y=12, **SHORT)
    cnn = CnnConfig.get_from_yaml()
    cnn.cnn_num_cells, cnn.cnn_kernel_sizes, cnn.cnn_strides = [4], [3], [2]
    cnn.cnn_paddings, cnn.mlp_num_cells = [0], [16]
    experiment = _run(t, MappoConfig.get_from_yaml(), tmp_path, model=cnn)  # MLP critic: state
    assert experiment.observation_spec["team0", "pixels"].shape == (2, 12, 12, 3)


@pytest.mark.slow
def test_qmix_trains_both_teams_with_the_state_in_its_mixer(tmp_path):
    experiment = _run(task(GAME, **SHORT), QmixConfig.get_from_yaml(), tmp_path)
    assert set(experiment.group_map) == {"team0", "team1"}


def test_the_short_name_gives_the_adapters_objects():
    import gigastep.adapters.benchmarl as full
    import gigastep.benchmarl as short

    assert short.task is full.task and short.GigastepTask is full.GigastepTask
    assert short.__all__ == full.__all__ == ["GigastepTask", "task"]
