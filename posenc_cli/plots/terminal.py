"""``posenc plot --terminal``: the heatmaps of :mod:`posenc_cli.plots.data` drawn in the terminal with rich, two
cells per character (upper half blocks), in a palette sampled from the matplotlib colormap of the same name
(no matplotlib needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from posenc_cli.errors import PosencError
from posenc_cli.plots.data import F64, AlibiData, Heatmap

if TYPE_CHECKING:
    from rich.console import RenderableType

# ---------------------------------------------------------------- terminal (rich, no matplotlib)

_PALETTES: dict[str, tuple[str, ...]] = {
    "RdBu": ("#67001f", "#b2182b", "#d6604d", "#f4a582", "#fddbc7", "#f7f7f7", "#d1e5f0", "#92c5de", "#4393c3",
             "#2166ac", "#053061"),
    "coolwarm": ("#3b4cc0", "#6f92f3", "#aac7fd", "#dddcdc", "#f7b89c", "#e7745b", "#b40426"),
    "viridis": ("#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
                "#fde725"),
    "magma": ("#000004", "#1c1044", "#4f127b", "#812581", "#b5367a", "#e55964", "#fb8761", "#fec287", "#fcfdbf"),
    "gray": ("#000000", "#ffffff"),
}
_MASKED_RGB = (110, 110, 110)
HALF_BLOCK = "\u2580"  # upper half block: foreground = top cell, background = bottom cell


def terminal_palette(name: str) -> npt.NDArray[np.float64]:
    """Anchor colours (k x 3, 0-255) of a terminal colormap; ``_r`` reverses it."""
    base = name[:-2] if name.endswith("_r") else name
    anchors = _PALETTES.get(base) or _PALETTES.get(base.lower())
    if anchors is None:
        known = ", ".join(sorted(_PALETTES))
        raise PosencError(f"--cmap {name!r} has no terminal palette; use one of: {known} (or with _r)")
    rgb = np.array([[int(h[i : i + 2], 16) for i in (1, 3, 5)] for h in anchors], dtype=np.float64)
    return rgb[::-1] if name.endswith("_r") else rgb


def _to_rgb(values: npt.ArrayLike, vmin: float, vmax: float, palette: F64) -> npt.NDArray[np.int64]:
    arr = np.ma.filled(np.ma.masked_invalid(np.ma.asarray(values, dtype=np.float64)), np.nan)
    t = np.clip((arr - vmin) / (vmax - vmin if vmax > vmin else 1.0), 0.0, 1.0)
    pos = np.nan_to_num(t) * (palette.shape[0] - 1)
    lo = np.minimum(np.floor(pos).astype(np.int64), palette.shape[0] - 2)
    frac = (pos - lo)[..., None]
    rgb = palette[lo] * (1 - frac) + palette[lo + 1] * frac
    rgb[np.isnan(arr)] = _MASKED_RGB
    out: npt.NDArray[np.int64] = np.rint(rgb).astype(np.int64)
    return out


def _half_blocks(rgb: npt.NDArray[np.int64]) -> Any:
    from rich.color import Color
    from rich.style import Style
    from rich.text import Text

    styles: dict[tuple[int, ...], Style] = {}
    text = Text(no_wrap=True, overflow="crop")
    rows = rgb.shape[0]
    for y in range(0, rows, 2):
        for x in range(rgb.shape[1]):
            top = tuple(int(v) for v in rgb[y, x])
            bottom = tuple(int(v) for v in rgb[y + 1, x]) if y + 1 < rows else ()
            key = top + bottom
            style = styles.get(key)
            if style is None:
                style = Style(color=Color.from_rgb(*top), bgcolor=Color.from_rgb(*bottom) if bottom else None)
                styles[key] = style
            text.append(HALF_BLOCK, style)
        if y + 2 < rows:
            text.append("\n")
    return text


def _scale_bar(vmin: float, vmax: float, palette: F64, width: int = 24) -> Any:
    from rich.text import Text

    rgb = _to_rgb(np.linspace(vmin, vmax, width)[None, :].repeat(2, axis=0), vmin, vmax, palette)
    bar = Text(f"{vmin:.3g} ", no_wrap=True)
    bar.append_text(_half_blocks(rgb))
    bar.append(f" {vmax:.3g}")
    return bar


def terminal_heatmap(heatmaps: Sequence[Heatmap], *, cmap: str = "RdBu", title: str | None = None) -> RenderableType:
    """Heatmaps as coloured half-block cells (two rows per line), side by side; a rich renderable.

    Each panel is drawn at its ``values`` shape: one column per terminal cell, two rows per line.
    """
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    palette = terminal_palette(cmap)
    grid = Table.grid(padding=(0, 2))
    cells = []
    for hm in heatmaps:
        n, d = hm.full_shape
        head = Text(hm.title, style="bold")
        axes = Text(f"rows: {hm.row_label} 0..{n - 1} (top to bottom); columns: {hm.col_label} 0..{d - 1}")
        parts: list[Any] = [head, axes]
        if hm.aggregated:
            parts.append(Text(hm.aggregation_note, style="italic"))
        for y, label in hm.hlines:
            if y < n:
                parts.append(Text(f"{label}: line {int(y * hm.values.shape[0] / n) // 2 + 1} of "
                                  f"{(hm.values.shape[0] + 1) // 2}"))
        parts.append(_half_blocks(_to_rgb(hm.values, hm.vmin, hm.vmax, palette)))
        parts.append(Text(f"{hm.value_label}: ", no_wrap=True) + _scale_bar(hm.vmin, hm.vmax, palette))
        grid.add_column(width=hm.values.shape[1])
        cells.append(Group(*parts))
    grid.add_row(*cells)
    return Group(Text(title, style="bold"), grid) if title else grid


def terminal_alibi(data: AlibiData, width: int, *, cmap: str = "viridis", title: str | None = None) -> RenderableType:
    """ALiBi heads as half-block small multiples; masked cells grey. Long sequences are sampled to fit."""
    from rich.columns import Columns
    from rich.console import Group
    from rich.text import Text

    palette = terminal_palette(cmap)
    n = data.seq_len
    cells = max(4, min(n, width - 2))
    idx = np.unique(np.linspace(0, n - 1, cells).round().astype(np.int64))
    vmin = data.vmin
    panels = []
    for h in range(data.heads):
        sub = data.bias[h][np.ix_(idx, idx)]
        label = Text(f"head {h + 1}: {data.slope_labels[h]}", style="bold")
        panels.append(Group(label, _half_blocks(_to_rgb(sub, vmin, 0.0, palette))))
    header = title or f"ALiBi causal bias: {data.heads} heads, {n} positions (official slopes)"
    lines: list[Any] = [Text(header, style="bold"),
                        Text("rows: query i (top to bottom); columns: key j; grey: masked future keys (-inf)")]
    if idx.size < n:
        lines.append(Text(f"sampled {idx.size} of {n} positions per axis", style="italic"))
    lines.append(Columns(panels, padding=(1, 2), width=max(idx.size, 24)))
    lines.append(Text("bias -m*(i-j): ") + _scale_bar(vmin, 0.0, palette))
    return Group(*lines)
