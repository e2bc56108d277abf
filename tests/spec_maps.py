"""The built-in maps as LITERAL values copied from rules §8.1 (with §15 row 23), for tests.

Nothing here reads `envs/maps.toml` or the library: a wrong entry in the catalogue is caught by
comparing with this table (tests/game/test_map_data.py), and the reset rules
(tests/game/test_reset_rules.py) check start regions against it.

§8.1 gives coordinates on a 10 x 10 world; boxes and start regions are [x1, y1, x2, y2], heights
and headings [lo, hi]. The table there names the 2023 library's regions "a" (team 1) and "b"
(team 0); §15 row 23 makes region "a" team 0's (team 0 first), so here start_team0 = "a" with
heading "a", and start_team1 = "b" with heading "b". §8.2: "all" is the 8 maps in this order,
"empty" is [empty, empty_flipped].
"""

from __future__ import annotations

import math

PI = math.pi

_TWO_ROOMS = ((0.0, 4.8, 3.0, 5.2), (7.0, 4.8, 10.0, 5.2))
_FOUR_ROOMS = (*_TWO_ROOMS, (4.8, 0.0, 5.2, 3.0), (4.8, 7.0, 5.2, 10.0))
_CENTER = ((3.8, 3.8, 6.2, 6.2),)
_LEFT, _RIGHT = (1.0, 1.0, 4.0, 9.0), (6.0, 1.0, 9.0, 9.0)
_LOW, _HIGH = (1.0, 1.0, 9.0, 3.0), (1.0, 7.0, 9.0, 9.0)
_EAST, _WEST = (0.0, 0.0), (PI, PI)

# name: (boxes, start_team0, start_team1, height, heading_team0, heading_team1)
SPEC_MAPS = {
    "empty": ((), _LEFT, _RIGHT, (0.0, 0.0), _EAST, _WEST),
    "empty_flipped": ((), _RIGHT, _LEFT, (0.0, 0.0), _WEST, _EAST),
    "two_rooms1": (_TWO_ROOMS, _LOW, _HIGH, (0.0, 0.0), _EAST, _WEST),
    "two_rooms2_flipped": (_TWO_ROOMS, _HIGH, _LOW, (0.0, 0.0), _WEST, _EAST),
    "four_rooms": (_FOUR_ROOMS, _LOW, _HIGH, (0.0, 0.0), _EAST, _WEST),
    "four_rooms_flipped": (_FOUR_ROOMS, _HIGH, _LOW, (0.0, 0.0), _WEST, _EAST),
    "center_block": (_CENTER, _LOW, _HIGH, (0.0, 0.0), _EAST, _WEST),
    "center_block_flipped": (_CENTER, _HIGH, _LOW, (0.0, 0.0), _WEST, _EAST),
}

SPEC_SETS = {"all": tuple(SPEC_MAPS), "empty": ("empty", "empty_flipped")}


def scaled(rect, limit_x: float, limit_y: float) -> tuple[float, float, float, float]:
    """§8.2: a box or start region scaled from the 10 x 10 world to limit_x x limit_y."""
    sx, sy = limit_x / 10.0, limit_y / 10.0
    return (rect[0] * sx, rect[1] * sy, rect[2] * sx, rect[3] * sy)
