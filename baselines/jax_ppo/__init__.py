"""PPO in JAX, the twin of the PyTorch trainer (`baselines.train`), with the same `PPOConfig`.

    python -m baselines.ppo --framework jax --preset cpu --out runs/jax      # one run
    python -m baselines.ppo --framework jax --seeds 8 --out runs/jax8        # 8 runs, vmapped

Modules:
    policy     the `ActorCritic` forward pass as pure functions of a parameter pytree keyed
               by the PyTorch `state_dict` names (so checkpoints convert name for name);
    algorithm  GAE and the clipped PPO loss, pure and shape-documented;
    running    running moments (observation normalisation, reward scale), merged per rollout;
    frozen     pool snapshots and checkpoint-file opponents inside the compiled update;
    state      the `TrainState` pytree and its parts (`Learner`, `EnvCarry`, `ValueNorm`)
               as named tuples;
    update     one update (rollout scan, GAE, epochs of minibatch steps) as a pure function
               of a `TrainState` pytree, jitted, and vmapped over runs for `--seeds`;
    trainer    the run loop: metrics, checkpoints, evaluation, resume;
    convert    checkpoints: JAX runs write the PyTorch trainer's format (`load_policy`, the
               `ppo` player and `gigastep eval` read them) and read PyTorch ones.
"""
