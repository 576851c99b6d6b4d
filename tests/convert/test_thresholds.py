"""``convert search --thresholds`` reads a thresholds file the way parity reads it."""
import re
from pathlib import Path

import numpy as np
import pytest

from amptool.convert.cli import _limits
from amptool.convert.config import SearchConfig
from amptool.convert.judge import search_thresholds
from amptool.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


def parity_doc_config() -> str:
    """The example config of docs/guides/parity-ci.md, as the document shows it."""
    text = (ROOT / "docs" / "guides" / "parity-ci.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(# parity\.toml.*?)```", text, re.DOTALL)
    assert block, "docs/guides/parity-ci.md has no parity.toml example"
    return block.group(1)


def _thresholds(path: Path, flags: dict):
    """The limits a search with ``--thresholds path`` and ``flags`` holds its network's
    first output (class logits of 10 classes) to."""
    table, given = _limits(path, flags)
    limits = search_thresholds(SearchConfig(threshold_table=table, threshold_flags=given),
                               classifier=True, classes=10)
    return limits.of(0, np.zeros((2, 10), np.float32))[0]


def test_the_parity_docs_example_config_is_taken_whole(tmp_path):
    path = tmp_path / "parity.toml"
    path.write_text(parity_doc_config(), encoding="utf-8")
    th = _thresholds(path, {})
    assert th.min_top1 == 0.98  # [thresholds]
    assert th.min_cosine == 0.9995  # [thresholds.fp16_vs_fp32]; output 0 has no own table


def test_output_zero_table_applies_and_others_do_not(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[thresholds]\nmin_top1 = 0.9\n[thresholds.outputs.0]\nmin_cosine = 0.95\n"
                    "[thresholds.outputs.1]\nmin_cosine = 0.5\nmin_top1 = 'off'\n")
    th = _thresholds(path, {})
    assert (th.min_cosine, th.min_top1) == (0.95, 0.9)
    assert _thresholds(path, {"min_cosine": "0.97"}).min_cosine == 0.97  # flags win


def test_an_unknown_threshold_is_one_usage_error(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[thresholds.outputs.0]\nmin_cosin = 0.95\n")
    with pytest.raises(UsageError, match="unknown threshold.*min_cosin"):
        _thresholds(path, {})


def test_thresholds_from_file_and_flags(tmp_path):
    path = tmp_path / "parity.toml"
    path.write_text('[thresholds]\nmin_cosine = 0.9\nmax_acc_drop = "off"\n'
                    '[thresholds.fp16_vs_fp32]\nmax_abs = 0.1\n')
    th = _thresholds(path, {"min_top1": "off", "max_rel": "0.5"})
    assert (th.min_cosine, th.max_acc_drop, th.max_abs, th.min_top1, th.max_rel) == (
        0.9, None, 0.1, None, 0.5)
