"""Replays and state files (gigastep.viz.replay)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from gigastep.viz.replay import (
    FORMAT_VERSION,
    GameRunner,
    Replay,
    ReplayError,
    ReplayWarning,
    _digest,
    load_state,
    record_game,
    save_state,
)

SCENARIO = "identical_2_vs_2_fobs_rgb_void_cont"
SMALL = {"resolution_x": 24, "resolution_y": 24}  # an override the replay must carry


@pytest.fixture(scope="module")
def recording():
    # pursuit against random ends in ~25 steps: the episode's end is part of the replay.
    return record_game(
        SCENARIO, ("pursuit", "random"), steps=120, seed=3, agents=(0, 2), overrides=SMALL
    )


@pytest.fixture(scope="module")
def replay_file(recording, tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "game.replay"
    recording.replay().save(path)
    return path


def _leaves(states):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(states)]


def test_a_replay_re_simulates_rewards_dones_and_every_state_exactly(recording, replay_file):
    assert recording.episode_done[-1] and recording.steps < 120
    again = Replay.load(replay_file).simulate()
    assert again.steps == recording.steps
    np.testing.assert_array_equal(again.rewards, recording.rewards)
    np.testing.assert_array_equal(again.dones, recording.dones)
    np.testing.assert_array_equal(again.episode_done, recording.episode_done)
    for a, b in zip(_leaves(again.states), _leaves(recording.states), strict=True):
        np.testing.assert_array_equal(a, b)  # bit for bit, the final state included
    np.testing.assert_array_equal(again.ego, recording.ego)


def test_a_replay_file_is_small_plain_arrays_without_pickle(replay_file, recording):
    with np.load(replay_file, allow_pickle=False) as data:
        assert sorted(data.files) == [
            "actions",
            "digest",
            "final_returns",
            "final_state_sha256",
            "format",
            "meta",
            "version",
        ]
        assert all(data[k].dtype != object for k in data.files)
        meta = json.loads(str(data["meta"]))
    assert meta["scenario"] == SCENARIO and meta["overrides"] == SMALL and meta["seed"] == 3
    assert meta["players"] == ["pursuit", "random"] and meta["agents"] == [0, 2]
    assert replay_file.stat().st_size < 16_000


def _rewrite(src, dst, forge=True, **changes):
    """Copy a replay file with some of its meta fields (or arrays) changed; with `digest`, the
    file's digest is recomputed as its writer would (`forge`: a deliberate forgery), else kept;
    a change to None removes that array."""
    with np.load(src, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays["meta"]))
    for key, value in changes.items():
        if key in meta:
            meta[key] = value
        elif value is None:
            arrays.pop(key, None)
        else:
            arrays[key] = value
    arrays["meta"] = np.asarray(json.dumps(meta))
    if forge and "digest" in arrays:
        arrays["digest"] = np.asarray(_digest(arrays))
    with open(dst, "wb") as f:  # a file object: savez would add .npz to the name
        np.savez_compressed(f, **arrays)
    return dst


def test_a_replay_whose_scenario_hash_no_longer_matches_is_refused(replay_file, tmp_path):
    bad = _rewrite(replay_file, tmp_path / "old.npz", config_hash="0123456789ab")
    replay = Replay.load(bad)
    real = Replay.load(replay_file).config_hash
    with pytest.raises(
        ReplayError, match=f"hash 0123456789ab, but that scenario now has hash {real}"
    ):
        replay.simulate()


def test_a_replay_that_diverges_from_its_recording_says_so(replay_file, tmp_path):
    actions = Replay.load(replay_file).actions.copy()
    actions[0] = 1.0 - actions[0]
    bad = _rewrite(replay_file, tmp_path / "edited.npz", actions=actions)
    with pytest.raises(ReplayError, match="differs from the recording"):
        Replay.load(bad).simulate()


def _one_action_changed(replay_file):
    """The replay's actions with agent 0's turn at step 1 (alive, not at the limit) changed
    by 0.01: so little that the final returns stay the same (only the state shows it)."""
    actions = Replay.load(replay_file).actions.copy()
    assert abs(actions[1, 0, 0]) < 0.9
    actions[1, 0, 0] += np.float32(0.01)
    return actions


def test_an_edited_action_is_refused_by_the_digest(replay_file, tmp_path):
    bad = _rewrite(
        replay_file,
        tmp_path / "edited.replay",
        forge=False,
        actions=_one_action_changed(replay_file),
    )
    with pytest.raises(ReplayError, match=r"edited\.replay' was changed after it was written"):
        Replay.load(bad)
    bad = _rewrite(replay_file, tmp_path / "seed.replay", forge=False, seed=4)
    with pytest.raises(ReplayError, match=r"seed\.replay' was changed after it was written"):
        Replay.load(bad)


def test_an_edited_action_with_a_forged_digest_fails_the_re_simulation(replay_file, tmp_path):
    """The re-simulation compares the final state, not only the returns: the changed action
    keeps the returns here and still changes where the agent ends up."""
    bad = _rewrite(
        replay_file, tmp_path / "forged.replay", actions=_one_action_changed(replay_file)
    )
    replay = Replay.load(bad)  # the digest matches: it was recomputed
    rec = replay.simulate(check=False)
    original = Replay.load(replay_file)
    np.testing.assert_array_equal(
        np.asarray(rec.states.episode.returns[-1]), original.final_returns
    )
    assert rec.steps == original.steps  # neither the returns nor the length betray the edit
    with pytest.raises(ReplayError, match="differs from the recording.*a different final state"):
        replay.simulate()


def test_a_replay_without_a_digest_loads_with_a_warning_and_is_still_re_simulated(
    replay_file, tmp_path
):
    old = _rewrite(replay_file, tmp_path / "old.replay", digest=None, forge=False)
    with pytest.warns(ReplayWarning, match=r"old\.replay' has no digest"):
        replay = Replay.load(old)
    replay.simulate()  # the same game: it passes
    edited = _rewrite(
        replay_file,
        tmp_path / "old-edited.replay",
        digest=None,
        forge=False,
        actions=_one_action_changed(replay_file),
    )
    with pytest.warns(ReplayWarning):
        replay = Replay.load(edited)
    with pytest.raises(ReplayError, match="a different final state"):
        replay.simulate()


BROKEN = [
    ("truncated", None, "not a plain .npz, or truncated"),
    ("no scenario", {"scenario": "DROP"}, "its metadata lacks scenario"),
    ("no seed", {"seed": "DROP"}, "its metadata lacks seed"),
    ("seed a string", {"seed": "3"}, "metadata seed is '3', expected an integer"),
    ("one player", {"players": ["pursuit"]}, "metadata players is ['pursuit']"),
    ("no actions", {"actions": None}, "its actions are missing"),
    ("actions of text", {"actions": np.asarray(["a", "b"])}, "its actions are <U1"),
    ("meta not JSON", {"meta": np.asarray("{oops")}, "its metadata is not JSON"),
    ("version text", {"version": np.asarray("one")}, "its version is"),
]


@pytest.mark.parametrize("case, change, message", BROKEN, ids=[c for c, _, _ in BROKEN])
def test_a_broken_replay_file_is_one_replay_error_naming_the_file(
    replay_file, tmp_path, case, change, message
):
    path = tmp_path / "broken.replay"
    if change is None:
        data = replay_file.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        with np.load(replay_file, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays["meta"]))
        for key, value in change.items():
            if key in meta:
                if value == "DROP":
                    del meta[key]
                else:
                    meta[key] = value
                arrays["meta"] = np.asarray(json.dumps(meta))
            elif value is None:
                del arrays[key]
            else:
                arrays[key] = value
        arrays["digest"] = np.asarray(_digest(arrays))  # a well-formed file, wrong inside
        with open(path, "wb") as f:
            np.savez_compressed(f, **arrays)
    with pytest.raises(ReplayError) as caught:
        Replay.load(path)
    assert str(path) in str(caught.value) and message in str(caught.value), caught.value


def test_a_folder_is_not_a_replay(tmp_path):
    with pytest.raises(ReplayError, match="is a folder, not a Gigastep replay file"):
        Replay.load(tmp_path)


def test_other_files_and_versions_are_refused(replay_file, tmp_path):
    newer = _rewrite(replay_file, tmp_path / "v9.npz", version=np.asarray(FORMAT_VERSION + 8))
    with pytest.raises(ReplayError, match="format version 9"):
        Replay.load(newer)
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ReplayError, match="not a Gigastep replay"):
        Replay.load(tmp_path / "other.npz")
    (tmp_path / "text.replay").write_text("hello")
    with pytest.raises(ReplayError, match="not a Gigastep replay"):
        Replay.load(tmp_path / "text.replay")
    with pytest.raises(FileNotFoundError, match="no replay file"):
        Replay.load(tmp_path / "missing.replay")


def test_a_game_runner_with_the_same_seed_plays_the_same_game(recording):
    game = GameRunner(SCENARIO, ("pursuit", "random"), seed=3, overrides=SMALL)
    for _ in range(5):
        game.step()
    np.testing.assert_array_equal(np.stack(game.actions), recording.actions[:5])
    # A person's override replaces that agent's action and nothing else.
    game.reset()
    game.step(overrides={1: np.asarray([1.0, -1.0, 0.0], np.float32)})
    np.testing.assert_array_equal(game.actions[0][1], [1.0, -1.0, 0.0])
    np.testing.assert_array_equal(
        np.delete(game.actions[0], 1, 0), np.delete(recording.actions[0], 1, 0)
    )


def test_save_state_and_load_state_round_trip(recording, tmp_path):
    states = recording.states  # a batch: one state per step
    save_state(states, tmp_path / "batch.npz")
    back = load_state(tmp_path / "batch.npz")
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(states)
    for a, b in zip(_leaves(back), _leaves(states), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    single = jax.tree_util.tree_map(lambda x: x[-1], states)
    save_state(single, tmp_path / "one.npz")
    restored = load_state(tmp_path / "one.npz")
    env = recording.env
    step = env.step(restored, np.zeros((4, 3), np.float32), jax.random.PRNGKey(0))
    reference = env.step(single, np.zeros((4, 3), np.float32), jax.random.PRNGKey(0))
    for a, b in zip(_leaves(step[1]), _leaves(reference[1]), strict=True):
        np.testing.assert_array_equal(a, b)


def test_load_state_refuses_other_files(tmp_path):
    np.savez(tmp_path / "x.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a Gigastep state file"):
        load_state(tmp_path / "x.npz")
    with pytest.raises(TypeError, match="takes an EnvState"):
        save_state({"x": 1}, tmp_path / "y.npz")
