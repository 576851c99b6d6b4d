"""Tables of measured figures, made from a results file (``bench/results.json``) only.

``python -m bench --render`` rewrites the block between ``<!-- bench:begin -->`` and
``<!-- bench:end -->`` in README.md (three headline figures in words, ``HEADLINE``, and
the tables of whole benchmarks, ``README_TABLES``) and in
docs/bench.md (a summary in words of every benchmark, every ratio of every benchmark, and
the zoo's table when there is one), and the block between ``<!-- bench:zoo:begin -->`` and
``<!-- bench:zoo:end -->`` in docs/guides/zoo.md (the zoo's table);
``python -m bench --check`` exits 1 when a block differs from what the results render.
No figure in those blocks is typed by hand. Standard library only: rendering needs no
MindSpore.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ORDER = ("train_overhead", "data_memory", "export", "parity", "search", "range_pass", "depth",
         "overflow", "overflow_64", "pipeline", "cli_startup", "workers", "cpu_isa")
RATIO_WORDS = ("ratio", "speedup", "overhead", "efficiency")
LABEL_KEYS = ("name", "model", "level", "format", "kind", "workers")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
HEADLINE = (("train_overhead", "training, simplecnn O2, batch"),
             ("export", "FP16 ÷ FP32 MindIR file"),
             ("parity", "`amptool parity` ÷ bare inference"))
"""README's figures: (benchmark, the start of the summary row quoted), in this order."""

README_TABLES = ((("parity_stream",), "Release-scale parity: the causallm sample's fp32 and "
                                       "fp16 MindIR (1,024 output floats a sample)"),
                 (("diff_reports", "ledger", "audit"), "The release gate: `amptool diff`, the "
                                                       "ledger, `amptool verify` and the "
                                                       "precision audit"),
                 (("cpu_isa",), "On an AVX-512 CPU: `amptool run --epochs 1` with oneDNN free to "
                                "use AVX-512, against the AVX2 cap amptool sets (ratio of wall "
                                "times)"))
"""Benchmarks whose every summary row the README shows too, under a heading of their own
(one heading over one or more benchmarks)."""


def markers(name: str = "") -> tuple:
    """The begin and end lines of block ``name`` ("" for the figures' block)."""
    if not name:
        return BEGIN, END
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


