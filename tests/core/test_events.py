"""Progress events are typed: each kind's ``to_dict`` is the dict the events were before they
were typed (a worker's ``amptool-event`` line), and ``read_event`` reads it back into the
same event; a step's event is its metrics.jsonl line."""
import json
import math
import typing

import pytest

from amptool.documents.events import (TRAIN_KINDS, Epoch, Finished, Launch, Overwrite, Stage,
                                      Step, TrainEnd, TrainEvent, TrainStart, Warned, read_event)
from amptool.documents.training import TrainSummary

SUMMARY = TrainSummary(val_acc=0.9, best_acc=0.95, steps=44, overflow_steps=1, loss_scale=32768.0,
                       samples_per_s=900.5, final_loss=0.25, epochs=1, workers=2, seconds=3.5,
                       out="runs/x", model="simplecnn", policy="O2/float16", device="CPU",
                       weights_sha256="ab" * 32, loss="cross-entropy", nodes=1, global_batch=64,
                       logs="runs/x/logs", ranks_identical=True)
EVENTS = [
    Warned("3 files skipped"),
    Overwrite("runs/x", ["run.json", "last.ckpt"]),
    Launch(2, 1, 29500, "runs/x/logs"),
    TrainStart(5, 2, 44, "CPU", "O2/float16", "dynamic"),
    Step(10, 1, 0.5, 65536.0, False, 0, 0.001, 812.5),
    Step(1, 1, 2.25, 65536, True, 1, 1, None),
    Epoch(1, val_acc=0.9, best_acc=0.9, val_loss=None, loss=0.5),
    Epoch(2, score="metric", val_score=0.5, best_score=0.75, val_loss=1.5, loss=0.5),
    Finished(5, "runs/x"),
    TrainEnd(SUMMARY),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_a_training_event_reads_back_from_its_worker_line(event):
    line = json.dumps(event.to_dict(), default=str)
    assert read_event(json.loads(line)) == event


def test_every_training_kind_is_read_and_tested():
    assert set(TRAIN_KINDS) == {"warning", "overwrite", "launch", "start", "step", "epoch",
                                "finished", "end"}
    assert {type(e) for e in EVENTS} == set(typing.get_args(TrainEvent))


def test_the_dicts_keep_the_keys_they_had():
    assert EVENTS[6].to_dict() == {"kind": "epoch", "epoch": 1, "val_acc": 0.9,
                                   "best_acc": 0.9, "val_loss": None, "loss": 0.5}
    assert list(EVENTS[7].to_dict()) == ["kind", "epoch", "score", "val_score", "best_score",
                                         "val_loss", "loss"]
    assert Stage("train").to_dict() == {"kind": "stage", "stage": "train"}
    assert Stage("export", ["MINDIR"]).to_dict() == {"kind": "stage", "stage": "export",
                                                     "formats": ["MINDIR"]}
    assert EVENTS[9].to_dict() == {"kind": "end", "summary": SUMMARY.to_dict()}


def test_a_step_is_its_metrics_line():
    step = EVENTS[4]
    assert json.dumps(step.record()) == (
        '{"step": 10, "epoch": 1, "loss": 0.5, "loss_scale": 65536.0, "overflow": false, '
        '"skipped": 0, "lr": 0.001, "samples_per_s": 812.5}')
    assert step.to_dict() == {"kind": "step", **step.record()}


def test_a_non_finite_loss_reads_back():
    step = Step(3, 1, float("nan"), 1.0, True, 3, 0.1, None)
    back = read_event(json.loads(json.dumps(step.to_dict())))
    assert isinstance(back, Step) and math.isnan(back.loss) and back.skipped == 3


@pytest.mark.parametrize("line", [{"kind": "stage", "stage": "train"}, {"kind": "nope"},
                                  {"message": "no kind"}, ["warning"],
                                  {"kind": "step", "step": "10"},
                                  {"kind": "warning", "message": "x", "extra": 1}])
def test_what_is_no_training_event_is_refused(line):
    with pytest.raises(ValueError):
        read_event(line)


def test_a_workers_event_lines_reach_the_launcher_typed(tmp_path, capsys):
    """The lead rank prints each event into its log (``worker._emit``); the job following
    that log hands each line on, cut anywhere, and the launcher reads it back typed."""
    from amptool.runtime.jobwatch import Job
    from amptool.train.worker import _emit

    for event in EVENTS:
        _emit(event)
    printed = "MindSpore says something\n" + capsys.readouterr().out
    job = Job([], {}, tmp_path, [0], 1, 1.0, False)
    got: list = []
    log = tmp_path / "worker_0.log"
    for cut in (0, 17, len(printed) // 2, len(printed)):  # written in pieces, as it runs
        log.write_text(printed[:cut])
        job._follow(lambda line: got.append(read_event(line)))
    assert got == EVENTS
