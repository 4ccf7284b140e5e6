"""The TTiLE scheme language (seed 000, ch. 3): parser, printer and every legality rule."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.candidate import Workload
from kernels.codegen import analyze_for
from kernels.scheme import (
    Atom,
    LoopStep,
    SchemeError,
    analyze,
    format_scheme,
    parse_atom,
    parse_scheme,
    scheme_to_yaml,
    walk_dim,
)
from kernels.targets import get_target

AVX2 = get_target("avx2")  # legality tests use 8 lanes whatever the host
AVX512 = get_target("avx512")

THESIS_SCHEMES = [
    "[R_j, T_{4,i}, λ_seq_i.[(12,6),(8,7)], Uλ_i, U_{2,j}, V_j]",
    "[Texct_{260,i}, T_{64,j}, Texctg_{120,i}, Tvar_{32,i}, T_{32,k}]",
    "[R_k, R_j, R_i, ScalP[k], T_{32,k}, U_{2,i}]",
    "[R_k, R_j, R_i, V_j]",
    "[R_j, R_k, R_i, T_{8,j}, T_{16,i}, T_{256,k}, U_{6,i}, U_{2,j}, V_j]",
    "[λ_seq_i.[(2,11),(3,7)], T_{32,k}, Uλ_i]",
    "[λ_seq_i.[(7,4),(3,5)], λ_seq_j.[(14,8),(12,6)], Uλ_i, Uλ_j]",
    "[Texct_{120,i}, T_{64,j}, Tvar_{32,i}, T_{32,k}]",
    "[R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}]",
    "[T_{4,w}, T_{3,r}, T_{4,h}, T_{2,c}, T_{4,w}, T_{8,k}, T_{3,s}, T_{48,h}, T_{256,c}, U_{12,w}, "
    "U_{2,k}, V_k]",
]


def mm(i: int = 12, j: int = 16, k: int = 8) -> Workload:
    return Workload.make("mm", "matmul", {"i": i, "j": j, "k": k})


def conv(stride: int = 1, **sizes: int) -> Workload:
    base = {"h": 2, "w": 3, "k": 8, "r": 3, "s": 3, "c": 8}
    return Workload.make("cv", "conv2d", {**base, **sizes}, stride=stride)


# -- parser and printer ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", THESIS_SCHEMES)
@pytest.mark.parametrize("ascii_only", [False, True])
def test_round_trip_thesis_schemes(text: str, ascii_only: bool) -> None:
    parsed = parse_scheme(text)
    assert len(parsed) == len(text.split(", "))
    printed = format_scheme(parsed, ascii_only=ascii_only)
    assert parse_scheme(printed) == parsed
    if ascii_only:
        assert printed.isascii()
    else:
        assert printed == text  # the thesis spelling is the canonical unicode form


def test_parsed_atoms_have_the_right_fields() -> None:
    s = parse_scheme(THESIS_SCHEMES[0])
    assert s == (
        Atom("R", "j"),
        Atom("T", "i", 4),
        Atom("lambda_seq", "i", seq=((12, 6), (8, 7))),
        Atom("Ul", "i"),
        Atom("U", "j", 2),
        Atom("V", "j"),
    )
    assert parse_scheme(THESIS_SCHEMES[2])[3] == Atom("ScalP", dims=("k",))
    assert [a.kind for a in parse_scheme(THESIS_SCHEMES[1])] == ["Texct", "T", "Texctg", "Tvar", "T"]


@pytest.mark.parametrize(
    "variant",
    [
        "[R_j, T_{4,i}, lambda_seq_i.[(12,6),(8,7)], Ul_i, U_{2,j}, V_j]",
        "[R_j; T_{4,i}; λ_seq_i.[(12,6);(8,7)]; Uλ_i; U_{2,j}; V_j]",
        "R_j, T_{4,i}, lambda_seq_i.[(12,6),(8,7)], Ul_i, U_{2,j}, V_j",
        "R_j; T_{4,i}; lambda_seq_i.[(12,6);(8,7)]; Ulambda_i; U_{2,j}; V_j",
        "[ R_j ,T_{ 4 , i },λseq_i[( 12 , 6 ),( 8,7 )],Uλ_i,U_{2,j},V_j ]",
    ],
)
def test_ascii_and_separator_spellings(variant: str) -> None:
    assert parse_scheme(variant) == parse_scheme(THESIS_SCHEMES[0])


def test_scalpromd_alias_and_multi_dim_scalp() -> None:
    assert parse_atom("Scalpromd[k]") == Atom("ScalP", dims=("k",))
    assert parse_atom("ScalP[r, s; c]") == Atom("ScalP", dims=("r", "s", "c"))
    assert parse_atom("ScalP[r,s,c]").text() == "ScalP[r,s,c]"


@pytest.mark.parametrize("text", THESIS_SCHEMES)
def test_yaml_list_forms_are_equivalent(text: str) -> None:
    parsed = parse_scheme(text)
    as_strings = scheme_to_yaml(parsed)
    assert all(isinstance(x, str) and x.isascii() for x in as_strings)
    assert parse_scheme(as_strings) == parsed
    mappings: list[dict[str, object]] = []
    for a in parsed:
        m: dict[str, object] = {"kind": a.kind}
        if a.dim is not None:
            m["dim"] = a.dim
        if a.size is not None:
            m["size"] = a.size
        if a.seq:
            m["seq"] = [list(p) for p in a.seq]
        if a.dims:
            m["dims"] = list(a.dims)
        mappings.append(m)
    assert parse_scheme(mappings) == parsed
    # mixed lists (strings and mappings) are fine too
    mixed = [m if n % 2 else s for n, (m, s) in enumerate(zip(mappings, as_strings, strict=True))]
    assert parse_scheme(mixed) == parsed


def test_yaml_mapping_aliases() -> None:
    assert parse_scheme(
        [
            {"kind": "λ_seq", "dim": "i", "seq": [[2, 11], [3, 7]]},
            {"atom": "T", "size": 32, "dim": "k"},
            {"kind": "Uλ", "dim": "i"},
        ]
    ) == parse_scheme("[λ_seq_i.[(2,11),(3,7)], T_{32,k}, Uλ_i]")
    for bad in ({"kind": "Pack", "dim": "i"}, {"kind": "Hoist", "dim": "i"}, {"kind": "T", "size": 2}):
        with pytest.raises(SchemeError) as ei:
            parse_scheme([bad])
        assert ei.value.rule == "syntax"
    assert parse_scheme([{"kind": "PackT", "tensor": "B", "dims": ["k", "j"]}]) == parse_scheme(
        "[PackT_B[k,j]]"
    )


_names = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,3}", fullmatch=True)
_pos = st.integers(1, 10**6)
_atoms = st.one_of(
    st.builds(Atom, st.sampled_from(["R", "V", "Ul"]), _names),
    st.builds(Atom, st.sampled_from(["T", "U", "Texct", "Tvar", "Texctg"]), _names, _pos),
    st.builds(
        lambda d, seq: Atom("lambda_seq", d, seq=tuple(seq)),
        _names,
        st.lists(st.tuples(_pos, _pos), min_size=2, max_size=4),
    ),
    st.builds(lambda ds: Atom("ScalP", dims=tuple(ds)), st.lists(_names, min_size=1, max_size=3)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_atoms, max_size=8), st.booleans(), st.sampled_from([", ", ",", "; ", " ;"]), st.booleans())
def test_property_format_then_parse(atoms: list[Atom], ascii_only: bool, sep: str, brackets: bool) -> None:
    scheme = tuple(atoms)
    text = format_scheme(scheme, ascii_only=ascii_only)
    assert parse_scheme(text) == scheme
    body = sep.join(a.text(ascii_only) for a in scheme)
    assert parse_scheme(f"[{body}]" if brackets else body) == scheme
    assert parse_scheme(scheme_to_yaml(scheme)) == scheme


# -- legality: one scheme per rule, breaking only that rule ------------------------------------------------
@dataclass(frozen=True)
class Broken:
    workload: Workload
    text: str
    rule: str
    position: int
    atom: str  # the atom's text as the message prints it
    dim: str | None
    twin: str  # a minimally different legal scheme: the rule under test is the only thing wrong
    mentions: tuple[str, ...] = ()


CASES = {
    "positive-size-T": Broken(
        mm(), "[R_i, R_j, T_{0,k}]", "positive-size", 2, "T_{0,k}", "k", "[R_i, R_j, T_{8,k}]"
    ),
    "positive-size-U": Broken(
        mm(), "[R_i, R_k, U_{-2,j}, V_j]", "positive-size", 2, "U_{-2,j}", "j", "[R_i, R_k, U_{2,j}, V_j]"
    ),
    "positive-size-lambda": Broken(
        mm(),
        "[λ_seq_i.[(0,6),(2,6)], R_j, R_k, Uλ_i]",
        "positive-size",
        0,
        "λ_seq_i.[(0,6),(2,6)]",
        "i",
        "[λ_seq_i.[(1,6),(1,6)], R_j, R_k, Uλ_i]",
    ),
    "unknown-dimension": Broken(
        mm(), "[R_i, R_j, R_k, T_{1,x}]", "unknown-dimension", 3, "T_{1,x}", "x", "[R_i, R_j, R_k, T_{1,k}]"
    ),
    "single-V": Broken(mm(j=8), "[R_i, R_k, V_j, V_j]", "single-V", 3, "V_j", "j", "[R_i, R_k, V_j]"),
    "V-innermost": Broken(
        mm(j=8), "[R_i, R_k, V_j, U_{2,i}]", "V-innermost", 2, "V_j", "j", "[R_i, R_k, U_{2,i}, V_j]"
    ),
    "V-stride1-parallel": Broken(
        mm(i=8, j=8), "[R_j, R_k, V_i]", "V-stride1", 2, "V_i", "i", "[R_i, R_k, V_j]", ("C", "A")
    ),
    "V-stride1-matmul-k": Broken(
        mm(i=8, j=8), "[R_i, R_j, V_k]", "V-stride1", 2, "V_k", "k", "[R_i, R_k, V_j]", ("B",)
    ),
    "V-stride1-conv-c": Broken(
        conv(),
        "[R_h, R_w, R_k, R_r, R_s, V_c]",
        "V-stride1",
        5,
        "V_c",
        "c",
        "[R_h, R_w, R_c, R_r, R_s, V_k]",
        ("K",),
    ),
    "V-stride1-conv-w": Broken(
        conv(w=8),
        "[R_h, R_k, R_r, R_s, R_c, V_w]",
        "V-stride1",
        5,
        "V_w",
        "w",
        "[R_h, R_w, R_r, R_s, R_c, V_k]",
        ("O", "I"),
    ),
    "V-reduction": Broken(
        Workload.make("ct", "contraction", {"i": 3, "j": 4, "k": 8}, spec="ik,jk->ij"),
        "[R_i, R_j, V_k]",
        "V-reduction",
        2,
        "V_k",
        "k",
        "[R_i, R_j, U_{8,k}]",
    ),
    "unroll-innermost": Broken(
        mm(), "[R_i, U_{2,j}, R_k, V_j]", "unroll-innermost", 1, "U_{2,j}", "j", "[R_i, R_k, U_{2,j}, V_j]"
    ),
    "R-once": Broken(mm(), "[R_i, R_i, R_j, R_k]", "R-once", 1, "R_i", "i", "[R_i, T_{1,i}, R_j, R_k]"),
    "R-outermost": Broken(
        mm(), "[T_{1,i}, R_i, R_j, R_k]", "R-outermost", 1, "R_i", "i", "[R_i, T_{1,i}, R_j, R_k]"
    ),
    "texct-followed-by-T": Broken(
        mm(),
        "[Texct_{12,i}, R_j, T_{4,i}, R_k]",
        "texct-chain",
        0,
        "Texct_{12,i}",
        "i",
        "[Texct_{12,i}, R_j, Tvar_{4,i}, R_k]",
        ("Tvar",),
    ),
    "texct-last": Broken(
        mm(),
        "[Texct_{12,i}, R_j, R_k]",
        "texct-chain",
        0,
        "Texct_{12,i}",
        "i",
        "[Texct_{12,i}, R_j, Tvar_{12,i}, R_k]",
    ),
    "texctg-last": Broken(
        mm(),
        "[Texct_{12,i}, Texctg_{6,i}, R_j, R_k]",
        "texct-chain",
        1,
        "Texctg_{6,i}",
        "i",
        "[Texct_{12,i}, Texctg_{6,i}, Tvar_{3,i}, R_j, R_k]",
    ),
    "tvar-without-texct": Broken(
        mm(),
        "[R_i, Tvar_{4,i}, R_j, R_k]",
        "texct-chain",
        1,
        "Tvar_{4,i}",
        "i",
        "[Texct_{12,i}, Tvar_{4,i}, R_j, R_k]",
    ),
    "lambda-seq-without-Ul": Broken(
        mm(),
        "[λ_seq_i.[(1,6),(2,3)], R_j, R_k]",
        "lambda-pair",
        0,
        "λ_seq_i.[(1,6),(2,3)]",
        "i",
        "[λ_seq_i.[(1,6),(2,3)], R_j, R_k, Uλ_i]",
        ("Uλ_i",),
    ),
    "lambda-seq-T-between": Broken(
        mm(),
        "[λ_seq_i.[(1,6),(2,3)], R_j, T_{1,i}, R_k, Uλ_i]",
        "lambda-pair",
        0,
        "λ_seq_i.[(1,6),(2,3)]",
        "i",
        "[λ_seq_i.[(1,6),(2,3)], R_j, T_{1,j}, R_k, Uλ_i]",
    ),
    "Ul-without-lambda-seq": Broken(
        mm(),
        "[R_i, R_j, R_k, Uλ_i]",
        "lambda-pair",
        3,
        "Uλ_i",
        "i",
        "[λ_seq_i.[(3,2),(2,3)], R_j, R_k, Uλ_i]",
        ("λ_seq_i",),
    ),
    "lambda-seq-one-pair": Broken(
        mm(),
        "[λ_seq_i.[(4,3)], R_j, R_k, Uλ_i]",
        "lambda-seq",
        0,
        "λ_seq_i.[(4,3)]",
        "i",
        "[λ_seq_i.[(2,3),(2,3)], R_j, R_k, Uλ_i]",
    ),
    # the thesis's own example (§3.5): the suffix [T_{2,i}, U_{3,i}] makes every tile above a multiple of 6
    "granularity-thesis": Broken(
        mm(i=34, j=1, k=1),
        "[Texct_{34,i}, Tvar_{13,i}, T_{2,i}, U_{3,i}]",
        "granularity",
        0,
        "Texct_{34,i}",
        "i",
        "[Texct_{34,i}, Tvar_{13,i}, T_{1,i}, U_{1,i}]",
        ("6",),
    ),
    "granularity-tvar": Broken(
        mm(i=36, j=1, k=1),
        "[Texct_{36,i}, Tvar_{13,i}, T_{2,i}, U_{3,i}]",
        "granularity",
        1,
        "Tvar_{13,i}",
        "i",
        "[Texct_{36,i}, Tvar_{12,i}, T_{2,i}, U_{3,i}]",
        ("13", "6"),
    ),
    "granularity-size": Broken(
        mm(i=34, j=1, k=1),
        "[R_i, Texct_{12,i}, Tvar_{6,i}, T_{2,i}, U_{3,i}]",
        "granularity",
        1,
        "Texct_{12,i}",
        "i",
        "[R_i, Texct_{12,i}, Tvar_{6,i}, T_{2,i}, U_{1,i}]",
        ("34",),
    ),
    "divisibility-top": Broken(
        mm(), "[R_i, R_j, T_{5,k}]", "divisibility", 2, "T_{5,k}", "k", "[R_i, R_j, T_{8,k}]", ("5", "8")
    ),
    "divisibility-under-R": Broken(
        mm(), "[R_i, T_{5,i}, R_j, R_k]", "divisibility", 0, "R_i", "i", "[R_i, T_{4,i}, R_j, R_k]", ("12",)
    ),
    "divisibility-V": Broken(
        mm(j=12), "[R_i, R_k, V_j]", "divisibility", 2, "V_j", "j", "[R_i, R_k, U_{12,j}]"
    ),
    "coverage-texct": Broken(
        mm(),
        "[Texct_{8,i}, Tvar_{4,i}, R_j, R_k]",
        "coverage",
        0,
        "Texct_{8,i}",
        "i",
        "[R_i, Texct_{8,i}, Tvar_{4,i}, R_j, R_k]",
    ),
    "scalp-output": Broken(
        mm(),
        "[R_i, R_j, R_k, ScalP[i]]",
        "scalp-output",
        3,
        "ScalP[i]",
        "i",
        "[R_i, R_j, R_k, ScalP[k]]",
        ("'i'",),
    ),
    "scalp-scope": Broken(
        mm(),
        "[R_i, ScalP[k], R_j, R_k]",
        "scalp-scope",
        1,
        "ScalP[k]",
        None,
        "[R_i, R_j, ScalP[k], R_k]",
        ("R_j", " j"),
    ),
    "scalp-once": Broken(
        mm(),
        "[R_i, R_j, ScalP[k], ScalP[k], R_k]",
        "scalp-once",
        3,
        "ScalP[k]",
        None,
        "[R_i, R_j, ScalP[k], R_k]",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_rule_is_reported_precisely(name: str) -> None:
    case = CASES[name]
    analyze_for(case.twin, case.workload, AVX2)  # the twin is legal
    with pytest.raises(SchemeError) as ei:
        analyze_for(case.text, case.workload, AVX2)
    e = ei.value
    msg = str(e)
    assert (e.rule, e.position, e.dim) == (case.rule, case.position, case.dim), msg
    assert e.atom is not None and e.atom.text() == case.atom
    assert e.atom == parse_atom(case.atom)
    assert f"atom {case.atom} at position {case.position}" in msg
    if case.dim is not None:
        assert f"(dimension {case.dim})" in msg
    assert f"[rule: {case.rule}]" in msg
    for word in case.mentions:
        assert word in msg


def test_partial_tiles_inside_other_loops() -> None:
    """Texct under R (border tile) with another dimension's loop between Texct and Tvar."""
    an = analyze_for("[R_i, Texct_{8,i}, R_j, Tvar_{4,i}, T_{4,i}, R_k]", mm(i=12), AVX2)
    plan = walk_dim(an, "i", {})
    assert plan[0] == LoopStep(8, True)  # 12 = 8 + 4: the border Texct tile has a variable extent
    assert plan[1] == LoopStep(4, False)  # which is always a multiple of 4
    with pytest.raises(SchemeError) as ei:
        analyze_for("[R_i, Texct_{8,i}, R_j, Tvar_{4,i}, T_{2,i}, R_k, U_{3,i}]", mm(i=12), AVX2)
    assert (ei.value.rule, ei.value.position) == ("granularity", 1)


