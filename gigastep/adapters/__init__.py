"""Adapters to other libraries: PyTorch, Gymnasium, PettingZoo, TorchRL, JaxMARL."""
