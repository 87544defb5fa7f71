"""Hugging Face model directories: `config.json` and safetensors weights.

What every Hugging Face reader of `tfattn.interop` needs, and nothing
model-specific:

- `read_config(directory)`: the `config.json` dict;
- `read_tensors(directory)`: every tensor of `model.safetensors`, or of
  the shards a sharded checkpoint's `model.safetensors.index.json` names,
  as NumPy arrays by name;
- `require_file(directory, name, what)`: the path of a file the directory
  must hold (a tokenizer's, say);
- `write_config(directory, config)` / `write_tensors(directory, tensors)`:
  the same files back, each written whole (`tfattn.utils.files`), one
  `model.safetensors` with the `{"format": "pt"}` metadata that
  transformers' `from_pretrained` checks.

The layout is transformers' `save_pretrained` one (`modeling_utils.py`:
`SAFE_WEIGHTS_NAME`, `SAFE_WEIGHTS_INDEX_NAME`, the index's `weight_map`
from tensor name to shard file). Like transformers, a directory with both a
single file and an index is read from the single file. PyTorch pickles
(`pytorch_model.bin`) are not read: they need torch, and loading a pickle
runs code. Reading needs the `safetensors` package (`pip install
tfattn[pretrained]`); it is imported on first use.

Errors name the file: `FileNotFoundError` for a directory or file that is
not there, `ValueError` for one whose content does not parse or does not
agree with the index.
"""

import json
import os

from tfattn.utils.files import write_files_atomically

__all__ = ["CONFIG_FILE", "WEIGHTS_FILE", "INDEX_FILE", "read_config",
           "read_tensors", "require_file", "write_config", "write_tensors"]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError("Reading Hugging Face weights needs safetensors: "
                          "pip install tfattn[pretrained]") from None
    return safetensors


def _directory(directory, context):
    path = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{context}: the model directory {path!r} does not exist (pass "
            "a local directory, e.g. one fetched with huggingface_hub's "
            "snapshot_download).")
    return path


def require_file(directory, name, what, context="hf_files"):
    """The path of `name` in `directory`, which must hold it.

    Args:
        directory: str or path-like. An existing local directory.
        name: str. The file's name (may contain `/`).
        what: str. What the file is for, for the message (e.g. "the
            tokenizer's vocabulary").
        context: str. Who reads; prefixes the messages.

    Returns:
        str. The file's absolute path.

    Raises:
        FileNotFoundError: the directory or the file does not exist.
    """
    path = os.path.join(_directory(directory, context), name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{context}: {path!r} is missing: it holds {what}.")
    return path


def _read_json(path, context):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"{context}: {path!r} is not valid JSON "
                         f"({error}).") from None


def read_config(directory, context="hf_files"):
    """The model's `config.json`.

    Args:
        directory: str or path-like. A Hugging Face model directory.
        context: str. Who reads; prefixes the messages.

    Returns:
        dict. The parsed file.

    Raises:
        FileNotFoundError: no such directory, or no `config.json` in it.
        ValueError: the file is not a JSON object.
    """
    path = require_file(directory, CONFIG_FILE, "the model's configuration",
                        context)
    config = _read_json(path, context)
    if not isinstance(config, dict):
        raise ValueError(f"{context}: {path!r} holds a "
                         f"{type(config).__name__}, not a JSON object.")
    return config


def read_tensors(directory, context="hf_files"):
    """Every weight of a Hugging Face model directory, as NumPy arrays.

    Reads `model.safetensors`, or else every shard that
    `model.safetensors.index.json` names (its `weight_map`); each tensor
    keeps its stored dtype and shape.

    Args:
        directory: str or path-like. A Hugging Face model directory.
        context: str. Who reads; prefixes the messages.

    Returns:
        dict. Tensor name -> np.ndarray.

    Raises:
        FileNotFoundError: no such directory, neither weights file, or a
            shard the index names is missing.
        ValueError: the index does not parse, or it and its shards
            disagree (a tensor it names is not in its shard).
        ImportError: safetensors is not installed.
    """
    path = _directory(directory, context)
    single = os.path.join(path, WEIGHTS_FILE)
    index = os.path.join(path, INDEX_FILE)
    if os.path.isfile(single):
        return _load_file(single, context)
    if not os.path.isfile(index):
        found = sorted(n for n in os.listdir(path)
                       if n.endswith((".bin", ".pt", ".h5", ".msgpack")))
        hint = (f" (it holds {', '.join(found)}: PyTorch, TensorFlow and Flax "
                "weights are not read; save the model with "
                "safe_serialization=True)" if found else "")
        raise FileNotFoundError(
            f"{context}: {path!r} has neither {WEIGHTS_FILE} nor "
            f"{INDEX_FILE}{hint}.")
    weight_map = _read_json(index, context).get("weight_map")
    if not isinstance(weight_map, dict):
        raise ValueError(f"{context}: {index!r} has no 'weight_map' "
                         "object.")
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        shard_path = require_file(path, shard,
                                  f"a shard that {INDEX_FILE} names", context)
        tensors.update(_load_file(shard_path, context))
    for name, shard in weight_map.items():
        if name not in tensors:
            raise ValueError(f"{context}: {INDEX_FILE} puts tensor {name!r} "
                             f"in {shard!r}, which does not hold it.")
    return tensors


def _load_file(path, context):
    safetensors = _safetensors()
    try:
        return dict(safetensors.numpy.load_file(path))
    except Exception as error:  # safetensors raises its own error types.
        raise ValueError(f"{context}: {path!r} could not be read as "
                         f"safetensors ({error}).") from None


def write_config(directory, config):
    """Writes `config.json` (sorted keys, indented, as transformers does).

    Args:
        directory: str or path-like. An existing local directory.
        config: dict. JSON-serializable.
    """
    text = json.dumps(config, indent=2, sort_keys=True) + "\n"
    write_files_atomically({os.path.join(os.fspath(directory), CONFIG_FILE):
                            text})


def write_tensors(directory, tensors):
    """Writes every tensor into one `model.safetensors`.

    Args:
        directory: str or path-like. An existing local directory; one with a
            `model.safetensors.index.json` is refused (readers that look for
            the index first, keras-hub's, would read its stale shards).
        tensors: dict. Tensor name -> np.ndarray (contiguous arrays of a
            dtype safetensors stores).

    Raises:
        ValueError: the directory holds a sharded index.
        ImportError: safetensors is not installed.
    """
    index = os.path.join(os.fspath(directory), INDEX_FILE)
    if os.path.exists(index):
        raise ValueError(f"hf_files: {index!r} exists: writing "
                         f"{WEIGHTS_FILE} beside a sharded index would leave "
                         "two checkpoints; write into another directory.")
    data = _safetensors().numpy.save(tensors, metadata={"format": "pt"})
    write_files_atomically({os.path.join(os.fspath(directory), WEIGHTS_FILE):
                            data})
