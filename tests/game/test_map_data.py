"""The built-in map data pinned to rules §8 by literal values (tests/spec_maps.py), never by
reading `envs/maps.toml` for the expected side: a wrong box, start region, height or heading
range in the catalogue fails here, even though the step, the rules and the NumPy reference
(which all read the maps through `EnvConfig`) would share it."""

from __future__ import annotations

import numpy as np
import pytest

from gigastep.game.arena import MapArrays, prerender
from gigastep.game.maps import builtin_maps, map_set
from gigastep.types import EnvConfig
from tests.spec_maps import SPEC_MAPS, SPEC_SETS, scaled


@pytest.mark.parametrize("name", list(SPEC_MAPS))
def test_builtin_map_equals_spec_8_1_table(name):
    """§8.1 (start regions and headings by team as §15 row 23 assigns them)."""
    boxes, start0, start1, height, heading0, heading1 = SPEC_MAPS[name]
    spec = builtin_maps()[name]
    assert len(spec.boxes) == len(boxes)
    np.testing.assert_allclose(np.reshape(spec.boxes, (-1, 4)), np.reshape(boxes, (-1, 4)))
    assert spec.start_team0 == pytest.approx(start0)
    assert spec.start_team1 == pytest.approx(start1)
    assert spec.height == pytest.approx(height)
    assert spec.heading_team0 == pytest.approx(heading0, abs=1e-12)
    assert spec.heading_team1 == pytest.approx(heading1, abs=1e-12)


def test_builtin_maps_are_exactly_the_eight_of_spec_8_1():
    assert list(builtin_maps()) == list(SPEC_MAPS)


@pytest.mark.parametrize("set_name", list(SPEC_SETS))
def test_map_sets_list_the_maps_of_spec_8_2_in_order(set_name):
    assert [m.name for m in map_set(set_name)] == list(SPEC_SETS[set_name])


def test_single_map_name_selects_that_map_only():
    """§8.2: any other built-in name selects that single map, a flipped one included."""
    assert [m.name for m in map_set("center_block_flipped")] == ["center_block_flipped"]


def test_loaded_map_arrays_are_the_spec_maps_scaled_to_the_world():
    """§8.2: boxes and start regions scale by (limit_x / 10, limit_y / 10); heights and
    headings do not; box lists are zero-padded to the largest count (4 for "all")."""
    config = EnvConfig(map_set="all", limit_x=20.0, limit_y=15.0, obs_type="vector")
    arrays = MapArrays(config)
    assert arrays.boxes.shape == (8, 4, 4)
    for k, name in enumerate(SPEC_SETS["all"]):
        boxes, start0, start1, height, heading0, heading1 = SPEC_MAPS[name]
        want = np.zeros((4, 4))
        for i, box in enumerate(boxes):
            want[i] = scaled(box, 20.0, 15.0)
        np.testing.assert_allclose(arrays.boxes[k], want, rtol=1e-6, err_msg=name)
        assert arrays.box_valid[k].tolist() == [i < len(boxes) for i in range(4)], name
        np.testing.assert_allclose(arrays.start[k, 0], scaled(start0, 20.0, 15.0), rtol=1e-6)
        np.testing.assert_allclose(arrays.start[k, 1], scaled(start1, 20.0, 15.0), rtol=1e-6)
        np.testing.assert_allclose(arrays.height[k], height)
        np.testing.assert_allclose(arrays.heading[k], [heading0, heading1], rtol=1e-6)


@pytest.mark.parametrize(
    "name, grey",
    [
        ("empty", 0),
        ("empty_flipped", 0),
        ("two_rooms1", 150),
        ("two_rooms2_flipped", 150),
        ("four_rooms", 300),
        ("four_rooms_flipped", 300),
        ("center_block", 441),
        ("center_block_flipped", 441),
    ],
)
@pytest.mark.parametrize("limit", [10.0, 20.0])
def test_prerendered_map_has_the_grey_pixel_count_of_spec_8_3(name, grey, limit):
    """§8.3: at 84 x 84, limits 10 x 10 and 20 x 20 give the same grey pixels."""
    config = EnvConfig(map_set=name, limit_x=limit, limit_y=limit)
    image = prerender(config)[0]
    assert int(np.all(image == 127, axis=-1).sum()) == grey
    assert int(np.any(image != 0, axis=-1).sum()) == grey  # nothing else is drawn


def test_center_block_covers_the_pixel_block_of_spec_8_3():
    """§8.3: center_block covers [31, 52) x [31, 52) at 84 x 84."""
    image = prerender(EnvConfig(map_set="center_block"))[0]
    want = np.zeros((84, 84), bool)
    want[31:52, 31:52] = True
    np.testing.assert_array_equal(np.all(image == 127, axis=-1), want)
