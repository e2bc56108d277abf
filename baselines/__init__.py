"""PyTorch baselines for Gigastep (recurrent S5 sequence models, with JAX references)."""
