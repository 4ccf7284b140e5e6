"""Operators: what is computed, independent of how.

An operator is ``Out[...] += In0[...] * In1[...]`` over named dimensions. Every tensor axis is an affine
sum of dimensions (``h*stride + r`` for a strided convolution input), tensors are row-major and the last
axis is stride-1. The float64 reference used by the semantic check lives here too, so the check never
depends on generated code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod

import numpy as np

Term = tuple[str, int]  # (dimension, coefficient)
AxisExpr = tuple[Term, ...]


class OperatorError(ValueError):
    """Bad operator definition or workload (unknown dimension, non-positive size...)."""


@dataclass(frozen=True)
class Access:
    tensor: str
    axes: tuple[AxisExpr, ...]

    def dims(self) -> tuple[str, ...]:
        seen: list[str] = []
        for axis in self.axes:
            for d, _ in axis:
                if d not in seen:
                    seen.append(d)
        return tuple(seen)

    def stride1_dim(self) -> str | None:
        """The dimension that moves along the last (contiguous) axis with coefficient 1, if unique."""
        last = self.axes[-1]
        return last[0][0] if len(last) == 1 and last[0][1] == 1 else None

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(sum(c * (sizes[d] - 1) for d, c in axis) + 1 for axis in self.axes)

    def text(self) -> str:
        def axis_text(axis: AxisExpr) -> str:
            return " + ".join(d if c == 1 else f"{d}*{c}" for d, c in axis)

        return f"{self.tensor}[" + "][".join(axis_text(a) for a in self.axes) + "]"


@dataclass(frozen=True)
class Operator:
    """``output += inputs[0] * inputs[1]``; ``params`` records what shaped it (e.g. stride)."""

    name: str
    dims: tuple[str, ...]
    output: Access
    inputs: tuple[Access, Access]
    params: tuple[tuple[str, object], ...] = field(default=())

    @property
    def tensors(self) -> tuple[Access, ...]:
        """ABI order: output first, then the inputs."""
        return (self.output, *self.inputs)

    @property
    def reduction_dims(self) -> tuple[str, ...]:
        out = set(self.output.dims())
        return tuple(d for d in self.dims if d not in out)

    @property
    def parallel_dims(self) -> tuple[str, ...]:
        return self.output.dims()

    def text(self) -> str:
        return f"{self.output.text()} += {self.inputs[0].text()} * {self.inputs[1].text()}"

    def validate_sizes(self, sizes: dict[str, int]) -> dict[str, int]:
        missing = [d for d in self.dims if d not in sizes]
        extra = [d for d in sizes if d not in self.dims]
        if missing or extra:
            raise OperatorError(
                f"operator {self.name} has dimensions {list(self.dims)}; "
                f"missing sizes {missing}, unknown sizes {extra}"
            )
        out: dict[str, int] = {}
        for d in self.dims:
            v = sizes[d]
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise OperatorError(f"size of dimension {d} must be a positive integer, got {v!r}")
            out[d] = int(v)
        return out

    def flops(self, sizes: dict[str, int]) -> int:
        """2 flops (multiply + add) per point of the iteration space."""
        return 2 * prod(sizes[d] for d in self.dims)

    def shapes(self, sizes: dict[str, int]) -> list[tuple[int, ...]]:
        return [t.shape(sizes) for t in self.tensors]

    # -- float64 reference ---------------------------------------------------------------------------
    def reference_points(
        self, tensors: list[np.ndarray], sizes: dict[str, int], points: np.ndarray, chunk: int = 1 << 22
    ) -> np.ndarray:
        """Expected output values (float64) at ``points`` (n x len(output.axes) output coordinates).

        ``tensors`` are the *initial* contents (output first): the expected value is the initial output
        plus the full reduction, computed in float64 with numpy.
        """
        out_dims = self.output.dims()
        if any(len(ax) != 1 or ax[0][1] != 1 for ax in self.output.axes):
            raise OperatorError("the output must be indexed by plain dimensions")
        red = self.reduction_dims
        red_sizes = [sizes[d] for d in red]
        n_red = prod(red_sizes)
        grids = np.unravel_index(np.arange(n_red), red_sizes) if red else ()
        result = np.empty(len(points), dtype=np.float64)
        step = max(1, chunk // max(1, n_red))
        for start in range(0, len(points), step):
            pts = points[start : start + step]
            env: dict[str, np.ndarray] = {d: pts[:, a][:, None] for a, d in enumerate(out_dims)}
            for d, g in zip(red, grids, strict=True):
                env[d] = g[None, :]
            prods = np.ones((len(pts), n_red), dtype=np.float64)
            for acc, arr in zip(self.inputs, tensors[1:], strict=True):
                idx = tuple(sum(c * env[d] for d, c in axis) for axis in acc.axes)
                prods = prods * arr[idx].astype(np.float64)
            init = tensors[0][tuple(pts[:, a] for a in range(len(out_dims)))].astype(np.float64)
            result[start : start + step] = init + prods.sum(axis=1)
        return result


def _plain(*dims: str) -> tuple[AxisExpr, ...]:
    return tuple(((d, 1),) for d in dims)


def matmul() -> Operator:
    """``C[i,j] += A[i,k] * B[k,j]``."""
    return Operator(
        "matmul",
        ("i", "j", "k"),
        Access("C", _plain("i", "j")),
        (Access("A", _plain("i", "k")), Access("B", _plain("k", "j"))),
    )


def conv2d(stride: int = 1) -> Operator:
    """Batch-1 convolution ``O[h][w][k] += I[h*stride+r][w*stride+s][c] * K[r][s][c][k]`` (seed 000)."""
    if isinstance(stride, bool) or not isinstance(stride, int) or stride <= 0:
        raise OperatorError(f"conv2d stride must be a positive integer, got {stride!r}")
    image_axes = ((("h", stride), ("r", 1)), (("w", stride), ("s", 1)), (("c", 1),))
    return Operator(
        "conv2d",
        ("h", "w", "k", "r", "s", "c"),
        Access("O", _plain("h", "w", "k")),
        (Access("I", image_axes), Access("K", _plain("r", "s", "c", "k"))),
        params=(("stride", stride),),
    )


_EINSUM = re.compile(r"^\s*([a-z]+)\s*,\s*([a-z]+)\s*->\s*([a-z]+)\s*$")


def contraction(spec: str) -> Operator:
    """A tensor contraction from an einsum spec with one-letter dimensions, e.g. ``"lkm,rmk->lr"``."""
    m = _EINSUM.match(spec)
    if not m:
        raise OperatorError(f"contraction spec {spec!r} is not of the form 'ab,bc->ac' (lowercase letters)")
    left, right, out = m.groups()
    for name, part in (("first input", left), ("second input", right), ("output", out)):
        if len(set(part)) != len(part):
            raise OperatorError(f"contraction spec {spec!r}: {name} repeats a dimension")
    unknown = set(out) - set(left) - set(right)
    if unknown:
        raise OperatorError(
            f"contraction spec {spec!r}: output dimensions {sorted(unknown)} are not summed over"
        )
    dims = tuple(dict.fromkeys(out + left + right))
    return Operator(
        "contraction",
        dims,
        Access("Out", _plain(*out)),
        (Access("Left", _plain(*left)), Access("Right", _plain(*right))),
        params=(("spec", spec.replace(" ", "")),),
    )


def make_operator(name: str, **params: object) -> Operator:
    """Operator by name, as configs name them."""
    if name == "matmul":
        return matmul()
    if name == "conv2d":
        return conv2d(params.get("stride", 1))  # type: ignore[arg-type]
    if name == "contraction":
        spec = params.get("spec")
        if not isinstance(spec, str):
            raise OperatorError("operator contraction needs a 'spec' such as 'ik,kj->ij'")
        return contraction(spec)
    raise OperatorError(f"unknown operator {name!r}; known: matmul, conv2d, contraction")
