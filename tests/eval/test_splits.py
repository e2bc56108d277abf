"""Generalisation splits (gigastep.eval.splits): manifests, their hash, the held-out rule, the
zero-shot protocol and its scores."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import numpy as np
import pytest

from gigastep.cli import main as cli
from gigastep.eval.matches import evaluate
from gigastep.eval.players import ScriptedPlayer
from gigastep.eval.splits import (
    FAMILIES,
    FEW_SHOT_SEED_OFFSET,
    ItemResult,
    SplitResult,
    evaluate_split,
    load_split,
    split_names,
)
from gigastep.eval.statistics import MatchResult, SeatResult
from gigastep.game.maps import builtin_maps
from gigastep.opponents import POLICIES

# The shipped splits are frozen: editing one changes its hash and fails here. A changed split
# is a new file with a new version (and a new row here).
FROZEN = {
    "levels-v1": "48317c7b2414",
    "levels-ent-v1": "cee4b07fe20d",
    "maps-layout-v1": "67213dd3ae61",
    "mix-v1": "fd6e2fed8f18",
    "opponents-v1": "23f614125b8c",
    "sensing-v1": "4fb6ca5ab22f",
    "sizes-drawn-v1": "f5ff20844cc2",
    "sizes-drawn-vec-v1": "54644588dbb8",
    "sizes-v1": "d6ab374d9632",
    "sizes-ent-v1": "6333a555f1de",
}

TINY = "identical_1_vs_1_fobs_vec_void_disc"


def _write(tmp_path, body: str, name: str = "s.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _split_text(train_maps: str, test_maps: str, extra: str = "") -> str:
    return f"""
        name = "t"
        version = 1
        family = "maps"
        games = 8
        {extra}
        [[items]]
        id = "a"
        role = "train"
        scenario = "{TINY}"
        maps = {train_maps}
        opponents = ["random"]

        [[items]]
        id = "b"
        role = "test"
        scenario = "{TINY}"
        maps = {test_maps}
        opponents = ["random"]
        seed = 1
        """


def test_every_shipped_split_loads_with_its_frozen_hash():
    assert sorted(split_names()) == sorted(FROZEN)
    for name, digest in FROZEN.items():
        split = load_split(name)
        assert split.name == name and split.hash == digest, name
        assert split.label == f"{name}@{digest}"


def test_shipped_map_split_holds_out_the_test_layouts_and_their_twins():
    split = load_split("maps-layout-v1")
    maps = builtin_maps()

    def boxes(item):
        return {tuple(map(tuple, maps[m].boxes)) for m in item.maps}

    test_boxes = set().union(*(boxes(i) for i in split.role("test")))
    for item in (*split.role("train"), *split.role("validation")):
        assert not boxes(item) & test_boxes, item.id
    assert all(f"{m}_flipped" in i.maps for i in split.role("test") for m in i.maps if "_" not in m)


def test_shipped_sizes_and_opponents_splits_are_disjoint_on_their_axis():
    sizes = load_split("sizes-v1")
    train = {sizes.config(i).team_sizes for i in sizes.role("train")}
    test = {sizes.config(i).team_sizes for i in sizes.role("test")}
    assert train == {(2, 2), (5, 5)} and test == {(1, 1), (10, 10), (5, 1)}
    opp = load_split("opponents-v1")
    seen = {o for i in opp.role("train") for o in i.opponents}
    assert not seen & {o for i in opp.role("test") for o in i.opponents}


def test_a_flipped_twin_in_train_and_test_is_refused(tmp_path):
    path = _write(tmp_path, _split_text('["center_block"]', '["center_block_flipped"]'))
    with pytest.raises(ValueError, match="test item 'b' shares obstacle layouts.*train item 'a'"):
        load_split(path)


def test_the_hash_ignores_comments_and_key_order_and_follows_content(tmp_path):
    a = load_split(_write(tmp_path, _split_text('["empty"]', '["center_block"]'), "a.toml"))
    text = "# a comment\n" + _split_text('["empty"]', '["center_block"]').replace(
        'version = 1\n        family = "maps"', 'family = "maps"\n        version = 1'
    )
    b = load_split(_write(tmp_path, text, "b.toml"))
    c = load_split(_write(tmp_path, _split_text('["empty"]', '["four_rooms"]'), "c.toml"))
    assert a.hash == b.hash != c.hash


@pytest.mark.parametrize(
    "body, message",
    [
        (_split_text('["empty"]', '["centre_block"]'), "unknown map 'centre_block'.*center_block"),
        (_split_text('["empty"]', '["four_rooms"]', 'familly = "maps"'), "unknown key 'familly'"),
        (
            _split_text('["empty"]', '["four_rooms"]').replace('"maps"\n', '"mapz"\n', 1),
            "unknown family 'mapz'.*maps",
        ),
        (
            _split_text('["empty"]', '["four_rooms"]').replace('["random"]', '["pursuit2"]', 1),
            "unknown opponent 'pursuit2'.*pursuit",
        ),
        (_split_text('["empty"]', '["four_rooms"]').replace('"b"', '"a"'), "repeated: \\['a'\\]"),
        (
            _split_text('["empty"]', '["four_rooms"]').replace('"test"', '"validation"'),
            "at least one test item",
        ),
        (
            _split_text('["empty"]', '["four_rooms"]', 'reference = ["random", "random"]'),
            "two different players",
        ),
    ],
)
def test_bad_manifests_are_named(tmp_path, body, message):
    with pytest.raises(ValueError, match=message):
        load_split(_write(tmp_path, body))


def test_unknown_split_names_list_the_closest():
    with pytest.raises(ValueError, match="unknown split 'size-v1'.*sizes-v1"):
        load_split("size-v1")


def _match(wins: int, draws: int, losses: int) -> MatchResult:
    seat = SeatResult(0, wins + draws + losses, wins, draws, losses, 0.0, 0.0, 0)
    return MatchResult("p", "o", "s", "h", (seat,), seat.games, 0, 10, 0)


def test_the_normalised_score_is_hand_computed():
    # points: policy (2 + 1/2) / 4 = 0.625, low 1/4 = 0.25, high 4/4 = 1 -> 0.375 / 0.75 = 0.5
    row = ItemResult(_match(2, 1, 1), _match(1, 0, 3), _match(4, 0, 0), item="i", role="test")
    assert row.points == 0.625 and row.normalised == pytest.approx(0.5)
    assert list(row.outcomes()) == [1.0, 1.0, 0.5, 0.0]
    same = ItemResult(_match(2, 1, 1), _match(1, 0, 3), _match(1, 0, 3), item="i", role="test")
    assert same.normalised is None  # the references cannot tell 0 from 1


def test_references_less_than_a_tenth_of_a_point_apart_give_no_normalised_score():
    # 20 games: the weaker reference 10 wins (0.5 points), the stronger 11 (0.55) or 12 (0.6)
    close = ItemResult(_match(15, 0, 5), _match(10, 0, 10), _match(11, 0, 9), role="test")
    assert close.reference_span == pytest.approx(0.05) and close.normalised is None
    apart = ItemResult(_match(15, 0, 5), _match(10, 0, 10), _match(12, 0, 8), role="test")
    assert apart.normalised == pytest.approx((0.75 - 0.5) / 0.1)  # 2.5, at the threshold
    result = SplitResult("t@x", "maps", "p", ("random", "pursuit"), 20, [close, apart])
    assert result.mean_normalised("test") == pytest.approx(2.5)  # the close row left out
    assert "| refs 0.050 apart |" in result.table()
    assert result.to_json()["rows"][0]["reference_span"] == pytest.approx(0.05)


def test_gap_and_test_iqm_are_hand_computed():
    low, high = _match(0, 0, 4), _match(4, 0, 0)  # points 0 and 1: normalised = points
    rows = [ItemResult(_match(3, 0, 1), low, high, item="tr", role="train")]  # 0.75
    rows += [  # test normalised 0, 0.25, 0.5, 1 -> mean 0.4375; IQM = mean(0.25, 0.5) = 0.375
        ItemResult(_match(w, 0, 4 - w), low, high, item=f"t{k}", role="test")
        for k, w in enumerate((0, 1, 2, 4))
    ]
    result = SplitResult("t@x", "maps", "p", ("random", "pursuit"), 4, rows)
    assert result.mean_normalised("train") == 0.75
    assert result.mean_normalised("test") == pytest.approx(0.4375)
    assert result.gap == pytest.approx(0.3125)
    iqm, lo, hi = result.test_iqm(resamples=200)
    assert iqm == pytest.approx(0.375) and lo <= iqm <= hi


@pytest.fixture(scope="module")
def tiny_split(tmp_path_factory):
    folder = tmp_path_factory.mktemp("split")
    return _write(folder, _split_text('["empty", "empty_flipped"]', '["center_block"]'))


def test_the_protocol_plays_the_same_games_as_evaluate(tiny_split):
    split = load_split(tiny_split)
    result = evaluate_split(split, "pursuit", games=8)
    assert [(r.item, r.opponent) for r in result.rows] == [("a", "random"), ("b", "random")]
    test_row = result.rows[1]
    direct = evaluate("pursuit", "random", split.config(split.role("test")[0]), games=8, seed=1)
    assert (test_row.result.wins, test_row.result.draws, test_row.result.losses) == (
        direct.wins,
        direct.draws,
        direct.losses,
    )
    # pursuit is the stronger reference: its normalised score is exactly 1 where defined
    assert all(r.normalised in (None, 1.0) for r in result.rows)
    assert result.to_json()["split"] == split.label
    tasks = result.marl_eval()["gigastep"]
    assert set(tasks) == {f"{split.label}/a/random", f"{split.label}/b/random"}
    assert (
        len(tasks[f"{split.label}/b/random"]["pursuit"]["seed_0"]["absolute_metrics"]["points"])
        == 8
    )


def test_items_keeps_only_the_named_items_and_names_a_wrong_one(tiny_split):
    result = evaluate_split(tiny_split, "pursuit", games=4, items=["b"])
    assert [(r.item, r.role) for r in result.rows] == [("b", "test")]
    with pytest.raises(
        ValueError, match=r"has no item 'bb' among its train/test items \(closest: b"
    ):
        evaluate_split(tiny_split, "pursuit", games=4, items=["bb"])
    with pytest.raises(ValueError, match="no item 'a' among its test items"):
        evaluate_split(tiny_split, "pursuit", games=4, roles=["test"], items=["a"])
    with pytest.raises(TypeError, match="list of item ids, got the string 'b'"):
        evaluate_split(tiny_split, "pursuit", games=4, items="b")


def test_a_reference_cache_plays_the_references_once_for_every_policy(tiny_split, monkeypatch):
    import gigastep.eval.splits as splits

    played = []
    real = splits.evaluate

    def counting(a, *args, **kwargs):
        played.append(getattr(a, "name", a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(splits, "evaluate", counting)
    cache: dict = {}
    first = evaluate_split(tiny_split, "evade", games=4, reference_cache=cache)
    second = evaluate_split(tiny_split, "circle", games=4, reference_cache=cache)
    assert played == ["random", "pursuit", "evade"] * 2 + ["circle"] * 2
    assert [r.low for r in first.rows] == [r.low for r in second.rows]


class _Refuses:
    name = "refuses"

    def check(self, config, team):
        raise ValueError(f"trained for 5 vs 5, not {config.team_sizes}")

    def actor(self, config, team, num_envs, device, seed):  # pragma: no cover - never called
        raise AssertionError


def test_a_policy_that_cannot_play_an_item_gets_a_row_saying_why(tiny_split):
    result = evaluate_split(tiny_split, _Refuses(), games=4, roles=("test",))
    (row,) = result.rows
    assert row.result is None and "not (1, 1)" in row.error and row.low.games == 4
    assert (
        "| cannot play: player A (refuses) cannot play team 0: trained for 5 vs 5" in result.table()
    )


def test_the_command_line_prints_the_table_and_writes_both_json_files(tiny_split, tmp_path, capsys):
    out, me = tmp_path / "r.json", tmp_path / "m.json"
    args = ["eval", "--split", str(tiny_split), "random", "--games", "4"]
    assert cli([*args, "--json", str(out), "--marl-eval", str(me)]) == 0
    printed = capsys.readouterr().out
    assert "| test | b | random | 4 |" in printed and "mean normalised score" in printed
    data = json.loads(out.read_text())
    assert data["split"].startswith("t@") and len(data["rows"]) == 2
    assert "gigastep" in json.loads(me.read_text())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["pursuit", "random"], "--split takes one player"),
        (["pursuit", "--seed", "3"], "--seed cannot be given"),
        (["pursuit", "--scenario", TINY], "--scenario cannot be given"),
    ],
)
def test_the_command_line_refuses_what_the_split_fixes(tiny_split, capsys, extra, message):
    assert cli(["eval", "--split", str(tiny_split), *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_outcomes_bootstrap_sample_is_a_float_array():
    row = ItemResult(None, _match(0, 0, 1), _match(1, 0, 0), error="x", item="i", role="test")
    assert isinstance(row.outcomes(), np.ndarray) and row.outcomes().size == 0


class _Tunable(ScriptedPlayer):
    """Plays `random`; fine-tuning turns it into `pursuit` (and records the call)."""

    calls: list = []

    def finetune(self, config, opponents, agent_steps, seed):
        self.calls.append((config.team_sizes, opponents, agent_steps, seed))
        return ScriptedPlayer("pursuit", POLICIES["pursuit"])


def test_few_shot_fine_tunes_each_test_item_once_per_budget_and_plays_fresh_games(tiny_split):
    split = load_split(tiny_split)
    _Tunable.calls.clear()
    policy = _Tunable("learner", POLICIES["random"])
    result = evaluate_split(split, policy, games=8, few_shot=(100, 1000), few_shot_seed=7)
    assert _Tunable.calls == [((1, 1), ("random",), 100, 7), ((1, 1), ("random",), 1000, 7)]
    train_row, test_row = result.rows
    assert train_row.few_shot == {} and set(test_row.few_shot) == {100, 1000}
    fresh = split.role("test")[0].seed + FEW_SHOT_SEED_OFFSET
    direct = evaluate("pursuit", "random", split.config(split.role("test")[0]), games=8, seed=fresh)
    shot = test_row.few_shot[1000].result
    assert (shot.wins, shot.draws, shot.losses, shot.seed) == (
        direct.wins,
        direct.draws,
        direct.losses,
        fresh,
    )
    assert test_row.few_shot[100].normalised in (None, 1.0)  # it now plays like `pursuit`
    assert " 1,000 steps |" in result.table()
    assert set(result.to_json()["rows"][1]["few_shot"]) == {"100", "1000"}


def test_few_shot_needs_a_policy_that_can_be_fine_tuned(tiny_split):
    with pytest.raises(ValueError, match="'pursuit' .* has no finetune method"):
        evaluate_split(tiny_split, "pursuit", games=4, few_shot=(10,))


def test_checkpoint_opponents_resolve_next_to_the_split_file(tmp_path):
    body = _split_text('["empty"]', '["center_block"]').replace(
        'opponents = ["random"]\n        seed = 1',
        'opponents = ["pool/seed3.pt"]\n        seed = 1',
    )
    path = _write(tmp_path, body)
    with pytest.raises(ValueError, match="opponent checkpoint 'pool/seed3.pt' not found"):
        load_split(path)
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "seed3.pt").write_bytes(b"")
    split = load_split(path)
    assert split.opponent("pool/seed3.pt") == str(tmp_path / "pool" / "seed3.pt")
    assert split.opponent("random") == "random"


def test_a_drawn_size_range_that_covers_a_training_size_is_refused(tmp_path):
    body = """
        name = "t"
        version = 1
        family = "team_sizes"
        [[items]]
        id = "4v4"
        role = "train"
        scenario = "identical_3-10_vs_3-10_fobs_ent_void_disc"
        opponents = ["random"]
        env = { team_draw = { sizes = [[4, 4], [4, 4]] } }
        [[items]]
        id = "3-5"
        role = "test"
        scenario = "identical_3-10_vs_3-10_fobs_ent_void_disc"
        opponents = ["random"]
        env = { team_draw = { sizes = [[3, 5], [3, 5]] } }
        """
    with pytest.raises(ValueError, match=r"test item '3-5' shares team sizes .*\(4, 4\)"):
        load_split(_write(tmp_path, body))


def test_the_type_mixes_of_a_draw_are_every_count_within_caps_and_sizes():
    # special_5-8_vs_5-8's team 0 has 2 `faster` and 2 `more_range` slots; a draw of 3-4
    # agents over those two types can field exactly these three mixes
    split = load_split("mix-v1")
    (item,) = [i for i in split.items if i.id == "faster+range"]
    mixes = {mix0 for mix0, _ in FAMILIES["type_mix"].values(split.config(item), item)}
    assert mixes == {
        (("faster", 1), ("more_range", 2)),
        (("faster", 2), ("more_range", 1)),
        (("faster", 2), ("more_range", 2)),
    }
    (train,) = split.role("train")
    assert all(
        "faster" not in dict(m0)
        for m0, _ in FAMILIES["type_mix"].values(split.config(train), train)
    )


def test_the_drawn_sizes_split_plays_one_size_per_item():
    split = load_split("sizes-drawn-v1")
    sizes = {i.id: split.config(i).team_draw.sizes for i in split.items}
    assert sizes["5v3"] == ((5, 5), (3, 3)) and sizes["8v8"] == ((8, 8), (8, 8))


def test_the_drawn_sizes_vector_twin_plays_the_same_games_on_the_vector_observation():
    ent, vec = load_split("sizes-drawn-v1"), load_split("sizes-drawn-vec-v1")
    assert [(i.id, i.role, i.seed, i.opponents) for i in ent.items] == [
        (i.id, i.role, i.seed, i.opponents) for i in vec.items
    ]
    for a, b in zip(ent.items, vec.items, strict=True):
        assert b.scenario == a.scenario.replace("_fobs_ent_", "_fobs_vec_") != a.scenario
        ca, cb = ent.config(a), vec.config(b)
        assert ca.team_draw == cb.team_draw and ca.obs_type == "entity"
        assert dataclasses.replace(ca, obs_type=cb.obs_type) == cb  # nothing else differs


def _levels_split(train: str, test: str) -> str:
    return f"""
        name = "t"
        version = 1
        family = "procedural_maps"
        [[items]]
        id = "a"
        role = "train"
        scenario = "{TINY}"
        opponents = ["random"]
        env = {{ map_generator = {{ base = "procgen_dense", seeds = {train} }} }}
        [[items]]
        id = "b"
        role = "test"
        scenario = "{TINY}"
        opponents = ["random"]
        env = {{ map_generator = {{ base = "procgen_dense", seeds = {test} }} }}
        """


def test_overlapping_level_ranges_of_one_generator_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"shares .*levels \[10, 16\)"):
        load_split(_write(tmp_path, _levels_split("[0, 16]", "[10, 20]")))
    assert load_split(_write(tmp_path, _levels_split("[0, 16]", "[16, 20]"), "ok.toml"))


def test_the_shipped_level_ranges_are_disjoint():
    split = load_split("levels-v1")
    ranges = {i.id: split.config(i).map_generator.seeds for i in split.items}
    (lo, hi) = ranges["unseen"]
    for other in ("levels-16", "levels-1024", "validation"):
        assert ranges[other][1] <= lo or ranges[other][0] >= hi


def _fixed_maps_test_item(maps: str) -> str:
    return f"""
        [[items]]
        id = "c"
        role = "test"
        scenario = "identical_1_vs_1_fobs_vec_maps_disc"
        maps = {maps}
        opponents = ["random"]
        seed = 2
        """


def test_a_procedural_split_tests_on_fixed_maps_each_layout_a_level_of_its_own(tmp_path):
    body = _levels_split("[0, 16]", "[16, 20]")
    split = load_split(_write(tmp_path, body + _fixed_maps_test_item('["center_block"]')))
    assert [i.id for i in split.role("test")] == ["b", "c"]
    # the same layout in training (its flipped twin here) and in test is refused
    train = _fixed_maps_test_item('["center_block_flipped"]').replace('"test"', '"train"')
    train = train.replace('id = "c"', 'id = "d"')
    text = body + _fixed_maps_test_item('["center_block"]') + train
    with pytest.raises(ValueError, match="shares .*map layout"):
        load_split(_write(tmp_path, text, "twin.toml"))


def test_the_entity_levels_split_is_levels_v1_on_entity_games_plus_the_built_in_maps():
    vec, ent = load_split("levels-v1"), load_split("levels-ent-v1")
    for item in vec.items:
        twin = next(i for i in ent.items if i.id == item.id)
        assert ent.config(twin) == vec.config(item).replace(obs_type="entity"), item.id
    fixed = [i for i in ent.role("test") if i.maps]
    assert sorted(m for i in fixed for m in i.maps) == sorted(builtin_maps())
