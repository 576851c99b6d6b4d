"""Small charts as inline SVG text, drawn from the numbers alone (no plotting library):
lines, steps, points and bars over a linear or log y axis, with labelled axes, a legend,
limit lines and marked positions. Every text is escaped; long series are thinned to
``MAX_POINTS`` (the smallest and largest value of each stretch kept, so spikes stay)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from typing_extensions import TypeGuard

MAX_POINTS = 400
"""Points drawn per series at most."""
MAX_LABELS = 40
"""Category labels written under the x axis at most (the marked ones always)."""
FONT = 11


@dataclass(frozen=True)
class Series:
    """One series: ``points`` are (x, y) pairs; a non-finite y breaks a line."""

    name: str
    points: tuple
    color: str
    style: str = "line"
    """line, dots (a line with a dot at each point), step (a value held until the next
    point), points or bars."""


@dataclass(frozen=True)
class Rule:
    """A labelled straight line across the chart at ``at`` (y for a limit, x for a mark)."""

    at: float
    label: str
    color: str = "#c62828"


@dataclass(frozen=True)
class Chart:
    """What one chart shows; ``labels``: the x positions' names on a categorical axis."""

    x_label: str
    y_label: str
    series: tuple
    log_y: bool = False
    limits: tuple = ()
    """Horizontal rules (``Rule`` at a y value)."""
    marks: tuple = ()
    """Vertical rules (``Rule`` at an x value)."""
    labels: Optional[tuple] = None
    whole_x: bool = False
    """The x values are counts (steps, epochs): ticks at whole numbers only."""
    width: int = 880
    height: int = 260


@dataclass(frozen=True)
class _Frame:
    """The plot area in pixels and the value ranges it shows."""

    left: float
    top: float
    right: float
    bottom: float
    x0: float
    x1: float
    y0: float
    y1: float
    log_y: bool

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / (self.x1 - self.x0) * (self.right - self.left)

    def py(self, y: float) -> float:
        if self.log_y:
            y, lo, hi = math.log10(y), math.log10(self.y0), math.log10(self.y1)
        else:
            lo, hi = self.y0, self.y1
        return self.bottom - (y - lo) / (hi - lo) * (self.bottom - self.top)


def finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def thin(points: list, limit: int = MAX_POINTS) -> list:
    """At most about ``limit`` points: of each stretch its smallest and largest y, in x order
    (a stretch holding a non-finite y keeps one, to break the line there)."""
    if len(points) <= limit:
        return list(points)
    size = math.ceil(len(points) / max(1, limit // 2))
    kept = []
    for start in range(0, len(points), size):
        chunk = points[start:start + size]
        good = [p for p in chunk if finite(p[1])]
        if len(good) < len(chunk):
            kept.append(next(p for p in chunk if not finite(p[1])))
        if good:
            low, high = min(good, key=lambda p: p[1]), max(good, key=lambda p: p[1])
            kept.extend(sorted({low, high}, key=lambda p: p[0]))
    return kept


def render(chart: Chart) -> str:
    """The chart as one ``<svg>`` element (scales with its container's width)."""
    series = [Series(s.name, tuple(thin(list(s.points))), s.color, s.style)
              for s in chart.series]
    frame = _frame(chart, series)
    parts = [f'<svg viewBox="0 0 {chart.width} '
             f'{chart.height}" role="img" aria-label="{escape(chart.y_label)} by '
             f'{escape(chart.x_label)}" font-size="{FONT}">',
             f'<rect class="plot" x="{frame.left:.1f}" y="{frame.top:.1f}" '
             f'width="{frame.right - frame.left:.1f}" height="{frame.bottom - frame.top:.1f}" '
             'fill="#fafbfc" stroke="#d0d7de"/>']
    parts += _y_axis(chart, frame) + _x_axis(chart, frame)
    for rule in chart.limits:
        parts.append(_hrule(frame, rule))
    for rule in chart.marks:
        parts.append(_vrule(frame, rule))
    for s in series:
        parts += _draw(frame, s)
    parts += _legend(chart, frame, series)
    parts.append("</svg>")
    return "".join(parts)


def _frame(chart: Chart, series: list) -> _Frame:
    xs = [p[0] for s in series for p in s.points] + [r.at for r in chart.marks]
    ys = [p[1] for s in series for p in s.points if finite(p[1])]
    ys += [r.at for r in chart.limits]
    if chart.log_y:
        ys = [y for y in ys if y > 0]
    if any(s.style == "bars" for s in series) and not chart.log_y:
        ys.append(0.0)
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if chart.labels is not None or any(s.style == "bars" for s in series):
        x0, x1 = x0 - 0.5, x1 + 0.5
    if x1 <= x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = _y_range(ys, chart.log_y)
    longest = max((len(_short(n)) for n in chart.labels or ()), default=0)
    bottom_room = 40 + 4 * longest if chart.labels is not None else 44
    return _Frame(left=70, top=30, right=chart.width - 16, bottom=chart.height - bottom_room,
                  x0=x0, x1=x1, y0=y0, y1=y1, log_y=chart.log_y)


def _y_range(ys: list, log_y: bool) -> tuple:
    if log_y:
        if not ys:
            return 0.1, 10.0
        lo, hi = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
        if hi == lo:  # one value: a decade either side
            lo, hi = lo - 1, hi + 1
        return 10.0 ** lo, 10.0 ** hi
    if not ys:
        return 0.0, 1.0
    lo, hi = min(ys), max(ys)
    if hi - lo < 1e-12 * max(1.0, abs(hi)):
        pad = abs(hi) * 0.05 or 0.5
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return (lo - pad if lo != 0 else 0.0), hi + pad


def nice_ticks(lo: float, hi: float, count: int = 5, whole: bool = False) -> list:
    """Round values between ``lo`` and ``hi``, about ``count`` of them (``whole``: whole
    numbers only)."""
    raw = max((hi - lo) / max(1, count), 1.0 if whole else 0.0)
    mag = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    steps = (1, 2, 5, 10) if whole else (1, 2, 2.5, 5, 10)
    step = next(m * mag for m in steps if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e6 or abs(value) < 1e-3:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{value:.6g}"


def _y_axis(chart: Chart, frame: _Frame) -> list:
    if chart.log_y:
        lo, hi = round(math.log10(frame.y0)), round(math.log10(frame.y1))
        step = max(1, math.ceil((hi - lo) / 6))
        within = (1, 2, 5) if hi - lo <= 2 else (1,)  # few decades: 1, 2, 5 of each
        ticks = [m * 10.0 ** e for e in range(lo, hi + 1, step) for m in within
                 if m * 10.0 ** e <= frame.y1 * 1.0001]
    else:
        ticks = nice_ticks(frame.y0, frame.y1)
    parts = []
    for t in ticks:
        y = frame.py(t)
        parts.append(f'<line x1="{frame.left:.1f}" x2="{frame.right:.1f}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="#e6e9ed"/>'
                     f'<text x="{frame.left - 6:.1f}" y="{y + 4:.1f}" text-anchor="end" '
                     f'fill="#57606a">{escape(tick_text(t))}</text>')
    mid = (frame.top + frame.bottom) / 2
    parts.append(f'<text class="axis-label" transform="translate(16 {mid:.1f}) rotate(-90)" '
                 f'text-anchor="middle" fill="#24292f">{escape(chart.y_label)}</text>')
    return parts


def _x_axis(chart: Chart, frame: _Frame) -> list:
    parts = []
    if chart.labels is not None:
        marked = {int(r.at) for r in chart.marks}
        every = max(1, math.ceil(len(chart.labels) / MAX_LABELS))
        for i, name in enumerate(chart.labels):
            if i % every and i not in marked:
                continue
            x, y = frame.px(i), frame.bottom + 10
            weight = ' font-weight="bold"' if i in marked else ""
            parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="end"{weight} '
                         f'transform="rotate(-40 {x:.1f} {y:.1f})" fill="#57606a">'
                         f'{escape(_short(name))}</text>')
        label_y: float = chart.height - 6
    else:
        for t in nice_ticks(frame.x0, frame.x1, 8, chart.whole_x):
            x = frame.px(t)
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.bottom:.1f}" '
                         f'y2="{frame.bottom + 4:.1f}" stroke="#57606a"/>'
                         f'<text x="{x:.1f}" y="{frame.bottom + 16:.1f}" text-anchor="middle" '
                         f'fill="#57606a">{escape(tick_text(t))}</text>')
        label_y = frame.bottom + 34
    parts.append(f'<text class="axis-label" x="{(frame.left + frame.right) / 2:.1f}" '
                 f'y="{label_y:.1f}" text-anchor="middle" fill="#24292f">'
                 f'{escape(chart.x_label)}</text>')
    return parts


def _short(name: str, keep: int = 24) -> str:
    return name if len(name) <= keep else "…" + name[-(keep - 1):]


