"""Training curves from a run's own TensorBoard event files.

- `read_scalars(log_dir, tag)`: the (step, value) points of one scalar that
  `tfattn.training.train` wrote with `tf.summary.scalar` (e.g.
  `validation_bleu`, `loss`, `tokens_per_second`) into `MODEL_DIR/train`.
- `plot_curve(log_dir, path, tags=...)`: those points as a PNG, one panel per
  tag, against the step and (top axis) the wall time since the first event.

Example::

    from tfattn.visualize import curves

    curves.plot_curve("runs/m30k/train", "docs/multi30k_validation_bleu.png")
"""

import io
import os

import numpy as np
import tensorflow as tf

from tfattn.utils.files import write_files_atomically
from tfattn.utils.validation import invalid_argument
from tfattn.visualize.plot import require_matplotlib

__all__ = ["available_tags", "plot_curve", "read_scalars"]

_CONTEXT = "curves"


def _event_files(log_dir):
    log_dir = os.fspath(log_dir)
    if not tf.io.gfile.isdir(log_dir):
        raise invalid_argument("log_dir", "a folder of TensorBoard event "
                               "files (MODEL_DIR/train)", log_dir, _CONTEXT)
    files = sorted(tf.io.gfile.glob(os.path.join(log_dir,
                                                 "events.out.tfevents.*")))
    if not files:
        raise invalid_argument("log_dir", "a folder holding "
                               "events.out.tfevents.* files", log_dir,
                               _CONTEXT)
    return files


def read_scalars(log_dir, tag):
    """The points of one scalar, sorted by step (a resumed run's later
    value at a repeated step wins).

    Args:
        log_dir: str or path-like. A folder of event files.
        tag: str. The scalar's name.

    Returns:
        (steps, values, wall_times): three 1-D numpy arrays, empty when the
        tag was never written.

    Raises:
        ValueError: `tag` is not a non-empty str, or `log_dir` holds no
            event files.
    """
    if not isinstance(tag, str) or not tag:
        raise invalid_argument("tag", "a non-empty str", tag, _CONTEXT)
    points = {}
    for path in _event_files(log_dir):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag != tag:
                    continue
                if value.HasField("tensor"):
                    number = float(tf.make_ndarray(value.tensor))
                else:
                    number = float(value.simple_value)
                points[int(event.step)] = (number, float(event.wall_time))
    steps = np.array(sorted(points), dtype=np.int64)
    values = np.array([points[s][0] for s in steps], dtype=np.float64)
    times = np.array([points[s][1] for s in steps], dtype=np.float64)
    return steps, values, times


def plot_curve(log_dir, path, tags=("validation_bleu", "loss"), title=None):
    """Draws scalars of a run against its steps into a PNG file.

    Args:
        log_dir: str or path-like. The run's `MODEL_DIR/train`.
        path: str or path-like. The PNG to write (atomically).
        tags: sequence of str. One panel per tag, in order. Defaults to
            `("validation_bleu", "loss")`.
        title: str or None. The figure's title. Defaults to `None`.

    Returns:
        dict tag -> (steps, values, wall_times) that were drawn.

    Raises:
        ValueError: no event files, or a tag with no points (the message
            lists the scalars that the files hold).
        ImportError: matplotlib is missing (the `viz` extra).
    """
    figure_cls, canvas_cls = require_matplotlib()
    from matplotlib.ticker import MaxNLocator
    if isinstance(tags, str) or not tags:
        raise invalid_argument("tags", "a non-empty list of str", tags,
                               _CONTEXT)
    series = {tag: read_scalars(log_dir, tag) for tag in tags}
    empty = [tag for tag, (steps, _, _) in series.items() if not len(steps)]
    if empty:
        raise invalid_argument(
            "tags", "scalars present in the event files (found: "
            + ", ".join(available_tags(log_dir)) + ")", empty, _CONTEXT)
    start = min(times.min() for _, _, times in series.values())
    figure = figure_cls(figsize=(6.4, 2.6 * len(tags)))
    canvas_cls(figure)
    axes = figure.subplots(len(tags), 1, squeeze=False)[:, 0]
    for axis, (tag, (steps, values, times)) in zip(axes, series.items()):
        axis.plot(steps, values, marker="o" if len(steps) < 40 else None,
                  markersize=3)
        axis.set_ylabel(tag.replace("_", " "))
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        minutes = (times - start) / 60.0
        if len(steps) > 1 and np.all(np.diff(minutes) > 0):
            top = axis.secondary_xaxis(
                "top", functions=(
                    lambda s, st=steps, m=minutes: np.interp(s, st, m),
                    lambda m, st=steps, mm=minutes: np.interp(m, mm, st)))
            # Outside the logged steps the mapping is clamped, so ticks
            # there would pile up on the last label: keep the ones inside.
            top.set_xticks([
                tick for tick in MaxNLocator(6).tick_values(
                    minutes[0], minutes[-1])
                if minutes[0] <= tick <= minutes[-1]])
            top.set_xlabel("minutes")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    write_files_atomically({os.fspath(path): png.getvalue()})
    return series


def available_tags(log_dir):
    """The scalar tags of a folder's event files, sorted.

    Args:
        log_dir: str or path-like. A folder of event files.

    Returns:
        A sorted list of str.

    Raises:
        ValueError: `log_dir` holds no event files.
    """
    tags = set()
    for path in _event_files(log_dir):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value
                        if value.HasField("tensor")
                        or value.HasField("simple_value"))
    return sorted(tags)
