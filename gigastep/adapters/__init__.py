"""Adapters to other libraries: the PyTorch bridge and vector env, Gymnasium, PettingZoo, TorchRL"""
