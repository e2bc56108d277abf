"""`gigastep.game.random`: the unrolled Threefry draws give exactly JAX's keys and bits, and
the compiled step keeps no rolled Threefry loop."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gigastep.game import random as grandom

# Known-answer vectors of Threefry-2x32 with 20 rounds (Random123's kat_vectors, also in JAX's
# own tests): key, counter -> output.
KAT = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


def _keys(count: int = 200) -> jax.Array:
    words = np.random.default_rng(7).integers(0, 2**32, size=(count, 2), dtype=np.uint64)
    words = words.astype(np.uint32)
    words[:3] = [[0, 0], [0, 1], [0xFFFFFFFF, 0xFFFFFFFF]]
    return jnp.asarray(words)


@pytest.fixture(params=[True, False], ids=["partitionable", "original"])
def threefry_mode(request):
    """Both of JAX's ways of drawing threefry bits (`jax_threefry_partitionable`)."""
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", request.param)
    yield request.param
    jax.config.update("jax_threefry_partitionable", before)


@pytest.mark.parametrize(("key", "counter", "expected"), KAT)
def test_threefry2x32_matches_the_published_known_answers(key, counter, expected):
    out = grandom.threefry2x32(*(jnp.uint32(w) for w in (*key, *counter)))
    assert tuple(int(w) for w in out) == expected


DRAWS = {
    "seed_words": (grandom.seed_words, lambda k: jax.random.bits(k, (2,), jnp.uint32)),
    "split": (grandom.split, jax.random.split),
    "split 3": (lambda k: grandom.split(k, 3), lambda k: jax.random.split(k, 3)),
    "split 5": (lambda k: grandom.split(k, 5), lambda k: jax.random.split(k, 5)),
}


@pytest.mark.parametrize("name", list(DRAWS))
def test_draws_equal_jax_random_on_raw_keys(name, threefry_mode):
    ours, theirs = DRAWS[name]
    keys = _keys()
    got = np.asarray(jax.jit(jax.vmap(ours))(keys))
    want = np.asarray(jax.jit(jax.vmap(theirs))(keys))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_draws_equal_jax_random_on_typed_keys(threefry_mode):
    key = jax.random.key(12345)
    for name, (ours, theirs) in DRAWS.items():
        got, want = ours(key), theirs(key)
        assert got.dtype == want.dtype, name
        if jax.dtypes.issubdtype(want.dtype, jax.dtypes.prng_key):
            got, want = jax.random.key_data(got), jax.random.key_data(want)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=name)


def test_keys_of_another_implementation_are_drawn_by_jax():
    key = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(
        np.asarray(jax.random.key_data(grandom.split(key, 3))),
        np.asarray(jax.random.key_data(jax.random.split(key, 3))),
    )
    np.testing.assert_array_equal(
        np.asarray(grandom.seed_words(key)), np.asarray(jax.random.bits(key, (2,), jnp.uint32))
    )


def _while_loops(fn, *args) -> list[str]:
    text = jax.jit(fn).lower(*args).compile().as_text()
    return [
        re.search(r'op_name="([^"]*)"', line).group(1)
        for line in text.splitlines()
        if " while(" in line
    ]


def test_the_compiled_step_keeps_no_threefry_loop():
    """On the CPU JAX lowers its Threefry hash as a rolled loop; the step's own draws must not
    (the plain step has no loop at all; the auto-resetting step none outside its resets, which
    draw with `jax.random`: they run for the finished games only, and unrolled they compiled
    slower)."""
    import gigastep

    env = gigastep.make("identical_2_vs_2")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    _, states = env.v_reset(keys)
    actions = jnp.zeros((3, env.n_agents, 3))
    assert _while_loops(env.v_step, states, actions, keys) == []
    auto = _while_loops(lambda s, a, k: env.v_step_autoreset(s, a, k)[:2], states, actions, keys)
    assert auto, "the resets' loops are expected inside the auto-resetting step"
    assert [name for name in auto if "/cond/" not in name] == [], auto
