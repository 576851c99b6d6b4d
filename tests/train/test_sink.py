"""Data sinking: refused on CPU (MindSpore sinks on Ascend and GPU only), sized to whole
host calls elsewhere."""
import pytest

from amptool.errors import UsageError
from amptool.train.sink import epoch_sink_size, resolve_sink_size


def test_cpu_runs_without_sinking_and_refuses_an_explicit_size():
    assert resolve_sink_size(None, "CPU", 10) == 0
    with pytest.raises(UsageError,
                       match="data sinking runs on Ascend and GPU only, this run is on CPU"):
        resolve_sink_size(4, "CPU", 10)
    with pytest.raises(UsageError, match="--sink-size must be >= 1"):
        resolve_sink_size(0, "Ascend", 10)


def test_ascend_and_gpu_sink_by_default():
    assert resolve_sink_size(None, "Ascend", 10) == 10
    assert resolve_sink_size(25, "GPU", 10) == 25


def test_a_sink_call_never_runs_past_the_epoch():
    assert epoch_sink_size(10, 44) == 4
    assert epoch_sink_size(11, 44) == 11
    assert epoch_sink_size(100, 44) == 44
    assert epoch_sink_size(10, 43) == 1
    assert all(44 % epoch_sink_size(k, 44) == 0 for k in range(1, 60))


def test_mindspore_itself_refuses_sinking_on_cpu():
    """The reason the CPU refusal exists, checked against MindSpore itself."""
    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np

    from amptool.runtime.device import set_device

    set_device("CPU")
    data = ds.NumpySlicesDataset({"x": np.zeros((4, 2), np.float32)}, shuffle=False).batch(2)
    with pytest.raises(ValueError, match="Data sinking supports ascend or gpu"):
        ms.data_sink(lambda x: x, data, sink_size=2)
