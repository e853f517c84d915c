"""Pictures: one chart spec per answer, drawn as PNG/SVG (matplotlib, optional) or HTML (uPlot,
bundled). The numbers come from the reports; this module only draws them.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ridgeline.errors import InputError

# the checkout's extra: no `ridgeline` on PyPI is this project
PLOT_EXTRA = "pip install -e '.[plot]' in ridgeline's checkout, or pip install matplotlib"


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    style: str = "line"  # line | points | dashed | mark (a point asked for, drawn over the rest)
    group: str = ""  # points of one colour group (engine, accelerator)


@dataclass(frozen=True)
class Chart:
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    log_x: bool = False
    log_y: bool = False
    notes: tuple[str, ...] = field(default=())


def check_target(path: str) -> None:
    """Refuse, before any work, a --plot file that could not be written: a format not
    drawn, or a folder that does not exist (found after a minutes-long run, it left the
    report printed and the run failed)."""
    if Path(path).suffix.lower() not in (".png", ".svg", ".html"):
        raise InputError(f"--plot takes a .png, .svg or .html file, got {path!r}")
    from ridgeline.cli_output_files import refuse_unwritable_output

    refuse_unwritable_output(path)


def save(chart: Chart, path: str) -> str:
    """Write ``chart`` by the file's extension: .png, .svg or .html."""
    suffix = Path(path).suffix.lower()
    if suffix == ".html":
        Path(path).write_text(html_page(chart.title, [chart]), encoding="utf-8")
        return path
    if suffix not in (".png", ".svg"):
        raise InputError(f"--plot takes a .png, .svg or .html file, got {path!r}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(f"PNG and SVG plots need matplotlib: {PLOT_EXTRA} (or write .html)") \
            from None
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in chart.series:
        if s.style == "points":
            ax.scatter(s.x, s.y, s=14, label=s.name)
        elif s.style == "mark":  # a ringed point and a dotted line at its x, over the curves
            ax.scatter(s.x, s.y, s=70, facecolors="none", edgecolors="black", linewidths=1.5,
                       zorder=3, label=s.name)
            for x in s.x:
                ax.axvline(x, color="black", linestyle=":", linewidth=0.8, zorder=0)
        else:
            ax.plot(s.x, s.y, "--" if s.style == "dashed" else "-", label=s.name)
    if chart.log_x:
        ax.set_xscale("log")
    if chart.log_y:
        ax.set_yscale("log")
    ax.set_title(chart.title)
    ax.set_xlabel(chart.x_label)
    ax.set_ylabel(chart.y_label)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout(rect=(0.0, _notes_below(fig, chart.notes), 1.0, 1.0))
    try:
        fig.savefig(path)
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)
    return path


NOTE_FONT_PT = 7
MARGIN = 0.01  # of the figure, around the notes' block


def _notes_below(fig: Any, notes: tuple[str, ...]) -> float:
    """Draw ``notes`` as one block at the foot of ``fig``, first note on top, each wrapped
    to the figure's width; return the block's height as a share of the figure's, where the
    axes (their tick labels and x-axis label) must start so that no note overprints them."""
    if not notes:
        return 0.0
    widest = max(notes, key=len)
    block = fig.text(MARGIN, MARGIN, widest, fontsize=NOTE_FONT_PT, ha="left", va="bottom")
    renderer = fig.canvas.get_renderer()
    per_char_px = block.get_window_extent(renderer).width / len(widest)
    room = int(0.95 * fig.bbox.width * (1 - 2 * MARGIN) / per_char_px)  # words vary in width
    block.set_text("\n".join(line for note in notes for line in textwrap.wrap(note, room)))
    return float(block.get_window_extent(renderer).height / fig.bbox.height) + 2 * MARGIN


def _vendor(name: str) -> str:
    return resources.files("ridgeline").joinpath(f"data/vendor/{name}").read_text("utf-8")


