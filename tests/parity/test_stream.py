"""Parity streamed: arrays on disk read by rows, golden files old and new, the prefetching
thread, candidate statistics merged across shards, and the --metric stream protocol."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

from amptool.errors import UsageError
from amptool.network.taskmetric import metric_mode
from amptool.parity.accumulate import CandidateStats, OutputPlan, TaskStream
from amptool.parity.store import Spool, StoredArray, stored_npz, write_npz
from amptool.parity.stream import prefetched, spans
from amptool.stats.judge import output_role
from amptool.stats.limits import Thresholds
from amptool.stats.metrics import compute_metrics

RNG = np.random.RandomState(7)


def test_spool_writes_batches_and_reads_rows(tmp_path):
    data = [RNG.rand(23, 4, 3).astype(np.float32), RNG.randint(0, 9, 23)]
    spool = Spool(tmp_path / "s", 23)
    for a, b in spans((0, 23), 5):
        spool.append([d[a:b] for d in data])
    stored = spool.close()
    for array, want in zip(stored, data):
        assert np.array_equal(array.rows(4, 17), want[4:17])
        assert np.array_equal(np.load(array.path), want)
        assert array.file() is not None and np.array_equal(array.memmap(), want)


def test_a_spool_short_of_its_rows_is_refused(tmp_path):
    spool = Spool(tmp_path, 10)
    spool.append([np.zeros((4, 2))])
    with pytest.raises(RuntimeError, match="4 rows, 10 announced"):
        spool.close()


def test_npz_written_in_chunks_is_numpys_and_mapped_in_place(tmp_path, monkeypatch):
    from amptool.parity import store

    monkeypatch.setattr(store, "COPY_BYTES", 64)  # many chunks
    spool = Spool(tmp_path / "s", 30)
    out = RNG.rand(30, 7)
    spool.append([out])
    ragged = RNG.rand(30, 9)[:, ::2]  # not contiguous
    write_npz(str(tmp_path / "g.npz"), {"output_0": spool.close()[0].file(), "x": ragged,
                                        "meta": np.frombuffer(b"{}", np.uint8)})
    with np.load(tmp_path / "g.npz") as z:
        assert np.array_equal(z["output_0"], out) and np.array_equal(z["x"], ragged)
    found = stored_npz(str(tmp_path / "g.npz"))
    assert isinstance(found["output_0"], StoredArray) and found["output_0"].file() is None
    assert np.array_equal(found["output_0"].rows(3, 30), out[3:])
    assert np.array_equal(found["x"].memmap(), ragged)


def test_old_savez_and_compressed_golden_files_read(tmp_path):
    out = RNG.rand(12, 5).astype(np.float32)
    np.savez(tmp_path / "old.npz", output_0=out)
    np.savez_compressed(tmp_path / "small.npz", output_0=out)
    assert np.array_equal(stored_npz(str(tmp_path / "old.npz"))["output_0"].rows(0, 12), out)
    assert np.array_equal(stored_npz(str(tmp_path / "small.npz"))["output_0"], out)


def test_a_golden_file_of_mismatched_counts_is_one_line(tmp_path):
    import json

    from amptool.parity.inputs import load_golden

    meta = {"reference": "r", "format": "MINDIR", "precision": "fp32", "preprocess": None,
            "description": "x",
            "inputs_meta": [{"name": "x", "shape": [-1, 3], "dtype": "float32"}],
            "outputs_meta": [{"name": "y", "shape": [-1, 2], "dtype": "float32"}]}
    np.savez(tmp_path / "g.npz", meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             input_0=np.zeros((5, 3), np.float32), output_0=np.zeros((4, 2), np.float32))
    with pytest.raises(UsageError, match="different sample counts"):
        load_golden(str(tmp_path / "g.npz"))
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="is not a golden outputs file"):
        load_golden(str(tmp_path / "bad.npz"))
    assert zipfile.is_zipfile(tmp_path / "g.npz")


def test_prefetched_keeps_order_raises_and_lets_go():
    assert list(prefetched(iter(range(50)))) == list(range(50))

    def failing():
        yield 1
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        list(prefetched(failing()))
    items = prefetched(iter(range(1000)))
    assert next(items) == 0
    items.close()  # the thread stops


def _plan(ref, labels, logits=True):
    limits = Thresholds(min_cosine=0.999, max_acc_drop=0.0)
    return OutputPlan("out", output_role(0, ref[:0]), limits, labels if logits else None)


def test_shards_merge_to_the_one_pass_and_the_whole_arrays():
    ref = RNG.randn(300, 6)
    cand = ref + RNG.randn(300, 6) * 0.05
    labels = RNG.randint(0, 6, 300)
    whole = CandidateStats([_plan(ref, labels)], keep_failing=True)
    for a, b in spans((0, 300), 64):
        whole.update(a, b, [ref[a:b]], [cand[a:b]])
    shards = []
    for span in ((0, 128), (128, 300)):  # shards start on a batch boundary
        part = CandidateStats([_plan(ref, labels)], keep_failing=True)
        for a, b in spans(span, 64):
            part.update(a, b, [ref[a:b]], [cand[a:b]])
        state = part.to_state()
        shards.append(CandidateStats([_plan(ref, labels)]).load_state(state))
    merged = shards[1].merge(shards[0])
    assert merged.outputs()[0].metrics == whole.outputs()[0].metrics
    assert merged.failing == whole.failing and whole.failing
    exact = compute_metrics(ref, cand, labels)
    got = whole.outputs()[0].metrics.figures()
    assert {k: v for k, v in got.items() if k not in ("p999_abs_scaled", "tie_tol", "cosine",
                                                        "mean_abs", "rmse", "rel_l2")} == {
        k: v for k, v in exact.items() if k not in ("p999_abs_scaled", "tie_tol", "cosine",
                                                      "mean_abs", "rmse", "rel_l2")}
    first = whole.first_failing(10)
    assert first[0] == whole.failing[0][0] and len(first) == 10


class _Mean:
    """A streamed metric: the mean of the first output."""

    @staticmethod
    def init():
        return (0.0, 0)

    @staticmethod
    def update(state, outputs, labels):
        return (state[0] + float(outputs[0].sum()), state[1] + outputs[0].size)

    @staticmethod
    def merge(a, b):
        return (a[0] + b[0], a[1] + b[1])

    @staticmethod
    def result(state):
        return state[0] / state[1]

    def __call__(self, outputs, labels):
        return float(np.mean(outputs[0]))


def test_metric_modes_and_the_declaration_a_stream_needs(tmp_path):
    def whole(outputs, labels):
        return float(np.mean(outputs[0]))

    assert metric_mode(_Mean()) == "stream" and metric_mode(whole) == "undeclared"
    whole.needs_all = True
    assert metric_mode(whole) == "whole"
    out = RNG.rand(40, 3)
    streamed = TaskStream(_Mean(), "m.py:mean", None, "candidate")
    spooled = TaskStream(whole, "m.py:whole", None, "candidate", Spool(tmp_path, 40))
    for a, b in spans((0, 40), 16):
        streamed.update(a, b, [out[a:b]])
        spooled.update(a, b, [out[a:b]])
    assert streamed.value() == pytest.approx(spooled.value()) == pytest.approx(out.mean())


class _Linear:
    """A runner computing its outputs from the rows it is fed (logits and a map)."""

    def __init__(self, weight):
        self.weight = weight

    def run(self, arrays):
        x = np.asarray(arrays[0], dtype=np.float64)
        return [(x @ self.weight).astype(np.float32), np.tanh(x[:, :3] * 2).astype(np.float32)]

    def close(self):
        pass


def _side(path, precision, weight):
    from amptool.parity.sides import Side

    io = {"inputs": [{"name": "x", "shape": [-1, 6], "dtype": "Float32"}],
          "outputs": [{"name": "logits", "shape": [-1, 4], "dtype": "Float32"},
                      {"name": "map", "shape": [-1, 3], "dtype": "Float32"}]}
    return Side(path=path, kind="artefact", format="MINDIR", precision=precision, io=io,
                opener=lambda: _Linear(weight), num_classes=4)


def _report(tmp_path, monkeypatch, **kwargs):
    from amptool.parity import compare
    from amptool.parity.config import ParityConfig

    weight = np.random.RandomState(0).randn(6, 4)
    sides = {"ref": _side("ref", "fp32", weight),
             "cand": _side("cand", "fp16", weight + 0.02 * np.random.RandomState(1).randn(6, 4))}
    monkeypatch.setattr(compare, "open_side", lambda path, *_: sides[path])
    x = np.random.RandomState(2).randn(90, 6).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=np.random.RandomState(3).randint(0, 4, 90))
    fed = {} if kwargs.get("load_outputs") else {"reference": "ref",
                                                 "inputs": str(tmp_path / "in.npz")}
    return compare.parity(ParityConfig(candidates=("cand",), device="CPU",
                                       emulate_settings=False, **fed, **kwargs)).to_dict()


def _figures(report):
    return [(o["passed"], o["metrics"]) for c in report["candidates"] for o in c["outputs"]]


def test_figures_do_not_depend_on_the_batches_and_golden_files_round_trip(tmp_path, monkeypatch):
    whole = _report(tmp_path, monkeypatch)
    batched = _report(tmp_path, monkeypatch, batch_size=7,
                      save_outputs=str(tmp_path / "golden.npz"))
    assert _figures(whole) == _figures(batched)
    with np.load(tmp_path / "golden.npz") as z:  # numpy's own reader
        assert z["output_0"].shape == (90, 4) and z["input_0"].shape == (90, 6)
    golden = _report(tmp_path, monkeypatch, batch_size=11,
                     load_outputs=str(tmp_path / "golden.npz"))
    assert _figures(golden) == _figures(whole)
    head = _report(tmp_path, monkeypatch, load_outputs=str(tmp_path / "golden.npz"), samples=30)
    assert head["inputs"]["samples"] == 30
    with pytest.raises(UsageError, match="holds 90 samples, --samples asks for 91"):
        _report(tmp_path, monkeypatch, load_outputs=str(tmp_path / "golden.npz"), samples=91)


def test_a_flip_the_sketch_leaves_open_is_a_finding():
    ref = np.array([[0.0, 10.0, -90.0]] * 101)
    cand = ref.copy()
    cand[:100, 1] += 0.3  # agreeing rows' error 0.3: exact tol = 0.6
    tol = compute_metrics(ref, cand)["tie_tol"]
    ref[100], cand[100] = [0.0, tol * 0.999, -90.0], [tol, tol * 0.999, -90.0]
    stats = CandidateStats([_plan(ref, None)])
    stats.update(0, 101, [ref], [cand])
    found = stats.findings()
    assert [f.kind for f in found] == ["tie_ambiguity"] and "1 top-1 flip" in found[0].message


def test_pages_read_through_a_memory_map_are_let_go(tmp_path):
    from amptool.parity.store import release_pages

    np.save(tmp_path / "a.npy", np.arange(4096 * 64, dtype=np.float32).reshape(-1, 64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    first = np.array(mapped[:512])
    release_pages(mapped[:10])  # a view lets go of its map's pages too
    release_pages(first)  # in memory: left as it is
    assert np.array_equal(np.array(mapped[:512]), first)  # read again from the file


class _Shapes:
    """The batch sizes ``_Linear`` is fed."""

    seen: list = []
    plain = _Linear.run

    @staticmethod
    def run(runner, arrays):
        _Shapes.seen.append(len(arrays[0]))
        return _Shapes.plain(runner, arrays)


def test_a_padded_last_batch_gives_the_unpadded_figures(tmp_path, monkeypatch):
    from amptool.parity import stream

    whole = _report(tmp_path, monkeypatch)  # one batch: run as it is
    monkeypatch.setattr(_Linear, "run", _Shapes.run)
    _Shapes.seen = []
    padded = _report(tmp_path, monkeypatch, batch_size=16)  # 90 = 5 x 16 + 10
    assert set(_Shapes.seen) == {16}  # every batch of one shape, the last one padded
    assert _figures(padded) == _figures(whole)
    monkeypatch.setattr(stream, "pad_size", lambda count, size: None)
    _Shapes.seen = []
    unpadded = _report(tmp_path, monkeypatch, batch_size=16)
    assert 10 in _Shapes.seen and _figures(unpadded) == _figures(padded)
    fed = [np.arange(6).reshape(3, 2)]
    assert stream.padded(fed, 5)[0].tolist() == [[0, 1], [2, 3], [4, 5], [4, 5], [4, 5]]


def test_shards_of_a_spool_write_one_file(tmp_path):
    data = RNG.rand(20, 3).astype(np.float32)
    for span in ((8, 20), (0, 8)):
        spool = Spool(tmp_path, 20, span=span)
        for a, b in spans(span, 4):
            spool.append([data[a:b]])
        spool.close()
    assert np.array_equal(np.load(tmp_path / "output_0.npy"), data)
