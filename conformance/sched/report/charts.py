"""Charts people can read: plotly figures with real axes, gridlines, values on hover and a
legend naming both systems, the JS embedded once per page so the report works offline.

Each chart is a `<div class='chart'>` carrying its figure as JSON (`data-figure`); one script at
the end of the page draws them all, so a 19-workload report holds one copy of plotly.js (about
4.6 MB), not 38. The two systems are told apart even where their lines coincide: the left one
is a wide translucent band, the right one a thin dashed line drawn over it. A divergence puts a
vertical red line and a label at its step on every chart of its workload (`data-marker-step`).
plotly.js is read from the `plotly` package's own files; the Python API is not needed.
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from typing import Any

Line = tuple[str, str, list[int], list[int]]
"""label, color, left values, right values"""


@cache
def plotly_js() -> str:
    """plotly.min.js from the installed `plotly` package ("" when it is not installed)."""
    try:
        return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(
            encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return ""


def figure(title: str, lines: list[Line], left: str, right: str,
           marker: tuple[int, str] | None) -> dict[str, Any]:
    traces = []
    for label, color, a, b in lines:
        traces.append({"type": "scatter", "mode": "lines", "name": f"{label}: {left}",
                       "legendgroup": label, "x": list(range(len(a))), "y": a,
                       "line": {"color": color, "width": 6}, "opacity": 0.35})
        traces.append({"type": "scatter", "mode": "lines", "name": f"{label}: {right}",
                       "legendgroup": label, "x": list(range(len(b))), "y": b,
                       "line": {"color": color, "width": 1.6, "dash": "dash"}})
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0, "font": {"size": 14}},
        "height": 330, "margin": {"l": 56, "r": 16, "t": 36, "b": 90},
        "hovermode": "x unified", "paper_bgcolor": "white", "plot_bgcolor": "white",
        "xaxis": {"title": {"text": "step"}, "showgrid": True, "gridcolor": "#eaeef2",
                  "zeroline": False, "showline": True, "linecolor": "#8c959f"},
        "yaxis": {"title": {"text": "count"}, "showgrid": True, "gridcolor": "#eaeef2",
                  "rangemode": "tozero", "showline": True, "linecolor": "#8c959f"},
        "legend": {"orientation": "h", "y": -0.3, "yanchor": "top", "font": {"size": 11}},
    }
    if marker is not None:
        step, text = marker
        layout["shapes"] = [{"type": "line", "x0": step, "x1": step, "yref": "paper",
                             "y0": 0, "y1": 1, "line": {"color": "#cf222e", "width": 2}}]
        layout["annotations"] = [{"x": step, "yref": "paper", "y": 1, "text": text,
                                  "showarrow": False, "xanchor": "left", "yanchor": "bottom",
                                  "font": {"color": "#cf222e", "size": 11}}]
    return {"data": traces, "layout": layout}


def chart(title: str, lines: list[Line], left: str, right: str,
          marker: tuple[int, str] | None = None) -> str:
    """A chart placeholder the page script draws; the marker step is kept as an attribute so a
    test (or a reader of the source) can find it without running plotly."""
    data = html.escape(json.dumps(figure(title, lines, left, right, marker),
                                  separators=(",", ":")), quote=True)
    step = "" if marker is None else f" data-marker-step='{marker[0]}'"
    return f"<div class='chart' data-figure=\"{data}\"{step}></div>"


def page_script() -> str:
    """plotly.js once, then the loop that draws every chart; a note if plotly is missing."""
    js = plotly_js()
    if not js:
        return ("<script>document.querySelectorAll('.chart').forEach(function(d){"
                "d.textContent='(chart left out: the plotly package is not installed)';});"
                "</script>")
    draw = ("document.querySelectorAll('.chart').forEach(function(d){"
            "var f=JSON.parse(d.getAttribute('data-figure'));"
            "Plotly.newPlot(d,f.data,f.layout,{responsive:true,displaylogo:false});});")
    safe = js.replace("</script", "<\\/script")
    return f"<script>{safe}</script><script>{draw}</script>"
