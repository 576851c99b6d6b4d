"""The network an artefact is traced from: checkpoint weights, in fp32 or true fp16."""
from __future__ import annotations


def _cast_output(net, dtype):
    from mindspore import nn, ops

    class CastOutput(nn.Cell):
        def __init__(self, inner):
            super().__init__(auto_prefix=False)
            self.inner = inner

        def construct(self, *args):
            return ops.cast(self.inner(*args), dtype)

    return CastOutput(net)


def build_network(spec, params: dict, precision: str, policy=None, io_dtype: str = "fp32",
                  source: str = "checkpoint"):
    """(cell to trace, names of parameters stored in fp16).

    fp32: the network as trained. fp16: the policy's cells compute in float16 and their
    parameters are stored in float16 (``set_dtype``); cells the policy keeps in fp32 keep
    fp32 weights. fp32 inputs are accepted (cast inside); outputs are fp32 unless
    ``io_dtype`` is fp16.
    """
    import mindspore as ms

    from amptool.checkpoint import load_into_net
    from amptool.precision import apply_policy, low_precision_params

    net = spec.build()
    load_into_net(net, params, source)
    net.set_train(False)
    if precision == "fp32":
        return net, []
    low = low_precision_params(net, policy)
    cell = apply_policy(net, policy)
    for param in low:
        param.set_dtype(ms.float16)
    if io_dtype == "fp16":
        cell = _cast_output(cell, ms.float16)
    cell.set_train(False)
    return cell, [p.name for p in low]


def example_inputs(spec, batch_size: int, dynamic: bool, dtype: str):
    """The input tensors to trace with: (N, C, H, W), N = None for a dynamic batch."""
    import mindspore as ms
    import numpy as np

    ms_dtype = ms.float16 if dtype == "fp16" else ms.float32
    if dynamic:
        return [ms.Tensor(shape=[None, *spec.input_shape], dtype=ms_dtype)]
    np_dtype = np.float16 if dtype == "fp16" else np.float32
    return [ms.Tensor(np.zeros((batch_size, *spec.input_shape), dtype=np_dtype))]
