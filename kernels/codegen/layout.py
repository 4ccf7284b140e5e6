"""Where a tensor lives in generated code: row-major strides, offsets as C expressions, and the View of a
tensor (itself, or the workspace buffer an enclosing Pack copied it into)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kernels.operators import Access
from kernels.scheme import SchemeError


def plain_axes(t: Access) -> bool:
    return all(len(ax) == 1 and ax[0][1] == 1 for ax in t.axes)


def row_major_strides(shape: tuple[int, ...]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def linear_offset(acc: Access, strides: list[int], index: Mapping[str, str | int]) -> str:
    """Row-major offset of ``acc`` as a C expression; ``index`` maps dims to C expressions or ints."""
    terms: list[str] = []
    const = 0
    for axis, stride in zip(acc.axes, strides, strict=True):
        for d, coef in axis:
            v = index.get(d, 0)
            if isinstance(v, int):
                const += v * coef * stride
            elif v != "0":
                k = coef * stride
                if not v.isidentifier():
                    v = f"({v})"
                terms.append(v if k == 1 else f"{k} * {v}")
    if const or not terms:
        terms.append(str(const))
    return " + ".join(terms)


def const_offset(acc: Access, strides: list[int], offsets: Mapping[str, int]) -> int:
    return sum(
        coef * offsets.get(d, 0) * s for axis, s in zip(acc.axes, strides, strict=True) for d, coef in axis
    )


@dataclass(frozen=True)
class View:
    """Where a tensor lives: a pointer, the stride of each of the tensor's axes, and the index each
    dimension starts at (a packed buffer starts at the tile's origin)."""

    ptr: str
    strides: list[int]
    origin: dict[str, str]
    # a buffer in panels (PackT_X[d/p, ..., d]): loop indices on d are whole panels from the origin, so
    # they move by ``strides`` (one panel of p per p elements), while the unrolled offsets inside a tile
    # (below p) move by ``inner`` (1 along d)
    inner: list[int] | None = None
    split: tuple[str, int] | None = None

    def address(self, acc: Access, bases: Mapping[str, str]) -> str:
        rel = {d: (b if d not in self.origin else f"{b} - ({self.origin[d]})") for d, b in bases.items()}
        return f"{self.ptr} + {linear_offset(acc, self.strides, rel)}"

    def offset(self, acc: Access, offsets: Mapping[str, int]) -> int:
        if self.split is not None:
            d, p = self.split
            if not 0 <= offsets.get(d, 0) < p:
                why = f"the microkernel reaches {d} + {offsets[d]}, past a panel of {p} of the packed buffer"
                raise SchemeError("pack-split", why + f": the tile along {d} must be at most {p}", dim=d)
        return const_offset(acc, self.inner or self.strides, offsets)
