"""Search spaces as data: the candidates a space configuration (conf/space/*.yaml) describes.

A space entry is one of
- a scheme string, or a mapping ``{avx2: ..., avx512: ...}`` when tile sizes depend on the vector length;
- a mapping with ``scheme`` (string or per-ISA mapping) and ``options`` (code-generation switches for
  that entry only, e.g. ``{partial: masked}``);
- a *cover* template: ``{cover: i, sizes: [4, 5, 6], template: "[R_j, {cover}, T_{128,k}, {unroll}, ...]"}``
  (optional ``limit``: keep the covers with the fewest microkernel calls)
  expands to one scheme per way of covering the workload's dimension ``i`` with microkernel sizes
  (thesis §5.3): a single dividing size ``n x a`` gives ``T_{n,i}`` / ``U_{a,i}``, a combination
  ``n_a x a + n_b x b`` gives ``λ_seq_i.[(n_a,a),(n_b,b)]`` / ``Uλ_i``;
- an *expander* entry, a mapping whose key is one of :func:`expanders` (e.g. ``{gemm_variant: B3A2C0,
  ...}``): a kernel family's module turns it into schemes;
- a candidate of another kind: ``{kind: conv_algo, text: yaconv, options: {...}}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernels.candidate import Candidate, Workload
from kernels.microkernels import Cover, divisors_cover, lambda_covers, lambda_seq_text
from kernels.scheme import format_scheme, parse_scheme


class SpaceError(ValueError):
    """A malformed space entry (names the entry and what is wrong)."""


# Space-entry expanders of the kernel families, as "module:function"; the function takes (entry, workload,
# target) and returns (scheme text, options) pairs, like entry_schemes. A study declares its own
# (``EXPANDERS`` in its __init__.py, e.g. the GEMM family's ``gemm_variant``): see :func:`expanders`.
EXPANDERS: dict[str, str] = {}


def expanders() -> dict[str, str]:
    """The core's expanders and those the studies declare (harness.studies.declared)."""
    from harness import studies

    return {**EXPANDERS, **studies.declared("EXPANDERS")}


def _for_target(value: Any, target: str) -> Any:
    """A per-ISA mapping picks the target's entry (None: nothing for this ISA); anything else is as is."""
    if isinstance(value, Mapping) and set(value) <= {"avx2", "avx512"}:
        return value.get(target)
    return value


def cover_texts(
    template: str, dim: str, size: int, sizes: Sequence[int], limit: int | None = None
) -> list[str]:
    """The scheme of every cover of ``size`` by ``sizes``; with ``limit``, only that many of those with
    the fewest microkernel calls (larger microkernels amortize their loads better)."""

    def fill(cover: Cover) -> str:
        if len(cover.pairs) == 1:
            (n, a), *_ = cover.pairs
            return template.replace("{cover}", f"T_{{{n},{dim}}}").replace("{unroll}", f"U_{{{a},{dim}}}")
        return template.replace("{cover}", lambda_seq_text(dim, cover)).replace("{unroll}", f"Uλ_{dim}")

    if "{cover}" not in template or "{unroll}" not in template:
        raise SpaceError(f"cover template {template!r} needs the placeholders {{cover}} and {{unroll}}")
    covers = divisors_cover(size, sizes) + lambda_covers(size, sizes)
    if limit is not None:
        covers = sorted(covers, key=lambda c: sum(n for n, _ in c.pairs))[:limit]
    return [fill(c) for c in covers]


def entry_schemes(entry: Any, workload: Workload, target: str) -> list[tuple[str, dict[str, Any]]]:
    """(scheme text, per-entry options) of one space entry."""
    known = expanders() if isinstance(entry, Mapping) else {}
    if isinstance(entry, Mapping) and (keys := set(entry) & set(known)):
        import importlib

        module, function = known[sorted(keys)[0]].split(":")
        return getattr(importlib.import_module(module), function)(entry, workload, target)
    if isinstance(entry, Mapping) and "cover" in entry:
        dim = str(entry["cover"])
        if dim not in workload.size:
            raise SpaceError(f"cover dimension {dim!r} is not one of {list(workload.size)}")
        template, sizes = _for_target(entry.get("template"), target), _for_target(entry.get("sizes"), target)
        if template is None or sizes is None:
            return []
        limit = entry.get("limit")
        texts = cover_texts(str(template), dim, workload.size[dim], [int(s) for s in sizes], limit)
        return [(t, dict(entry.get("options") or {})) for t in texts]
    if isinstance(entry, Mapping) and "scheme" in entry:
        text = _for_target(entry["scheme"], target)
        return [] if text is None else [(str(text), dict(entry.get("options") or {}))]
    text = _for_target(entry, target)
    if text is None:
        return []
    if not isinstance(text, str):
        raise SpaceError(f"space entry {entry!r} is neither a scheme, a per-ISA scheme nor a cover template")
    return [(text, {})]


def baseline_candidate(entry: str | Mapping[str, Any]) -> Candidate:
    """A space's baseline: a library name, or ``{name: onednn, threads: 2}`` for one with options; with the
    installed library's version in its options (kernels.baselines.versioned)."""
    from kernels.baselines import versioned

    if isinstance(entry, Mapping):
        options = {str(k): v for k, v in entry.items() if k != "name"}
        if "name" not in entry or not options:
            raise SpaceError(f"a baseline with options needs a name and an option, got {dict(entry)}")
        return versioned(Candidate("baseline", str(entry["name"]), tuple(sorted(options.items()))))
    return versioned(Candidate("baseline", str(entry)))


def space_candidates(
    space: Mapping[str, Any],
    workload: Workload,
    target: str,
    base_options: Mapping[str, Any],
    scheme: str | None = None,
    baselines: Sequence[str] | None = None,
) -> list[Candidate]:
    """Every candidate of a space on a workload: entries x variants, then the library baselines.

    ``scheme`` replaces the space's entries (and, unless ``baselines`` is given, its baselines).
    """
    from kernels.baselines import versioned

    entries = [scheme] if scheme else list(space.get("schemes", []))
    variants = [{}] if scheme else list(space.get("variants") or [{}])
    out: dict[str, Candidate] = {}
    for entry in entries:
        if isinstance(entry, Mapping) and "kind" in entry:
            c = Candidate(
                str(entry["kind"]),
                str(entry["text"]),
                tuple(sorted({**base_options, **(entry.get("options") or {})}.items())),
            )
            c = versioned(c)  # a library inside the candidate (im2col's gemm) is part of its key too
            out.setdefault(c.key, c)
            continue
        for text, options in entry_schemes(entry, workload, target):
            canonical = format_scheme(parse_scheme(text))  # one spelling per scheme, so one candidate key
            for v in variants:
                c = Candidate("scheme", canonical, tuple(sorted({**base_options, **options, **v}.items())))
                out.setdefault(c.key, c)
    libs = baselines if baselines is not None else ([] if scheme else space.get("baselines", []))
    for b in libs:
        c = baseline_candidate(b)
        out.setdefault(c.key, c)
    return list(out.values())
