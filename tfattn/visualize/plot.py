"""`plot_attention`: attention weights as labelled heatmaps (matplotlib)."""

import io
import math
import os

import numpy as np

from tfattn.utils.files import write_files_atomically
from tfattn.utils.validation import invalid_argument

__all__ = ["plot_attention", "require_matplotlib"]

_CONTEXT = "plot_attention"


def require_matplotlib():
    """Imports matplotlib's object-oriented API (no pyplot, no display).

    Returns:
        `(Figure, FigureCanvasAgg)`: the classes
        `matplotlib.figure.Figure` and
        `matplotlib.backends.backend_agg.FigureCanvasAgg`.

    Raises:
        ImportError: matplotlib is missing (the `viz` extra).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "tfattn.visualize draws with matplotlib, which is not installed: "
            'pip install "tfattn[viz]" (or pip install matplotlib).') from None
    return Figure, FigureCanvasAgg


def _tokens(name, tokens, count):
    if isinstance(tokens, (str, bytes)) or not all(
            isinstance(t, str) for t in tokens):
        raise invalid_argument(name, "a list of str", tokens, _CONTEXT)
    if len(tokens) != count:
        raise invalid_argument(
            name, f"{count} tokens (the weights' length on that axis)",
            f"<{len(tokens)} tokens>", _CONTEXT)
    return list(tokens)


def plot_attention(weights, query_tokens, key_tokens, path=None, title=None):
    """Draws attention weights with token labels on both axes.

    Args:
        weights: [T_q, T_k] (one map) or [H, T_q, T_k] (one panel per head,
            in a grid of up to 4 columns): NumPy array or tensor.
        query_tokens: list of T_q str, the rows' labels (who attends).
        key_tokens: list of T_k str, the columns' labels (attended to).
        path: str or None. Where to write a PNG (atomically); `None`
            writes nothing. Defaults to `None`.
        title: str or None. The figure's title. Defaults to `None`.

    Returns:
        The `matplotlib.figure.Figure`.

    Raises:
        ValueError: weights of another rank, or token lists whose lengths do
            not match the weights' shape.
        ImportError: matplotlib is missing (install the `viz` extra).
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        weights = weights[None]
    if weights.ndim != 3:
        raise invalid_argument("weights", "an array [T_q, T_k] or "
                               "[H, T_q, T_k]", f"<array of shape "
                               f"{weights.shape}>", _CONTEXT)
    heads, t_q, t_k = weights.shape
    query_tokens = _tokens("query_tokens", query_tokens, t_q)
    key_tokens = _tokens("key_tokens", key_tokens, t_k)
    figure_cls, canvas_cls = require_matplotlib()
    columns = min(heads, 4)
    rows = math.ceil(heads / columns)
    cell = 0.32  # Inches per token.
    width = columns * (1.2 + cell * t_k)
    height = rows * (1.2 + cell * t_q) + (0.4 if title else 0.0)
    figure = figure_cls(figsize=(max(width, 3.0), max(height, 2.5)))
    canvas_cls(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= heads:
            ax.axis("off")
            continue
        ax.imshow(weights[index], cmap="viridis", vmin=0.0, vmax=1.0,
                  aspect="equal")
        ax.set_xticks(range(t_k), key_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(t_q), query_tokens, fontsize=7)
        if heads > 1:
            ax.set_title(f"head {index}", fontsize=8)
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    if path is not None:
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=100)
        write_files_atomically({os.fspath(path): png.getvalue()})
    return figure
