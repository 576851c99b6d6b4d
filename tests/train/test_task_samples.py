"""The samples that are not classifiers, causallm and detector: their bundled data tasks,
and each trained, exported and judged by the README's ``amptool run`` at O2 (on the first 768
samples of its task)."""
import json
from pathlib import Path

import numpy as np
import pytest

from amptool.data.bundled import boxes_dataset, sequences_dataset
from amptool.data.sources import open_arrays, open_images, readable_here
from amptool.errors import UsageError

TOP1 = ("top1_agree", "top1_agree_clear", "ref_acc", "cand_acc", "acc_drop", "acc_drop_clear")
DETECTOR_LOSS = "amptool.samples.losses:BoxAndClassLoss"


def test_sequences_task_is_next_token_and_fixed():
    arrays, y = sequences_dataset()
    tokens = arrays["tokens"]
    assert tokens.shape == y.shape == (2048, 32) and tokens.dtype == y.dtype == np.int32
    assert tokens.min() >= 1 and max(tokens.max(), y.max()) <= 31
    assert np.array_equal(tokens[:, 1:], y[:, :-1])  # y is the next token
    steps = (y - tokens) % 31  # one step per row, the same all along it
    assert (steps == steps[:, :1]).all() and set(np.unique(steps)) == {1, 2, 3, 5}
    again, y2 = sequences_dataset()
    assert np.array_equal(again["tokens"], tokens) and np.array_equal(y2, y)


def test_boxes_task_holds_one_rectangle_of_its_class():
    data = boxes_dataset()
    x, box, cls = data["x"], data["y_box"], data["y_cls"]
    assert x.shape == (2048, 1, 32, 32) and x.dtype == np.float32 and 0 <= x.min() <= x.max() <= 1
    assert box.shape == (2048, 4) and box.dtype == np.float32 and cls.dtype == np.int32
    assert set(np.unique(cls)) == {0, 1, 2} and np.bincount(cls).min() > 600
    for i in range(0, 2048, 97):  # the bright pixels are exactly the box
        x0, y0, x1, y1 = np.round(box[i] * 32).astype(int)
        bright = np.argwhere(x[i, 0] > 0.5)
        assert (bright.min(axis=0) == (y0, x0)).all() and (bright.max(axis=0) + 1 == (y1, x1)).all()
        w, h = x1 - x0, y1 - y0
        assert cls[i] == (0 if w >= 1.5 * h else 1 if h >= 1.5 * w else 2)
    assert np.array_equal(boxes_dataset()["x"], x)


def test_task_sources_feed_their_models_only():
    from amptool.network.models import resolve_model

    lm = resolve_model("causallm")
    rows, (names, ys) = open_arrays("sequences", lm.inputs, None, labels=False)
    assert names == ("y",) and ys[0].shape == (2048, 32) and len(rows) == 2048
    rows, (names, ys), _ = open_images("boxes", (1, 32, 32), None, ("y_box", "y_cls"),
                                       labels=False)
    assert names == ("y_box", "y_cls") and [y.shape for y in ys] == [(2048, 4), (2048,)]
    with pytest.raises(UsageError, match="holds token ids, not images.*causallm"):
        open_images("sequences", (1, 32, 32), 10)
    _, labels, _ = open_images("boxes", (1, 32, 32), 3)  # as a classifier's: the shapes
    assert np.array_equal(labels, boxes_dataset()["y_cls"])
    rows, (names, ys) = open_arrays("sequences:64", lm.inputs, None, labels=False)
    assert len(rows) == 64 and np.array_equal(ys[0], sequences_dataset()[1][:64])
    rows, (names, ys), _ = open_images("boxes:100", (1, 32, 32), None, ("y_box", "y_cls"),
                                       labels=False)
    assert len(rows) == 100 and np.array_equal(ys[1], boxes_dataset()["y_cls"][:100])
    with pytest.raises(UsageError, match="'boxes:4096' asks for 4096 samples; it holds 2048"):
        open_images("boxes:4096", (1, 32, 32), 3)
    assert readable_here("boxes:768") and not readable_here("npz:/no/such/file.npz")
    detector = resolve_model("detector")
    assert detector.num_classes is None and detector.class_logits == (1,)
    assert lm.num_classes is None and lm.class_logits is None


def _run(doc_run, name: str) -> tuple:
    """(pipeline folder, summary.json) of the README's ``amptool run`` of this sample (on
    the first 768 samples of its bundled task, one epoch), run once per session."""
    run = doc_run(name)
    folder = run.cwd / "runs" / {"causallm": "lm", "detector": "det"}[name]
    return folder, json.loads((folder / "summary.json").read_text())