class Block(NamedTuple):
    """A rendered block: the file holding it and its name ("" for the figures' block)."""

    path: Path
    name: str = ""


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            label = next((str(item[k]) for k in LABEL_KEYS if isinstance(item, dict)
                          and isinstance(item.get(k), (str, int))), str(i))
            yield from _flatten(item, f"{prefix}[{label}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield prefix, value


def _leaf(key: str) -> str:
    return key.rsplit(".", 1)[-1].lower()


def _is_ratio(key: str) -> bool:
    leaf = _leaf(key)
    return leaf.endswith("_x") or any(word in leaf for word in RATIO_WORDS)


def _fmt(key: str, value) -> str:
    leaf = _leaf(key)
    if "overhead" in leaf or "efficiency" in leaf:  # relative figures: 0.03 means 3 %
        return f"{value:+.1%}"
    if _is_ratio(key):
        return f"{value:.3g}x"
    if leaf.endswith("_s"):
        return f"{value:.3g} s"
    return f"{value:g}"


def _target(figures: dict, key: str) -> str:
    """A target the benchmark states: ``targets[key]`` or a sibling ``target``."""
    targets = figures.get("targets") if isinstance(figures.get("targets"), dict) else {}
    if key in targets:
        return str(targets[key])
    node = figures
    for part in key.split(".")[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and "target" in node and not isinstance(node["target"], dict):
        return str(node["target"])
    return ""


def _cell(text) -> str:
    """Text that fits one Markdown table cell: one line, no column break."""
    return " ".join(str(text).split()).replace("|", "\\|")


def ordered(results: dict) -> list:
    """(name, entry) of every benchmark: the known ones in ORDER, then the others by name."""
    entries = results["benchmarks"]
    return ([(n, entries[n]) for n in ORDER if n in entries]
            + [(n, entries[n]) for n in sorted(entries) if n not in ORDER])


def header(results: dict) -> str:
    """Where and when the figures were measured, as the results file records it."""
    m = results["machine"]
    commit = m.get("commit")
    at = "an unrecorded commit"
    if commit:
        at = f"commit `{commit[:12]}`" + (" with uncommitted changes"
                                          if m.get("commit_dirty") else "")
    load = m.get("load_1min_at_start")
    load = "?" if load is None else f"{load:.1f}"
    notes = ""
    if results.get("quick"):
        notes += " A quick (smoke) run: its figures are not measurements."
    if not results.get("complete", True):
        notes += " The run did not complete."
    return (f"Measured {results['date']} at {at} on {m['cpu']}, {m['cores']} cores "
            f"({m.get('system', '?')}; 1-minute load {load} at start), Python {m['python']}, "
            f"MindSpore {m['mindspore']}, numpy {m.get('numpy')}, amptool {m.get('amptool')}: "
            f"`python -m bench`, recorded in `bench/results.json`.{notes}")


def measured_elsewhere(results: dict, entry: dict) -> str:
    """"measured at commit X" for an entry merged in from a run at another commit, "on CPU"
    for one run on another processor than the header's, both, or ""."""
    commit, cpu = entry.get("commit"), entry.get("cpu")
    words = []
    if commit and commit != results["machine"].get("commit"):
        words.append(f"at commit `{commit[:12]}`"
                     + (" with uncommitted changes" if entry.get("commit_dirty") else ""))
    if cpu and cpu != results["machine"].get("cpu"):
        words.append(f"on {cpu}")
    return f"measured {' '.join(words)}" if words else ""


def ratio_rows(entry: dict) -> list:
    """(figure, value, target) for every ratio of one benchmark (its first figures if none)."""
    if entry["status"] != "ok":
        return [(entry["status"], entry.get("error", ""), "")]
    figures = entry["figures"]
    rows = [(k, v) for k, v in _flatten(figures) if not k.startswith("targets.")]
    ratios = [(k, v) for k, v in rows if _is_ratio(k)]
    return [(k, _fmt(k, v), _target(figures, k)) for k, v in (ratios or rows[:8])]


def table(results: dict) -> str:
    """One Markdown table: every ratio of every benchmark (all figures where none is a ratio)."""
    lines = ["| benchmark | figure | value | target |", "|---|---|---|---|"]
    for name, entry in ordered(results):
        other = measured_elsewhere(results, entry)
        label = f"{name} ({other})" if other else name
        lines += [f"| {label} | `{_cell(k)}` | {_cell(v)} | {_cell(t)} |"
                  for k, v, t in ratio_rows(entry)]
    return "\n".join(lines)


# --- the summary: each benchmark's figures in words ------------------------------------
# A row is (what, figure, target); a target is the key of a target the benchmark states,
# or the text of one it states beside its figures.

def _x(value) -> str:
    return f"{value:.2f}×"


def _s(value) -> str:
    return f"{value:.3g} s"


def _train_rows(f: dict) -> list:
    rows = []
    for key in sorted(f["runs"], key=lambda k: (k.rsplit("_", 1)[0], k.endswith("O0"))):
        r, (model, level) = f["runs"][key], key.rsplit("_", 1)
        rate = r["steps_per_s"]
        scaling = "dynamic loss scaling on both" if level == "O2" else "no loss scaling"
        what = (f"training, {model} {level}, batch {f['batch']}, {r['steps_per_round']} steps × "
                f"{r['rounds']} rounds: `amptool train`'s step path ÷ `Model.train` (the same "
                f"batches fed the same way; {scaling})")
        value = (f"{_x(r['amptool_vs_model_train_ratio'])} ({rate['amptool_train']:.1f} vs "
                 f"{rate['model_train']:.1f} steps/s); ÷ the bare compiled step "
                 f"({rate['bare_step']:.1f} steps/s, the limit): amptool "
                 f"{_x(r['amptool_vs_bare_step_ratio'])}, `Model.train` "
                 f"{_x(r['model_train_vs_bare_step_ratio'])}")
        rows.append((what, value, f"runs.{key}.amptool_vs_model_train_ratio"))
        if "streaming_vs_in_memory_ratio" in r:
            rows.append((f"training, {model} {level}: `amptool train`'s step path ÷ the bare "
                         "compiled step on in-memory tensors (the limit)",
                         _x(r["amptool_vs_bare_step_ratio"]),
                         f"runs.{key}.amptool_vs_bare_step_ratio"))
            rows.append((f"training, {model} {level}: batches streamed through the data "
                         "pipeline ÷ the same loop on batches sliced from memory",
                         f"{_x(r['streaming_vs_in_memory_ratio'])} "
                         f"({rate['amptool_in_memory']:.1f} steps/s from memory)",
                         f"runs.{key}.streaming_vs_in_memory_ratio"))
        if "amptool_vs_model_pipeline_ratio" in r:
            scale = "no loss scale" if level == "O0" else "fixed loss scale 1024 on both sides"
            rows.append((f"training, {model} {level}: `amptool train` ÷ the seed's "
                         f"`Model(amp_level=\"{level}\").train(dataset_sink_mode=False)` fed "
                         f"the same `mindspore.dataset` pipeline ({scale})",
                         f"{_x(r['amptool_vs_model_pipeline_ratio'])} "
                         f"({rate['amptool_fixed_scale']:.1f} vs "
                         f"{rate['model_train_pipeline']:.1f} steps/s)",
                         f"runs.{key}.amptool_vs_model_pipeline_ratio"))
        if "loss_scaling_overhead" in r:
            what = (f"dynamic loss scaling, {model} {level}: bare step ÷ the same step with no "
                    "overflow check (no all_finite, unconditional update)")
            value = (f"{r['loss_scaling_overhead']:+.1%} time per step (overflow check and "
                     f"conditional update alone: {r['overflow_check_overhead']:+.1%})")
            rows.append((what, value, f"runs.{key}.loss_scaling_overhead"))
    return rows


def _export_rows(f: dict) -> list:
    models = f["models"]
    names = " / ".join(m["model"] for m in models)

    def each(value) -> str:
        return " / ".join(f"{value(m):.3g}" for m in models)

    naive = [m["naive_o2_mindir_ratio"] for m in models]
    files = (f"{each(lambda m: m['mindir_file_ratio'])} (parameter bytes "
             f"{each(lambda m: m['mindir_param_ratio'])})")
    speed = (f"{each(lambda m: m['mindir_fp16_infer_ms'] / m['mindir_fp32_infer_ms'])}; "
             f"{each(lambda m: m['onnx_fp16_infer_ms'] / m['onnx_fp32_infer_ms'])}")
    timing = (f"FP16 ÷ FP32 inference time on {f['device']}, batch {f['batch']}: MindIR; "
              f"ONNX Runtime ({names})")
    return [(f"FP16 ÷ FP32 MindIR file, {names}", files, ""),
            (f"FP16 ÷ FP32 ONNX file, {names}", each(lambda m: m["onnx_file_ratio"]), ""),
            ("an O2 network exported as it is ÷ FP32, MindIR file",
             f"{min(naive):.3g}–{max(naive):.3g}", ""),
            (timing, speed, "")]


def _parity_rows(f: dict) -> list:
    dyn, one = f["overhead"]["dynamic_batch"], f["overhead"]["batch_1"]
    if "runners" not in dyn:  # measured with runners reloaded every round: other words
        raise KeyError("runners")
    layers = f["per_layer"]
    fails = [f"{n} at `{r['first_flagged']}`" for n, r in layers.items() if not r["passed"]]
    slower = [r["seconds_with_per_layer"] / r["seconds_without"] for r in layers.values()]
    what = ("`amptool parity` ÷ bare inference of the same two loaded MindIR artefacts, "
            f"{dyn['samples']} digits")
    value = (f"{_x(dyn['ratio'])} with a dynamic batch ({_s(dyn['parity_s'])} vs "
             f"{_s(dyn['bare_s'])}), {_x(one['ratio'])} with batch 1 ({_s(one['parity_s'])} vs "
             f"{_s(one['bare_s'])})")
    localized = (f"{sum(r['passed'] for r in layers.values())} pass, fail: "
                 f"{', '.join(fails) or 'none'}; a check with the per-layer pass takes "
                 f"{min(slower):.1f}–{max(slower):.1f}× as long")
    return [(what, value, f"≤ {dyn['target']:g}×"),
            (f"per-layer localization, FP16 vs FP32 MindIR, {len(layers)} sample models",
             localized, "")]


def _search_rows(f: dict) -> list:
    cells = []
    for model, row in f["models"].items():
        s = next(r for r in row["searches"] if r["level"] == "O3")
        kept = f" keeps {', '.join(f'`{k}`' for k in s['kept'])}" if s["kept"] else ""
        cells.append(f"{model} {s['trials']}/{s['candidates']}{kept}")
    rows = [("fp32-cell search from O3: trials / candidate cells", "; ".join(cells), "")]
    for model, b in f.get("brute_force", {}).items():
        what = f"search ÷ a timed brute force (one trial per candidate cell), {model} {b['level']}"
        value = (f"{_x(b['search_vs_brute_force_wall_ratio'])} wall time "
                 f"({_s(b['search_wall_s'])} vs {_s(b['brute_force_wall_s'])}); trials "
                 f"{b['search_trials']} vs {b['brute_force_trials']}, taking "
                 f"{_s(b['search_trials_s'])} vs {_s(b['brute_force_trials_s'])}")
        rows.append((what, value, ""))
    return rows


def _pipeline_rows(f: dict) -> list:
    st = f["stages"]
    value = (f"{_x(f['run_vs_train_ratio'])} ({_s(f['amptool_run_s'])} vs "
             f"{_s(f['amptool_train_s'])}; stages: train {_s(st['train_s'])}, export "
             f"{_s(st['export_s'])}, parity {_s(st['parity_s'])})")
    return [(f"`amptool run` ÷ `amptool train` ({f['epochs']} epochs)", value, "")]


def _cli_rows(f: dict) -> list:
    value = (f"{_x(f['help_vs_import_mindspore_ratio'])} ({_s(f['amptool_help_s'])} vs "
             f"{_s(f['import_mindspore_s'])})")
    return [('`amptool --help` ÷ `python -c "import mindspore"`, fresh processes', value,
             "help_vs_import_mindspore_ratio")]


def _workers_rows(f: dict) -> list:
    value = (f"{_x(f['throughput_2_vs_1_ratio'])} at per-worker batch {f['per_worker_batch']}; "
             f"{_x(f['throughput_2_vs_1_same_global_batch_ratio'])} at the same global batch; "
             f"wall time {_x(f['wall_2_vs_1_ratio'])}")
    return [("2 workers ÷ 1 worker (msrun, CPU), training throughput", value, "")]


def _data_memory_rows(f: dict) -> list:
    runs = f["runs"]
    small, large = sorted(runs, key=int)
    value = (f"{_x(f['peak_rss_ratio'])} ({runs[large]['peak_rss_mb']:.0f} MiB for {int(large):,} "
             f"images, {runs[small]['peak_rss_mb']:.0f} MiB for {int(small):,}); the pipeline "
             f"alone reads {f['pipeline_images_per_s']:.0f} images/s")
    return [(f"streaming data: peak RSS of `amptool train --data imagefolder:DIR` ({f['image']}, "
             f"one epoch) on {int(large):,} ÷ {int(small):,} images", value, "peak_rss_ratio")]


def _range_pass_rows(f: dict) -> list:
    rows = []
    for i, m in enumerate(f["models"]):
        value = (f"{m['range_pass_overhead']:.1%} ({_s(m['range_pass_s'])} of a "
                 f"{_s(m['epoch_s'])} epoch; the epoch with `--policy auto` "
                 f"{_s(m['epoch_auto_s'])}); kept: {', '.join(m['kept']) or 'none'}")
        rows.append((f"range pass ÷ one-epoch run, {m['model']}", value,
                     f"models[{m['model']}].range_pass_overhead"))
    return rows


def _depth_rows(f: dict) -> list:
    net = (f"{f['model']}, {f['depth']} blocks, {f['cells']} cells, {f['samples']} samples, "
           f"fault planted in `{f['planted']}`")
    layer = (f"{_x(f['per_layer_vs_forward_ratio'])} ({_s(f['per_layer_s'])}: parity "
             f"{_s(f['parity_s'])}, with `--per-layer` {_s(f['parity_per_layer_s'])}; one eager "
             f"forward {_s(f['forward_s'])}); flags `{f['per_layer_first_flagged']}` first "
             f"({f['per_layer_origin']})")
    kept = ", ".join(f"`{k}`" for k in f["range_pass_kept"]) or "nothing"
    ranges = (f"{_x(f['range_pass_vs_forward_ratio'])} ({_s(f['range_pass_s'])} vs "
              f"{_s(f['forward_s'])}); keeps {kept}")
    return [(f"per-layer pass ÷ one eager forward: {net}", layer, "per_layer_vs_forward_ratio"),
            (f"range pass of `--policy auto` ÷ one eager forward: {net}", ranges,
             "range_pass_vs_forward_ratio")]


def _ended(run: dict) -> str:
    if run["ended"].startswith("same run"):
        return "the same run (nothing kept)"
    if run["ended"] == "finished":
        return (f"val acc {run['val_acc']:.3f} ({run['overflow_steps']} of {run['steps']} steps "
                f"skipped)")
    return f"diverged at {run.get('culprit') or '?'}"


def _overflow_rows(f: dict) -> list:
    runs = f["runs"]
    auto, o0, plain = runs["O2_auto"], runs["O0"], runs["O2"]
    kept = ", ".join(k["path"] for k in auto.get("kept", [])) or "none"
    parity = "pass" if auto.get("parity", {}).get("passed") else "FAIL"
    gap = auto.get("acc_gap_points")
    side = ("? points from" if gap is None else f"{gap:g} points below" if gap >= 0
            else f"{-gap:g} points above")
    value = (f"O2 --policy auto: {_ended(auto)}, keeps {auto.get('kept_cells', '?')} of "
             f"{auto.get('cells', '?')} cells ({kept}), {side} O0 ({_ended(o0)}), fp16 MindIR "
             f"parity {parity}; plain O2: {_ended(plain)}")
    seeds = f.get("seeds")
    if seeds:
        pairs = ", ".join(f"{_acc(a0)} / {_acc(a2)}" for a0, a2 in
                          zip(seeds["O0_val_acc"], seeds["O2_auto_val_acc"]))
        mean = seeds["mean_gap_points"]
        value += (f"; seeds {', '.join(map(str, seeds['seeds']))}, val acc O0 / O2 auto: "
                  f"{pairs}, mean gap {'?' if mean is None else f'{mean:g}'} points (O0 alone "
                  f"spreads {seeds['O0_spread_points']:g} points over the seeds)")
    return [(f"{f['model']} {f['input']}, {f['epochs']} epochs: O2 with `--policy auto`", value,
             "≤ 10 % of cells, ≤ 2 points" + (" (mean over seeds)" if seeds else ""))]


def _acc(value) -> str:
    return "diverged" if value is None else f"{value:.3f}"


SUMMARY = {"train_overhead": _train_rows, "export": _export_rows, "parity": _parity_rows,
           "search": _search_rows, "pipeline": _pipeline_rows, "cli_startup": _cli_rows,
           "workers": _workers_rows, "range_pass": _range_pass_rows, "overflow": _overflow_rows,
           "depth": _depth_rows,
           "data_memory": _data_memory_rows,
           "overflow_64": _overflow_rows}


def _pretty_target(key: str, text: str) -> str:
    """``<= 0.03`` of an overhead as ``≤ 3%``, ``>= 1.0`` of a ratio as ``≥ 1×``."""
    op, _, number = text.partition(" ")
    try:
        value = float(number)
    except ValueError:
        return text
    sign = {"<=": "≤", ">=": "≥", "<": "<", ">": ">"}.get(op)
    if sign is None:
        return text
    if "overhead" in _leaf(key):
        return f"{sign} {value:.0%}"
    return f"{sign} {value:g}{'×' if _is_ratio(key) else ''}"


def summary_rows(name: str, entry: dict) -> list:
    """(what, figure, target) in words; a benchmark's plain ratios when it has no words here
    or its figures are not the shape the words expect (an older version of it)."""
    words = SUMMARY.get(name) or _own_summary(name)
    if entry["status"] == "ok" and words:
        figures = entry["figures"]
        try:
            rows = words(figures)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, StopIteration):
            rows = None
        if rows is not None:
            return [(w, v, _pretty_target(t, _target(figures, t)) if t and t[0] not in "≤≥"
                     else t) for w, v, t in rows]
    return [(f"{name}: `{k}`", v, t) for k, v, t in ratio_rows(entry)]


def _own_summary(name: str):
    """``summary(figures) -> rows`` of a benchmark module that words its own (standard
    library only, as here), or None."""
    path = HERE / f"{name}.py"
    if not path.is_file() or "\ndef summary(" not in path.read_text(encoding="utf-8"):
        return None
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module(f"bench.{name}").summary


def zoo_block(results: dict) -> str:
    """The zoo benchmark's own table (``bench/zoo.py``'s ``markdown``), when both exist."""
    entry = results["benchmarks"].get("zoo")
    if not entry or entry.get("status") != "ok" or not (HERE / "zoo.py").is_file():
        return ""
    import importlib

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("bench.zoo").markdown(entry["figures"]).strip()


def summary_table(results: dict, zoo: str) -> list:
    """Every benchmark's figures in words: the lines of one Markdown table."""
    summary = ["| what | figure | target |", "| --- | --- | --- |"]
    for name, entry in ordered(results):
        rows = summary_rows(name, entry)
        other = measured_elsewhere(results, entry)
        rows = [(w, f"{v} ({other})" if other else v, t) for w, v, t in rows]
        if name == "zoo" and zoo:
            rows = [("model zoo: export and parity per network", "the table below", "")]
        summary += [f"| {_cell(w)} | {_cell(v)} | {_cell(t)} |" for w, v, t in rows]
    return summary


def headline(results: dict) -> list:
    """README's three figures (``HEADLINE``): the lines of one Markdown table; a benchmark
    the results lack, or that failed, says so in its row."""
    lines = ["| what | figure | target |", "| --- | --- | --- |"]
    for name, start in HEADLINE:
        entry = results["benchmarks"].get(name)
        if entry is None:
            lines.append(f"| {name} | not measured: run `python -m bench --only {name}` | |")
            continue
        rows = summary_rows(name, entry)
        w, v, t = next((r for r in rows if r[0].startswith(start)), rows[0])
        other = measured_elsewhere(results, entry)
        lines.append(f"| {_cell(w)} | {_cell(f'{v} ({other})' if other else v)} | {_cell(t)} |")
    return lines


def readme_tables(results: dict) -> list:
    """The lines of README's tables of whole benchmarks (``README_TABLES``), each after a
    blank line and its heading; a benchmark the results lack says so."""
    lines = []
    for names, heading in README_TABLES:
        lines += ["", f"{heading}:", "", "| what | figure | target |", "| --- | --- | --- |"]
        for name in names:
            entry = results["benchmarks"].get(name)
            if entry is None:
                lines.append(f"| {name} | not measured: run `python -m bench --only {name}` | |")
                continue
            other = measured_elsewhere(results, entry)
            lines += [f"| {_cell(w)} | {_cell(f'{v} ({other})' if other else v)} | {_cell(t)} |"
                      for w, v, t in summary_rows(name, entry)]
    return lines


def render_blocks(results: dict) -> dict:
    """{Block: the text it must hold}."""
    zoo = zoo_block(results)
    head = header(results)
    docs = [head, "\n".join(summary_table(results, zoo)), table(results), zoo]
    zoo_page = "\n\n".join([head, zoo or "No zoo figures in the results: run `python -m bench`."])
    return {Block(ROOT / "README.md"): "\n".join([head, "", *headline(results),
                                                   *readme_tables(results)]),
            Block(ROOT / "docs" / "guides" / "zoo.md", "zoo"): zoo_page,
            Block(ROOT / "docs" / "bench.md"): "\n\n".join(part for part in docs if part)}


def split_block(text: str, path, name: str = "") -> tuple:
    """(before, block, after) around block ``name``'s markers, each alone on its line, once
    per file."""
    begin, end = markers(name)
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise ValueError(f"{path} needs exactly one {begin} line, then one {end} line")
    b, e = begins[0], ends[0]
    return "".join(lines[:b]), "".join(lines[b + 1:e]).strip("\n"), "".join(lines[e + 1:])


def render(results: dict, check: bool = False) -> list:
    """Rewrite every block (with ``check``, only compare); return the files that were stale."""
    stale = []
    for (path, name), block in render_blocks(results).items():
        before, current, after = split_block(path.read_text(encoding="utf-8"), path, name)
        if current == block:
            continue
        if path not in stale:
            stale.append(path)
        if not check:
            begin, end = markers(name)
            tmp = path.with_name(f".{path.name}.bench-tmp")
            tmp.write_text(f"{before}{begin}\n{block}\n{end}\n{after}", encoding="utf-8")
            os.replace(tmp, path)
    return stale
