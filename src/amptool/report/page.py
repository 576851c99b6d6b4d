"""The parts of a self-contained HTML page: its shell with inline CSS, tables, badges,
figures holding inline SVG charts, number formats. Every text given is escaped here; the
page refers to nothing outside itself (no script, stylesheet, font or image by address)."""
from __future__ import annotations

import math
import re
from html import escape
from typing import Iterable, Optional

CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --warn: #9a6700; --ink: #24292f;
  --muted: #57606a; --line: #d0d7de; --soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  "Noto Sans", "DejaVu Sans", sans-serif; color: var(--ink); background: #fff; }
main { max-width: 1120px; margin: 0 auto; padding: 16px 24px 48px; }
.topline { color: var(--muted); font-size: 13px; margin-bottom: 8px; }
.verdict { display: flex; gap: 20px; align-items: center; padding: 16px 20px;
  border-radius: 8px; border: 1px solid; margin-bottom: 16px; }
.verdict.pass { background: #dafbe1; border-color: #4ac26b; }
.verdict.fail { background: #ffebe9; border-color: #ff8182; }
.verdict .word { font-size: 34px; font-weight: 800; letter-spacing: 1px; min-width: 104px;
  text-align: center; color: #fff; border-radius: 6px; padding: 4px 12px; }
.verdict.pass .word { background: var(--pass); }
.verdict.fail .word { background: var(--fail); }
.verdict .line { font-size: 16px; font-weight: 600; margin: 0; overflow-wrap: anywhere; }
.verdict .fix { margin: 6px 0 0; color: var(--ink); overflow-wrap: anywhere; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin-bottom: 8px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px;
  background: var(--soft); min-width: 130px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 18px; font-weight: 600; }
h2 { font-size: 19px; border-bottom: 1px solid var(--line); padding-bottom: 4px;
  margin: 28px 0 10px; }
h3 { font-size: 15px; margin: 18px 0 6px; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 10px; font-size: 13px; }
th, td { border-bottom: 1px solid #eaeef2; padding: 5px 8px; text-align: left;
  vertical-align: top; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.path { overflow-wrap: anywhere; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
  font-size: 12px; }
tr.bad td { background: #fff5f5; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px;
  font-weight: 700; color: #fff; white-space: nowrap; }
.badge.pass { background: var(--pass); } .badge.fail { background: var(--fail); }
.badge.info { background: #6e7781; } .badge.warn { background: var(--warn); }
figure { margin: 8px 0 16px; border: 1px solid var(--line); border-radius: 6px;
  padding: 8px 10px 4px; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 12.5px; margin: 2px 0 6px; }
figcaption b { color: var(--ink); }
.note { color: var(--muted); margin: 4px 0; overflow-wrap: anywhere; }
.note.warn { color: var(--warn); }
details { margin: 6px 0 12px; }
summary { cursor: pointer; font-weight: 600; overflow-wrap: anywhere; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px;
  background: var(--soft); padding: 0 4px; border-radius: 4px; overflow-wrap: anywhere; }
footer { color: var(--muted); font-size: 12px; margin-top: 32px; }
nav.contents { font-size: 13px; color: var(--muted); margin: 4px 0 0; }
nav.contents a { color: #0969da; text-decoration: none; }
nav.contents a:hover { text-decoration: underline; }
"""


def h(value) -> str:
    """``value`` as escaped text ('-' for None)."""
    return "-" if value is None else escape(str(value))


def page(title: str, body: Iterable[str]) -> str:
    """A whole HTML document: ``title`` (escaped) and the already escaped ``body`` parts."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{h(title)}</title><style>{CSS}</style></head>"
            f"<body><main>{''.join(body)}</main></body></html>\n")


def verdict_banner(passed: bool, line: str, fix: Optional[str] = None) -> str:
    """The PASS/FAIL banner with the one line that explains it (and its fix)."""
    kind, word = ("pass", "PASS") if passed else ("fail", "FAIL")
    fix_text = f'<p class="fix"><b>fix:</b> {h(fix)}</p>' if fix else ""
    return (f'<section id="verdict" class="verdict {kind}"><div class="word">{word}</div>'
            f'<div><p class="line">{h(line)}</p>{fix_text}</div></section>')


def badge(text: str, kind: str) -> str:
    """A small coloured label; ``kind``: pass, fail, info or warn."""
    return f'<span class="badge {kind}">{h(text)}</span>'


def verdict_badge(passed: Optional[bool], caveat: bool = False) -> str:
    if passed is None:
        return badge("n/a", "info")
    if passed:
        return badge("PASS*" if caveat else "PASS", "warn" if caveat else "pass")
    return badge("FAIL", "fail")


def cards(items: Iterable[tuple]) -> str:
    """Key figures as (label, value text) cards."""
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{h(k)}</div><div class="v">{h(v)}</div></div>'
        for k, v in items) + "</div>"


class Cell(str):
    """Table cell HTML that is already escaped (a badge, a code span)."""


def cell(value, kind: str = "") -> str:
    cls = f' class="{kind}"' if kind else ""
    text = value if isinstance(value, Cell) else h(value)
    return f"<td{cls}>{text}</td>"


def table(headers: list, rows: Iterable[list], kinds: Optional[list] = None,
          bad: Optional[list] = None) -> str:
    """A table; ``kinds`` per column: '' text, 'num' right-aligned, 'path' monospace;
    ``bad`` per row: highlighted."""
    kinds = kinds or [""] * len(headers)
    rows = list(rows)
    bad = bad or [False] * len(rows)
    head = "".join(f'<th class="{k}">{h(t)}</th>' if k else f"<th>{h(t)}</th>"
                   for t, k in zip(headers, kinds))
    body = "".join(('<tr class="bad">' if b else "<tr>")
                   + "".join(cell(v, k) for v, k in zip(row, kinds)) + "</tr>"
                   for row, b in zip(rows, bad))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(name: str, svg: str, caption: str) -> str:
    """A chart (its SVG text, from ``svgchart.render``) with an escaped caption."""
    return (f'<figure class="chart" data-chart="{h(name)}">{svg}'
            f"<figcaption>{h(caption)}</figcaption></figure>")


def contents(sections: list) -> str:
    """Links to the ``sections`` (made by ``section`` with an id), in their order."""
    found = [re.match(r'<section id="([^"]+)"><h2>(.*?)</h2>', s) for s in sections]
    links = [f'<a href="#{m.group(1)}">{m.group(2)}</a>' for m in found if m]
    return f'<nav class="contents">{" · ".join(links)}</nav>' if links else ""


def section(title: str, parts: Iterable[str], ident: str = "") -> str:
    attr = f' id="{h(ident)}"' if ident else ""
    return f"<section{attr}><h2>{h(title)}</h2>{''.join(parts)}</section>"


def note(text: str, warn: bool = False) -> str:
    return f'<p class="note{" warn" if warn else ""}">{h(text)}</p>'


def number(value, digits: int = 4) -> str:
    """A figure for a table: '-' when absent, NaN/Inf as such, else ``digits`` significant."""
    value = as_float(value)
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}" if abs(value) >= 1e4 else str(int(value))
    return f"{value:.{digits}g}"


def as_float(value) -> Optional[float]:
    """A number from JSON (where NaN/Inf are written as strings), else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def size_text(nbytes) -> str:
    if nbytes is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def ci_text(ci) -> str:
    """A 95 % interval as ``low..high`` ('-' without one)."""
    if not ci or len(ci) != 2:
        return "-"
    return f"{number(ci[0])}..{number(ci[1])}"
