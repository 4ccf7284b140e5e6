"""kernels.conv_space: the 23 layers, the samplers' legality and distributions, the §5.4.3 footprint table."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from scipy import stats

from kernels import conv_space as cs
from kernels.candidate import Workload
from kernels.microkernels import Cover
from kernels.scheme import parse_scheme

CONF = Path(__file__).resolve().parent.parent / "conf" / "workload"


# -- the layers -------------------------------------------------------------------------------------------
def test_the_23_layers_and_their_errata() -> None:
    layers = cs.load_layers()
    assert len(layers) == 23
    assert Counter(lay.network for lay in layers) == {"yolo9000": 11, "resnet18": 12}
    by = {lay.name: lay for lay in layers}
    assert by["yolo9000_23"].k == 28269 and by["yolo9000_23"].k_used == 28272 and by["yolo9000_23"].erratum
    assert by["resnet18_08"].erratum and by["resnet18_10"].erratum
    assert {lay.name for lay in layers if lay.stride == 2} == {
        "resnet18_01", "resnet18_04", "resnet18_05", "resnet18_07", "resnet18_10", "resnet18_11"
    }  # fmt: skip
    # MACs with H/W read as the output size (the notes' derived totals)
    assert by["yolo9000_12"].macs == 512 * 256 * 34 * 34 * 9
    assert round(by["yolo9000_12"].macs / 1e6) == 1364
    assert sum(lay.macs for lay in layers) == pytest.approx(18.2e9, rel=0.002)


@pytest.mark.parametrize("layer", cs.load_layers(), ids=lambda lay: lay.name)
def test_workload_configs_match_the_table(layer: cs.Layer) -> None:
    assert (CONF / f"{layer.name}.yaml").read_text(encoding="utf-8") == cs.workload_yaml(layer)


# -- the §5.4.3 footprint table ----------------------------------------------------------------------------
# The thesis's example (sizes {k:256, c:512, w:192, h:192, r:3, s:3}, AVX-512 lanes) with the erratum
# T_{16,k} -> T_{8,k}. The thesis joins (w, r) and (h, s) in the input; our operator joins h with r and w
# with s, so the example is translated by exchanging r and s.
EXAMPLE = ("[T_{4,w}, T_{3,s}, T_{4,h}, T_{2,c}, T_{4,w}, T_{8,k}, T_{3,r}, T_{48,h}, T_{256,c}, U_{12,w}, "
           "U_{2,k}, V_k]")  # fmt: skip
EXAMPLE_SIZES = {"h": 192, "w": 192, "k": 256, "r": 3, "s": 3, "c": 512}
TABLE = [  # atom, Input, Output, Params as printed (outer to inner)
    ("T_{4,w}", "19M", "9.4M", "1.2M"),
    ("T_{3,s}", "4.9M", "2.3M", "1.2M"),
    ("T_{4,h}", "4.7M", "2.3M", "393K"),
    ("T_{2,c}", "1.2M", "589K", "393K"),
    ("T_{4,w}", "614K", "590K", "197K"),
    ("T_{8,k}", "153K", "147K", "197K"),
    ("T_{3,r}", "153K", "18K", "24K"),
    ("T_{48,h}", "147K", "18K", "8K"),
    ("T_{256,c}", "3K", "384", "8K"),
    ("U_{12,w}", "12", "384", "32"),
    ("U_{2,k}", "1", "32", "32"),
    ("V_k", "1", "16", "16"),
]


def _printed(text: str) -> float:
    mult = {"K": 1e3, "M": 1e6}
    return float(text[:-1]) * mult[text[-1]] if text[-1] in mult else float(text)


def test_footprint_table_of_5_4_3_row_by_row() -> None:
    per_atom = cs.suffix_sizes(EXAMPLE, EXAMPLE_SIZES, lanes=16)
    atoms = [a.text() for a in parse_scheme(EXAMPLE)]
    assert atoms == [row[0] for row in TABLE]
    for (atom, *printed), sizes in zip(TABLE, per_atom, strict=True):
        fp = cs.conv_footprints(sizes)
        for tensor, value in zip(("I", "O", "K"), printed, strict=True):
            # the table prints 2-3 significant digits, sometimes truncated (4.97M as 4.9M); 1K = 1000 or 1024
            assert fp[tensor] == pytest.approx(_printed(value), rel=0.05), (atom, tensor, fp[tensor], value)


def test_movement_of_5_4_3_shortest_overflowing_suffix() -> None:
    # 4 MB = 1 Mi floats: the suffix from the second T_{4,w} overflows (1 400 832 floats), 96 iterations above
    mi = 2**20
    assert cs.movement(EXAMPLE, EXAMPLE_SIZES, 16, mi) == 1_400_832 * 96
    # a cache holding everything moves the whole footprint once
    total = sum(cs.conv_footprints(EXAMPLE_SIZES).values())
    assert cs.movement(EXAMPLE, EXAMPLE_SIZES, 16, 10 * total) == total
    metric = cs.model_metric(EXAMPLE, EXAMPLE_SIZES, 16, [8192, 131072, mi], [16.0, 8.0, 2.0])
    assert metric > 1_400_832 * 96 / 2.0


# -- samplers ----------------------------------------------------------------------------------------------
SMALL = [
    Workload.make("y12s", "conv2d", {"h": 8, "w": 8, "k": 32, "c": 16, "r": 3, "s": 3}),
    Workload.make("y18s", "conv2d", {"h": 17, "w": 17, "k": 32, "c": 8, "r": 3, "s": 3}),
    Workload.make("r11s", "conv2d", {"h": 14, "w": 14, "k": 64, "c": 16, "r": 1, "s": 1}, stride=2),
]
SPACES = {
    "all": cs.ConvSpace(),
    "single": cs.ConvSpace(combination="single", partial="masked"),
    "lambda": cs.ConvSpace(combination="lambda"),
    "free": cs.ConvSpace(divisibility="free"),
    "fixed": cs.ConvSpace(permutation="fixed"),
    "packed": cs.ConvSpace(packing="any"),
    "parallel": cs.ConvSpace(parallel=2),
    "remainder": cs.ConvSpace(lambda_remainder=True),
}


@pytest.mark.parametrize("space", SPACES, ids=str)
@pytest.mark.parametrize("sampler", sorted(cs.SAMPLERS))
def test_every_sample_is_legal(space: str, sampler: str) -> None:
    rng = random.Random(7)
    for w in SMALL:
        try:
            ctx = cs.context(SPACES[space], w, "avx2", None)
        except cs.ConvSpaceError:
            assert space == "lambda" and w.name == "y12s"  # 8 = 4 + 4 has no two-size cover: single only
            continue
        for _ in range(60):
            text, plan = cs.draw(ctx, sampler, rng, tries=1)  # tries=1: an illegal draw raises
            assert ctx.legal(text) and plan in ctx.plans
            if SPACES[space].combination == "single":
                assert "λ_seq" not in text
            if space == "lambda":
                assert "λ_seq" in text
            atoms = parse_scheme(text)
            if space == "parallel":  # §6.2.1: one Tpar_{2,d} on an output dimension, outermost
                assert atoms[0].kind == "Tpar" and atoms[0].size == 2 and atoms[0].dim in ("h", "w", "k")
                assert sum(a.kind == "Tpar" for a in atoms) == 1
            else:
                assert all(a.kind != "Tpar" for a in atoms)


def test_remainder_covers_pair_a_tile_with_a_smaller_remainder() -> None:
    # the AVX2 stem: w = 544 and, at k = 4 vectors, only the 3-wide tile, which does not divide 544
    assert cs.remainder_covers(544, [3]) == [Cover(((1, 1), (181, 3))), Cover(((2, 2), (180, 3)))]
    got = cs.remainder_covers(34, [3, 4])  # a = 3 is in the set: 34 = 2x3 + 7x4 is a §5.3 pair already
    want = (((1, 1), (11, 3)), ((2, 2), (10, 3)), ((2, 1), (8, 4)), ((1, 2), (8, 4)))
    assert got == [Cover(p) for p in want]
    assert cs.remainder_covers(12, [3, 4, 6]) == []  # every size divides 12: nothing to add
    for D in range(1, 60):
        for cov in cs.remainder_covers(D, [3, 5, 6]):
            (n_a, a), (n_b, b) = cov.pairs
            assert cov.total == D and n_a >= 1 and n_b >= 1 and a < b and a not in (3, 5, 6) and D % b
    # off (the thesis's §5.3): no plan of the 3 x 4-vector tile on 17; on: the tile with its remainders
    y18s = SMALL[1]
    mks = [{"w": 3, "k": 4}, {"w": 4, "k": 2}, {"w": 5, "k": 2}]
    sizes = {**y18s.size, "k": 32}
    off = cs.plans(cs.ConvSpace(), sizes, 8, mks)
    on = cs.plans(cs.ConvSpace(lambda_remainder=True), sizes, 8, mks)
    assert not any(p.size["k"] == 4 for p in off)
    four = {p.cover for p in on if p.size["k"] == 4 and p.lam_dim == "w"}
    assert four == {((2, 1), (5, 3)), ((1, 2), (5, 3))}  # 17 = 2x1 + 5x3 = 1x2 + 5x3
    assert set(off) < set(on)
    with pytest.raises(cs.ConvSpaceError, match="lambda_remainder"):
        cs.ConvSpace.from_config({"lambda_remainder": "yes"})


def test_forced_microkernel_and_bad_knobs() -> None:
    space = cs.ConvSpace.from_config(
        {"microkernels": "forced", "forced": ["U_{17,h}, V_k"], "combination": "single"}
    )
    ctx = cs.context(space, SMALL[1], "avx2", None)
    text, _ = cs.draw(ctx, "random", random.Random(0))
    assert text.endswith("U_{17,h}, U_{1,k}, V_k]")
    with pytest.raises(cs.ConvSpaceError, match="combination"):
        cs.ConvSpace.from_config({"combination": "some"})
    with pytest.raises(cs.ConvSpaceError, match="unknown"):
        cs.ConvSpace.from_config({"nope": 1})
    # 17 is prime: no selected microkernel divides it; the space widens to k-only microkernels (w = 1)
    ctx = cs.context(cs.ConvSpace(combination="single"), SMALL[1], "avx2", None)
    assert ctx.widened and all(p.size["w"] == 1 for p in ctx.plans)
    assert not cs.context(cs.ConvSpace(), SMALL[1], "avx2", None).widened  # λ_seq covers 17 = 3x4 + 1x5
    odd_k = Workload.make("k12", "conv2d", {"h": 4, "w": 4, "k": 12, "c": 4, "r": 1, "s": 1})
    with pytest.raises(cs.ConvSpaceError, match="no microkernel plan"):
        cs.context(cs.ConvSpace(), odd_k, "avx2", None)  # k = 12 is no multiple of the 8 lanes


def test_added_microkernels_join_the_set_and_cover_7_with_partial_tiles() -> None:
    """Issue 32: a register tile across h and w (2 x 3 pixels x 2 vectors) added to the fallback set; on a
    7 x 7 layer it divides neither dimension, so with partial=masked its plan has partial h and w (R
    loops) and every draw that uses it ends with the 2-D tile; a bad text names the key."""
    layer = Workload.make("l7", "conv2d", {"h": 7, "w": 7, "k": 64, "c": 16, "r": 3, "s": 3})
    tile = "U_{3,w}, U_{2,h}, U_{2,k}, V_k"
    space = cs.ConvSpace.from_config({"added": [tile, tile], "partial": "masked"})
    mks = cs.microkernel_set(space, "avx2", None)
    assert mks[: len(cs.FALLBACK["avx2"])] == [dict(m) for m in cs.FALLBACK["avx2"]]
    assert mks[len(cs.FALLBACK["avx2"]) :] == [{"w": 3, "h": 2, "k": 2}]  # once
    ctx = cs.context(space, layer, "avx2", None)
    two_d = [p for p in ctx.plans if p.size.get("h", 1) == 2]
    assert [p.partial_dims for p in two_d] == [("h", "w")]
    texts = [cs.draw(ctx, "random", random.Random(seed))[0] for seed in range(40)]
    assert any(t.endswith("U_{3,w}, U_{2,h}, U_{2,k}, V_k]") and "R_h" in t for t in texts)
    without = cs.context(cs.ConvSpace(partial="masked"), layer, "avx2", None)
    assert not any(p.size.get("h", 1) > 1 for p in without.plans)
    with pytest.raises(cs.ConvSpaceError, match=r"added microkernel 'U_\{3,w\}' must end with V_k"):
        cs.ConvSpace.from_config({"added": ["U_{3,w}"]})
    with pytest.raises(cs.ConvSpaceError, match="space.conv.added microkernel 'U_{3,w, V_k'"):
        cs.ConvSpace.from_config({"added": ["U_{3,w, V_k"]})


def _toy(c: int, k_vectors: int, space: cs.ConvSpace | None = None) -> cs.Context:
    """h = w = r = s = 1: only c and k are tiled above a 1 x 1-vector microkernel."""
    w = Workload.make("toy", "conv2d", {"h": 1, "w": 1, "k": 8 * k_vectors, "c": c, "r": 1, "s": 1})
    return cs.Context(space or cs.ConvSpace(), w, "avx2", [cs.Plan((("k", 1), ("w", 1)))])


def _dim_atoms(text: str) -> list[tuple[str, int]]:
    return [(a.dim, a.size) for a in parse_scheme(text) if a.kind == "T"]


def test_random_search_picks_uniformly_over_dimension_divisor_pairs() -> None:
    """§5.4.5: with c = 4 and k = 2 vectors left, the innermost tile is (c,2), (c,4) or (k,2), 1/3 each."""
    ctx, rng = _toy(4, 2), random.Random(11)
    firsts = Counter(_dim_atoms(cs.sample_random(ctx, rng)[0])[-1] for _ in range(3000))
    assert set(firsts) == {("c", 2), ("c", 4), ("k", 2)}
    assert stats.chisquare(list(firsts.values())).pvalue > 0.001


def test_levels_sampler_levels_are_uniform_in_1_to_4() -> None:
    """§6.5: c = 2^6 can be split into 1..4 levels: the number of c tiles is uniform over {1, 2, 3, 4}."""
    ctx, rng = _toy(64, 1), random.Random(3)
    counts = Counter(sum(d == "c" for d, _ in _dim_atoms(cs.sample_levels(ctx, rng)[0])) for _ in range(4000))
    assert set(counts) == {1, 2, 3, 4}
    assert stats.chisquare([counts[i] for i in (1, 2, 3, 4)]).pvalue > 0.001


def test_levels_sampler_permutation_is_uniform_pop() -> None:
    """Uniform pop (§6.5 step 5): each step pops one of the remaining (dimension, size) elements uniformly:
    with one k level and three c levels the k tile is innermost with probability 1/4 (a uniformly chosen
    dimension would give 1/2)."""
    space = cs.ConvSpace(max_levels=4)
    ctx, rng = _toy(8, 2, space), random.Random(5)
    inner_k = n = 0
    for _ in range(6000):
        atoms = _dim_atoms(cs.sample_levels(ctx, rng)[0])
        if sum(d == "c" for d, _ in atoms) == 3 and sum(d == "k" for d, _ in atoms) == 1:
            n += 1
            inner_k += atoms[-1][0] == "k"
    assert n > 300
    assert stats.binomtest(inner_k, n, 0.25).pvalue > 0.001


def test_reduction_inner_prior_puts_the_innermost_c_r_s_tiles_above_the_microkernel() -> None:
    """space.conv.reduction_inner=p: a draw's atoms right above the microkernel are the innermost tile of
    each reduction dimension it tiles, with probability p (issue 32); p = 0 is the thesis's sampler, draw
    for draw (the prior takes no random number then, so seeded searches draw what they drew before)."""
    w = Workload.make("cv", "conv2d", {"h": 4, "w": 8, "k": 16, "c": 8, "r": 3, "s": 3})
    plans = [cs.Plan((("k", 1), ("w", 4)))]

    def draws(p: float, n: int = 400) -> list[str]:
        ctx, rng = cs.Context(cs.ConvSpace(reduction_inner=p), w, "avx2", plans), random.Random(7)
        return [cs.sample_random(ctx, rng)[0] for _ in range(n)]

    def reductions_inner(text: str) -> bool:
        atoms = [a for a in parse_scheme(text) if a.kind == "T"]
        tiled = {a.dim for a in atoms} & {"c", "r", "s"}
        return {a.dim for a in atoms[len(atoms) - len(tiled) :]} == tiled

    assert draws(0.0) == [cs.sample_random(cs.Context(cs.ConvSpace(), w, "avx2", plans), rng)[0]
                          for rng in [random.Random(7)] for _ in range(400)]  # fmt: skip
    assert all(reductions_inner(t) for t in draws(1.0))
    share = sum(map(reductions_inner, draws(0.5))) / 400
    uniform = sum(map(reductions_inner, draws(0.0))) / 400
    assert uniform < 0.3 and 0.5 < share < 0.5 + uniform + 0.1
    with pytest.raises(cs.ConvSpaceError, match="reduction_inner is a probability"):
        cs.ConvSpace.from_config({"reduction_inner": 1.5})


def test_pack_weights_prior_packs_microkernel_panels_above_the_first_h_or_w_loop() -> None:
    """space.conv.pack_weights=p: with probability p a draw packs the weights as PackT_K[k/kf,r,s,c,k] (kf the
    microkernel's output channels) right above its outermost h or w loop, legal by construction; p = 0
    draws as before."""
    w = Workload.make("cv", "conv2d", {"h": 4, "w": 8, "k": 32, "c": 8, "r": 3, "s": 3})
    plans = [cs.Plan((("k", 2), ("w", 4)))]

    def draws(p: float, n: int = 300) -> list[str]:
        ctx, rng = cs.Context(cs.ConvSpace(pack_weights=p), w, "avx2", plans), random.Random(3)
        return [cs.draw(ctx, "random", rng)[0] for _ in range(n)]

    assert not any("Pack" in t for t in draws(0.0))
    for text in draws(1.0):
        atoms = parse_scheme(text)
        kinds = [a.kind for a in atoms]
        at = kinds.index("PackT")
        assert atoms[at].text() == "PackT_K[k/16,r,s,c,k]"
        assert all(a.dim not in ("h", "w") for a in atoms[:at])
        assert atoms[at + 1].dim in ("h", "w")
    share = sum("PackT" in t for t in draws(0.5)) / 300
    assert 0.4 < share < 0.6
    with pytest.raises(cs.ConvSpaceError, match="pack_weights is a probability"):
        cs.ConvSpace.from_config({"pack_weights": -0.1})


def test_constant_weights_pack_the_whole_weights_outermost_and_keep_them() -> None:
    """space.conv.constant_weights: the weights' panels of a draw that packs them go above every loop, and
    the candidate keeps them across calls (option constant=K); a draw without the pack, or a space without
    the knob, has no such option; a parallel space cannot have it (its parallel loop is outermost)."""
    w = Workload.make("cv", "conv2d", {"h": 4, "w": 8, "k": 32, "c": 8, "r": 3, "s": 3})
    plans = [cs.Plan((("k", 2), ("w", 4)))]
    ctx = cs.Context(cs.ConvSpace(pack_weights=0.5, constant_weights=True), w, "avx2", plans)
    rng = random.Random(4)
    texts = [cs.draw(ctx, "random", rng)[0] for _ in range(100)]
    packed = [t for t in texts if "PackT" in t]
    assert 20 < len(packed) < 80
    for text in packed:
        assert parse_scheme(text)[0].text() == "PackT_K[k/16,r,s,c,k]" and cs.kept_weights(ctx, text)
    assert not any(cs.kept_weights(ctx, t) for t in texts if "PackT" not in t)
    plain = cs.Context(cs.ConvSpace(pack_weights=1.0), w, "avx2", plans)
    assert not cs.kept_weights(plain, cs.draw(plain, "random", random.Random(4))[0])
    with pytest.raises(cs.ConvSpaceError, match="constant_weights is true or false"):
        cs.ConvSpace.from_config({"constant_weights": "yes"})
    with pytest.raises(cs.ConvSpaceError, match="a parallel loop is outermost"):
        cs.ConvSpace.from_config({"constant_weights": True, "parallel": 2})


def test_panels_for_a_masked_k_tile_only_with_their_knob() -> None:
    """A 3-vector k tile on K = 40 (AVX2: 24 + a masked 16) ends masked: the draws never pack its weights
    unless space.conv.panels_partial_k (the archived searches drew without); with it they do, in panels of
    the tile's 3 vectors (and every draw is legal: cs.draw checks)."""
    w = Workload.make("cv", "conv2d", {"h": 4, "w": 6, "k": 40, "c": 8, "r": 3, "s": 3})
    plans = [cs.Plan((("k", 3), ("w", 3)), partial_dims=("k",))]

    def draws(**knobs: object) -> list[str]:
        space = cs.ConvSpace(pack_weights=1.0, partial="masked", **knobs)  # type: ignore[arg-type]
        ctx, rng = cs.Context(space, w, "avx2", plans), random.Random(5)
        return [cs.draw(ctx, "random", rng)[0] for _ in range(60)]

    assert not any("PackT" in t for t in draws())
    packed = [t for t in draws(panels_partial_k=True) if "PackT" in t]
    assert len(packed) > 30 and all("PackT_K[k/24,r,s,c,k]" in t for t in packed)
    with pytest.raises(cs.ConvSpaceError, match="panels_partial_k is true or false"):
        cs.ConvSpace.from_config({"panels_partial_k": 1})


def test_fixed_permutation_is_level_by_level() -> None:
    ctx = _toy(64, 4, cs.ConvSpace(permutation="fixed", fixed_order=("k", "h", "w", "c", "r", "s")))
    rng = random.Random(2)
    for _ in range(50):
        text, _ = cs.draw(ctx, "random", rng)
        atoms = _dim_atoms(text)
        # inner to outer: level 0 of k (if any) is outside level 0 of c, and so on level by level
        inner = list(reversed(atoms))
        if inner and any(d == "k" for d, _ in inner) and any(d == "c" for d, _ in inner):
            assert inner[0][0] == "c"


def test_exhaustive_tilings_are_distinct_and_legal() -> None:
    ctx = cs.context(cs.ConvSpace(permutation="fixed"), SMALL[0], "avx2", None)
    assert len(ctx.plans) == 1  # U_{4,w}, U_{2,k}: the only fallback microkernel dividing 8 x 8 x 32
    texts = cs.exhaustive_tilings(ctx, 1000)
    # h: 8 = 8 | 2.4 | 4.2 | 2.2.2 (4 ways), c: 16 in up to 4 ordered factors (8 ways), w, k, r, s: 1 way
    assert len(texts) == len(set(texts)) == 4 * 8
    assert all(ctx.legal(t) for t in texts)
    assert cs.exhaustive_tilings(ctx, 5) == texts[:5]


def test_parallel_chunks_reach_l2() -> None:
    """§5.6: with the rule on, the footprint under the Tpar loop is at least L2 (or half the problem)."""
    w = Workload.make("y12", "conv2d", {"h": 34, "w": 34, "k": 512, "c": 256, "r": 3, "s": 3})
    ctx = cs.context(cs.ConvSpace(parallel=2), w, "avx2", None)
    ctx.chunk_bytes = 512 * 1024
    rng = random.Random(1)
    for _ in range(20):
        text, _ = cs.draw(ctx, "random", rng)
        under = cs.suffix_sizes(text, w.size, 8)[1]
        assert sum(cs.conv_footprints(under).values()) * 4 >= 512 * 1024
    with pytest.raises(cs.ConvSpaceError, match="parallel"):
        cs.ConvSpace.from_config({"parallel": 1})
