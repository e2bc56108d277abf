"""Evaluation: players, matches and their statistics, ratings."""
