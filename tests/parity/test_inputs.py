"""``parity --inputs``: arrays matched by the model's own input names and the run's targets,
the rule training's npz data follows (``amptool.data.sources.match_inputs``); several targets
keep the class labels for class logits and say which array they are."""
import numpy as np
import pytest

from amptool.data.sources import match_inputs
from amptool.errors import UsageError
from amptool.parity.inputs import load_golden, load_npz_inputs, pick_labels

RNG = np.random.RandomState(0)
IDS = RNG.randint(0, 64, (12, 32)).astype(np.int32)
MASK = np.ones_like(IDS)
Y = RNG.randint(0, 4, 12)


def _npz(tmp_path, **arrays):
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    return str(path)


def test_inputs_go_by_the_model_names_the_manifest_records(tmp_path):
    """A two-input text network: arrays ids, mask, y although its MindIR names input0, input1."""
    path = _npz(tmp_path, ids=IDS, mask=MASK, y=Y)
    got = load_npz_inputs(path, ["ids", "mask"], None, None, ("input0", "input1"), 4)
    assert np.array_equal(got.given[0], IDS) and np.array_equal(got.given[1], MASK)
    assert np.array_equal(got.labels, Y) and got.labels_from == "y"
    # the graph's own names and input0, input1, ... work as before; x for a single input
    for arrays in ({"input0": IDS, "input1": MASK}, {"mask": MASK, "ids": IDS}):
        got = load_npz_inputs(_npz(tmp_path, **arrays), ["ids", "mask"], 5, None,
                              ("input0", "input1"))
        assert np.array_equal(got.given[0], IDS[:5]) and got.labels is None
    got = load_npz_inputs(_npz(tmp_path, x=IDS, y=Y), ["tokens"], None)
    assert np.array_equal(got.given[0], IDS)


def test_a_mismatch_names_the_arrays_and_the_inputs(tmp_path):
    path = _npz(tmp_path, tokens=IDS, attention=MASK, y=Y)
    with pytest.raises(UsageError) as err:
        load_npz_inputs(path, ["ids", "mask"], None, None, ("input0", "input1"))
    assert "has arrays attention, tokens (targets y), the model takes ids, mask (or input0, " \
           "input1)" in str(err.value)
    with pytest.raises(UsageError, match="different sample counts"):
        load_npz_inputs(_npz(tmp_path, ids=IDS, mask=MASK, y=Y[:5]), ["ids", "mask"], None)
    # training reads npz data by the same function
    with pytest.raises(UsageError, match="has arrays a, b, the model takes ids, mask"):
        match_inputs({"a": IDS, "b": MASK}, ["ids", "mask"], "npz:f.npz")


def test_targets_follow_the_runs_loss_and_several_keep_the_class_labels(tmp_path):
    boxes = RNG.rand(12, 4).astype(np.float32)
    task = {"kind": "factory", "name": "loss.py:det", "targets": ["y_box", "y_cls"],
            "classifier": False}
    path = _npz(tmp_path, x=RNG.rand(12, 8).astype(np.float32), y_box=boxes, y_cls=Y)
    got = load_npz_inputs(path, ["x"], None, task)
    assert got.labels_from == "y_cls" and np.array_equal(got.labels, Y)
    assert [t.shape for t in got.metric_targets] == [(12, 4), (12,)]  # as training's metric
    assert "targets y_box, y_cls; class labels: y_cls" in got.description
    assert got.head(3).targets[0].shape == (3, 4)
    # y0, y1 without a declared loss; a declared target missing in part is one line
    got = load_npz_inputs(_npz(tmp_path, x=boxes, y0=boxes, y1=Y), ["x"], None)
    assert got.target_names == ("y0", "y1") and got.labels_from == "y1"
    with pytest.raises(UsageError, match="the loss takes the targets y_box, y_cls"):
        load_npz_inputs(_npz(tmp_path, x=boxes, y_box=boxes), ["x"], None, task)


def test_labels_out_of_several_targets_are_never_guessed():
    two_int = pick_labels(("a", "b"), [Y, Y], 4)
    assert two_int[0] is None and "several hold one class index" in two_int[2]
    floats = pick_labels(("a", "b"), [Y.astype(np.float32), RNG.rand(12, 2)], None)
    assert floats[0] is None and "none holds" in floats[2]
    too_big = pick_labels(("a", "b"), [Y + 10, RNG.rand(12, 2)], 4)  # not within the classes
    assert too_big[0] is None
    assert pick_labels(("y",), [RNG.rand(12, 3)], None)[0].dtype == np.float64  # as stored


def test_golden_outputs_keep_several_targets(tmp_path):
    from amptool.parity.inputs import InputSet, save_golden
    from amptool.parity.sides import Side

    inputs = InputSet(None, [IDS], Y, "x (12 samples)", None, [IDS[:, :2], Y], ("y_a", "y_b"),
                      "y_b")
    ref = Side(path="ref.mindir", kind="artefact", format="MINDIR", precision="fp32",
               golden={"inputs_meta": [{"name": "ids", "shape": [-1, 32], "dtype": "int32"}],
                       "outputs_meta": [{"name": "out", "shape": [-1, 4], "dtype": "float32"}]})
    save_golden(str(tmp_path / "g.npz"), ref, inputs, [IDS], [RNG.rand(12, 4)])
    _, loaded, _ = load_golden(str(tmp_path / "g.npz"))
    assert loaded.target_names == ("y_a", "y_b") and loaded.labels_from == "y_b"
    assert np.array_equal(loaded.metric_targets[0], IDS[:, :2])


def test_an_image_source_with_several_targets_keeps_its_class_labels(tmp_path):
    from amptool.parity.inputs import load_data_inputs

    rng = np.random.RandomState(1)
    np.savez(tmp_path / "det.npz", x=rng.randint(0, 255, (40, 8, 8)).astype(np.uint8),
             y_box=rng.rand(40, 4).astype(np.float32), y_cls=rng.randint(0, 3, 40))
    prep = {"channels": 1, "height": 8, "width": 8, "mean": 0.5, "std": 0.25}
    task = {"kind": "factory", "name": "loss.py:det", "targets": ["y_box", "y_cls"],
            "classifier": False}
    got = load_data_inputs(f"npz:{tmp_path / 'det.npz'}", prep, None, 0.25, None, task)
    assert got.raw.shape == (10, 1, 8, 8) and got.labels_from == "y_cls"
    assert [t.shape for t in got.metric_targets] == [(10, 4), (10,)]
    assert np.array_equal(got.labels, got.metric_targets[1])
