"""The engine: the phases of one game step as pure functions of `(config, state, ...)`.

`gigastep.env` composes them into `reset` and `step`; nothing here is public API beyond what
`gigastep` re-exports (`MapSpec`), but each module documents its phase:

- `dynamics`: decoding actions and moving agents (rules §3).
- `waypoints`: the waypoint of an episode (rules §4.2).
- `interactions`: geometry, hazards (bounds, collisions, boxes), detection and damage (§4.3-4.7).
- `rewards`: the reward terms (rules §4.10).
- `observations`: what each agent sees, vector and RGB (rules §5), and the state vector.
- `reset`: the map and the placement of a fresh game (rules §6).
- `batching`: computing a batch only where a mask is set (the batched auto-reset).
- `maps`: the map type, the catalogue and the per-config map arrays.
- `random`: the counter-based random numbers of a step.
- `_native`: the CPU kernel of the vector observation.
"""