def test_uncovered_dimension_is_a_coverage_error() -> None:
    with pytest.raises(SchemeError) as ei:
        analyze_for("[R_i, R_j]", mm(k=4), AVX2)
    assert ei.value.rule == "coverage"
    assert "dimension k (size 4)" in str(ei.value) and "R_k" in str(ei.value)
    # size-1 dimensions need no atom
    analyze_for("[R_i, R_j]", mm(k=1), AVX2)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("[R_i, R_j, X_{2,k}]", "X_{2,k}"),
        ("[R_i, R_j, T_{2 k}]", "T_{2 k}"),
        ("[R_i, R_j, T_{2,k]", "unbalanced"),
        ("[R_i, R_j), T_{2,k}]", "unbalanced"),
        ("[R_i, λ_seq_i.[(1,2),x], Uλ_i]", "λ_seq"),
        ("[R_i, R_j, T_{+2,k}]", "T_{+2,k}"),
    ],
)
def test_syntax_errors(text: str, shown: str) -> None:
    with pytest.raises(SchemeError) as ei:
        parse_scheme(text)
    assert ei.value.rule == "syntax"
    assert shown in str(ei.value) and "[rule: syntax]" in str(ei.value)
    with pytest.raises(SchemeError):
        analyze_for(text, mm(), AVX2)


