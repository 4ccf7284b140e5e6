"""The TTiLE scheme language (seed 000, chapter 3): atoms, parser, printer and legality rules.

A scheme is a list of atoms written outermost first, e.g. ``[R_j, T_{4,i}, U_{6,i}, U_{2,j}, V_j]``.
This module is the one place that knows the notation and the rules; an illegal scheme raises
:class:`SchemeError`, whose message names the atom, its position, the dimension and the rule.

Semantics chosen where the thesis is silent (recorded in docs/schemes.md):
- every atom has a *footprint* on its dimension: ``V`` = vector lanes, ``T/U_{a}`` = a x footprint below,
  ``R`` = the whole dimension, ``Texct/Tvar/Texctg_{a}`` = a elements, ``λ_seq`` = sum of r x a x below;
- a loop atom iterates over its extent in steps of the footprint of the next atom on the same dimension;
- an extent that is not a static multiple of that step gives the inner atom a variable extent
  ``MIN(step, extent - index)``, which only ``Texct`` (at the domain border), ``Tvar`` and ``Texctg`` accept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import gcd

PAR_KINDS = ("Tpar", "Tfused")  # parallel loops (OpenMP): T semantics, outermost only (thesis §3.7)
LOOP_KINDS = ("R", "T", "Texct", "Tvar", "Texctg", "lambda_seq", *PAR_KINDS)
UNROLL_KINDS = ("U", "Ul")
EXTERNAL = "ExternalCall"  # a call to an external microkernel, flexible on its dimension (thesis §3.5)
VAR_KINDS = ("Texct", "Tvar", "Texctg", EXTERNAL)  # atoms that accept a variable extent
PARTIAL_KINDS = ("U", "V")  # ... and, with partial microkernels, the microkernel's own atoms
SIZED_KINDS = ("T", "U", "Texct", "Tvar", "Texctg", *PAR_KINDS, EXTERNAL)
TILE_KINDS = ("T", "U", *PAR_KINDS)  # footprint = size x the tile below
PACK_KINDS = ("Pack", "PackT")
ALL_KINDS = (
    "R", "T", "U", "V", "Ul", "lambda_seq", "Texct", "Tvar", "Texctg", "ScalP", *PACK_KINDS, *PAR_KINDS,
    EXTERNAL,
)  # fmt: skip


class SchemeError(ValueError):
    """An unparsable or illegal scheme; ``rule`` is a short stable name for the rule broken."""

    def __init__(
        self,
        rule: str,
        message: str,
        atom: Atom | None = None,
        position: int | None = None,
        dim: str | None = None,
    ):
        self.rule = rule
        self.detail = message
        self.atom = atom
        self.position = position
        self.dim = dim if dim is not None else (atom.dim if atom is not None else None)
        parts = []
        if atom is not None:
            parts.append(f"atom {atom.text()}")
        if position is not None:
            parts.append(f"at position {position}")
        if self.dim is not None:
            parts.append(f"(dimension {self.dim})")
        where = " ".join(parts) + ": " if parts else ""
        super().__init__(f"illegal scheme: {where}{message} [rule: {rule}]")


@dataclass(frozen=True)
class Atom:
    kind: str
    dim: str | None = None
    size: int | None = None
    seq: tuple[tuple[int, int], ...] = ()  # λ_seq: (repetitions, unroll factor) pairs
    # ScalP; PackT: the buffer's dimension order, innermost last; "d/p" splits d into panels of p
    # (the outer part here, the inner part where d itself is listed: BLIS's micro-panels)
    dims: tuple[str, ...] = ()
    tensor: str | None = None  # Pack, PackT
    # Tfused_[(d1,a1),(d2,a2)...] is held as one atom per pair (kind Tfused, dim d_k, size a_k), so every
    # per-dimension rule sees it; ``fused`` is the whole pair list and ``part`` the pair's index in it
    fused: tuple[tuple[str, int], ...] = ()
    part: int = 0
    name: str | None = None  # ExternalCall: the external microkernel (kernels/external.py)

    def text(self, ascii_only: bool = False) -> str:
        lam = "lambda" if ascii_only else "λ"
        if self.kind == "Tfused":
            return "Tfused_[" + ",".join(f"({d},{a})" for d, a in self.fused) + "]"
        if self.kind == EXTERNAL:
            return f"ExternalCall_{{{self.name},{self.size},{self.dim}}}"
        if self.kind in ("R", "V"):
            return f"{self.kind}_{self.dim}"
        if self.kind == "Ul":
            return f"U{'l' if ascii_only else 'λ'}_{self.dim}"
        if self.kind == "lambda_seq":
            pairs = ",".join(f"({r},{a})" for r, a in self.seq)
            return f"{lam}_seq_{self.dim}.[{pairs}]"
        if self.kind == "ScalP":
            return f"ScalP[{','.join(self.dims)}]"
        if self.kind == "Pack":
            return f"Pack_{self.tensor}"
        if self.kind == "PackT":
            return f"PackT_{self.tensor}[{','.join(self.dims)}]"
        return f"{self.kind}_{{{self.size},{self.dim}}}"


Scheme = tuple[Atom, ...]

# -- parsing ---------------------------------------------------------------------------------------------
_NAME = r"([A-Za-z][A-Za-z0-9]*)"
_SIZED = re.compile(r"^(Texctg|Texct|Tvar|T|U)\s*_\s*\{\s*(-?\d+)\s*,\s*" + _NAME + r"\s*\}$")
_PLAIN = re.compile(r"^(R|V|Uλ|Ulambda|Ul)\s*_\s*" + _NAME + r"$")
_LAMBDA = re.compile(r"^(?:λ|lambda)_?seq\s*_\s*" + _NAME + r"\s*\.?\s*\[(.*)\]$")
_PAIR = re.compile(r"\(\s*(-?\d+)\s*,\s*(-?\d+)\s*\)")
_SCALP = re.compile(r"^(?:ScalP|Scalpromd)\s*\[(.*)\]$")
_PACK = re.compile(r"^(PackT|Pack)\s*_\s*([A-Za-z][A-Za-z0-9]*)\s*(?:\[(.*)\])?$")
_TPAR = re.compile(r"^Tpar\s*_\s*\{\s*(-?\d+)\s*,\s*" + _NAME + r"\s*\}$")
_EXTERNAL = re.compile(r"^ExternalCall\s*_\s*\{\s*" + _NAME + r"\s*,\s*(-?\d+)\s*,\s*" + _NAME + r"\s*\}$")
_TFUSED = re.compile(r"^Tfused\s*_\s*\[(.*)\]$")
_DIM_PAIR = re.compile(r"\(\s*" + _NAME + r"\s*,\s*(-?\d+)\s*\)")


def fused_atoms(pairs: Sequence[tuple[str, int]]) -> tuple[Atom, ...]:
    """The atoms of ``Tfused_[(d1,a1),...]``: one per pair, each carrying the whole list."""
    fused = tuple((str(d), int(a)) for d, a in pairs)
    return tuple(Atom("Tfused", d, a, fused=fused, part=k) for k, (d, a) in enumerate(fused))


def expand(atoms: Iterable[Atom]) -> tuple[Atom, ...]:
    """Atoms with every Tfused given as its first pair only (as written in a YAML list) completed."""
    out: list[Atom] = []
    for a in atoms:
        if a.kind == "Tfused" and a.part == 0 and a.fused and len(a.fused) > 1:
            out.extend(fused_atoms(a.fused))
        else:
            out.append(a)
    return tuple(out)


def _split_top(text: str) -> list[str]:
    """Split on ',' or ';' outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                raise SchemeError("syntax", f"unbalanced '{ch}' in {text!r}")
        if ch in ",;" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise SchemeError("syntax", f"unbalanced brackets in {text!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_atom(text: str) -> Atom:
    """One atom; a ``Tfused_[...]`` gives its first pair's atom carrying the whole list (see expand)."""
    t = text.strip()
    if m := _TPAR.match(t):
        return Atom("Tpar", m.group(2), int(m.group(1)))
    if m := _EXTERNAL.match(t):
        return Atom(EXTERNAL, m.group(3), int(m.group(2)), name=m.group(1))
    if m := _TFUSED.match(t):
        body = m.group(1)
        pairs = [(d, int(a)) for d, a in _DIM_PAIR.findall(body)]
        rest = _DIM_PAIR.sub("", body).replace(",", "").replace(";", "").strip()
        if rest or not pairs:
            raise SchemeError("syntax", f"cannot read the Tfused list {body!r} (expected [(d,a),(d,a),...])")
        return fused_atoms(pairs)[0]
    if m := _SIZED.match(t):
        return Atom(m.group(1), m.group(3), int(m.group(2)))
    if m := _PLAIN.match(t):
        kind = "Ul" if m.group(1) in ("Uλ", "Ulambda", "Ul") else m.group(1)
        return Atom(kind, m.group(2))
    if m := _LAMBDA.match(t):
        body = m.group(2)
        pairs = tuple((int(r), int(a)) for r, a in _PAIR.findall(body))
        rest = _PAIR.sub("", body).replace(",", "").replace(";", "").strip()
        if rest:
            raise SchemeError("syntax", f"cannot read the λ_seq list {body!r} (expected [(r,a),(r,a),...])")
        return Atom("lambda_seq", m.group(1), seq=pairs)
    if m := _PACK.match(t):
        dims = tuple(d.strip() for d in re.split(r"[,;]", m.group(3) or "") if d.strip())
        if (m.group(1) == "PackT") != bool(dims):
            raise SchemeError(
                "syntax", f"{t!r}: PackT_X[d,...] lists the buffer's dimensions; Pack_X lists none"
            )
        return Atom(m.group(1), tensor=m.group(2), dims=dims)
    if m := _SCALP.match(t):
        dims = tuple(d.strip() for d in re.split(r"[,;]", m.group(1)) if d.strip())
        return Atom("ScalP", dims=dims)
    raise SchemeError(
        "syntax",
        f"cannot read atom {t!r}; expected one of R_d, V_d, T_{{a,d}}, U_{{a,d}}, Uλ_d, "
        "λ_seq_d.[(r,a),...], Texct_{a,d}, Tvar_{a,d}, Texctg_{a,d}, ScalP[d,...], Pack_X, PackT_X[d,...], "
        "Tpar_{a,d}, Tfused_[(d,a),...], ExternalCall_{name,a,d}",
    )


def _atom_from_mapping(item: Mapping[str, object]) -> Atom:
    kind = str(item.get("kind", item.get("atom", "")))
    kind = {"Uλ": "Ul", "Ulambda": "Ul", "λ_seq": "lambda_seq"}.get(kind, kind)
    if kind not in ALL_KINDS:
        raise SchemeError("syntax", f"unknown atom kind {kind!r} in {dict(item)!r}; known: {ALL_KINDS}")
    size = item.get("size")
    seq = tuple((int(r), int(a)) for r, a in item.get("seq", ()) or ())  # type: ignore[union-attr]
    dims = tuple(str(d) for d in item.get("dims", ()) or ())  # type: ignore[union-attr]
    dim, tensor = item.get("dim"), item.get("tensor")
    if kind == "Tfused":  # {kind: Tfused, pairs: [[i, 2], [j, 3]]}
        pairs = [(str(d), int(a)) for d, a in item.get("pairs", ()) or ()]  # type: ignore[union-attr]
        if not pairs:
            raise SchemeError("syntax", f"Tfused needs pairs: [[dim, size], ...] in {dict(item)!r}")
        return fused_atoms(pairs)[0]
    if kind == EXTERNAL:  # {kind: ExternalCall, name: libxsmm, size: 16, dim: i}
        ext = item.get("name")
        return Atom(kind, None if dim is None else str(dim), None if size is None else int(size),  # type: ignore[call-overload]
                    name=None if ext is None else str(ext))  # fmt: skip
    return Atom(
        kind,
        None if dim is None else str(dim),
        None if size is None else int(size),  # type: ignore[call-overload]
        seq,
        dims,
        None if tensor is None else str(tensor),
    )


def parse_scheme(spec: str | Sequence[object]) -> Scheme:
    """Parse the thesis notation (``"[R_j, T_{4,i}, V_j]"``) or a YAML list of atom strings/mappings."""
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        items: list[object] = list(_split_top(text))
    else:
        items = list(spec)
    atoms = []
    for pos, item in enumerate(items):
        try:
            atoms.append(_atom_from_mapping(item) if isinstance(item, Mapping) else parse_atom(str(item)))
        except SchemeError as exc:
            raise SchemeError(exc.rule, exc.detail, None, pos) from None
    scheme = expand(atoms)
    try:
        return validate_atoms(scheme)
    except SchemeError as exc:
        raise as_written(exc, scheme) from None


def as_written(exc: SchemeError, scheme: Scheme) -> SchemeError:
    """``exc`` with its position counted in the scheme as written (a Tfused is one atom, not one per
    pair), so the position always points at the atom the user wrote."""
    if exc.position is None or not any(a.kind == "Tfused" and a.part for a in scheme[: exc.position + 1]):
        return exc
    # the written atoms up to and including this one; a later pair of a Tfused maps to its first
    pos = sum(1 for a in scheme[: exc.position + 1] if not (a.kind == "Tfused" and a.part > 0)) - 1
    return SchemeError(exc.rule, exc.detail, exc.atom, pos, exc.dim)


def validate_atoms(atoms: Scheme) -> Scheme:
    """Checks that need no operator: sizes, λ_seq pair lists (run on every path into ``analyze``)."""
    for pos, a in enumerate(atoms):
        missing = (
            "a name" if a.kind == EXTERNAL and not a.name
            else "a tensor" if a.kind in PACK_KINDS and not a.tensor
            else "buffer dimensions" if a.kind == "PackT" and not a.dims
            else "dimensions" if a.kind == "ScalP" and not a.dims
            else "a dimension" if a.kind not in (*PACK_KINDS, "ScalP") and not a.dim
            else None
        )  # fmt: skip
        if missing:
            raise SchemeError("syntax", f"{a.kind} needs {missing}", a, pos)
        if a.kind in SIZED_KINDS and (not isinstance(a.size, int) or a.size < 1):
            raise SchemeError("positive-size", f"size must be a positive integer, got {a.size}", a, pos)
        if a.kind == "Tfused" and len({d for d, _ in a.fused}) != len(a.fused):
            raise SchemeError("syntax", "Tfused lists each dimension at most once", a, pos)
        if a.kind == "lambda_seq":
            if len(a.seq) < 2:
                raise SchemeError(
                    "lambda-seq", "λ_seq needs at least two (repetitions, factor) pairs", a, pos
                )
            if any(r < 1 or f < 1 for r, f in a.seq):
                raise SchemeError("positive-size", "λ_seq repetitions and factors must be >= 1", a, pos)
    return atoms


def _written(scheme: Iterable[Atom]) -> list[Atom]:
    """The atoms as written: a Tfused once (its first pair), not once per pair."""
    return [a for a in scheme if not (a.kind == "Tfused" and a.part > 0)]


def format_scheme(scheme: Iterable[Atom], ascii_only: bool = False) -> str:
    return "[" + ", ".join(a.text(ascii_only) for a in _written(scheme)) + "]"


def scheme_to_yaml(scheme: Iterable[Atom]) -> list[str]:
    """The YAML list form: one atom string per item."""
    return [a.text(ascii_only=True) for a in _written(scheme)]


# -- legality and footprints -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Analysis:
    """What code generation needs from a legal scheme."""

    scheme: Scheme
    sizes: dict[str, int]
    lanes: int
    vector_dim: str | None
    unroll_start: int  # index of the first atom of the unrolled suffix (U/Uλ/V)
    scalp_position: int | None
    partial: bool = False  # partial microkernels allowed: U and V may receive a variable extent

    def chain(self, dim: str) -> list[int]:
        return [p for p, a in enumerate(self.scheme) if a.dim == dim]

    def footprint(self, pos: int, binding: Mapping[str, int]) -> int:
        """Elements of ``scheme[pos].dim`` covered by one instance of the tile rooted at ``pos``."""
        a = self.scheme[pos]
        below = self.step(pos, binding)
        if a.kind == "V":
            return self.lanes
        if a.kind in TILE_KINDS:
            return a.size * below  # type: ignore[operator]
        if a.kind == "Ul":
            return binding[a.dim] * below  # type: ignore[index]
        if a.kind == "lambda_seq":
            return sum(r * f for r, f in a.seq) * below
        if a.kind == "R":
            return self.sizes[a.dim]  # type: ignore[index]
        return a.size  # type: ignore[return-value]  # Texct / Tvar / Texctg

    def step(self, pos: int, binding: Mapping[str, int]) -> int:
        """Footprint of the next atom on the same dimension (1 if none): the loop step of ``pos``.

        For λ_seq it is the tile under its Uλ; each branch then steps by its factor times that.
        """
        a = self.scheme[pos]
        for q in range(pos + 1, len(self.scheme)):
            if self.scheme[q].dim == a.dim and self.scheme[q].kind != "ScalP":
                if a.kind == "lambda_seq":
                    # λ_seq steps by the Uλ factor of the branch; its footprint uses the tile under Uλ
                    return self.step(q, binding)
                return self.footprint(q, binding)
        return 1


def _lambda_bindings(scheme: Scheme) -> list[dict[str, int]]:
    """Every combination of λ factors (one binding per branch of the cartesian product)."""
    combos: list[dict[str, int]] = [{}]
    for a in scheme:
        if a.kind == "lambda_seq":
            combos = [{**c, a.dim: f} for c in combos for _, f in a.seq]  # type: ignore[dict-item]
    return combos


_SPLIT = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*/\s*(-?\d+)$")


def pack_layout(a: Atom) -> tuple[tuple[str, ...], tuple[str, int] | None]:
    """A PackT's buffer dimensions without the panel entry, and its panel split (d, p) if it has one:
    ``PackT_A[i/6,k,i]`` is ``(("k", "i"), ("i", 6))``, A in panels of 6 rows, each k x 6 row-major."""
    plain, split = [], None
    for d in a.dims:
        if m := _SPLIT.match(d):
            if split is not None:
                raise SchemeError("pack-split", "a buffer splits at most one dimension into panels", a)
            split = (m.group(1), int(m.group(2)))
        else:
            plain.append(d)
    if split is not None:
        d, p = split
        if p < 1:
            raise SchemeError("pack-split", f"panel size must be a positive integer, got {p}", a, dim=d)
        if not plain or plain[-1] != d:
            why = f"the panel dimension {d} must also be the innermost buffer dimension (…, {d}/{p}, …, {d})"
            raise SchemeError("pack-split", why, a, dim=d)
    return tuple(plain), split


def _check_pack(
    a: Atom, pos: int, tensors: Mapping[str, tuple[str, ...] | None], stride1: Mapping[str, Sequence[str]]
) -> dict[str, list]:
    """Pack_X / PackT_X[dims] legality; returns the stride-1 map as the code below the pack sees it."""
    if a.tensor not in tensors:
        raise SchemeError("unknown-tensor", f"tensor {a.tensor!r} is not one of {list(tensors)}", a, pos)
    if a.kind == "Pack":
        return dict(stride1)  # type: ignore[arg-type]
    axes = tensors[a.tensor]
    if axes is None:
        why = f"{a.tensor} has a compound axis (e.g. h*stride + r): pack it without transposition (Pack)"
        raise SchemeError("packt-dims", why, a, pos)
    try:
        dims, _ = pack_layout(a)
    except SchemeError as exc:
        raise SchemeError(exc.rule, exc.detail, a, pos, exc.dim) from None
    if sorted(dims) != sorted(axes):
        why = f"the buffer dimensions {list(dims)} must be a permutation of {a.tensor}'s {list(axes)}"
        raise SchemeError("packt-dims", why, a, pos)
    innermost = dims[-1]
    return {d: [(t, innermost if t == a.tensor else s1) for t, s1 in uses] for d, uses in stride1.items()}


def analyze(
    spec: str | Sequence[object] | Scheme,
    dims: Sequence[str],
    sizes: Mapping[str, int],
    lanes: int,
    stride1: Mapping[str, Sequence[str]],
    output_dims: Sequence[str],
    partial: bool = False,
    tensors: Mapping[str, tuple[str, ...] | None] | None = None,
) -> Analysis:
    """Check every legality rule of thesis §3 and return what codegen needs.

    ``stride1`` maps each dimension to (tensor, stride-1 dimension of that tensor) for every tensor that
    uses it, and ``tensors`` maps tensor names to their plain axis dimensions (None when an axis is a
    sum such as ``h*2 + r``), so the rules need no operator import here.
    """
    if isinstance(spec, tuple) and all(isinstance(a, Atom) for a in spec):
        scheme: Scheme = expand(spec)
    else:
        scheme = parse_scheme(spec)  # type: ignore[arg-type]
    try:
        return _analyze(validate_atoms(scheme), dims, sizes, lanes, stride1, output_dims, partial, tensors)
    except SchemeError as exc:
        raise as_written(exc, scheme) from None


def _analyze(
    scheme: Scheme,
    dims: Sequence[str],
    sizes: Mapping[str, int],
    lanes: int,
    stride1: Mapping[str, Sequence[str]],
    output_dims: Sequence[str],
    partial: bool,
    tensors: Mapping[str, tuple[str, ...] | None] | None,
) -> Analysis:
    sizes = dict(sizes)
    tensors = dict(tensors or {})
    for pos, a in enumerate(scheme):
        named = (
            a.dims if a.kind == "ScalP"
            else tuple(d.split("/")[0].strip() for d in a.dims) if a.kind == "PackT"
            else () if a.kind == "Pack" else (a.dim,)
        )  # fmt: skip
        for d in named:
            if d not in dims:
                raise SchemeError(
                    "unknown-dimension", f"dimension {d!r} is not one of {list(dims)}", a, pos, dim=d
                )
        if a.kind in PACK_KINDS:
            stride1 = _check_pack(a, pos, tensors, stride1)

    _check_parallel(scheme, dims, output_dims)

    # V: once, innermost, stride-1 in every tensor it touches
    vpos = [p for p, a in enumerate(scheme) if a.kind == "V"]
    if len(vpos) > 1:
        raise SchemeError("single-V", "only one vectorization atom is allowed", scheme[vpos[1]], vpos[1])
    if vpos and vpos[0] != len(scheme) - 1:
        raise SchemeError(
            "V-innermost", "vectorization must be the innermost (last) atom", scheme[vpos[0]], vpos[0]
        )
    vector_dim = scheme[vpos[0]].dim if vpos else None
    if vector_dim is not None:
        bad = [t for t, s1 in stride1.get(vector_dim, ()) if s1 != vector_dim]  # type: ignore[misc]
        if bad:
            raise SchemeError(
                "V-stride1",
                f"{vector_dim} is not the stride-1 (innermost) dimension of tensor(s) {bad}; "
                "vectorize another dimension or pack/transpose",
                scheme[vpos[0]],
                vpos[0],
            )

    _check_external(scheme, vpos)

    # unrolls form a suffix (optionally followed by V, or by an ExternalCall they give its tile)
    first_u = next((p for p, a in enumerate(scheme) if a.kind in (*UNROLL_KINDS, EXTERNAL)), None)
    unroll_start = first_u if first_u is not None else (vpos[0] if vpos else len(scheme))
    for p in range(unroll_start, len(scheme)):
        if scheme[p].kind not in (*UNROLL_KINDS, "V", EXTERNAL):
            raise SchemeError(
                "unroll-innermost",
                "unroll atoms must come last (only U, Uλ or V may follow an unroll)",
                scheme[first_u],  # type: ignore[index]
                first_u,
            )

    # per-dimension chains
    for d in dims:
        chain = [p for p, a in enumerate(scheme) if a.dim == d]
        kinds = [scheme[p].kind for p in chain]
        for i, p in enumerate(chain):
            a = scheme[p]
            if a.kind == "R" and i != 0:
                rule = "R-once" if "R" in kinds[:i] else "R-outermost"
                raise SchemeError(
                    rule, "R must appear at most once per dimension, as its outermost atom", a, p
                )
            if a.kind in ("Texct", "Texctg") and (
                i + 1 >= len(chain) or kinds[i + 1] not in ("Tvar", "Texctg", EXTERNAL)
            ):
                raise SchemeError(
                    "texct-chain",
                    f"the next atom on {d} must be Tvar_{{..,{d}}}, Texctg_{{..,{d}}} "
                    f"or ExternalCall_{{..,..,{d}}}",
                    a,
                    p,
                )
            if a.kind in ("Tvar", "Texctg") and (i == 0 or kinds[i - 1] not in ("Texct", "Texctg")):
                raise SchemeError(
                    "texct-chain", f"{a.kind} needs a Texct_{{..,{d}}} or Texctg above it on {d}", a, p
                )
            if a.kind == "lambda_seq":
                if i + 1 >= len(chain) or kinds[i + 1] != "Ul":
                    raise SchemeError(
                        "lambda-pair", f"λ_seq_{d} must be followed on {d} by Uλ_{d} (nothing between)", a, p
                    )
                if kinds.count("lambda_seq") > 1:
                    raise SchemeError("lambda-pair", f"at most one λ_seq per dimension ({d})", a, p)
            if a.kind == "Ul" and (i == 0 or kinds[i - 1] != "lambda_seq"):
                raise SchemeError("lambda-pair", f"Uλ_{d} needs λ_seq_{d} directly above it on {d}", a, p)

    # ScalP: output accumulators promoted above loops on the listed (reduction) dimensions only
    scalps = [p for p, a in enumerate(scheme) if a.kind == "ScalP"]
    if len(scalps) > 1:
        raise SchemeError("scalp-once", "at most one ScalP per scheme", scheme[scalps[1]], scalps[1])
    scalp_position = scalps[0] if scalps else None
    if scalp_position is not None:
        a = scheme[scalp_position]
        touched = [d for d in a.dims if d in output_dims]
        if touched:
            raise SchemeError(
                "scalp-output",
                f"the output is indexed by {touched}: it cannot be promoted out",
                a,
                scalp_position,
                dim=touched[0],
            )
        for q in range(scalp_position + 1, unroll_start):
            if scheme[q].kind in PACK_KINDS:
                why = f"{scheme[q].text()} below ScalP: pack above the promoted accumulators"
                raise SchemeError("scalp-scope", why, a, scalp_position)
            if scheme[q].kind == "lambda_seq":
                raise SchemeError(
                    "scalp-scope",
                    f"{scheme[q].text()} below ScalP: accumulators cannot be promoted above a λ sequence",
                    a,
                    scalp_position,
                    dim=scheme[q].dim,
                )
            if scheme[q].dim not in a.dims:
                raise SchemeError(
                    "scalp-scope",
                    f"loop {scheme[q].text()} below ScalP is on {scheme[q].dim}, not one of {list(a.dims)}",
                    a,
                    scalp_position,
                )

    analysis = Analysis(scheme, sizes, lanes, vector_dim, unroll_start, scalp_position, partial)
    for binding in _lambda_bindings(scheme):
        _check_extents(analysis, dims, binding)
    return analysis


def _check_external(scheme: Scheme, vpos: Sequence[int]) -> None:
    """ExternalCall_{name,α,d} (thesis §3.5) replaces the microkernel: it is the last atom, once, with no
    V; U atoms just above it (on other dimensions) set the fixed extents of the tile it computes."""
    ext = [p for p, a in enumerate(scheme) if a.kind == EXTERNAL]
    if not ext:
        return
    p = ext[0]
    a = scheme[p]
    if len(ext) > 1:
        raise SchemeError("external-once", "at most one ExternalCall per scheme", scheme[ext[1]], ext[1])
    if p != len(scheme) - 1:
        why = f"an ExternalCall computes the innermost tile: it must come last, not {scheme[-1].text()}"
        raise SchemeError("external-innermost", why, a, p)
    if vpos:
        why = "the external microkernel does its own vectorization: no V with an ExternalCall"
        raise SchemeError("external-V", why, a, p)
    for b in scheme:
        if b.kind == "ScalP":
            raise SchemeError("external-scalp", "ScalP promotes accumulators the external call owns", a, p)
        if b.kind in UNROLL_KINDS and b.dim == a.dim:
            why = f"{b.text()} unrolls the call's flexible dimension {a.dim}: use a loop"
            raise SchemeError("external-suffix", why, a, p)


def _check_parallel(scheme: Scheme, dims: Sequence[str], output_dims: Sequence[str]) -> None:
    """Tpar / Tfused (thesis §3.7, §5.6): parallel loops form the outermost prefix of the scheme (nothing
    but other parallel atoms above them, so no loop, pack or λ nest is shared between threads), and run
    over output dimensions only (a parallel reduction would race on the output)."""
    seen_serial: int | None = None
    for pos, a in enumerate(scheme):
        if a.kind not in PAR_KINDS:
            seen_serial = pos if seen_serial is None else seen_serial
            continue
        if seen_serial is not None:
            above = scheme[seen_serial]
            raise SchemeError(
                "par-outermost",
                f"a parallel loop must be outermost: {above.text()} is above it; "
                "only Tpar/Tfused atoms may be above a parallel atom",
                a,
                pos,
            )
        if a.dim not in output_dims and a.dim in dims:
            raise SchemeError(
                "par-reduction",
                f"{a.dim} is a reduction dimension: a parallel loop on it would race on the output",
                a,
                pos,
            )


def _check_extents(an: Analysis, dims: Sequence[str], binding: Mapping[str, int]) -> None:
    """Coverage and granularity for one λ branch; divisibility is checked by the loop walk."""
    scheme = an.scheme
    for d in dims:
        size = an.sizes[d]
        chain = an.chain(d)
        if not chain:
            if size != 1:
                raise SchemeError(
                    "coverage", f"dimension {d} (size {size}) is not covered by any atom; add R_{d}", dim=d
                )
            continue
        var_positions = [p for p in chain if scheme[p].kind in VAR_KINDS]
        if var_positions:
            gran = an.step(var_positions[-1], binding)
            for p in var_positions:
                if scheme[p].size % gran:  # type: ignore[operator]
                    raise SchemeError(
                        "granularity",
                        f"size {scheme[p].size} is not a multiple of the tile below it on {d} ({gran})",
                        scheme[p],
                        p,
                    )
            if size % gran and not an.partial:
                raise SchemeError(
                    "granularity",
                    f"the size of {d} ({size}) is not a multiple of the tile below it ({gran})",
                    scheme[var_positions[0]],
                    var_positions[0],
                )
        top = scheme[chain[0]]
        fp = an.footprint(chain[0], binding)
        if top.kind == "Texct" and fp < size:
            raise SchemeError(
                "coverage", f"footprint {fp} is smaller than {d} ({size}); add R_{d} above", top, chain[0]
            )
        if an.partial and top.kind in PARTIAL_KINDS and fp >= size:
            continue  # a single partial microkernel covers the whole (smaller) dimension
        if top.kind not in ("R", "Texct") and fp != size:
            raise SchemeError(
                "divisibility",
                f"the atoms on {d} cover {fp} elements but the dimension has {size}; "
                f"their sizes must multiply to {size} (or add R_{d})",
                top,
                chain[0],
            )
        walk_dim(an, d, binding)


@dataclass(frozen=True)
class LoopStep:
    """How the loop of one atom runs: its step, and whether its inner atom gets a variable extent."""

    step: int
    child_variable: bool


def walk_dim(an: Analysis, d: str, binding: Mapping[str, int]) -> dict[int, LoopStep]:
    """Walk the loops on ``d`` outer -> inner; the one place deciding static vs ``MIN``-bounded extents.

    An extent is ("exact", E) or ("var", m): a runtime value that is always a multiple of m.
    """
    scheme = an.scheme
    chain = [p for p in an.chain(d) if scheme[p].kind not in (*UNROLL_KINDS, "V")]
    plan: dict[int, LoopStep] = {}
    exact, val = True, an.sizes[d]
    for p in chain:
        a = scheme[p]
        step = an.step(p, binding)
        if val % step == 0:
            nxt_exact, nxt_val = True, step
        else:
            nxt_exact, nxt_val = False, gcd(val, step)
        inner = [q for q in an.chain(d) if q > p]
        child = scheme[inner[0]] if inner else None
        accepts_var = VAR_KINDS + (PARTIAL_KINDS if an.partial else ())
        if not nxt_exact and (child is None or child.kind not in accepts_var):
            what = f"the size of {d} ({val})" if exact else f"its variable extent on {d}"
            raise SchemeError(
                "divisibility",
                f"{what} is not a multiple of the tile below ({step} elements) and the next atom "
                f"{child.text() if child else '(none)'} has a fixed size; use Texct/Tvar for partial tiles "
                "or partial microkernels (codegen.partial=masked)",
                a,
                p,
            )
        plan[p] = LoopStep(step, not nxt_exact)
        exact, val = nxt_exact, nxt_val
    return plan
