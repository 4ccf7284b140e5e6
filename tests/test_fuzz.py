"""Scheme fuzzing (issue "Reliability", item 1): every random scheme is rejected precisely or runs right.

The default run has a Hypothesis property test (40 derandomized examples, the whole pipeline for the
legal ones), a message-contract test on a seeded batch of rejections (no compilation), checks of the
generators and of :func:`harness.verify.fuzz.fuzz` itself, a regression test per bug the fuzzer found that is
fixed, and a strict-xfail minimal reproducer per open one. ``-m slow`` runs the 10,000-scheme profile.

A failure that is an instance of one of those bugs (:data:`KNOWN_BUGS`, matched by :func:`known_bug`) is
tolerated by the property tests so they keep guarding against *new* failures;
``python -m harness.verify.fuzz`` itself counts every failure. When a bug is fixed its xfail turns into an
XPASS (strict): delete the xfail marker and its entry in :data:`KNOWN_BUGS`.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.machine import vector_lanes
from harness.verify.fuzz import (
    FAILURES,
    OK,
    PARTIAL,
    REJECTED,
    RULES,
    FuzzCase,
    FuzzReport,
    RandomDraw,
    Verdict,
    check_cases,
    classify,
    describe,
    fuzz,
    gen_options,
    gen_workload,
    main,
    message_problems,
    near_legal_scheme,
    random_case,
    schemes,
    workloads,
)
from kernels.candidate import Candidate, Workload, render
from kernels.scheme import Atom, SchemeError, format_scheme, parse_scheme
from kernels.targets import get_target
from tests.conftest import HOST_TARGET

LANES = get_target(HOST_TARGET).lanes

# bug -> the strict-xfail test reproducing it; none is open (the three found so far are fixed, below)
KNOWN_BUGS: dict[str, str] = {}


def known_bug(case: FuzzCase, outcome: str, reason: str) -> str | None:
    """Which open bug a failure of ``case`` is an instance of (None: a new failure)."""
    return None


def unknown_failures(report: FuzzReport) -> list[tuple[str, str, str]]:
    """The failures of a report (all kept: ``keep >= n``) that are not instances of a known bug."""
    out = []
    for outcome, examples in report.examples.items():
        for workload, text, reason in examples:
            index = int(re.match(r"#(\d+) ", text).group(1))  # type: ignore[union-attr]
            if known_bug(random_case(report.seed, index, report.target), outcome, reason) is None:
                out.append((workload, text, f"{outcome}: {reason}"))
    return out


def _case(
    workload: Workload, atoms: tuple[Atom, ...], hoist: bool = True, fma: bool = True, partial: str = "none"
) -> FuzzCase:
    opts = (("fma", fma), ("hoist", hoist), ("partial", partial), ("target", HOST_TARGET))
    return FuzzCase(workload, atoms, opts)


def _verdict(op: str, sizes: dict[str, int], text: str, cache: Path, **options: object) -> Verdict:
    """The property's verdict on one hand-written case (compiled and run when legal)."""
    w = Workload.make("repro", op, sizes)
    opts = tuple(sorted({"target": HOST_TARGET, **options}.items()))
    (verdict,) = check_cases([FuzzCase(w, parse_scheme(text), opts)], cache, jobs=1)
    return verdict


# -- the property, through Hypothesis --------------------------------------------------------------------
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same 40 examples on every run: CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    example=st.sampled_from(PARTIAL).flatmap(
        lambda partial: workloads(LANES).flatmap(
            lambda w: st.tuples(st.just(w), schemes(w, LANES, partial), st.just(partial))
        )
    ),
    hoist=st.booleans(),
    fma=st.booleans(),
)
def test_scheme_is_rejected_precisely_or_compiles_and_passes_full_check(
    example: tuple[Workload, tuple[Atom, ...], str], hoist: bool, fma: bool, shared_cache: Path
) -> None:
    workload, atoms, partial = example
    case = _case(workload, atoms, hoist, fma, partial)
    (verdict,) = check_cases([case], shared_cache, jobs=1)
    if verdict.outcome == REJECTED:
        assert verdict.rule in RULES
    elif verdict.outcome not in (OK, "unsupported"):
        bug = known_bug(case, verdict.outcome, verdict.reason)
        assert bug is not None, (describe(workload), case.label(), verdict.outcome, verdict.reason)