@pytest.mark.parametrize(
    ("text", "workload", "position", "dim"),
    [
        ("[R_i, R_j, X_{2,k}]", mm(), 2, None),
        ("[R_i, R_j]", mm(k=4), None, "k"),
        ("[R_i, R_j, R_k, ScalP[x]]", mm(), 3, "x"),
        ("[R_i, R_j, R_k, ScalP[i]]", mm(), 3, "i"),
    ],
    ids=["syntax-position", "uncovered-dim", "scalp-unknown-dim", "scalp-output-dim"],
)
def test_error_locates_position_and_dimension(text: str, workload: Workload, position: int, dim: str) -> None:
    with pytest.raises(SchemeError) as ei:
        analyze_for(text, workload, AVX2)
    if position is not None:
        assert ei.value.position == position
    if dim is not None:
        assert ei.value.dim == dim


@pytest.mark.parametrize(
    ("atoms", "rule"),
    [
        ((Atom("R", "i"), Atom("R", "j"), Atom("R", "k"), Atom("T", "k", 0)), "positive-size"),
        (
            (Atom("lambda_seq", "i", seq=((4, 3),)), Atom("R", "j"), Atom("R", "k"), Atom("Ul", "i")),
            "lambda-seq",
        ),
    ],
    ids=["zero-size", "one-pair-lambda"],
)
def test_analyze_checks_preparsed_schemes(atoms: tuple[Atom, ...], rule: str) -> None:
    w = mm()
    op = w.op
    stride1 = {d: [(t.tensor, t.stride1_dim()) for t in op.tensors if d in t.dims()] for d in op.dims}
    with pytest.raises(SchemeError) as ei:
        analyze(atoms, op.dims, w.size, 8, stride1, op.output.dims())
    assert ei.value.rule == rule


