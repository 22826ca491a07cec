"""`lean_dataclass`: dataclasses that cost little to define (what a one-shot through the gateway imports is most
of its time).

`dataclasses` compiles each generated method from source when a class is defined (about 0.25 ms apiece here):
frozen=True adds __setattr__ and __delattr__, eq=True __eq__ (and __hash__ when frozen), repr=True __repr__. A
`lean_dataclass` gets only its __init__ compiled; equality and repr come from `ByValue`, freezing and hashing from
`Frozen`, written once here with the results dataclasses' own methods give. The type checker reads `lean_dataclass` as
`dataclasses.dataclass` (a dataclass_transform), so mypy still refuses an assignment to a frozen one's field.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, fields

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a one-shot loads this module and not typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")

    @dataclass_transform()
    def lean_dataclass(*, frozen: bool = False, kw_only: bool = False) -> Callable[[type[_T]], type[_T]]: ...
else:
    def lean_dataclass(*, frozen=False, kw_only=False):
        """@dataclass(frozen=frozen, kw_only=kw_only) for a class deriving from Frozen (frozen) or ByValue."""

        def wrap(cls):
            if not issubclass(cls, ByValue) or issubclass(cls, Frozen) != frozen:
                raise TypeError(f"{cls.__name__}: a lean_dataclass derives from Frozen when frozen, else from ByValue")
            return dataclass(cls, kw_only=kw_only, eq=False, repr=False)

        return wrap


class ByValue:
    """__eq__ and __repr__ as dataclasses generate them. Defining __eq__ leaves the class unhashable, as a
    dataclass with eq is; Frozen hashes."""

    if TYPE_CHECKING:
        __dataclass_fields__: ClassVar[dict[str, Any]]

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{self.__class__.__qualname__}({shown})"


class Frozen(ByValue):
    """What frozen=True gives: each field is set once, by __init__, and nothing can be set or deleted after it;
    hashed by its fields' values."""

    def __setattr__(self, name: str, value: object) -> None:
        if name in self.__dict__ or name not in self.__dataclass_fields__:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._values())
