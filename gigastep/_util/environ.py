"""Environment variables that switch something on or off.

Each accepts one documented set of values (any case, surrounding spaces ignored): on is
``1``, ``true``, ``yes``, ``on``; off is ``0``, ``false``, ``no``, ``off``; unset or empty
means the variable's default. Anything else is refused with a ValueError naming the
variable, the value and the accepted values, rather than silently meaning "on". The
variables are listed in docs/development.md, "Inputs and their checks".
"""

from __future__ import annotations

import os

__all__ = ["FALSE", "TRUE", "flag"]

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def flag(name: str, default: bool) -> bool:
    """The on/off value of the environment variable `name` (`default` if unset or empty).

    Raises:
        ValueError: the value is none of `TRUE` and `FALSE`.
    """
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(
        f"the environment variable {name}={raw!r} is not one of the accepted values: "
        f"{', '.join(TRUE)} (on) or {', '.join(FALSE)} (off), in any case; unset or empty "
        f"means {'on' if default else 'off'}"
    )
