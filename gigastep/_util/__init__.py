"""Private helpers of every layer: input checks, atomic files, pytrees, the catalogue's location,
the names of the packages beside the library (the PPO baseline, the benchmarks)."""
