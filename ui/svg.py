"""Inline SVG pictures for the UI pages, drawn as text: a histogram, a line chart, a tool graph.

No plotting library and no script: each function returns an ``<svg>`` element (a string) that a page
puts in its HTML, so a test reads it like the rest of the page.  Every label is HTML-escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

__all__ = ["histogram", "line_chart", "nice_ticks", "PALETTE"]

#: Series colours (colour-blind safe, after Okabe and Ito), used in order.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999"]


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _fmt(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 1e-9 and abs(v) < 1e6 else f"{v:.3g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def histogram(values: Sequence[float], *, lo: float = 0.0, hi: float = 1.0, bins: int = 10, width: int = 360,
              height: int = 140, title: str = "reward") -> str:
    """A histogram of ``values`` in ``bins`` equal bins over ``[lo, hi]`` (the last bin includes ``hi``;
    values outside are clamped into the end bins).  Each bar carries a ``<title>`` with its range and count."""
    counts = [0] * bins
    for v in values:
        k = int((v - lo) / (hi - lo) * bins) if hi > lo else 0
        counts[min(bins - 1, max(0, k))] += 1
    top = max(counts) or 1
    ml, mb, mt = 30, 28, 8
    pw, ph = width - ml - 8, height - mb - mt
    bw = pw / bins
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='hist' width='{width}' height='{height}' "
             f"role='img' aria-label='{_e(title)} histogram'>"]
    for i, c in enumerate(counts):
        h = ph * c / top
        a, b = lo + (hi - lo) * i / bins, lo + (hi - lo) * (i + 1) / bins
        parts.append(f"<rect class='bar' data-count='{c}' x='{ml + i * bw + 1:.1f}' y='{mt + ph - h:.1f}' "
                     f"width='{bw - 2:.1f}' height='{h:.1f}' fill='#0072B2'><title>{_fmt(a)}-{_fmt(b)}: {c}</title></rect>")
        if c:
            parts.append(f"<text x='{ml + (i + 0.5) * bw:.1f}' y='{mt + ph - h - 2:.1f}' font-size='10' "
                         f"text-anchor='middle'>{c}</text>")
    parts.append(f"<line x1='{ml}' y1='{mt + ph}' x2='{ml + pw}' y2='{mt + ph}' stroke='#333'/>")
    for t in nice_ticks(lo, hi, 5):
        x = ml + pw * (t - lo) / (hi - lo)
        parts.append(f"<text x='{x:.1f}' y='{mt + ph + 12}' font-size='10' text-anchor='middle'>{_fmt(t)}</text>")
    parts.append(f"<text x='{ml + pw / 2:.1f}' y='{height - 3}' font-size='10' text-anchor='middle'>{_e(title)}</text>")
    parts.append(f"<text x='{ml - 4}' y='{mt + 8}' font-size='10' text-anchor='end'>{top}</text></svg>")
    return "".join(parts)


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, width: int = 720, height: int = 300,
               x_label: str = "step", y_label: str = "", y_range: tuple[float, float] | None = None) -> str:
    """A line chart of ``series`` (name → ``(x, y)`` points, drawn in order), with axes, round ticks and
    a legend; one point is a dot.  ``y_range`` fixes the y axis (else the data's range)."""
    pts = [p for s in series.values() for p in s if math.isfinite(p[0]) and math.isfinite(p[1])]
    if not pts:
        return "<p class='muted'>no points to draw</p>"
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range else (min(ys), max(ys))
    if x1 <= x0:
        x1 = x0 + 1
    if y1 <= y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    ml, mr, mt, mb = 52, 150, 10, 36
    pw, ph = width - ml - mr, height - mt - mb

    def sx(x: float) -> float:
        return ml + pw * (x - x0) / (x1 - x0)

    def sy(y: float) -> float:
        return mt + ph - ph * (y - y0) / (y1 - y0)

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='chart' width='{width}' height='{height}' role='img' "
             f"aria-label='{_e(y_label or ', '.join(series))} against {_e(x_label)}'>",
             f"<rect x='{ml}' y='{mt}' width='{pw}' height='{ph}' fill='#fff' stroke='#ccc'/>"]
    for t in nice_ticks(y0, y1, 5):
        if y0 - 1e-12 <= t <= y1 + 1e-12:
            parts.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{sy(t):.1f}' y2='{sy(t):.1f}' stroke='#eee'/>"
                         f"<text x='{ml - 4}' y='{sy(t) + 3:.1f}' font-size='10' text-anchor='end'>{_fmt(t)}</text>")
    for t in nice_ticks(x0, x1, 8):
        if x0 - 1e-12 <= t <= x1 + 1e-12:
            parts.append(f"<line x1='{sx(t):.1f}' x2='{sx(t):.1f}' y1='{mt + ph}' y2='{mt + ph + 4}' stroke='#333'/>"
                         f"<text x='{sx(t):.1f}' y='{mt + ph + 15}' font-size='10' text-anchor='middle'>{_fmt(t)}</text>")
    parts.append(f"<text x='{ml + pw / 2:.1f}' y='{height - 4}' font-size='11' text-anchor='middle'>{_e(x_label)}</text>")
    if y_label:
        parts.append(f"<text x='12' y='{mt + ph / 2:.1f}' font-size='11' text-anchor='middle' "
                     f"transform='rotate(-90 12 {mt + ph / 2:.1f})'>{_e(y_label)}</text>")
    for k, (name, points) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        good = [(sx(x), sy(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)]
        if len(good) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(good))
            parts.append(f"<path class='series' data-series='{_e(name)}' d='{d}' fill='none' stroke='{colour}' "
                         f"stroke-width='1.8'/>")
        for x, y in good if len(good) <= 60 else []:
            parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2.2' fill='{colour}'/>")
        ly = mt + 12 + 16 * k
        parts.append(f"<line x1='{ml + pw + 10}' x2='{ml + pw + 28}' y1='{ly - 4}' y2='{ly - 4}' stroke='{colour}' "
                     f"stroke-width='2.5'/><text x='{ml + pw + 32}' y='{ly}' font-size='11'>{_e(name)}</text>")
    parts.append("</svg>")
    return "".join(parts)
