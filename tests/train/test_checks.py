"""``validate``: every problem of a training config in one error, a single one as it was."""
import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.errors import UsageError
from amptool.train.checks import validate
from amptool.train.config import TrainConfig


def _problem(cfg: TrainConfig) -> UsageError:
    with pytest.raises(UsageError) as caught:
        validate(cfg)
    return caught.value


def test_three_independent_problems_come_in_one_error(tmp_path):
    out = tmp_path / "run"
    err = _problem(TrainConfig(amp_level="O9", epochs=0, model="nonet", out=str(out),
                               resume=True))
    assert err.problem.split("; ") == [
        "unknown AMP level 'O9'", "epochs must be >= 1 (got 0)", "unknown model 'nonet'",
        f"--resume: no checkpoint last.ckpt in {out}"]
    assert err.fix.startswith("use O0, O1, O2 or O3; fix the options or config file; use one of ")
    assert not out.exists()


def test_several_value_problems_share_one_fix(tmp_path):
    err = _problem(TrainConfig(epochs=0, batch_size=0, out=str(tmp_path / "run")))
    assert str(err) == ("epochs must be >= 1 (got 0); batch size must be >= 1 (got 0); "
                        "fix the options or config file")


@pytest.mark.parametrize("changes, line", [
    ({"epochs": 0}, "epochs must be >= 1 (got 0); fix the options or config file"),
    ({"amp_level": "O9"}, "unknown AMP level 'O9'; use O0, O1, O2 or O3"),
    ({"sink_size": 0}, "--sink-size must be >= 1 (got 0); give the steps to run per host call, "
                       "or leave it out"),
])
def test_one_problem_keeps_its_own_line(tmp_path, changes, line):
    assert str(_problem(TrainConfig(out=str(tmp_path / "run"), **changes))) == line


def test_the_output_folder_is_checked_unless_asked_not_to(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    cfg = TrainConfig(out=str(afile))
    assert str(_problem(cfg)) == f"--out {afile} is a file, not a folder; give a folder path"
    validate(cfg, folder=False)


def test_the_command_reports_them_in_one_line(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", "--amp-level", "O9", "--epochs", "0",
                                      "--model", "nonet", "--out", str(out)])
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    for fragment in ("unknown AMP level 'O9'", "epochs must be >= 1 (got 0)",
                     "unknown model 'nonet'"):
        assert fragment in lines[0]
    assert not out.exists()
