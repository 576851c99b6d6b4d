"""The per-layer part of ``report.html``: one candidate's error along the depth, each
cell's output error against fp32 with its input's drawn beside it, the culprit marked, and
the table of its cells."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from amptool.report import page as hp
from amptool.report import svgchart as sc

if TYPE_CHECKING:
    from amptool.documents.layers import LayerReport, LayerRow
    from amptool.documents.parity import CandidateResult

BLUE, ORANGE, RED, GREY, PURPLE = "#1f6feb", "#bc4c00", "#cf222e", "#8c959f", "#8250df"


def layer_part(cand: "CandidateResult", name: str) -> str:
    """One candidate's per-layer chart (1 - cosine of each cell's input and output, the
    limit, the culprit marked) and its table; ``cand`` has a per-layer report."""
    layer = cand.per_layer
    assert layer is not None  # only candidates with a per-layer report are drawn
    rows = layer.rows
    names = tuple(r.path for r in rows)
    first = layer.first_flagged
    out_err = [_one_minus(r.cosine) for r in rows]
    # the network's own rows ((input), (output)) have no cell input of their own
    in_err = [None if r.type in ("input", "network") else _one_minus(r.in_cosine)
              for r in rows]
    positive = [v for v in out_err + in_err if sc.finite(v) and v > 0]
    limit = 1.0 - float(layer.min_cosine)
    floor = min(positive + [limit] + [1e-3]) / 10
    shown = lambda v: v if not sc.finite(v) else max(v, floor)  # noqa: E731
    origins = [_origin(r, first) for r in rows]
    series = [sc.Series("error of the cell's input", tuple(
        (i, shown(v)) if v is not None else (i, float("nan")) for i, v in enumerate(in_err)),
        GREY)]
    for group, color in (("within the limit", BLUE), ("born here", RED),
                         ("inherited", ORANGE)):
        pts = tuple((i, shown(out_err[i])) for i, o in enumerate(origins) if o == group)
        if pts:
            series.append(sc.Series(group, pts, color, "points"))
    marks: tuple[sc.Rule, ...] = ()
    if first is not None and first in names:
        marks = (sc.Rule(names.index(first), f"culprit: {first} ({layer.origin})"),)
    chart = sc.Chart("cell, in execution order", "1 - cosine vs fp32 (log)", tuple(series),
                     log_y=True, limits=(sc.Rule(limit, f"limit: cosine {layer.min_cosine}",
                                                 PURPLE),),
                     marks=marks, labels=names, height=340)
    caption = (f"{name}: each cell's output error against fp32 ({layer.policy}"
               f" vs fp32, {layer.samples} samples); grey: the error its input already had. "
               "Born: the cell's output breaks the limit while its input is within it; "
               "inherited: the error came in with its input."
               + (f" Zero is drawn at {floor:.1g}." if any(v == 0 for v in out_err) else ""))
    verdict = hp.verdict_badge(cand.passed, bool(cand.caveat))
    return (f"<h3>{hp.h(name)} {verdict}</h3>"
            + hp.figure(f"per-layer {name}", sc.render(chart), caption)
            + f"<details><summary>Cells of {hp.h(name)}</summary>"
            + layer_table(layer) + "</details>")


def _origin(row: "LayerRow", first: Optional[str]) -> str:
    """How a cell's error is drawn: within the limit, born here or inherited (the network's
    output row inherits when a cell before it is the culprit)."""
    if not row.flagged:
        return "within the limit"
    if row.origin == "inherited" or (row.type == "network" and first and first != row.path):
        return "inherited"
    return "born here"


def _one_minus(value):
    value = hp.as_float(value)
    return None if value is None else 1.0 - value


def layer_table(layer: "LayerReport") -> str:
    rows, bad = [], []
    for i, r in enumerate(layer.rows):
        note = r.origin or ""
        if r.path == layer.first_flagged:
            note = f"first below the limit ({r.origin})"
        if r.fp16_risk == "overflow":
            note = f"{note}; fp32 reaches {hp.number(r.ref_absmax)}".lstrip("; ")
        elif r.fp16_risk == "subnormal":
            note = f"{note}; fp16-subnormal outputs".lstrip("; ")
        if r.nonfinite:
            note = f"{note}; {r.nonfinite} NaN/Inf".lstrip("; ")
        rows.append([i, hp.Cell(f"<code>{hp.h(r.path)}</code>"), r.type,
                     r.dtype, hp.number(r.cosine, 7),
                     hp.number(r.rel_l2, 4), note])
        bad.append(bool(r.flagged))
    return hp.table(["#", "cell", "type", "dtype", "cosine", "rel L2", "note"], rows,
                    ["num", "path", "", "", "num", "num", ""], bad)
