"""The engine: the phases of one game step as pure functions of `(config, state, ...)`.

`step` composes them into one game's `reset` and `step`, and `batched` into their batched
forms; `gigastep.env` compiles them. Nothing here is public API beyond what `gigastep` and
`gigastep.env` re-export (`MapSpec`, `step`, ...), but each module documents its part:

- `dynamics`: decoding actions and moving agents (rules §3).
- `waypoints`: the waypoint of an episode (rules §4.2).
- `interactions`: geometry, hazards (bounds, collisions, boxes), detection and damage (§4.3-4.7).
- `rewards`: the reward terms (rules §4.10).
- `observations`: what each agent sees, vector and RGB (rules §5), and the state vector.
- `reset`: the map and the placement of a fresh game (rules §6).
- `step`: one game's reset, step and auto-resetting step; the winner and outcome of a step.
- `batched`: the batched reset, step and auto-resetting step.
- `state_checks`: a state is one game, or one batch of games, of a config.
- `batching`: computing a batch only where a mask is set (the batched auto-reset).
- `maps`: the map type, the catalogue and the per-config map arrays.
- `random`: the counter-based random numbers of a step.
- `_native`: the CPU kernel of the vector observation.
"""
