"""Public names whose module moved keep their old import path for one release, with a
DeprecationWarning naming the new one."""
import importlib
import sys

import pytest

MOVED = {"amptool.limits": ("amptool.stats.limits", "Thresholds"),
         "amptool.trainsummary": ("amptool.documents.training", "TrainSummary"),
         "amptool.parityreport": ("amptool.documents.parity", "ParityReport"),
         "amptool.figures": ("amptool.documents.figures", "OutputMetrics"),
         "amptool.runsummary": ("amptool.documents.summary", "PipelineSummary")}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_spelling_gives_the_same_names_and_warns(old):
    new, name = MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
