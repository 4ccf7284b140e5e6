"""ExternalCall_{name,α,d} (thesis §3.5): a call to an external microkernel flexible on d (libxsmm's JIT
small-matmul kernels), its registry and legality, and its results through the real pipeline."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest

from harness.check import CheckConfig
from harness.run import TimingConfig
from kernels.baselines import BaselineUnavailable
from kernels.candidate import Workload, render
from kernels.codegen import analyze_for
from kernels.external import EXTERNALS, link_args
from kernels.scheme import SchemeError, format_scheme, parse_scheme
from kernels.targets import get_target
from tests.conftest import FAST_TIMING, HOST_TARGET, run_candidates, scheme

FULL = CheckConfig(full_below=10**9)


def mm(i: int, j: int, k: int) -> Workload:
    return Workload.make("mm", "matmul", {"i": i, "j": j, "k": k})


def _libxsmm_or_skip() -> None:
    try:
        link_args(EXTERNALS["libxsmm"])
    except BaselineUnavailable as exc:
        pytest.skip(str(exc))


def test_external_call_parses_and_prints() -> None:
    s = parse_scheme("[R_i, Texct_{16,i}, U_{8,j}, ExternalCall_{libxsmm,16,i}]")
    a = s[-1]
    assert (a.kind, a.name, a.size, a.dim) == ("ExternalCall", "libxsmm", 16, "i")
    assert format_scheme(s) == "[R_i, Texct_{16,i}, U_{8,j}, ExternalCall_{libxsmm,16,i}]"
    assert parse_scheme(format_scheme(s)) == s
    assert parse_scheme([{"kind": "ExternalCall", "name": "libxsmm", "size": 16, "dim": "i"}])[0] == a


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("[R_i, R_j, R_k, ExternalCall_{nosuchlib,4,i}]", "external-unknown"),
        ("[R_j, R_k, ExternalCall_{libxsmm,4,i}, U_{2,j}]", "external-innermost"),  # anything after it
        ("[R_j, R_k, R_i, ExternalCall_{libxsmm,4,i}, ExternalCall_{libxsmm,4,i}]", "external-once"),
        ("[R_i, R_k, U_{8,j}, ExternalCall_{libxsmm,4,i}, V_j]", "external-innermost"),
        ("[R_i, R_k, R_j, ExternalCall_{libxsmm,4,x}]", "unknown-dimension"),
        ("[R_j, R_k, R_i, U_{2,i}, ExternalCall_{libxsmm,2,i}]", "external-suffix"),
        ("[R_j, ScalP[k], R_k, R_i, ExternalCall_{libxsmm,4,i}]", "external-scalp"),
        ("[R_j, R_k, Texct_{4,i}, R_i]", "texct-chain"),  # Texct needs Tvar, Texctg or ExternalCall below
        ("[R_j, R_k, ExternalCall_{libxsmm,3,i}]", "divisibility"),  # on top of i it must cover i
        ("[R_j, R_k, R_i, ExternalCall_{libxsmm,999,i}]", "external-size"),
    ],
)
def test_external_call_legality_names_the_atom(text: str, rule: str) -> None:
    with pytest.raises(SchemeError) as ei:
        analyze_for(text, mm(8, 8, 6), get_target(HOST_TARGET))
    assert ei.value.rule == rule, str(ei.value)
    if rule.startswith("external"):
        assert "atom ExternalCall_{" in str(ei.value)


def test_external_call_on_an_operator_it_does_not_compute() -> None:
    w = Workload.make("cv", "conv2d", {"h": 2, "w": 2, "k": 8, "c": 2, "r": 1, "s": 1}, stride=1)
    with pytest.raises(SchemeError, match="libxsmm computes matmul") as ei:
        analyze_for("[R_h, R_w, R_c, R_r, R_s, ExternalCall_{libxsmm,8,k}]", w, get_target(HOST_TARGET))
    assert ei.value.rule == "external-operator"


def test_external_call_needs_row_major_views() -> None:
    _libxsmm_or_skip()
    with pytest.raises(SchemeError) as ei:
        render(scheme("[PackT_A[k,i], R_i, R_j, R_k, ExternalCall_{libxsmm,1,k}]"), mm(4, 4, 4))
    assert ei.value.rule == "external-layout"


def test_external_call_code_and_link() -> None:
    _libxsmm_or_skip()
    src = render(scheme("[R_i, Texct_{6,i}, U_{40,j}, U_{20,k}, ExternalCall_{libxsmm,6,i}]"), mm(13, 40, 20))
    assert "libxsmm_smmdispatch(40, e_i_1, 20," in src.code  # column-major: m = j, n = i (flexible), k
    assert any("libxsmm.a" in x for x in src.libs) and any("libxsmmnoblas.a" in x for x in src.libs)
    # no accumulators of our own: the call owns the tile
    assert "acc0" not in src.code and "_mm256_fmadd_ps" not in src.code


def _cases(rng: random.Random) -> list[tuple[str, Workload, dict[str, object]]]:
    i, j, k = rng.randrange(9, 30), rng.randrange(9, 40), rng.randrange(5, 24)
    ua = rng.choice([1, 2, 3])
    return [
        # the thesis's pattern: Texct on the flexible dimension, the remainder through the same call
        (f"[R_i, Texct_{{6,i}}, U_{{{j},j}}, U_{{{k},k}}, ExternalCall_{{libxsmm,6,i}}]", mm(i, j, k), {}),
        # a loop straight above the call hands it the remainder too
        (f"[R_j, R_k, R_i, U_{{{ua},k}}, ExternalCall_{{libxsmm,5,i}}]", mm(i, 8 * ua, 3 * ua), {}),
        # flexible on j, a packed B above, k tiled by a loop (accumulating calls)
        (
            f"[R_i, R_k, Pack_B, R_j, U_{{4,i}}, U_{{{k},k}}, ExternalCall_{{libxsmm,16,j}}]",
            mm(8, j, 2 * k),
            {},
        ),
        # flexible on k under Texct/Texct... the call sums a variable slice of k
        ("[R_i, R_j, R_k, Texct_{7,k}, U_{3,i}, U_{8,j}, ExternalCall_{libxsmm,7,k}]", mm(6, 16, k), {}),
    ]


@pytest.mark.parametrize("seed", [0])
def test_external_call_equals_the_reference_on_non_divisible_shapes(
    seed: int, tmp_path: Path, shared_cache: Path
) -> None:
    _libxsmm_or_skip()
    for n, (text, w, opts) in enumerate(_cases(random.Random(seed))):
        rows = run_candidates(
            [scheme(text, **opts)], w, tmp_path / str(n), shared_cache, check=FULL, seed=seed
        )
        bad = [(r["label"], r["status"], r["reason"][:400]) for r in rows if r["status"] != "ok"]
        assert not bad, bad
        assert rows[0]["check_points"] == math.prod(w.shapes()[0])


def test_external_call_under_parallel_loops(tmp_path: Path, shared_cache: Path) -> None:
    _libxsmm_or_skip()
    threads = min(2, len(os.sched_getaffinity(0)))
    timing = TimingConfig(**{**FAST_TIMING.__dict__, "threads": threads})
    text = "[Tpar_{2,j}, R_i, R_k, U_{8,j}, U_{9,k}, ExternalCall_{libxsmm,6,i}]"
    rows = run_candidates([scheme(text)], mm(17, 16, 27), tmp_path, shared_cache, check=FULL, timing=timing)
    assert rows[0]["status"] == "ok", rows[0]["reason"]
