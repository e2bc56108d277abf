"""Observation renderers: the vector observation, the RGB images and the global view."""
