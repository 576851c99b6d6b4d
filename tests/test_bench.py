"""The benchmark figures quoted in README.md, docs/bench.md and docs/guides/zoo.md are
bench/results.json's."""
import copy
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def render(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("bench.render")


@pytest.fixture(scope="module")
def results() -> dict:
    return json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))


def test_quoted_figures_are_the_results_files(render, results):
    blocks = render.render_blocks(results)
    assert set(blocks) == {render.Block(ROOT / "README.md"),
                           render.Block(ROOT / "docs" / "guides" / "zoo.md", "zoo"),
                           render.Block(ROOT / "docs" / "bench.md")}
    for (path, name), block in blocks.items():
        _, current, _ = render.split_block(path.read_text(encoding="utf-8"), path, name)
        assert current == block, (f"{path.name} {name}: its figures differ from "
                                  "bench/results.json; run `python -m bench --render`")


def _scaled(value):
    """Every number in ``value`` changed (x -> 3x + 1), the rest as it is."""
    if isinstance(value, dict):
        return {k: v if k == "targets" else _scaled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scaled(v) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 3 + 1
    return value


def test_every_figure_and_the_machine_come_from_the_results(render, results):
    """Change a benchmark's figures, the load and the commit: every block that quotes it
    follows (README: the three headline benchmarks and its whole tables; the zoo guide: the
    zoo)."""
    headline = {name for name, _ in render.HEADLINE}
    headline |= {name for names, _ in render.README_TABLES for name in names}
    before = render.render_blocks(results)
    changed = copy.deepcopy(results)
    changed["machine"].update(load_1min_at_start=123.4, commit="f" * 40)
    for name, entry in render.ordered(changed):
        if entry["status"] != "ok":
            continue
        entry["figures"] = _scaled(entry["figures"])
        after = render.render_blocks(changed)
        for block in before:
            if (block.name == "zoo" and name != "zoo") or (
                    block.path.name == "README.md" and name not in headline):
                continue
            assert after[block] != before[block], f"{block} ignores {name}'s figures"
            assert "123.4" in after[block] and "ffffffffffff" in after[block]
        before = after


def test_render_rewrites_only_the_block(render, results, tmp_path, monkeypatch):
    pages = {}
    for path, _ in render.render_blocks(results):
        page = tmp_path / path.relative_to(ROOT).as_posix().replace("/", "_")
        zoo_begin, zoo_end = render.markers("zoo")
        page.write_text(f"# intro\n\n{render.BEGIN}\nold figures\n{render.END}\n\nmiddle\n\n"
                        f"{zoo_begin}\nold figures\n{zoo_end}\n\nafter\n", encoding="utf-8")
        pages[path] = page
    monkeypatch.setattr(render, "render_blocks", lambda r, real=render.render_blocks: {
        render.Block(pages[b.path], b.name): text for b, text in real(r).items()})
    assert render.render(results, check=True) == list(pages.values())
    assert "old figures" in pages[ROOT / "README.md"].read_text(encoding="utf-8")
    assert len({page.name for page in pages.values()}) == len(pages)
    assert render.render(results) == list(pages.values())
    for page in pages.values():
        text = page.read_text(encoding="utf-8")
        assert text.startswith("# intro\n\n") and text.endswith("\n\nafter\n")
        assert "\n\nmiddle\n\n" in text
    for block in render.render_blocks(results):  # every block rendered
        begin, end = render.markers(block.name)
        inside = block.path.read_text(encoding="utf-8").split(begin)[1].split(end)[0]
        assert "old figures" not in inside
    assert render.render(results, check=True) == []


def test_failed_and_quick_runs_say_so(render, results):
    broken = copy.deepcopy(results)
    broken["quick"] = True
    name = render.HEADLINE[0][0]  # quoted by every block but the zoo's
    broken["benchmarks"][name] = {"status": "failed", "seconds": 1.0,
                                  "error": "RuntimeError: first line\n| second line"}
    for key, block in render.render_blocks(broken).items():
        assert "A quick (smoke) run" in block
        if key.name == "zoo":
            continue
        row = next(line for line in block.splitlines() if "first line" in line)
        assert "failed" in row and "\\| second line" in row  # one row, the pipe escaped


def test_a_merged_entry_names_its_commit_and_another_processor(render, results):
    merged = copy.deepcopy(results)
    merged["machine"].update(commit="a" * 40, cpu="Intel(R) Xeon(R) Processor")
    entry = {"status": "ok", "commit": "b" * 40, "cpu": "AMD EPYC", "figures": {}}
    assert render.measured_elsewhere(merged, entry) == \
        "measured at commit `bbbbbbbbbbbb` on AMD EPYC"
    entry["cpu"] = "Intel(R) Xeon(R) Processor"
    assert render.measured_elsewhere(merged, entry) == "measured at commit `bbbbbbbbbbbb`"
    assert render.measured_elsewhere(merged, dict(entry, commit="a" * 40)) == ""
    same_commit = dict(entry, commit="a" * 40, cpu="AMD EPYC")
    assert render.measured_elsewhere(merged, same_commit) == "measured on AMD EPYC"


def _partial_run(results, tmp_path, monkeypatch) -> tuple:
    """(bench.run, the results file holding ``results``, the name of its first benchmark,
    a run of that benchmark alone made at another commit on another processor)."""
    monkeypatch.syspath_prepend(str(ROOT))
    run = importlib.import_module("bench.run")
    out = tmp_path / "results.json"
    out.write_text(json.dumps(results))
    name = next(iter(results["benchmarks"]))
    part = {"date": "2030-01-01 00:00 UTC", "quick": False, "complete": True,
            "machine": {**results["machine"], "commit": "c" * 40, "cpu": "Some CPU"},
            "benchmarks": {name: {"status": "ok", "seconds": 1.0, "figures": {"x_ratio": 2.0}}}}
    return run, out, name, part


def test_merge_puts_a_partial_run_in_with_its_own_commit(results, tmp_path, monkeypatch, capsys):
    run, out, name, part = _partial_run(results, tmp_path, monkeypatch)
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert run.main(["--merge", str(tmp_path / "part.json"), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["benchmarks"][name] == {**part["benchmarks"][name], "commit": "c" * 40,
                                          "commit_dirty": part["machine"]["commit_dirty"],
                                          "date": part["date"],
                                          "cpu": "Some CPU"}
    assert {k: v for k, v in merged["benchmarks"].items() if k != name} == {
        k: v for k, v in results["benchmarks"].items() if k != name}
    before = out.read_bytes()
    part["benchmarks"][name]["status"] = "failed"  # never replaces a measurement
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert run.main(["--merge", str(tmp_path / "part.json"), "--out", str(out)]) == 2
    assert out.read_bytes() == before and "no benchmark that ran ok" in capsys.readouterr().err
    part["benchmarks"][name]["status"] = "ok"
    part["quick"] = True  # a smoke run never lands among measurements
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert run.main(["--merge", str(tmp_path / "part.json"), "--out", str(out)]) == 2
    assert out.read_bytes() == before
    assert "not measurements" in capsys.readouterr().err


def test_markers_must_be_one_pair(render, tmp_path):
    for text in ("no markers\n", f"{render.END}\n{render.BEGIN}\n",
                 f"{render.BEGIN}\n{render.END}\n{render.BEGIN}\n{render.END}\n"):
        with pytest.raises(ValueError, match="exactly one"):
            render.split_block(text, tmp_path / "page.md")


def test_only_into_an_existing_results_file_merges_the_run(results, tmp_path, monkeypatch):
    """``--only NAME`` with the results file that holds every benchmark: the others stay."""
    run, out, name, part = _partial_run(results, tmp_path, monkeypatch)

    def one_run(quick, only, path, progress, timeout):
        assert only == {name} and path != out
        path.write_text(json.dumps(part))
        return part

    monkeypatch.setattr(run, "run_all", one_run)
    assert run.main(["--only", name, "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert merged["benchmarks"][name]["figures"] == {"x_ratio": 2.0}
    assert {k: v for k, v in merged["benchmarks"].items() if k != name} == {
        k: v for k, v in results["benchmarks"].items() if k != name}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]