# -- legal thesis examples ------------------------------------------------------------------------------
@pytest.mark.parametrize("target", [AVX2, AVX512], ids=lambda t: t.name)
def test_fig_3_7_lambda_combination(target: object) -> None:
    """128 = 12x6 + 8x7 on i; j = 128 is a multiple of 2 vectors for 8 and 16 lanes."""
    w = mm(i=128, j=128, k=64)
    an = analyze_for("[R_j, λ_seq_i.[(12,6),(8,7)], T_{64,k}, Uλ_i, U_{2,j}, V_j]", w, target)  # type: ignore[arg-type]
    assert an.vector_dim == "j" and an.unroll_start == 3
    assert an.footprint(1, {"i": 6}) == an.footprint(1, {"i": 7}) == 128
    assert an.step(0, {}) == 2 * target.lanes  # type: ignore[attr-defined]
    assert an.footprint(3, {"i": 7}) == 7


def test_two_lambdas_and_thesis_arithmetic() -> None:
    # 43 = 2x11 + 3x7 (thesis §3.4.3)
    analyze_for("[λ_seq_i.[(2,11);(3,7)]; T_{32,k}; Uλ_i]", mm(i=43, j=1, k=32), AVX2)
    # two lambdas: i = 43 = 7x4 + 3x5 ; the thesis's j list covers 14x8 + 12x6 = 184 (it says j = 180)
    analyze_for(
        "[λ_seq_i.[(7,4),(3,5)], λ_seq_j.[(14,8),(12,6)], R_k, Uλ_i, Uλ_j]", mm(i=43, j=184, k=2), AVX2
    )
    with pytest.raises(SchemeError) as ei:
        analyze_for(
            "[λ_seq_i.[(7,4),(3,5)], λ_seq_j.[(14,8),(12,6)], R_k, Uλ_i, Uλ_j]", mm(i=43, j=180, k=2), AVX2
        )
    assert (ei.value.rule, ei.value.dim) == ("divisibility", "j")


