"""What ``amptool diff`` compares and under which budget (``DiffConfig``): the budget comes
from a config file's ``[regression]`` table, the file parity's ``--config`` reads its
``[thresholds]`` from (its other keys are parity's and are not read here)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from amptool.files.configfile import read_config_file
from amptool.stats.regression import TABLE, RegressionBudget, budget_from_table


@dataclass(frozen=True)
class DiffConfig:
    """Everything ``amptool diff`` needs."""

    base: str
    """The report compared against: a parity report (parity.json), or a run folder holding
    one (``amptool run --out``) or its summary.json."""
    new: str
    """The report judged, given as BASE is."""
    budget: RegressionBudget = field(default_factory=RegressionBudget)
    """How much worse NEW may be beyond each figure's noise."""

    @classmethod
    def from_file(cls, path: Optional[Union[str, Path]], base: Union[str, Path],
                  new: Union[str, Path]) -> "DiffConfig":
        """BASE and NEW under the ``[regression]`` table of the config file at ``path`` (None:
        the default budget); every bad key of the table in one UsageError."""
        budget = RegressionBudget()
        if path is not None:
            table = read_config_file(path).get(TABLE, {})
            budget = budget_from_table(table, f"config {path}")
        return cls(str(base), str(new), budget)
