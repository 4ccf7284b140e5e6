"""The interface between ``kernels`` and ``harness``: workloads, candidates and rendered kernel sources.

The harness only sees a :class:`KernelSource`: C source of ``int kernel(float *const *tensors, void *ws)``
(tensors in ABI order: output first, then inputs, row-major, aligned), the flags and libraries it needs,
and its workspace size.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from kernels.operators import Operator, make_operator

TARGETS = ("avx512", "avx2")
DEFAULT_OPTIONS: dict[str, object] = {"hoist": True, "fma": True, "partial": "none"}


def content_hash(obj: object, n: int = 16) -> str:
    """Stable hash of a JSON-able object (sorted keys)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:n]


@dataclass(frozen=True)
class Workload:
    """An operator instance: operator + dimension sizes."""

    name: str
    op: Operator
    sizes: tuple[tuple[str, int], ...]

    @classmethod
    def make(cls, name: str, op_name: str, sizes: dict[str, int], **op_params: object) -> Workload:
        op = make_operator(op_name, **op_params)
        checked = op.validate_sizes(dict(sizes))
        return cls(name, op, tuple((d, checked[d]) for d in op.dims))

    @property
    def size(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def flops(self) -> int:
        return self.op.flops(self.size)

    def shapes(self) -> list[tuple[int, ...]]:
        return self.op.shapes(self.size)

    def describe(self) -> dict[str, object]:
        return {
            "workload": self.name,
            "op": self.op.name,
            "op_params": dict(self.op.params),
            "sizes": self.size,
        }


@dataclass(frozen=True)
class Candidate:
    """A frozen description of one way to compute a workload.

    ``kind`` selects the renderer (``scheme``: a TTiLE scheme; ``baseline``: a library call); ``text`` is
    the scheme or library name; ``options`` are code-generation switches (target ISA, hoisting, FMA...).
    """

    kind: str
    text: str
    options: tuple[tuple[str, object], ...] = field(default=())

    @property
    def key(self) -> str:
        return content_hash({"kind": self.kind, "text": self.text, "options": dict(self.options)})

    def option(self, name: str, default: object = None) -> object:
        return dict(self.options).get(name, default)

    def label(self) -> str:
        """The text (with a library's version: ``onednn 3.2.0``) plus the options that differ from the code
        generator's defaults."""
        hidden = ("target", "version", "gemm_version")  # a library version: shown by the text or not at all
        extra = ",".join(
            f"{k}={v}" for k, v in self.options if k not in hidden and DEFAULT_OPTIONS.get(k) != v
        )
        version = self.option("version")
        return f"{self.text}" + (f" {version}" if version else "") + (f" ({extra})" if extra else "")


@dataclass(frozen=True)
class KernelSource:
    code: str
    target: str  # ISA the code needs: "avx512", "avx2" or "any"
    cflags: tuple[str, ...] = ()
    libs: tuple[str, ...] = ()
    workspace_bytes: int = 0

    @property
    def source_hash(self) -> str:
        return content_hash({"code": self.code, "cflags": self.cflags, "libs": self.libs})


class BaselineUnavailable(RuntimeError):
    """A library is not installed on this machine (the reason names it and the files looked for); long
    imported from kernels.baselines, which re-exports it."""


# Renderers per candidate kind, as "module:function" (imported on first use, so a kind's module and its
# dependencies load only when used). A study's own kernel family is declared by the study (its
# ``RENDERERS``, harness.studies.declared), not here: YaConv's conv_algo, the loop strings' loop_string.
RENDERERS: dict[str, str] = {
    "scheme": "kernels.codegen:render_scheme",  # a TTiLE scheme (seed 000)
    "baseline": "kernels.baselines:render_baseline",  # a vendor library call
}


def renderers() -> dict[str, str]:
    """Every candidate kind's renderer: the core's, then those the studies declare."""
    from harness import studies

    declared = studies.declared("RENDERERS")
    if clash := set(declared) & set(RENDERERS):
        raise ValueError(f"studies redeclare core candidate kinds: {sorted(clash)}")
    return {**RENDERERS, **declared}


def render(candidate: Candidate, workload: Workload) -> KernelSource:
    """C source for ``candidate`` on ``workload`` (dispatch on the candidate kind)."""
    import importlib

    known = RENDERERS if candidate.kind in RENDERERS else renderers()
    target = known.get(candidate.kind)
    if target is None:
        raise ValueError(f"unknown candidate kind {candidate.kind!r}; known: {', '.join(known)}")
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)(candidate, workload)
