"""The exportable replacements of ``amptool.export.onnx_ops``, run eagerly against the
MindSpore operators they stand for (the ONNX round trip of the same rewrites is in
``test_onnx_zoo``; here each branch is checked on its own, outside any graph)."""
import numpy as np
import pytest


@pytest.fixture(scope="module")
def ms():
    import mindspore

    from amptool.runtime.device import execution_mode

    with execution_mode(graph=False):
        yield mindspore


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_invert_is_logical_not_on_bool_and_mindspores_own_elsewhere(ms):
    from amptool.export.onnx_ops import invert

    mask = ms.Tensor(_x((3, 4)) > 0)
    assert invert(mask).dtype == ms.bool_
    assert (invert(mask).asnumpy() == ~mask.asnumpy()).all()
    ints = ms.Tensor(np.array([0, 1, 5, -3], np.int32))
    assert (invert(ints).asnumpy() == (~ints).asnumpy()).all()  # MindSpore's own ~


@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
def test_cumsum_matches_the_operator_on_every_axis(ms, axis):
    from amptool.export.onnx_ops import cumsum

    x = _x((2, 3, 5))
    expect = np.cumsum(x, axis=axis)
    got = cumsum(ms.Tensor(x), axis).asnumpy()
    assert got.shape == expect.shape
    assert np.abs(got - expect).max() <= 1e-5 * np.abs(expect).max()


def test_cumsum_of_a_bool_mask_counts_in_int64_and_keeps_a_requested_dtype(ms):
    from amptool.export.onnx_ops import cumsum

    mask = _x((3, 6)) > 0
    counted = cumsum(ms.Tensor(mask), 1)
    assert counted.dtype == ms.int64
    assert (counted.asnumpy() == np.cumsum(mask, axis=1)).all()
    as_float = cumsum(ms.Tensor(mask), 1, dtype=ms.float16)
    assert as_float.dtype == ms.float16
    assert (as_float.asnumpy() == np.cumsum(mask, axis=1)).all()
    ints = ms.Tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert cumsum(ints, 0).dtype == ms.int32
    assert (cumsum(ints, 0).asnumpy() == np.cumsum(np.arange(12).reshape(3, 4), 0)).all()


@pytest.mark.parametrize("corners", [True, False, None])
@pytest.mark.parametrize("size", [(4, 3), (7, 9), 5, (1, 1)])
def test_bilinear_interpolate_matches_the_operator(ms, corners, size):
    from mindspore import ops

    from amptool.export.onnx_ops import interpolate

    x = ms.Tensor(_x((2, 3, 6, 5)))
    want = ops.interpolate(x, size=size if not isinstance(size, int) else (size, size),
                           mode="bilinear", align_corners=corners).asnumpy()
    got = interpolate(x, size=size, mode="bilinear", align_corners=corners).asnumpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_interpolate_hands_other_modes_to_the_operator(ms):
    from mindspore import ops

    from amptool.export.onnx_ops import interpolate

    x = ms.Tensor(_x((1, 2, 4, 4)))
    got = interpolate(x, size=(8, 8), mode="nearest").asnumpy()
    assert (got == ops.interpolate(x, size=(8, 8), mode="nearest").asnumpy()).all()


@pytest.mark.parametrize("axis,epsilon", [(0, 1e-4), (2, 1e-3), (-1, 10.0)])
def test_l2normalize_is_the_operators_formula(ms, axis, epsilon):
    from mindspore import ops

    from amptool.export.onnx_ops import L2Normalize

    x = _x((3, 4, 5), seed=2)
    got = L2Normalize(axis, epsilon)(ms.Tensor(x)).asnumpy()
    want = ops.L2Normalize(axis=axis, epsilon=epsilon)(ms.Tensor(x)).asnumpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