# -- the message contract on a seeded batch (no compilation) --------------------------------------------
def test_rejection_messages_name_atom_position_dimension_and_rule() -> None:
    rules: Counter[str] = Counter()
    legal = 0
    for index in range(400):
        case = random_case(seed=11, index=index, target=HOST_TARGET)
        # positions count the atoms as written: a Tfused_[...] is one atom (one Atom per pair inside)
        written = [a for a in case.atoms if not (a.kind == "Tfused" and a.part > 0)]
        try:
            render(case.candidate, case.workload)
        except SchemeError as exc:
            msg = str(exc)
            where = (describe(case.workload), case.label(), msg)
            problems = []
            if exc.rule not in RULES or f"[rule: {exc.rule}]" not in msg:
                problems.append("rule")
            if exc.atom is None and exc.rule == "coverage":  # a dimension without any atom
                problems += [] if f"(dimension {exc.dim})" in msg else ["dimension"]
            elif exc.atom is None:  # an atom the parser refuses: its position and its text
                if f"at position {exc.position}" not in msg:
                    problems.append("position")
                elif written[exc.position].text() not in msg:  # type: ignore[index]
                    problems.append("atom")
            else:
                if f"atom {exc.atom.text()} at position {exc.position}" not in msg:
                    problems.append("atom/position")
                elif written[exc.position].text() != exc.atom.text():  # type: ignore[index]
                    problems.append("the position is not the atom's")
                if exc.atom.dim is not None and f"(dimension {exc.atom.dim})" not in msg:
                    problems.append("dimension")
            assert (problems == []) == (message_problems(exc, case.atoms) == []), where  # same oracle
            if problems:
                assert known_bug(case, "bad_message", msg) is not None, (problems, where)
            rules[exc.rule] += 1
        except Exception as exc:  # noqa: BLE001 - only SchemeError may reject a scheme
            reason = f"render: {type(exc).__name__}: {exc}"
            assert known_bug(case, "unexpected", reason) is not None, (case.label(), reason)
        else:
            legal += 1
    assert 0.3 <= legal / 400 <= 0.6, (legal, rules)  # a mix of legal and rule-breaking schemes
    assert len(rules) >= 14, rules  # most rules are exercised


def test_message_oracle_catches_imprecise_messages() -> None:
    atoms = parse_scheme("[R_i, T_{5,k}, R_j]")
    assert message_problems(SchemeError("divisibility", "bad", atoms[1], 1), atoms) == []
    assert message_problems(SchemeError("divisibility", "bad", atoms[1], 0), atoms)  # wrong position
    assert message_problems(SchemeError("divisibility", "bad", atoms[1]), atoms)  # no position
    assert message_problems(SchemeError("divisibility", "bad"), atoms)  # no atom
    assert message_problems(SchemeError("made-up", "bad", atoms[1], 1), atoms)  # unknown rule
    assert message_problems(SchemeError("coverage", "no atom on k", dim="k"), atoms) == []
    assert message_problems(SchemeError("syntax", "cannot read 'T_{5,k}'", None, 1), atoms) == []
    assert message_problems(SchemeError("syntax", "cannot read it", None, 1), atoms)  # atom not named


# -- the generators ------------------------------------------------------------------------------------
def test_near_legal_schemes_are_legal_before_mutation() -> None:
    """The unmutated generator is legal by construction (for every partial mode): a rejection here
    means an over-strict rule or a generator bug; the one deliberate exception is V on a stride-1
    reduction dimension."""
    rejected = []
    for index in range(600):
        draw = RandomDraw(random.Random(f"near:{index}"))
        w = gen_workload(draw, LANES)
        options = gen_options(draw, HOST_TARGET)
        atoms = near_legal_scheme(draw, w, LANES, str(dict(options).get("partial", "none")))
        try:
            render(Candidate("scheme", format_scheme(atoms), options), w)
        except SchemeError as exc:
            case = FuzzCase(w, atoms, options)
            if exc.rule != "V-reduction" and known_bug(case, REJECTED, str(exc)) is None:
                rejected.append((describe(w), case.label(), str(exc)))
    assert not rejected, rejected[:5]