def _aligned(chart: Chart) -> dict[str, Any]:
    """uPlot wants one shared x array: merge the series' x values, null where absent."""
    xs = sorted({x for s in chart.series for x in s.x if _finite(x)})
    index = {x: i for i, x in enumerate(xs)}
    data: list[list[float | None]] = [list(xs)]
    for s in chart.series:
        column: list[float | None] = [None] * len(xs)
        for x, y in zip(s.x, s.y):
            if _finite(x) and _finite(y):
                column[index[x]] = y
        data.append(column)
    return {"title": chart.title, "x": chart.x_label, "y": chart.y_label,
            "logx": chart.log_x, "logy": chart.log_y, "data": data,
            "series": [{"name": s.name, "style": s.style} for s in chart.series],
            "notes": list(chart.notes)}


def _finite(v: float) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def html_page(title: str, charts: list[Chart], extra_script: str = "",
              extra_html: str = "") -> str:
    """A self-contained page: uPlot inlined, charts as JSON; opens offline."""
    payload = json.dumps([_aligned(c) for c in charts])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_escape(title)}</title>
<style>{_vendor("uPlot.min.css")}
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
.chart {{ margin: 1em 0 2em; }} .note {{ font-size: 0.85em; color: #555; }}
label {{ margin-right: 1em; }}</style>
<script>{_vendor("uPlot.iife.min.js")}</script></head>
<body><h2>{_escape(title)}</h2>{extra_html}<div id="charts"></div>
<script>
const CHARTS = {payload};
const COLORS = ["#1f77b4","#d62728","#2ca02c","#ff7f0e","#9467bd","#8c564b","#e377c2",
                "#7f7f7f","#bcbd22","#17becf"];
function draw(spec, el) {{
  el.innerHTML = "";
  const opts = {{ title: spec.title, width: Math.min(900, window.innerWidth - 60), height: 380,
    // ``xrange``: the x axis drawn over these bounds, not rounded out to the next decade;
    // ``y2``: a second y axis, on the right, for the series marked ``y2`` (another unit)
    scales: {{ x: {{ time: false, distr: spec.logx ? 3 : 1,
                     ...(spec.xrange ? {{ range: () => spec.xrange }} : {{}}) }},
               y: {{ distr: spec.logy ? 3 : 1 }},
               ...(spec.y2 ? {{ y2: {{ distr: spec.logy ? 3 : 1 }} }} : {{}}) }},
    axes: [{{ label: spec.x }}, {{ label: spec.y }}].concat(spec.y2 ?
      [{{ scale: "y2", side: 1, label: spec.y2, grid: {{ show: false }} }}] : []),
    series: [{{}}].concat(spec.series.map((s, i) => ({{ label: s.name,
      ...(s.y2 ? {{ scale: "y2" }} : {{}}),
      stroke: s.style === "mark" ? "#000" : COLORS[i % COLORS.length],
      width: s.style === "points" || s.style === "mark" ? 0 : 2,
      dash: s.style === "dashed" ? [6, 4] : undefined, spanGaps: true,
      points: {{ show: s.style === "points" || s.style === "mark",
                 size: s.style === "mark" ? 11 : 7 }},
      // a series with ``text`` reads it in the legend, not its y (a marker placed, not a value)
      ...(s.text ? {{ value: (u, v) => v == null ? "--" : s.text }} : {{}}) }}))) }};
  new uPlot(opts, spec.data, el);
  for (const n of spec.notes) {{ const p = document.createElement("p"); p.className = "note";
    p.textContent = n; el.appendChild(p); }}
}}
function drawAll(charts) {{
  const root = document.getElementById("charts"); root.innerHTML = "";
  for (const spec of charts) {{ const el = document.createElement("div"); el.className = "chart";
    root.appendChild(el); draw(spec, el); }}
}}
drawAll(CHARTS);
{extra_script}
</script></body></html>
"""


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
