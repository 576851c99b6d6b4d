"""``amptool ledger show`` and ``amptool ledger trend``: the records as a table (filtered, and
as JSON), the figures over commits printed and drawn, and ``--max-drift`` catching a slow
drift whose every step passed while a flat history passes."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from ledgerkit import commit, plant
from typer.testing import CliRunner

from amptool.cli import app
from amptool.gate.trend import DriftBudget, trend
from amptool.ledger.store import RecordFilter

runner = CliRunner()
FLAT = [0.0100, 0.0103, 0.0098, 0.0101, 0.0099, 0.0102, 0.0097, 0.0100, 0.0101, 0.0099]
"""A history without drift: the figure's noise of a few percent around 0.01."""
STEP = 1.15
"""A slow drift's one step: 15 % worse each commit, within a one-step budget of 20 %."""


def _metrics(p999: float, cosine: float = 0.99995) -> dict:
    return {"cosine": cosine, "p999_abs_scaled": p999, "max_abs_scaled": 2 * p999,
            "nonfinite": 0, "top1_agree_clear": 1.0}


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("amptool: error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def drifting(tmp_path):
    """Eight flat records, then five steps of a slow drift: each record passes."""
    ledger = str(tmp_path / "drift.db")
    drift = [FLAT[-1] * STEP ** k for k in range(1, 6)]
    plant(ledger, [_metrics(v) for v in FLAT[:8] + drift])
    return ledger


def test_a_slow_drift_of_five_passing_steps_is_caught(drifting, tmp_path):
    one_step = _invoke("ledger", "trend", "--ledger", drifting, "--window", 2,
                       "--max-drift", "p999_abs_scaled=20%")
    assert one_step.exit_code == 0, one_step.output  # no single step breaks its budget
    html = tmp_path / "trend.html"
    result = _invoke("ledger", "trend", "--ledger", drifting, "--window", 6,
                     "--max-drift", "p999_abs_scaled=50%", "--report", html)
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert re.search(r"p999_abs_scaled of simplecnn MINDIR fp16 logits drifted \+10\d%", line)
    assert "over its last 6 records, though each passed (budget 50%)" in line
    assert "FAIL p999_abs_scaled" in result.output
    page = html.read_text()
    assert page.count("<svg") == 5  # one chart a figure the records have
    assert 'class="verdict fail"' in page and "drifted" in page
    assert not re.search(r"(src|href)=\"(?!#)", page)  # nothing outside the page
    # the same, through the Python API
    found = trend(drifting, RecordFilter(), (), [DriftBudget.parse("p999_abs_scaled=50%")], 6)
    assert not found.passed and found.worst is not None
    assert found.worst.all_passed and found.worst.share == pytest.approx(1.04, abs=0.01)


def test_a_flat_history_passes_the_same_budget(tmp_path):
    ledger = str(tmp_path / "flat.db")
    plant(ledger, [_metrics(v) for v in FLAT])
    result = _invoke("ledger", "trend", "--ledger", ledger, "--window", 6,
                     "--max-drift", "p999_abs_scaled=50%", "--max-drift", "cosine=50%",
                     "--max-drift", "max_abs_scaled=0.002")
    assert result.exit_code == 0, result.output
    assert "drift within budget: 3 checked" in result.output


def test_a_cosine_drifting_from_one_is_caught(tmp_path):
    """Cosine worsens downwards: its gap to 1 growing by a fifth a commit is a drift."""
    ledger = str(tmp_path / "cos.db")
    plant(ledger, [_metrics(0.01, cosine=1 - 1e-5 * 1.2 ** k) for k in range(6)])
    result = _invoke("ledger", "trend", "--ledger", ledger, "--max-drift", "cosine=50%",
                     "--json")
    assert result.exit_code == 1
    data = json.loads(result.output[:result.output.rindex("}") + 1])
    (cos,) = data["drifts"]
    assert cos["exceeded"] and cos["share"] == pytest.approx(1.61, abs=0.01)
    assert [len(s["points"]) for s in data["series"]] == [6] * 5


def test_show_lists_filters_and_names_each_failure(tmp_path):
    ledger = str(tmp_path / "l.db")
    plant(ledger, [_metrics(v) for v in FLAT[:4]], passed=[True, True, False, True])
    result = _invoke("ledger", "show", "--ledger", ledger)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if re.match(r"\s+\d+\s+2026", line)]
    assert len(rows) == 4 and "FAIL" in rows[2] and "0.99995" in rows[0]
    assert f"FAIL #3 {commit(2)[:10]}: logits: cosine 0.99995 (limit >= 0.999)" in result.output
    result = _invoke("ledger", "show", "--ledger", ledger, "--verdict", "fail", "--json")
    assert [r["id"] for r in json.loads(result.output)] == [3]
    result = _invoke("ledger", "show", "--ledger", ledger, "--last", 2, "--json")
    records = json.loads(result.output)
    assert [r["id"] for r in records] == [3, 4]
    assert records[1]["outputs"][0]["figures"]["p999_abs_scaled"] == FLAT[3]
    result = _invoke("ledger", "show", "--ledger", ledger, "--commit", commit(1)[:7], "--json")
    assert [r["id"] for r in json.loads(result.output)] == [2]


@pytest.mark.parametrize("args, said", [
    (["show", "--ledger", "{missing}"], "does not exist"),
    (["show", "--ledger", "{ledger}", "--verdict", "maybe"], "--verdict must be pass or fail"),
    (["trend", "--ledger", "{ledger}", "--max-drift", "cosine"], "is not FIGURE=AMOUNT"),
    (["trend", "--ledger", "{ledger}", "--max-drift", "loss=5%"],
     "--max-drift names loss, which no record has"),
    (["trend", "--ledger", "{ledger}", "--window", "1"], "--window must be 2 or more"),
    (["trend", "--ledger", "{ledger}", "--report", "{tmp}/no/such/t.html"],
     "folder {tmp}/no/such does not exist"),
])
def test_mistakes_are_one_line_and_exit_2(args, said, tmp_path):
    ledger = str(tmp_path / "l.db")
    plant(ledger, [_metrics(0.01)])
    fill = {"ledger": ledger, "missing": str(tmp_path / "missing.db"), "tmp": str(tmp_path)}
    result = _invoke("ledger", *[a.format(**fill) for a in args])
    assert result.exit_code == 2, result.output
    assert said.format(**fill) in _error_line(result)


def test_help_does_not_import_sqlalchemy():
    code = ("import sys; from amptool.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['ledger', 'trend', '--help']); "
            "assert r.exit_code == 0, r.output; "
            "r = CliRunner().invoke(app, ['ledger', 'show']); "
            "assert r.exit_code == 2, r.output; "
            "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
