"""The fp32-cell search: finds the planted fp16-unsafe cell, keeps nothing on a healthy
model, fails clearly when nothing passes."""
import json
from pathlib import Path

import pytest
from schemas import assert_fits
from typer.testing import CliRunner

from amptool.cli import app
from amptool.convert.bisection import bisect, bisect_cells, sub_units
from amptool.convert.result import SearchResult
from amptool.files.fileio import jsonable
from amptool.precision.policy import load_policy, make_policy, save_policy

pytestmark = pytest.mark.slow  # trains or exports real networks

runner = CliRunner()


def _one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amptool: error:"), result.output
    return lines[0]


def _oracle(needed):
    calls = []

    def trial(kept, phase):
        calls.append(list(kept))
        return all(any(c in kept for c in group) for group in needed)

    return trial, calls


def test_bisect_finds_scattered_cells_in_fewer_trials_than_brute_force():
    cells = [f"c{i}" for i in range(32)]
    trial, calls = _oracle([{"c3"}, {"c29"}])
    assert bisect(cells, trial) == ["c3", "c29"]
    assert len(calls) < len(cells)


def test_bisect_drop_phase_removes_a_cell_needed_only_earlier():
    """c1 is needed only while c6 is fp32 (cells interact): once c6 went fp16, drop c1."""
    cells = [f"c{i}" for i in range(8)]
    log = []

    def trial(kept, phase):
        log.append(phase)
        return "c4" in kept and ("c1" in kept or "c6" not in kept)

    assert bisect(cells, trial) == ["c4"]
    assert "drop" in log


# a network as leaf paths in execution order: a stem, a stage of eight blocks, a head
LEAVES = (["stem"] + [f"stage.{b}.{leaf}" for b in range(8) for leaf in ("conv", "bn", "act")]
          + ["head"])
BLOCKS = ["stage"] + [f"stage.{b}" for b in range(8)]


def _block_oracle(leaf=None, block=None):
    """Passes when ``leaf`` is kept, or when ``block``'s own construct is fp32: the block
    kept, or a cell holding it, or every leaf inside it (as ``close_kept`` does)."""
    calls = set()  # distinct networks tried, as the search's cache counts them

    def under(path, unit):
        return path == unit or path.startswith(unit + ".")

    def trial(kept, phase):
        covered = frozenset(p for p in LEAVES if any(under(p, k) for k in kept))
        calls.add((covered, frozenset(b for b in BLOCKS if any(under(b, k) for k in kept) or all(
            p in covered for p in LEAVES if under(p, b)))))
        if leaf is not None:
            return any(under(leaf, k) for k in kept)
        inside = [p for p in LEAVES if under(p, block)]
        return (any(under(block, k) for k in kept)
                or all(any(under(p, k) for k in kept) for p in inside))

    return trial, calls


def test_sub_units_walk_blocks_in_execution_order():
    assert sub_units(LEAVES, "") == ["stem", "stage", "head"]
    assert sub_units(LEAVES, "stage") == BLOCKS[1:]
    assert sub_units(LEAVES, "stage.2") == ["stage.2.conv", "stage.2.bn", "stage.2.act"]
    assert sub_units(["a.b.c", "a.b.d"], "") == ["a.b.c", "a.b.d"]  # a chain is skipped
    # a block holding a cell the base forces to fp16 (no candidate) is never a unit
    leaves = [p for p in LEAVES if p != "stage.1.act"]
    assert sub_units(leaves, "", avoid={"stage.1.act"}) == (
        ["stem", "stage.0", "stage.1.conv", "stage.1.bn"] + BLOCKS[3:] + ["head"])


def test_bisect_cells_keeps_a_block_whose_own_construct_needs_fp32():
    trial, calls = _block_oracle(block="stage.1")
    assert bisect_cells(LEAVES, trial) == ["stage.1"]
    assert len(calls) < len(LEAVES)


def test_bisect_cells_goes_inside_a_block_when_a_leaf_is_enough():
    trial, calls = _block_oracle(leaf="stage.2.act")
    assert bisect_cells(LEAVES, trial) == ["stage.2.act"]
    assert len(calls) < len(LEAVES)


def test_bisect_cells_never_keeps_a_block_around_a_forced_fp16_cell():
    trial, calls = _block_oracle(leaf="stage.1.conv")
    leaves = [p for p in LEAVES if p != "stage.1.act"]
    assert bisect_cells(leaves, trial, avoid={"stage.1.act"}) == ["stage.1.conv"]
    assert not any({"stage", "stage.1"} & blocks for _, blocks in calls)