def _hrule(frame: _Frame, rule: Rule) -> str:
    if not finite(rule.at) or (frame.log_y and rule.at <= 0):
        return ""
    y = frame.py(rule.at)
    return (f'<line x1="{frame.left:.1f}" x2="{frame.right:.1f}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{rule.color}" stroke-dasharray="6 4"/>'
            f'<text x="{frame.right - 4:.1f}" y="{y - 4:.1f}" text-anchor="end" '
            f'fill="{rule.color}">{escape(rule.label)}</text>')


def _vrule(frame: _Frame, rule: Rule) -> str:
    x = frame.px(rule.at)
    anchor = "end" if x > (frame.left + frame.right) / 2 else "start"
    shift = -4 if anchor == "end" else 4
    return (f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top:.1f}" '
            f'y2="{frame.bottom:.1f}" stroke="{rule.color}" stroke-width="1.5" '
            f'stroke-dasharray="3 3"/><text x="{x + shift:.1f}" y="{frame.top + 12:.1f}" '
            f'text-anchor="{anchor}" font-weight="bold" fill="{rule.color}">'
            f'{escape(rule.label)}</text>')


def _shown(frame: _Frame, y) -> Optional[float]:
    """The y drawn for a value: None when it cannot be (non-finite, or <= 0 on a log axis:
    drawn at the bottom)."""
    if not finite(y):
        return None
    if frame.log_y and y <= 0:
        return frame.y0
    return min(max(y, frame.y0), frame.y1)


def _draw(frame: _Frame, s: Series) -> list:
    if s.style == "bars":
        return [_bars(frame, s)]
    if s.style == "points":
        return [_points(frame, s)]
    runs: list = []
    run: list = []
    for x, y in s.points:
        shown = _shown(frame, y)
        if shown is None:
            runs, run = runs + [run] if run else runs, []
            continue
        if s.style == "step" and run:
            run.append((frame.px(x), run[-1][1]))
        run.append((frame.px(x), frame.py(shown)))
    runs += [run] if run else []
    parts = [f'<polyline fill="none" stroke="{s.color}" stroke-width="1.8" '
             f'stroke-linejoin="round" points="'
             + " ".join(f"{x:.1f},{y:.1f}" for x, y in r) + '"/>' for r in runs if len(r) > 1]
    dots = [p for r in runs for p in r] if s.style == "dots" else \
        [r[0] for r in runs if len(r) == 1]
    parts += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{s.color}"/>' for x, y in dots]
    return parts


def _points(frame: _Frame, s: Series) -> str:
    out = []
    for x, y in s.points:
        shown = _shown(frame, y)
        cx = frame.px(x)
        if shown is None:  # NaN/Inf: a cross at the top
            out.append(f'<path d="M{cx - 4:.1f},{frame.top + 2:.1f}l8,8m0,-8l-8,8" '
                       f'stroke="{s.color}" stroke-width="2"/>')
        else:
            out.append(f'<circle cx="{cx:.1f}" cy="{frame.py(shown):.1f}" r="4" '
                       f'fill="{s.color}" stroke="#fff"/>')
    return "".join(out)


def _bars(frame: _Frame, s: Series) -> str:
    n = max(1, len(s.points))
    width = max(1.0, (frame.right - frame.left) / (frame.x1 - frame.x0) * 0.7
                if n > 1 else 12.0)
    width = min(width, (frame.right - frame.left) / n * 0.9)
    base = frame.py(frame.y0 if frame.log_y else max(frame.y0, 0.0))
    out = []
    for x, y in s.points:
        shown = _shown(frame, y)
        if shown is None:
            continue
        top = frame.py(shown)
        out.append(f'<rect x="{frame.px(x) - width / 2:.1f}" y="{min(top, base):.1f}" '
                   f'width="{width:.1f}" height="{max(abs(base - top), 1.0):.1f}" '
                   f'fill="{s.color}"/>')
    return "".join(out)


def _legend(chart: Chart, frame: _Frame, series: list) -> list:
    named = [s for s in series if s.name]
    parts, x = [], frame.left
    for s in named:
        parts.append(f'<rect x="{x:.1f}" y="{frame.top - 18:.1f}" width="12" height="8" '
                     f'fill="{s.color}"/><text x="{x + 16:.1f}" y="{frame.top - 10:.1f}" '
                     f'fill="#24292f">{escape(s.name)}</text>')
        x += 28 + 6.5 * len(s.name)
    return parts
