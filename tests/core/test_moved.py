"""Public names whose module moved keep their old import path for one release, with a
DeprecationWarning naming the new one; configs moved beside their engine keep it too."""
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


CONFIGS = [("amptool.export.api", "amptool.export.config", "ExportConfig"),
           ("amptool.convert.search", "amptool.convert.config", "SearchConfig"),
           ("amptool.convert.ckpt", "amptool.convert.config", "CkptConfig"),
           ("amptool.convert.explain", "amptool.convert.config", "PolicyConfig"),
           ("amptool.pipeline", "amptool.pipelineconfig", "PipelineConfig")]
"""(engine module, config module, name): configs moved out of their engine module, which
still gives them."""


@pytest.mark.parametrize("old, new, name", CONFIGS)
def test_a_config_is_the_same_from_its_engine_module(old, new, name):
    assert getattr(importlib.import_module(old), name) is \
        getattr(importlib.import_module(new), name)