SEARCH_KEYS = {"base", "base_kept", "brute_force_trials", "candidates", "ckpt", "classifier",
               "confirm", "device", "flops_fp16", "kept", "kept_where", "metric", "model",
               "n_trials", "out", "params_fp16", "policy", "range_kept", "ranges", "samples",
               "schema_version", "seconds", "thresholds", "trials", "trials_saved"}
"""``amptool convert search --json``'s keys, as the dict-built result wrote them (with its
``schema_version`` since)."""


@pytest.fixture(scope="module")
def trap_search(trap_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("search") / "trap.toml"
    # the trials alone (no range pass): bisection must find the cell by itself
    result = runner.invoke(app, ["convert", "search", "--run", str(trap_run), "--samples", "128",
                                 "--range-safety", "off", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_range_pass_keeps_trapmlp_norm_before_any_trial(trap_run, tmp_path):
    """norm's overflow stays inside it (a sum of squares): its fp16 error shows it."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "ranges.png"
    result = runner.invoke(app, ["convert", "search", "--run", str(trap_run), "--samples", "128",
                                 "--json", "--plot", str(png),
                                 "--out", str(tmp_path / "trap.toml")])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["range_kept"] == ["norm"] and report["kept"] == ["norm"]
    assert report["n_trials"] <= 1 and report["confirm"]["passed"]
    norm = next(r for r in report["ranges"] if r["path"] == "norm")
    assert norm["local_error"] >= 0.5 and norm["out_max"] < 100
    assert set(report) == SEARCH_KEYS and set(report["confirm"]) == {"metrics", "mode", "passed"}
    assert {key for t in report["trials"] for key in t} == {"fp32", "metrics", "passed", "phase",
                                                            "trial"}
    assert json.loads(json.dumps(jsonable(SearchResult.from_dict(report).to_dict()))) == report
    assert_fits(report, "search-result")
    assert "range pass: computing alone in fp16 it is off by" in \
        (tmp_path / "trap.toml").read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_search_keeps_the_planted_cell(trap_search):
    out, text = trap_search
    policy = load_policy(out)
    assert policy.level == "O3" and "norm" in policy.fp32_cells and len(policy.fp32_cells) <= 2
    trials = [line for line in text.splitlines() if line.startswith("trial")]
    assert "all-fp16" in trials[0] and trials[0].endswith("FAIL")
    assert "all-fp32" in trials[1] and trials[1].endswith("pass")
    assert "kept in fp32 (beyond the base): norm" in text
    assert f"{len(trials)} trials (brute force: 7)" in text


def test_found_policy_passes_and_all_fp16_fails_on_a_fresh_network(trap_run, trap_search):
    """The planted fault is caught by the metrics, and the found policy removes it."""
    import mindspore as ms

    from amptool.convert.search import judge
    from amptool.convert.subject import load_subject
    from amptool.network.checkpoint import build_with_weights
    from amptool.precision.apply import apply_policy
    from amptool.stats.limits import FP16_VS_FP32

    src = load_subject(str(trap_run), None, None, None, 128)
    x = ms.Tensor(src.x)
    ref = build_with_weights(src.spec, src.weights, "ckpt")(x).asnumpy()
    for policy, expect in ((make_policy("O3"), False), (load_policy(trap_search[0]), True)):
        net = apply_policy(build_with_weights(src.spec, src.weights, "ckpt"), policy)
        ok, metrics = judge(ref, net(x).asnumpy(), src.y, FP16_VS_FP32)
        assert ok is expect, metrics


def test_healthy_model_keeps_nothing_beyond_the_base(cnn_run, tmp_path):
    out = tmp_path / "cnn.json"
    result = runner.invoke(app, ["convert", "search", "--run", str(cnn_run), "--level", "O2",
                                 "--samples", "128", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["kept"] == [] and report["n_trials"] == 1
    assert report["params_fp16"] == 1.0 and report["flops_fp16"] == 1.0
    assert load_policy(out) == make_policy("O2")


def test_nothing_passes_exits_1_and_writes_nothing(trap_run, tmp_path):
    out = tmp_path / "never.toml"
    result = runner.invoke(app, ["convert", "search", "--run", str(trap_run), "--samples", "64",
                                 "--max-abs", "0", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "amptool: error: no policy passes parity" in result.output
    assert "all-fp32" in result.output and not out.exists()


def test_search_mistakes(trap_run, tmp_path):
    exists = tmp_path / "exists.toml"
    exists.write_text("x")
    bf16 = save_policy(make_policy("O3", "bf16"), tmp_path / "bf16.toml")
    bad = save_policy(make_policy("O3", fp32_cells=["nope"]), tmp_path / "bad.toml")
    run = ["convert", "search", "--run", str(trap_run)]
    cases = [
        (["convert", "search"], "nothing to search on"),
        (run + ["--out", str(exists)], "already exists"),
        (run + ["--out", str(tmp_path / "p.txt")], "unknown extension"),
        (run + ["--level", "O1", "--out", str(tmp_path / "p.toml")], "needs an O2 or O3 base"),
        (run + ["--policy", str(bf16), "--out", str(tmp_path / "p.toml")],
         "bfloat16 is not supported on CPU"),
        (run + ["--policy", str(bad), "--out", str(tmp_path / "p.toml")],
         "unknown cell path(s) nope"),
        (["convert", "search", "--run", str(tmp_path), "--out", str(tmp_path / "p.toml")],
         "has no run.json"),
        (run + ["--ckpt", str(tmp_path / "exists.toml"), "--out", str(tmp_path / "p.toml")],
         "cannot be read"),
    ]
    for args, message in cases:
        assert message in _one_line_error(runner.invoke(app, args)), args
    assert not (tmp_path / "p.toml").exists()


def test_fp16_export_under_the_found_policy_passes_parity(trap_run, trap_search, tmp_path):
    """End to end: search -> export --policy -> amptool parity; the all-fp16 export fails."""
    found, _ = trap_search
    all_fp16 = save_policy(make_policy("O3"), tmp_path / "o3.toml")
    for name, policy in (("found", found), ("o3", all_fp16)):
        result = runner.invoke(app, ["export", "--run", str(trap_run), "--policy", str(policy),
                                     "--precision", "fp16" if name == "o3" else "both",
                                     "--out", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    ref = tmp_path / "found" / "trapmlp_fp32.mindir"
    good = runner.invoke(app, ["parity", str(ref), str(tmp_path / "found" / "trapmlp_fp16.mindir"),
                               "--samples", "128"])
    assert good.exit_code == 0, good.output
    bad = runner.invoke(app, ["parity", str(ref), str(tmp_path / "o3" / "trapmlp_fp16.mindir"),
                              "--samples", "128"])
    assert bad.exit_code == 1 and "parity failed" in bad.output, bad.output


PLANTED = Path(__file__).resolve().parent.parent / "planted_branches.py"


def test_range_pass_keeps_a_block_whose_own_construct_overflows(tmp_path):
    """No leaf covers the branch sum (and a branch is never called, so keeping every
    called leaf does not keep the block): the trials alone find the block, and the range
    pass keeps it before any trial."""
    import mindspore as ms

    model = f"{PLANTED}:build"
    ms.set_seed(0)
    from amptool.network.models import resolve_model

    ms.save_checkpoint(resolve_model(model).build(), str(tmp_path / "seeded.ckpt"))
    base = ["convert", "search", "--ckpt", str(tmp_path / "seeded.ckpt"), "--model", model,
            "--level", "O2", "--samples", "64", "--json"]
    off = runner.invoke(app, base + ["--range-safety", "off", "--out", str(tmp_path / "off.toml")])
    assert off.exit_code == 0, off.output
    trials = json.loads(off.output)
    assert trials["range_kept"] == [] and trials["kept"] == ["block"]
    assert trials["trials"][1]["phase"] == "all-fp32" and trials["trials"][1]["passed"]
    assert trials["confirm"]["passed"]
    # the block's branches kept with its own sum in fp16 fail: it stays whole
    assert [t["passed"] for t in trials["trials"] if t["phase"] == "split"] == [False]
    on = runner.invoke(app, base + ["--out", str(tmp_path / "on.toml")])
    assert on.exit_code == 0, on.output
    result = json.loads(on.output)
    assert result["range_kept"] == ["block"] and result["kept"] == ["block"]
    assert result["n_trials"] <= 1 < trials["n_trials"]  # all-fp16 beside the block passes
    assert result["ranges"][0]["out_max"] > 65504 and result["confirm"]["passed"]
    assert list(load_policy(tmp_path / "on.toml").fp32_cells) == ["block"]
    assert result["kept_where"]["block"].startswith("Branches (planted_branches.py:")
    assert "# fp32 cell block: Branches (planted_branches.py:" in (tmp_path / "on.toml").read_text()
