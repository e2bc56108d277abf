"""Private helpers of every layer: input checks, atomic files, pytrees, the catalogue's location."""
