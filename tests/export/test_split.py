"""Artefacts whose weights are written apart from their graph, as a big network's are.

MindSpore writes MINDIR past 1 GiB of parameters as ``<name>_graph.mindir`` plus
``<name>_variables/``, and amptool has ONNX keep its weights in external data from there on
too (MindSpore's own limit is 2 GiB); ``AMPTOOL_SPLIT_BYTES``
lowers both limits, so a 1.6 MB network takes the path a gigabyte one takes: export,
inspect, run, parity (with per-layer and the stored-weight check) and convert.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from amptool.cli import app

from .conftest import FP32_REL, scaled_max_abs
from .user_models import save_init_checkpoint, triu_net, wide_mlp

pytestmark = pytest.mark.slow  # exports real networks

HERE = Path(__file__).parent
MODEL = f"{HERE / 'user_models.py'}:wide_mlp"
SPLIT = {"AMPTOOL_SPLIT_BYTES": "4096"}
cli = CliRunner()


def invoke(*args, env=None):
    return cli.invoke(app, [str(a) for a in args], env=env)


def listing(folder: Path) -> list:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_init_checkpoint(wide_mlp, tmp_path_factory.mktemp("split") / "wide.ckpt")


@pytest.fixture(scope="module")
def split(ckpt, tmp_path_factory):
    """wide_mlp exported split: MINDIR and ONNX, fp32 and fp16."""
    out = tmp_path_factory.mktemp("split-out")
    res = invoke("export", "--ckpt", ckpt, "--model", MODEL, "--data", "none",
                 "-f", "mindir,onnx", "--out", out, "--json", env=SPLIT)
    assert res.exit_code == 0, res.output
    by = {(a["format"], a["precision"]): a for a in json.loads(res.output)}
    return out, by


def test_the_split_form_is_written_as_one_set(split):
    out, by = split
    assert listing(out) == [
        "model", "model/user_models.py",
        "wide_mlp_fp16.onnx", "wide_mlp_fp16.onnx.data", "wide_mlp_fp16.onnx.json",
        "wide_mlp_fp16_graph.mindir", "wide_mlp_fp16_graph.mindir.json",
        "wide_mlp_fp16_variables", "wide_mlp_fp16_variables/data_0",
        "wide_mlp_fp32.onnx", "wide_mlp_fp32.onnx.data", "wide_mlp_fp32.onnx.json",
        "wide_mlp_fp32_graph.mindir", "wide_mlp_fp32_graph.mindir.json",
        "wide_mlp_fp32_variables", "wide_mlp_fp32_variables/data_0"]
    assert Path(by[("MINDIR", "fp32")]["path"]).name == "wide_mlp_fp32_graph.mindir"
    from amptool.files.fileio import sha256

    for art in by.values():
        m = art["manifest"]
        files = m["files"]
        assert len(files) == 2 and files[0]["path"] == Path(art["path"]).name
        for f in files:
            on_disk = out / f["path"]
            assert (f["size"], f["sha256"]) == (on_disk.stat().st_size, sha256(on_disk))
        assert m["total_size"] == sum(f["size"] for f in files)
        # the weights are in the data file, not the graph
        assert files[1]["size"] >= m["params"]["bytes"] > 50 * files[0]["size"]
    p32, p16 = (by[("MINDIR", p)]["manifest"]["params"] for p in ("fp32", "fp16"))
    assert p16["bytes"] * 2 == p32["bytes"]


def test_without_the_knob_the_same_network_is_one_file(ckpt, tmp_path):
    res = invoke("export", "--ckpt", ckpt, "--model", MODEL, "--data", "none", "-f", "mindir",
                 "--precision", "fp32", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    assert listing(tmp_path) == ["model", "model/user_models.py", "wide_mlp_fp32.mindir",
                                 "wide_mlp_fp32.mindir.json"]


def test_onnx_goes_apart_where_mindspore_splits_a_mindir(ckpt, tmp_path, monkeypatch):
    """An ONNX export writes its weights apart from MindSpore's MINDIR threshold on
    (``TOTAL_SAVE``, 1 GiB), not only past protobuf's 2 GiB: below it MindSpore's exporter
    holds the network, the message and its bytes at once. The threshold lowered, not the
    knob: both formats come out split."""
    import mindspore.train.serialization as serialization

    monkeypatch.delenv("AMPTOOL_SPLIT_BYTES", raising=False)
    monkeypatch.setattr(serialization, "TOTAL_SAVE", 4)  # KiB
    res = invoke("export", "--ckpt", ckpt, "--model", MODEL, "--data", "none", "-f",
                 "mindir,onnx", "--precision", "fp32", "--out", tmp_path)
    assert res.exit_code == 0, res.output
    names = listing(tmp_path)
    assert "wide_mlp_fp32.onnx.data" in names and "wide_mlp_fp32_graph.mindir" in names


def _eager(ckpt, x):
    import mindspore as ms

    from amptool.network.checkpoint import load_into_net, read_checkpoint

    net = wide_mlp()
    load_into_net(net, read_checkpoint(ckpt))
    net.set_train(False)
    return net(ms.Tensor(x)).asnumpy()


def test_split_artefacts_run_and_match_the_network(split, ckpt):
    from amptool.artefact.runners import load_runner

    out, by = split
    x = np.random.default_rng(0).standard_normal((5, 1, 28, 28)).astype(np.float32)
    ref = _eager(ckpt, x)
    for (fmt, precision), art in by.items():
        got = load_runner(art["path"]).run([x])[0]
        bound = FP32_REL if precision == "fp32" else 1e-2  # fp16 weights: ~1e-3 relative
        assert scaled_max_abs(got, ref) <= bound, (fmt, precision)
    # the name a one-file export would have finds the split graph
    named = load_runner(out / "wide_mlp_fp32.mindir")
    assert named.path.endswith("wide_mlp_fp32_graph.mindir")


def test_inspect_shows_and_checks_every_file(split, tmp_path):
    out, by = split
    res = invoke("inspect", by[("MINDIR", "fp16")]["path"])
    assert res.exit_code == 0, res.output
    assert "weights apart: 1 file(s) beside it (wide_mlp_fp16_variables/data_0)" in res.output
    assert "precision fp16" in res.output and "matches the file" in res.output
    res = invoke("inspect", by[("ONNX", "fp32")]["path"], "--json")
    facts = json.loads(res.output)
    assert [f["path"] for f in facts["files"]] == ["wide_mlp_fp32.onnx",
                                                   "wide_mlp_fp32.onnx.data"]
    assert facts["manifest_matches"] and facts["params"]["count"] == 407_050
    # one changed byte in the weights file: the manifest no longer describes the set
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    data = copy / "wide_mlp_fp16_variables" / "data_0"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    res = invoke("inspect", copy / "wide_mlp_fp16_graph.mindir")
    assert "DOES NOT MATCH the file (re-export it): wide_mlp_fp16_variables/data_0 has " \
           "another sha256" in res.output, res.output


def test_parity_per_layer_and_stored_weights_on_split_artefacts(split, ckpt):
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    out, by = split
    report = parity(ParityConfig(
        reference=by[("MINDIR", "fp32")]["path"],
        candidates=(by[("MINDIR", "fp16")]["path"], by[("ONNX", "fp16")]["path"],
                    by[("ONNX", "fp32")]["path"]),
        per_layer=True, samples=32, data="digits"))
    assert report.passed, report.to_dict()
    for cand in report.candidates:  # each side's own stored weights, not a checkpoint's
        weights = cand.weights
        assert weights.reference.endswith("_graph.mindir (stored weights)"), weights
        assert weights.candidate == f"{cand.path} (stored weights)", weights
        assert not weights.mismatched


def test_the_stored_weight_check_reads_the_variables_file(split, tmp_path):
    """A weight changed in data_0 (with the manifest rewritten to match) is caught."""
    from mindspore.train import mind_ir_pb2

    from amptool.artefact.files import file_facts
    from amptool.parity.compare import parity
    from amptool.parity.config import ParityConfig

    out, by = split
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    graph = copy / "wide_mlp_fp16_graph.mindir"
    model = mind_ir_pb2.ModelProto()
    model.ParseFromString(graph.read_bytes())
    param = next(p for p in model.graph.parameter if p.name.endswith("fc1.weight"))
    data = copy / param.external_data.location
    raw = bytearray(data.read_bytes())
    start = param.external_data.offset
    values = np.frombuffer(bytes(raw[start:start + 784 * 4 * 2]), np.float16).copy()
    raw[start:start + values.nbytes] = (values * 3 + 1).astype(np.float16).tobytes()
    data.write_bytes(bytes(raw))
    manifest_file = copy / "wide_mlp_fp16_graph.mindir.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["files"] = file_facts(graph)
    manifest_file.write_text(json.dumps(manifest))
    report = parity(ParityConfig(reference=by[("MINDIR", "fp32")]["path"],
                                 candidates=(str(graph),), samples=16, data="digits",
                                 per_layer=True))
    weights = report.candidates[0].weights
    assert weights.candidate.endswith("(stored weights)"), weights
    assert [w.name for w in weights.mismatched] == ["fc1.weight"], weights
    assert not report.passed


def test_convert_reads_a_split_artefacts_policy(split):
    out, by = split
    res = invoke("convert", "policy", "--policy", f"{by[('MINDIR', 'fp16')]['path']}.json")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("policy O2")


def test_force_replaces_the_other_form_and_nothing_else(split, ckpt, tmp_path):
    out = tmp_path / "o"
    args = ("export", "--ckpt", ckpt, "--model", MODEL, "--data", "none", "-f", "mindir,onnx",
            "--precision", "fp32", "--out", out)
    assert invoke(*args).exit_code == 0
    res = invoke(*args, env=SPLIT)  # the one-file forms are there: refused
    assert res.exit_code == 2 and "--force" in res.output, res.output
    assert invoke(*args, "--force", env=SPLIT).exit_code == 0
    assert listing(out) == [
        "model", "model/user_models.py", "wide_mlp_fp32.onnx", "wide_mlp_fp32.onnx.data",
        "wide_mlp_fp32.onnx.json", "wide_mlp_fp32_graph.mindir",
        "wide_mlp_fp32_graph.mindir.json", "wide_mlp_fp32_variables",
        "wide_mlp_fp32_variables/data_0"]
    assert invoke(*args, "--force").exit_code == 0  # and back: no stale weights left
    assert listing(out) == ["model", "model/user_models.py", "wide_mlp_fp32.mindir",
                            "wide_mlp_fp32.mindir.json", "wide_mlp_fp32.onnx",
                            "wide_mlp_fp32.onnx.json"]


def test_a_failed_split_export_leaves_nothing(tmp_path):
    """ONNX fails after the split MINDIR was staged: neither is left."""
    ckpt = save_init_checkpoint(triu_net, tmp_path / "t.ckpt")
    res = invoke("export", "--ckpt", ckpt, "--model", f"{HERE / 'user_models.py'}:triu_net",
                 "--data", "none", "-f", "mindir,onnx", "--out", tmp_path / "o", env=SPLIT)
    assert res.exit_code == 2 and "Triu" in res.output, res.output
    assert not (tmp_path / "o").exists() or listing(tmp_path / "o") == []


def test_too_little_free_space_is_refused_up_front(ckpt, tmp_path, monkeypatch):
    import amptool.files.fileio

    monkeypatch.setattr(amptool.files.fileio, "free_bytes", lambda folder: 5_000_000)
    res = invoke("export", "--ckpt", ckpt, "--model", MODEL, "--data", "none",
                 "-f", "mindir,onnx", "--out", tmp_path / "o")
    assert res.exit_code == 2, res.output
    assert res.output.count("\n") == 1 and "Traceback" not in res.output
    # 407,050 parameters: 2 artefacts x 4 bytes + 2 x 2 bytes, each with 5% and 16 MiB more,
    # and the fp32 MindIR's split form, which its one file is streamed from
    needed = sum(2 * (int(407_050 * b * 1.05) + (16 << 20)) for b in (4, 2))
    needed += int(407_050 * 4 * 1.05) + (16 << 20)
    assert f"exporting 4 artefact(s) needs about {needed / 1e6:.2f} MB in" in res.output, \
        res.output
    assert "which has 5.00 MB free; nothing was written" in res.output
    assert not (tmp_path / "o").exists() or listing(tmp_path / "o") == []


def test_the_deployment_settings_follow_the_form_written(ckpt, tmp_path):
    """Settings of a split fp16 graph are named after its graph file and checked by inspect;
    re-exported in one file with --force, the split form's graph, weights and settings go
    and the one file gets its own."""
    policy = tmp_path / "keep.json"
    policy.write_text(json.dumps({"level": "O2", "fp32_cells": ["fc2"]}))
    out = tmp_path / "o"
    base = ["export", "--ckpt", ckpt, "--model", MODEL, "--data", "none", "--policy", policy,
            "--precision", "fp16", "--out", out]
    res = invoke(*base, env=SPLIT)
    assert res.exit_code == 0, res.output
    graph = out / "wide_mlp_fp16_graph.mindir"
    settings = [f"{graph.name}.lite.ini", f"{graph.name}.atc.txt"]
    assert set(settings) <= set(listing(out))
    manifest = json.loads((out / f"{graph.name}.json").read_text())
    assert sorted(f["name"] for f in manifest["deployment"]["files"]) == sorted(settings)
    res = invoke("inspect", graph)
    assert res.exit_code == 0 and "deployment settings" in res.output, res.output
    res = invoke(*base, "--force")
    assert res.exit_code == 0, res.output
    one = "wide_mlp_fp16.mindir"
    assert listing(out) == sorted(["model", "model/user_models.py", one, f"{one}.json",
                                   f"{one}.lite.ini", f"{one}.atc.txt"])



def test_amptool_run_goes_through_on_the_split_form(tmp_path):
    """The whole pipeline (train, export, parity, summary) on artefacts written split."""
    out = tmp_path / "pipe"
    res = invoke("run", "--model", MODEL, "--data", "synthetic", "--epochs", "1",
                 "--samples", "32", "--onnx", "off", "--out", out, env=SPLIT)
    assert res.exit_code == 0, res.output
    assert "parity PASSED on 32 samples" in res.output
    summary = json.loads((out / "summary.json").read_text())
    rows = {(r["format"], r["precision"]): r for r in summary["artefacts"]}
    assert rows[("MINDIR", "fp16")]["verdict"] == "PASS"
    for precision in ("fp32", "fp16"):
        assert Path(rows[("MINDIR", precision)]["path"]).name == \
            f"wide_mlp_{precision}_graph.mindir"
        assert (out / "export" / f"wide_mlp_{precision}_variables" / "data_0").is_file()


def test_the_split_forms_carry_their_provenance(split, tmp_path):
    """The graph file of a split MindIR (read by its graph's name or the name asked for) and
    an ONNX graph with external data carry the provenance, copied alone too; the audit
    reads them without their weights."""
    from amptool.artefact.audit import audit_artefact
    from amptool.artefact.provenance import read_provenance

    out, by = split
    for (fmt, precision), art in by.items():
        found = read_provenance(art["path"])
        assert found is not None and (found.format, found.precision) == (fmt, precision)
        assert found.checkpoint.name == "wide.ckpt"
        copy = tmp_path / f"{fmt}-{precision}{Path(art['path']).suffix}"
        shutil.copyfile(art["path"], copy)
        assert read_provenance(copy) == found
        assert audit_artefact(art["path"]).findings == []
    asked = out / "wide_mlp_fp16.mindir"  # the name asked for: its split graph is found
    assert read_provenance(asked) == read_provenance(by[("MINDIR", "fp16")]["path"])