def test_fig_3_15_texct_tvar() -> None:
    an = analyze_for("[Texct_{120,i}, T_{64,j}, Tvar_{32,i}, T_{32,k}]", mm(i=120, j=64, k=32), AVX2)
    plan = walk_dim(an, "i", {})
    assert plan[0] == LoopStep(32, True)  # 120 is not a multiple of 32: Tvar gets MIN(32, ...)
    assert plan[2] == LoopStep(1, False)


def test_fig_3_16_texctg() -> None:
    an = analyze_for(
        "[Texct_{260,i}, T_{64,j}, Texctg_{120,i}, Tvar_{32,i}, T_{32,k}]", mm(i=260, j=64, k=32), AVX2
    )
    plan = walk_dim(an, "i", {})
    assert plan[0] == LoopStep(120, True)
    assert plan[2] == LoopStep(32, True)
    assert plan[3] == LoopStep(1, False)


def test_granularity_legal_thesis_example() -> None:
    """[Texct_{48,i}, Tvar_{18,i}, T_{2,i}, U_{3,i}] is legal although 48 is not a multiple of 18."""
    an = analyze_for("[Texct_{48,i}, Tvar_{18,i}, T_{2,i}, U_{3,i}]", mm(i=48, j=1, k=1), AVX2)
    assert walk_dim(an, "i", {})[0] == LoopStep(18, True)
    assert walk_dim(an, "i", {})[1] == LoopStep(6, False)
    analyze_for("[R_i, Texct_{48,i}, R_j, Tvar_{18,i}, T_{2,i}, R_k, U_{3,i}]", mm(i=96, j=5, k=3), AVX2)


