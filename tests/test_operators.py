"""Operators: flop counts, tensor shapes, contraction specs, size validation and the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from kernels.candidate import Workload
from kernels.operators import OperatorError, contraction, conv2d, make_operator, matmul


def _rand(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _all_points(shape: tuple[int, ...]) -> np.ndarray:
    return np.stack(np.unravel_index(np.arange(int(np.prod(shape))), shape), axis=1)


# -- flops and shapes ----------------------------------------------------------------------------------
def test_matmul_flops_and_shapes() -> None:
    op = matmul()
    sizes = {"i": 3, "j": 5, "k": 7}
    assert op.flops(sizes) == 2 * 3 * 5 * 7
    assert op.shapes(sizes) == [(3, 5), (3, 7), (7, 5)]
    assert op.reduction_dims == ("k",)
    assert op.parallel_dims == ("i", "j")
    w = Workload.make("mm", "matmul", sizes)
    assert w.flops == 210 and w.shapes() == [(3, 5), (3, 7), (7, 5)]


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_strided_conv_shapes_and_flops(stride: int) -> None:
    sizes = {"h": 4, "w": 5, "k": 6, "r": 3, "s": 2, "c": 7}
    op = conv2d(stride)
    out, image, weights = op.shapes(sizes)
    assert out == (4, 5, 6)
    # the input extent of a strided convolution is (H-1)*stride + R (and (W-1)*stride + S)
    assert image == ((4 - 1) * stride + 3, (5 - 1) * stride + 2, 7)
    assert weights == (3, 2, 7, 6)
    assert op.flops(sizes) == 2 * 4 * 5 * 6 * 3 * 2 * 7
    assert op.reduction_dims == ("r", "s", "c")
    assert dict(op.params) == {"stride": stride}
    # the vectorizable (stride-1) dimension of each tensor
    assert [t.stride1_dim() for t in op.tensors] == ["k", "c", "k"]


def test_contraction_dims_shapes_and_flops() -> None:
    # the thesis example Out[l1,r1,l2] += Left[l2,k1,k2,l1] * Right[r1,k2,k1] with one-letter names
    op = contraction("bkma,rmk->arb")
    sizes = {"a": 2, "r": 3, "b": 4, "k": 5, "m": 6}
    assert set(op.dims) == set(sizes)
    assert op.parallel_dims == ("a", "r", "b")
    assert set(op.reduction_dims) == {"k", "m"}
    assert op.shapes(sizes) == [(2, 3, 4), (4, 5, 6, 2), (3, 6, 5)]
    assert op.flops(sizes) == 2 * 2 * 3 * 4 * 5 * 6
    assert dict(op.params) == {"spec": "bkma,rmk->arb"}


def test_make_operator_by_name() -> None:
    assert make_operator("matmul") == matmul()
    assert make_operator("conv2d", stride=2) == conv2d(2)
    assert make_operator("contraction", spec="ik,kj->ij") == contraction("ik,kj->ij")
    with pytest.raises(OperatorError, match="unknown operator"):
        make_operator("gemv")
    with pytest.raises(OperatorError, match="spec"):
        make_operator("contraction")


@pytest.mark.parametrize("stride", [0, -1, True, 1.5, "2"])
def test_conv2d_rejects_bad_stride(stride: object) -> None:
    with pytest.raises(OperatorError, match="stride"):
        conv2d(stride)  # type: ignore[arg-type]


@pytest.mark.parametrize("stride", [1.5, True])
def test_make_operator_rejects_non_integer_stride(stride: object) -> None:
    with pytest.raises(OperatorError, match="stride"):
        make_operator("conv2d", stride=stride)


# -- contraction spec errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("ik,kj", "not of the form"),  # no arrow
        ("ik->ij", "not of the form"),  # one input
        ("iK,kj->ij", "not of the form"),  # uppercase
        ("i1,kj->ij", "not of the form"),  # not a letter
        ("ik,kj->", "not of the form"),  # empty output
        ("ii,ij->ij", "first input repeats"),
        ("ik,kjk->ij", "second input repeats"),
        ("ik,kj->iji", "output repeats"),
        ("ik,kj->il", r"output dimensions \['l'\]"),
    ],
)
def test_contraction_spec_errors(spec: str, match: str) -> None:
    with pytest.raises(OperatorError, match=match):
        contraction(spec)


def test_contraction_spec_tolerates_spaces() -> None:
    assert contraction(" ik , kj -> ij ") == contraction("ik,kj->ij")


# -- size validation -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        ({"i": 0, "j": 2, "k": 3}, "dimension i must be a positive integer"),
        ({"i": 2, "j": -1, "k": 3}, "dimension j must be a positive integer"),
        ({"i": 2, "j": 2, "k": 2.0}, "dimension k must be a positive integer"),
        ({"i": 2, "j": 2, "k": True}, "dimension k must be a positive integer"),
        ({"i": 2, "j": 2, "k": "3"}, "dimension k must be a positive integer"),
        ({"i": 2, "j": 2}, r"missing sizes \['k'\]"),
        ({"i": 2, "j": 2, "k": 2, "x": 2}, r"unknown sizes \['x'\]"),
    ],
)
def test_validate_sizes_errors(sizes: dict[str, object], match: str) -> None:
    with pytest.raises(OperatorError, match=match):
        matmul().validate_sizes(sizes)  # type: ignore[arg-type]
    with pytest.raises(OperatorError, match=match):
        Workload.make("mm", "matmul", sizes)  # type: ignore[arg-type]


def test_validate_sizes_accepts_numpy_integers_and_orders_dims() -> None:
    out = conv2d().validate_sizes({"c": np.int64(3), "h": 1, "w": 2, "k": 4, "r": 1, "s": np.int32(2)})
    assert out == {"h": 1, "w": 2, "k": 4, "r": 1, "s": 2, "c": 3}
    assert all(type(v) is int for v in out.values())
    assert list(Workload.make("cv", "conv2d", out).size) == ["h", "w", "k", "r", "s", "c"]


# -- float64 reference against independent numpy computations ------------------------------------------
def test_reference_matmul_against_einsum() -> None:
    rng = np.random.default_rng(1)
    sizes = {"i": 5, "j": 7, "k": 9}
    c, a, b = (_rand(s, rng) for s in matmul().shapes(sizes))
    expected = c.astype(np.float64) + np.einsum("ik,kj->ij", a.astype(np.float64), b.astype(np.float64))
    got = matmul().reference_points([c, a, b], sizes, _all_points(c.shape))
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", ["bkma,rmk->arb", "bik,bkj->bij", "ij,ij->ij", "ik,jk->ji"])
def test_reference_contraction_against_einsum(spec: str) -> None:
    rng = np.random.default_rng(2)
    op = contraction(spec)
    sizes = {d: 2 + n for n, d in enumerate(op.dims)}
    tensors = [_rand(s, rng) for s in op.shapes(sizes)]
    out = tensors[0]
    f64 = [t.astype(np.float64) for t in tensors]
    expected = f64[0] + np.einsum(spec, f64[1], f64[2])
    got = op.reference_points(tensors, sizes, _all_points(out.shape))
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("stride", [1, 2, 3])
def test_reference_strided_conv_against_explicit_loop(stride: int) -> None:
    rng = np.random.default_rng(3)
    sizes = {"h": 3, "w": 4, "k": 2, "r": 3, "s": 2, "c": 3}
    op = conv2d(stride)
    o, img, ker = (_rand(s, rng) for s in op.shapes(sizes))
    expected = o.astype(np.float64).copy()
    for h in range(3):
        for w in range(4):
            for k in range(2):
                for r in range(3):
                    for s in range(2):
                        for c in range(3):
                            expected[h, w, k] += float(img[h * stride + r, w * stride + s, c]) * float(
                                ker[r, s, c, k]
                            )
    # an independent vectorized formulation too: sliding windows of the image, strided
    win = sliding_window_view(img.astype(np.float64), (3, 2), axis=(0, 1))[::stride, ::stride]
    assert win.shape == (3, 4, 3, 3, 2)  # h, w, c, r, s
    via_windows = o.astype(np.float64) + np.einsum("hwcrs,rsck->hwk", win, ker.astype(np.float64))
    np.testing.assert_allclose(via_windows, expected, rtol=1e-12, atol=1e-12)
    got = op.reference_points([o, img, ker], sizes, _all_points(o.shape))
    np.testing.assert_allclose(got, expected.ravel(), rtol=1e-12, atol=1e-12)


def test_reference_points_subset_and_chunking() -> None:
    """Sampled points and small chunks give the same values as the full computation."""
    rng = np.random.default_rng(4)
    sizes = {"h": 2, "w": 3, "k": 4, "r": 2, "s": 2, "c": 5}
    op = conv2d(2)
    tensors = [_rand(s, rng) for s in op.shapes(sizes)]
    pts = _all_points(tensors[0].shape)
    full = op.reference_points(tensors, sizes, pts)
    chunked = op.reference_points(tensors, sizes, pts, chunk=7)
    np.testing.assert_array_equal(full, chunked)
    pick = np.array([5, 0, 23, 11])
    np.testing.assert_array_equal(op.reference_points(tensors, sizes, pts[pick]), full[pick])


def test_reference_is_float64_and_keeps_initial_output() -> None:
    """The reference adds to the initial output (a kernel that overwrites is caught) in float64."""
    sizes = {"i": 1, "j": 1, "k": 2}
    c = np.array([[1.0]], dtype=np.float32)
    a = np.array([[2.0**24, 1.0]], dtype=np.float32)
    b = np.array([[1.0], [1.0]], dtype=np.float32)
    got = matmul().reference_points([c, a, b], sizes, np.array([[0, 0]]))
    assert got.dtype == np.float64
    assert got[0] == 2.0**24 + 2.0  # not representable in float32
