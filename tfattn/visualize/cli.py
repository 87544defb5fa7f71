"""The work of `python -m tfattn.visualize` (see `__main__`), without its
flags, so that tests and scripts can call `run` directly."""

import io
import os

from tfattn.utils.files import write_files_atomically

__all__ = ["check_output_dir", "parse_indices", "run"]


def parse_indices(flag, text, count, what):
    """The indices that a `--layers` or `--heads` value selects.

    Args:
        flag: str. The flag's name, for error messages.
        text: str. `"all"`, or comma-separated integers such as `"0,2"`.
        count: int. How many there are (indices run from 0 to
            `count - 1`).
        what: str. What they index, e.g. `"layer(s)"`, for error messages.

    Returns:
        A sorted list of distinct int indices in `[0, count)`.

    Raises:
        ValueError: neither `"all"` nor integers, or an index out of range.
    """
    if text.strip() == "all":
        return list(range(count))
    try:
        indices = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise ValueError(f'--{flag}={text!r}: expected "all" or comma-'
                         "separated integers.") from None
    bad = [i for i in indices if not 0 <= i < count]
    if bad or not indices:
        raise ValueError(f"--{flag}={text!r}: {what} {bad} out of range; the "
                         f"model has {count} (valid: 0-{count - 1}).")
    return indices


def check_output_dir(path):
    """Refuses an `--output_dir` that exists and is not a directory.

    Args:
        path: str. The output directory.

    Raises:
        ValueError: `path` exists and is not a directory.
    """
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--output_dir={path}: exists and is not a "
                         "directory.")


def run(model_dir, text, output_dir, layers="all", heads="all",
        average_checkpoints=1):
    """The CLI's work, for tests and scripts.

    Translates `text` with the model that `train.py` left in `model_dir`
    and writes into `output_dir`: `index.html` (every layer and head),
    `{kind}_layer{i}.png` (the selected heads of each selected layer) and
    `scores.npz` (the selected weights and the tokens).

    Args:
        model_dir: str. A model directory that `train.py` trained.
        text: str. The source sentence.
        output_dir: str. Where the files go (created if missing).
        layers: str. `"all"` or comma-separated layer indices. Defaults to
            `"all"`.
        heads: str. `"all"` or comma-separated head indices. Defaults to
            `"all"`.
        average_checkpoints: int. Use the average of the last N
            checkpoints. Defaults to `1`.

    Returns:
        `(maps, paths)`: the `AttentionMaps` and the paths written (the
        page, the PNGs, then the `.npz`).

    Raises:
        ValueError: an empty `text`, bad indices, or an `output_dir` that
            is not a directory.
        ImportError: matplotlib is missing (the `viz` extra).
    """
    import numpy as np

    from tfattn import config
    from tfattn.training import model_io
    from tfattn import visualize

    if not text.strip():
        raise ValueError("--text is empty: give a source sentence.")
    check_output_dir(output_dir)
    visualize.plot.require_matplotlib()
    model, tokenizer, hp = model_io.restore_model(
        model_dir, average_last=average_checkpoints)
    layer_ids = parse_indices("layers", layers, hp.num_layers, "layer(s)")
    head_ids = parse_indices("heads", heads, hp.num_heads, "head(s)")
    maps = visualize.attention_maps(model, tokenizer, text,
                                    **config.decoding_kwargs(hp))
    selected = {kind: [maps.scores[kind][i][head_ids] for i in layer_ids]
                for kind in maps.scores}
    os.makedirs(output_dir, exist_ok=True)
    paths = []
    for kind, per_layer in selected.items():
        queries, keys = visualize.query_and_key_tokens(maps, kind)
        for layer, weights in zip(layer_ids, per_layer):
            path = os.path.join(output_dir, f"{kind}_layer{layer}.png")
            visualize.plot_attention(weights, queries, keys, path=path,
                                     title=f"{kind} attention, layer {layer}")
            paths.append(path)
    # The page is interactive: it gets every layer and head, numbered as in
    # the model; --layers and --heads select the pictures and the arrays.
    html = visualize.write_html(maps.scores, maps.source_tokens,
                                maps.target_tokens,
                                os.path.join(output_dir, "index.html"))
    arrays = {f"{kind}_{layer}": weights
              for kind, per_layer in selected.items()
              for layer, weights in zip(layer_ids, per_layer)}
    npz = os.path.join(output_dir, "scores.npz")
    buffer = io.BytesIO()
    np.savez(buffer, source_tokens=np.array(maps.source_tokens),
             target_tokens=np.array(maps.target_tokens), **arrays)
    write_files_atomically({npz: buffer.getvalue()})
    return maps, [html] + paths + [npz]
