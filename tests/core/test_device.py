"""``execution_mode``: the one place MindSpore's mode is switched for a block and restored."""
import pytest

from amptool.device import execution_mode


@pytest.mark.parametrize("graph", [True, False])
def test_the_callers_mode_comes_back_even_when_the_block_raises(graph):
    import mindspore as ms

    outer = ms.PYNATIVE_MODE if graph else ms.GRAPH_MODE
    inner = ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE
    ms.set_context(mode=outer)
    with execution_mode(graph=graph):
        assert ms.get_context("mode") == inner
    assert ms.get_context("mode") == outer
    with pytest.raises(ZeroDivisionError), execution_mode(graph=graph):
        assert ms.get_context("mode") == inner
        1 / 0
    assert ms.get_context("mode") == outer