def test_seeded_cases_are_reproducible_and_varied() -> None:
    assert random_case(3, 17, HOST_TARGET) == random_case(3, 17, HOST_TARGET)
    cases = [random_case(3, i, HOST_TARGET) for i in range(300)]
    assert len({c.text for c in cases}) > 250
    assert {c.workload.op.name for c in cases} == {"matmul", "conv2d", "contraction"}
    assert {dict(c.workload.op.params).get("stride") for c in cases} >= {1, 2, 3}
    kinds = {a.kind for c in cases for a in c.atoms}
    assert kinds >= {"R", "T", "U", "V", "Ul", "lambda_seq", "Texct", "Tvar", "Texctg", "ScalP"}
    assert kinds >= {"Pack", "PackT", "Tpar", "Tfused", "ExternalCall"}
    assert {dict(c.options).get("partial", "none") for c in cases} == set(PARTIAL)
    for c in cases:
        assert all(1 <= n <= 32 for _, n in c.workload.sizes)
        if c.workload.op.name == "contraction":
            left, right = c.workload.op.inputs
            assert 2 <= len(left.axes) <= 4 and 2 <= len(right.axes) <= 4
    verdicts = [(c, classify(c)) for c in cases]
    new = [(c.label(), v.outcome) for c, v in verdicts if v.outcome not in ("legal", REJECTED)]
    assert all(
        known_bug(c, v.outcome, v.reason) for c, v in verdicts if v.outcome not in ("legal", REJECTED)
    ), new


def test_fuzz_end_to_end_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    messages: list[str] = []
    report = fuzz(
        12, seed=5, target=HOST_TARGET, cache_dir=tmp_path, jobs=2, batch=6, progress=messages.append, keep=12
    )
    assert (
        report.done == 12 and report.legal + report.outcomes[REJECTED] + report.outcomes["bad_message"] == 12
    )
    assert sum(report.rules.values()) == report.outcomes[REJECTED]
    assert report.failures == sum(len(v) for v in report.examples.values())
    assert unknown_failures(report) == [], report.table()
    assert len(messages) == 2 and "legal=" in messages[-1] and "ETA=" in messages[-1]
    table = report.table()
    assert "legal fraction" in table and all(k in table for k in FAILURES)
    assert main(["--n", "2", "--seed", "5", "--cache-dir", str(tmp_path)]) in (0, 1)
    assert "scheme fuzz: 2 schemes" in capsys.readouterr().out


def test_parallel_and_external_schemes_through_the_property(shared_cache: Path) -> None:
    """The generators' Tpar/Tfused prefixes and ExternalCall schemes: legal before mutation, and run
    right (parallel ones on two threads where there are two CPUs) through the whole property."""
    from harness.verify.fuzz import external_scheme

    picked: list[FuzzCase] = []
    kinds: set[str] = set()
    for index in range(400):
        draw = RandomDraw(random.Random(f"par-ext:{index}"))
        w = gen_workload(draw, LANES)
        if w.op.name == "matmul" and draw.coin(0.5):
            atoms = external_scheme(draw, w, LANES)
        else:
            atoms = near_legal_scheme(draw, w, LANES)
        new = {a.kind for a in atoms} & {"Tpar", "Tfused", "ExternalCall"}
        if not new or (new <= kinds and len(picked) >= 4) or atoms[-1].name == "nosuchkernel":
            continue
        kinds |= new
        picked.append(_case(w, atoms))
        if kinds == {"Tpar", "Tfused", "ExternalCall"} and len(picked) >= 5:
            break
    assert kinds == {"Tpar", "Tfused", "ExternalCall"}, kinds
    verdicts = check_cases(picked, shared_cache, jobs=2)
    pairs = zip(picked, verdicts, strict=True)
    bad = [(describe(c.workload), c.label(), v.outcome, v.reason[:300]) for c, v in pairs]
    assert all(v.outcome in (OK, "unsupported") for v in verdicts), bad


def test_tfused_positions_in_messages_count_written_atoms() -> None:
    atoms = parse_scheme("[Tfused_[(i,2),(j,2)], R_k, Tpar_{2,i}]")
    w = Workload.make("m", "matmul", {"i": 4, "j": 8, "k": 6})
    with pytest.raises(SchemeError) as ei:
        render(Candidate("scheme", format_scheme(atoms), (("target", HOST_TARGET),)), w)
    assert "atom Tpar_{2,i} at position 2" in str(ei.value)  # not 3: the Tfused is one written atom
    assert message_problems(ei.value, atoms) == []
    # an error on a Tfused's second pair points at the Tfused (fuzz seed 1, case 116)
    with pytest.raises(SchemeError) as ei:
        parse_scheme("[R_i, Tfused_[(j,2),(i,0)], R_k]")
    assert "atom Tfused_[(j,2),(i,0)] at position 1 (dimension i)" in str(ei.value)
    assert ei.value.rule == "positive-size"
    # a V on a reduction dimension after a Tfused: the V's position as written (fuzz seed 0, case 2347)
    verdict = classify(random_case(0, 2347, "avx512"))
    assert (verdict.outcome, verdict.rule) == (REJECTED, "V-reduction"), verdict


