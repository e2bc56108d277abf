"""`pytree_dataclass`: the frozen chex dataclass every state and record type of the library is,
spelt so that type checkers see a dataclass (fields as keyword arguments, `replace`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, dataclass_transform

import chex

if TYPE_CHECKING:
    from typing import Self

__all__ = ["PytreeData", "pytree_dataclass"]

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def pytree_dataclass(cls: type[_T]) -> type[_T]:
    """`chex.dataclass(frozen=True)(cls)`: a frozen dataclass registered as a JAX pytree."""
    return chex.dataclass(frozen=True)(cls)


class PytreeData:
    """Base of the `pytree_dataclass` types: declares for type checkers the `replace` method
    chex adds (`x.replace(field=value)`: a copy with fields changed). Empty at run time."""

    if TYPE_CHECKING:

        def replace(self, **changes: Any) -> Self: ...
