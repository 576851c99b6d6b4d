"""The network an artefact is traced from: checkpoint weights, in fp32 or true fp16."""
from __future__ import annotations

from amptool.network.checkpoint import load_into_net
from amptool.network.ckptstream import build_uninitialized, load_streamed
from amptool.precision.apply import apply_policy, cast_outputs, low_precision_params


def build_network(spec, params, precision: str, policy=None, io_dtype: str = "fp32",
                  source: str = "checkpoint"):
    """(cell to trace, names of parameters stored in fp16); ``params``: the checkpoint's
    entries, or the path of a checkpoint to read into the network one tensor at a time.

    fp32: the network as trained. fp16: the policy's cells compute in float16 and their
    parameters are stored in float16 (``set_dtype``); cells the policy keeps in fp32 keep
    fp32 weights. fp32 inputs are accepted (cast inside); outputs are fp32 unless
    ``io_dtype`` is fp16.
    """
    import mindspore as ms

    if isinstance(params, dict):
        net = spec.build()
        load_into_net(net, params, source)
    else:  # every parameter comes from the file: none is initialized first
        net = build_uninitialized(spec.build)
        load_streamed(net, params, source)
    net.set_train(False)
    if precision == "fp32":  # nested outputs unrolled: a MindIR keeps them nested otherwise
        flat = cast_outputs(net, None)
        flat.set_train(False)
        return flat, []
    low = low_precision_params(net, policy)
    cell = apply_policy(net, policy)
    for param in low:  # one tensor at a time: each fp32 copy goes as its fp16 one is made
        param.set_dtype(ms.float16)
    if io_dtype == "fp16":
        cell = cast_outputs(cell, ms.float16)
    cell.set_train(False)
    return cell, [p.name for p in low]


def example_inputs(spec, batch_size: int, dynamic: bool, dtype: str):
    """The input tensors to trace with, one per input of the signature: dynamic dimensions
    (the batch with ``dynamic``, and any the signature marks -1) are None. ``dtype`` fp16
    applies to floating-point inputs only; integer inputs keep their dtype."""
    import mindspore as ms
    import numpy as np

    tensors = []
    for item in spec.inputs:
        want = "float16" if (dtype == "fp16" and item.is_float) else item.dtype
        ms_dtype = getattr(ms, want if want != "bool" else "bool_")
        if dynamic or any(d == -1 for d in item.shape[1:]):
            shape = [None if (i == 0 and dynamic) or d == -1 else d
                     for i, d in enumerate(item.shape)]
            if not dynamic:
                shape[0] = batch_size
            tensors.append(ms.Tensor(shape=shape, dtype=ms_dtype))
        else:
            tensors.append(ms.Tensor(np.asarray(item.example(batch_size), dtype=np.dtype(want))))
    return tensors
