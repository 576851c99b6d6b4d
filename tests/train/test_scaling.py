"""Training under loss scaling on a slice of the bundled digits (``few_digits``: 18 steps an
epoch): the first batch settles the scale, forced overflows are skipped and counted,
read-backs change nothing; the other sample models (the session's runs, which the export
tests read too) and safetensors checkpoints train and resume."""
import json
import shutil

import numpy as np
import pytest

from amptool.errors import DivergedError, UsageError
from amptool.train.config import TrainConfig
from amptool.train.run import run_training

pytestmark = pytest.mark.slow  # trains real networks


def _losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if "loss" in r]


def test_first_batch_settles_the_scale_without_skipping_steps(tmp_path, few_digits):
    """A scale far too large overflows the first batch: the batch is tried again at each
    halved scale until it updates, instead of the run skipping its first ~20 steps (a later
    batch may still overflow once at the settled scale)."""
    summary = run_training(TrainConfig(epochs=1, out=str(tmp_path), scale_init=2.0 ** 40,
                                       data=few_digits))
    tries = summary.first_batch_tries
    assert 10 < tries < 40 and summary.overflow_steps <= 2
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 1 and not first["overflow"] and first["skipped"] == 0
    assert first["loss_scale"] == 2.0 ** 40 / 2 ** (tries - 1)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["summary"]["first_batch_tries"] == tries
    assert summary.val_acc > 0.5


def test_first_batch_tries_stop_at_max_skipped_and_only_with_a_dynamic_scale(tmp_path,
                                                                              tiny_digits):
    with pytest.raises(DivergedError, match=r"3 consecutive overflow steps skipped by step 1 "
                       r"\(the first batch's tries"):
        run_training(TrainConfig(epochs=1, out=str(tmp_path / "tries"), scale_init=2.0 ** 40,
                                 max_skipped=3, data=tiny_digits))
    assert not (tmp_path / "tries" / "last.ckpt").exists()
    static = run_training(TrainConfig(epochs=1, out=str(tmp_path / "static"),
                                      loss_scale="static:1024", data=tiny_digits))
    assert static.first_batch_tries is None


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory, few_digits) -> tuple:
    """(folder, summary of a run read back on every step, summary of one read back on every
    tenth): a scale that grows after every clean step overflows again and again."""
    folder = tmp_path_factory.mktemp("overflowing")
    kwargs = dict(epochs=1, scale_init=2.0 ** 40, scale_window=1, data=few_digits)
    every = run_training(TrainConfig(out=str(folder / "every"), log_every=1, **kwargs))
    tenth = run_training(TrainConfig(out=str(folder / "tenth"), **kwargs))
    return folder, every, tenth


def test_forced_overflow_is_counted(overflowing):
    """Each step that overflows is skipped and counted."""
    folder, _, summary = overflowing
    assert summary.overflow_steps >= summary.steps // 3
    assert summary.loss_scale <= 2.0 ** 30
    rows = [json.loads(line) for line in (folder / "tenth" / "metrics.jsonl").read_text()
            .splitlines()]
    assert sum(r["skipped"] for r in rows if "skipped" in r) == summary.overflow_steps
    assert summary.val_acc > 0.5


def test_reading_back_every_tenth_step_changes_nothing_but_the_lines(overflowing):
    """The device counts skipped steps between read-backs: the run, its counts and its
    weights are those of a run read back on every step."""
    tmp_path, every, tenth = overflowing
    assert tenth.weights_sha256 == every.weights_sha256
    assert tenth.overflow_steps == every.overflow_steps >= tenth.steps // 3
    per_step = [json.loads(line)
                for line in (tmp_path / "every" / "metrics.jsonl").read_text().splitlines()]
    logged = [json.loads(line)
              for line in (tmp_path / "tenth" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in per_step if "loss" in r]
    assert steps[-1] > 10
    assert [r["step"] for r in logged if "loss" in r] == [1, 10, steps[-1]]
    by_step = {r["step"]: r for r in per_step if "loss" in r}
    previous = 0
    for row in (r for r in logged if "loss" in r):
        same = by_step[row["step"]]
        assert row["loss"] == same["loss"] and row["loss_scale"] == same["loss_scale"]
        assert row["skipped"] == sum(by_step[s]["skipped"]
                                     for s in range(previous + 1, row["step"] + 1))
        previous = row["step"]


@pytest.mark.parametrize("model", ["lenet5", "resnet", "transformer"])
def test_other_samples_train(model, sample_runs):
    out = sample_runs.get(model)  # the session's shared run (O2, one epoch), export tests' too
    summary = sample_runs.summaries[model]
    losses = _losses(out)  # the logged steps: the first, every 10th, the last
    assert losses[-1] < losses[0]
    assert np.isfinite(summary.final_loss) and summary.overflow_steps < summary.steps // 4


def test_safetensors_checkpoints_and_resume(tmp_path, few_digits, first_epoch):
    def train(epochs: int, **kwargs):
        return run_training(TrainConfig(epochs=epochs, out=str(tmp_path), data=few_digits,
                                        ckpt_format="safetensors", **kwargs))

    shutil.copytree(first_epoch("safetensors"), tmp_path, dirs_exist_ok=True)  # 1 epoch
    first = json.loads((tmp_path / "run.json").read_text())["summary"]
    assert (tmp_path / "last.safetensors").is_file() and (tmp_path / "best.safetensors").is_file()
    resumed = train(2, resume=True)
    assert resumed.steps == 2 * first["steps"]
    with pytest.raises(UsageError, match="already holds 2 epochs, more than --epochs 1"):
        train(1, resume=True)
    again = train(2, resume=True)
    assert again.already_finished and again.steps == resumed.steps
    assert again.val_acc == resumed.val_acc and again.best_acc == resumed.best_acc
    assert again.final_loss == resumed.final_loss