def _losses(run: Path) -> list:
    rows = (json.loads(line) for line in (run / "train" / "metrics.jsonl").read_text().splitlines())
    return [r["loss"] for r in rows if "loss" in r]


def _verdicts(run: Path) -> list:
    return json.loads((run / "parity.json").read_text())["candidates"]


@pytest.mark.slow
def test_causallm_trains_under_the_range_pass_and_passes_parity(doc_run):
    """At plain O2 its mask, (1 - causal) * -1e9 added in fp16, is -inf times 0: NaN
    (measured: the run stops at step 10). The range pass keeps both attention cells."""
    run, summary = _run(doc_run, "causallm")
    losses = _losses(run)
    assert losses[-1] < losses[0] - 0.3 and summary["passed"]
    policy = json.loads((run / "train" / "run.json").read_text())["policy"]
    assert {"blocks.0.attn", "blocks.1.attn"} <= set(policy["fp32_cells"])
    cands = _verdicts(run)
    formats = {(c["format"], c["precision"]) for c in cands}
    assert {("MINDIR", "fp16"), ("ONNX", "fp32"), ("ONNX", "fp16")} <= formats
    for cand in cands:  # (N, T, V) token logits: judged by their errors, never top-1
        out = cand["outputs"][0]
        assert not set(TOP1) & set(out["metrics"]) and cand["passed"]
        assert "max_abs_scaled" in {r["metric"] for r in out["checks"]}
    for manifest in (run / "export").glob("*.json"):
        facts = json.loads(manifest.read_text())
        if "task" in facts:
            assert facts["task"]["kind"] == "token-cross-entropy"
            assert facts["model"]["name"] == "causallm"


@pytest.mark.slow
def test_detector_trains_at_o2_and_parity_judges_each_output(doc_run):
    run, summary = _run(doc_run, "detector")
    losses = _losses(run)
    assert losses[-1] < 0.8 * losses[0] and summary["passed"]
    cands = _verdicts(run)
    assert len(cands) == 3
    for cand in cands:
        box, logits = cand["outputs"]
        assert not set(TOP1) & set(box["metrics"])  # the box: its errors only
        assert "max_abs_scaled" in {r["metric"] for r in box["checks"]}
        checked = {r["metric"] for r in logits["checks"]}
        assert {"top1_agree_clear", "acc_drop_clear"} <= checked  # the logits: top-1, accuracy
        assert 0 <= logits["metrics"]["cand_acc"] <= 1 and cand["passed"]  # labels: y_cls
    accuracy = [a["accuracy"] for a in summary["artefacts"]]  # the class logits' accuracy
    assert accuracy[0] is not None and accuracy[0] == accuracy[1]
    manifests = [json.loads(p.read_text()) for p in (run / "export").glob("*.json")]
    recorded = [m for m in manifests if "task" in m]
    assert recorded and all(m["task"]["targets"] == ["y_box", "y_cls"]
                            and m["model"]["class_logits"] == [1] for m in recorded)


def test_a_recorded_sample_loss_runs_and_another_package_loss_does_not(tmp_path):
    from amptool.network.trust import vet_recorded_code

    assert vet_recorded_code(DETECTOR_LOSS, None, "run.json", tmp_path, "loss") == DETECTOR_LOSS
    with pytest.raises(UsageError, match="from package amptool, which is not trusted"):
        vet_recorded_code("amptool.network.losses:build_loss", None, "run.json", tmp_path, "loss")


@pytest.mark.slow
def test_detector_golden_outputs_keep_the_class_labels(doc_run, tmp_path):
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    run, _ = _run(doc_run, "detector")
    golden = tmp_path / "golden.npz"
    fp32, fp16 = (str(run / "export" / f"detector_{p}.mindir") for p in ("fp32", "fp16"))
    parity(ParityConfig(reference=fp32, candidates=(fp16,), save_outputs=str(golden),
                        samples=32, emulate_settings=False))
    with np.load(golden) as z:
        assert z["labels"].shape == (32,) and z["labels"].dtype == np.int64  # y_cls
        assert {"target_0", "target_1"} <= set(z.files)  # y_box and y_cls, for --metric
    again = parity(ParityConfig(load_outputs=str(golden), candidates=(fp16,),
                                emulate_settings=False)).candidates[0]
    box, logits = again.outputs
    assert logits.metrics.cand_acc is not None and not set(TOP1) & set(box.metrics.figures())