def test_non_divisible_outer_level_on_conv_w33() -> None:
    """§6.5: [R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}] on w = 33 (33 = 3x9 + 6)."""
    w = conv(h=1, w=33, k=1, r=1, s=1, c=1)
    an = analyze_for("[R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}]", w, AVX2)
    plan = walk_dim(an, "w", {})
    assert plan == {0: LoopStep(9, True), 1: LoopStep(6, True), 2: LoopStep(3, False)}
    w2 = conv(stride=2, h=2, w=33, k=16, r=3, s=3, c=4)
    analyze_for(
        "[R_h, R_r, R_s, R_c, R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}, V_k]", w2, AVX512
    )  # k = 16 lanes
    for target in (AVX2, AVX512):
        analyze_for("[R_h, R_k, R_r, R_s, R_c, R_w, Texct_{9,w}, Tvar_{6,w}, U_{3,w}, V_k]", w2, target)


def test_scalp_fig_3_6_and_microkernel_family() -> None:
    an = analyze_for("[R_k, R_j, R_i, ScalP[k], T_{32,k}, U_{2,i}]", mm(i=4, j=3, k=64), AVX2)
    assert an.scalp_position == 3 and an.unroll_start == 5 and an.vector_dim is None
    an = analyze_for(
        "[R_h, R_c, R_w, U_{3,s}, U_{3,r}, U_{2,c}, U_{3,w}, U_{2,h}, U_{2,k}, V_k]",
        conv(h=4, w=6, k=16, c=8),
        AVX2,
    )
    assert an.unroll_start == 3 and an.vector_dim == "k"


def test_vector_footprint_follows_lanes() -> None:
    w = mm(i=2, j=16, k=2)
    analyze_for("[R_i, R_k, V_j]", w, AVX512)
    with pytest.raises(SchemeError) as ei:
        analyze_for("[R_i, R_k, V_j]", w, AVX2)
    assert ei.value.rule == "divisibility"
    analyze_for("[R_i, R_k, R_j, V_j]", w, AVX2)