# -- bugs the fuzzer found --------------------------------------------------------------------------------
# Fixed in 9e43b97 (these reproducers were strict xfails until then; now they guard against regressions).
def test_pack_below_lambda_seq_addresses_its_buffer_from_the_tile_origin(shared_cache: Path) -> None:
    """Was: View.address wrote `{base} - {origin}` unparenthesised: buf + (i_0 + 1 - i_0 + 1)."""
    text = "[R_i, λ_seq_i.[(1,1),(1,1)], Pack_A, Uλ_i, V_j]"
    # j is one vector of the host's ISA (8 or 16 lanes): V_j with no R_j must cover it exactly
    v = _verdict("matmul", {"i": 4, "j": vector_lanes(HOST_TARGET), "k": 1}, text, shared_cache)
    assert v.outcome == OK, v.reason


def test_masked_microkernel_does_not_share_operands_loaded_with_other_masks(shared_cache: Path) -> None:
    """Was: operands shared by (tensor, offset); B[4][0] and B[0][8] alias but need other lane masks."""
    text = "[R_j, U_{5,k}, U_{2,j}, V_j]"
    v = _verdict("matmul", {"i": 1, "j": 2, "k": 5}, text, shared_cache, partial="masked")
    assert v.outcome == OK, v.reason


def test_padded_illegal_lambda_is_a_scheme_error() -> None:
    """Was: padded_workload computed footprints first and raised KeyError on a Uλ without λ_seq."""
    w = Workload.make("repro", "matmul", {"i": 1, "j": 2, "k": 1})
    with pytest.raises(SchemeError) as ei:
        render(Candidate("scheme", "[R_j, Uλ_j]", (("partial", "padded"), ("target", HOST_TARGET))), w)
    assert ei.value.rule == "lambda-pair"


def test_empty_scalp_message_names_the_atom() -> None:
    """Was: `ScalP needs dimensions` with atom=None named only the position."""
    w = Workload.make("repro", "matmul", {"i": 2, "j": 2, "k": 2})
    atoms = (*parse_scheme("[R_i, R_j, R_k]"), Atom("ScalP", dims=()))
    with pytest.raises(SchemeError) as ei:
        render(Candidate("scheme", format_scheme(atoms), (("target", HOST_TARGET),)), w)
    assert "ScalP[]" in str(ei.value) and message_problems(ei.value, atoms) == []


# Fixed after the fuzzer found them: their minimal reproducers now guard against regressions.
def test_bug_pack_below_packt_changes_the_layout_the_analysis_assumes(shared_cache: Path) -> None:
    text = "[PackT_C[j,i], PackT_A[k,i], Pack_A, R_k, V_i]"
    v = _verdict("matmul", {"i": 8, "j": 1, "k": 2}, text, shared_cache)
    assert v.outcome in (OK, REJECTED), v.reason


def test_bug_padded_rejects_a_tile_that_padding_makes_exact(shared_cache: Path) -> None:
    v = _verdict("matmul", {"i": 4, "j": 1, "k": 1}, "[R_i, T_{3,i}]", shared_cache, partial="padded")
    assert v.outcome == OK, (v.outcome, v.reason)


def test_bug_masked_microkernel_merges_accumulators_of_different_masks(shared_cache: Path) -> None:
    text = "[R_j, U_{3,i}, U_{2,j}, V_j]"
    v = _verdict("matmul", {"i": 3, "j": 4, "k": 1}, text, shared_cache, partial="masked")
    assert v.outcome == OK, v.reason


# -- the long profile --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_fuzz_10000_schemes(tmp_path: Path) -> None:
    """Zero failures over 10,000 seeded schemes, apart from instances of the known bugs above."""
    report = fuzz(10_000, seed=0, cache_dir=tmp_path, keep=10_000)
    assert unknown_failures(report) == [], report.table()
    assert 0.3 <= report.legal / report.done <= 0.6, report.table()