def test_a_factory_declares_its_class_logits_output(monkeypatch):
    from amptool.network.models import resolve_model
    from amptool.samples.tasks import TinyDetector

    ref = "amptool.samples.tasks:TinyDetector"
    image = "x:-1x1x32x32:float32"
    spec = resolve_model(ref, {"num_classes": 5}, image)  # a box head of 4 is no class count
    assert spec.num_classes is None and spec.class_logits == (1,)
    assert spec.describe()["class_logits"] == [1]
    monkeypatch.setattr(TinyDetector, "class_logits", (2,))
    with pytest.raises(UsageError, match=r"declares class_logits \(2,\), but it has 2 "
                                         r"output\(s\); declare the indices"):
        resolve_model(ref, {"num_classes": 5}, image)


@pytest.mark.slow
def test_detector_artefacts_without_a_recorded_loss_are_judged_by_the_declaration(doc_run,
                                                                                 tmp_path):
    """As exported from a bare checkpoint (``export --ckpt``): no ``task`` in the manifests;
    the model's ``class_logits`` still decides, and ``boxes`` gives its shapes as labels."""
    import shutil

    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    run, _ = _run(doc_run, "detector")
    paths = []
    for precision in ("fp32", "fp16"):
        name = f"detector_{precision}.mindir"
        shutil.copy(run / "export" / name, tmp_path / name)
        manifest = json.loads((run / "export" / f"{name}.json").read_text())
        manifest["task"] = None  # as export --ckpt writes it
        manifest["deployment"] = None
        (tmp_path / f"{name}.json").write_text(json.dumps(manifest))
        paths.append(str(tmp_path / name))
    report = parity(ParityConfig(reference=paths[0], candidates=(paths[1],), data="boxes",
                                 samples=32, emulate_settings=False))
    box, logits = report.candidates[0].outputs
    assert not set(TOP1) & set(box.metrics.figures()) and "max_abs_scaled" in {
        r.metric for r in box.checks}
    assert logits.metrics.cand_acc is not None and report.passed


@pytest.mark.slow
def test_every_output_is_read_by_the_summary_the_exit_and_the_search(doc_run, tmp_path):
    """The detector's class logits are its second output: the summary's row takes its
    accuracy drop from there and its cosine from the worst output; a fault planted in the
    class head alone fails the candidate (the run's exit), named by output, though the first
    output passes; and convert search judges both outputs of every trial."""
    from amptool.convert.search import SearchConfig, search_policy
    from amptool.documents.summary import ArtefactRow
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig
    from amptool.parity.report import failure_line
    from amptool.pipeline import breach_lines, output_rows

    from ..parity.conftest import corrupt_mindir_weight

    run, summary = _run(doc_run, "detector")
    for row in summary["artefacts"][1:]:
        assert [o["name"] for o in row["outputs"]] == ["output0", "output1"]
        assert row["cosine"] == min(o["cosine"] for o in row["outputs"])
        assert row["drop"]["metric"] == "acc_drop_clear"  # from output1, the class logits
    fp32, fp16 = (str(run / "export" / f"detector_{p}.mindir") for p in ("fp32", "fp16"))
    bad = str(corrupt_mindir_weight(fp16, tmp_path / "bad", "cls.weight", rows=1))
    report = parity(ParityConfig(reference=fp32, candidates=(bad,), samples=64,
                                 emulate_settings=False))
    verdict = report.verdict(bad)
    assert not report.passed and not verdict.passed
    assert [name for name, _ in verdict.failed_outputs] == ["output1"]
    assert report.candidates[0].outputs[0].passed  # the box output alone passes
    row = ArtefactRow("MINDIR", "fp16", bad, 0, None, None, "FAIL",
                      outputs=output_rows(verdict))
    lines = breach_lines([row])
    assert len(lines) == 1 and lines[0].startswith("FAIL MINDIR fp16 output1: "), lines
    assert "output1 " in failure_line(report)
    found = search_policy(SearchConfig(run=str(run / "train"), samples=64, range_safety=None,
                                       out=str(tmp_path / "p.toml"))).to_dict()
    assert len(found["thresholds"]["outputs"]) == 2
    box, logits = found["trials"][0]["metrics"]["outputs"]
    assert not set(TOP1) & set(box) and "p999_abs_scaled" in box
    assert {"top1_agree_clear", "acc_drop_clear"} <= set(logits)  # labels: y_cls
    assert found["thresholds"]["outputs"][0]["max_p999_abs_scaled"] == 2 ** -5
    assert found["thresholds"]["outputs"][1]["min_top1"] == 0.99
