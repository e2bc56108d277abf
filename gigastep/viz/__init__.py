"""Seeing games: rendering, the viewer, replays."""
