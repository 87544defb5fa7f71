"""Where training pairs come from: dataset specs, splits and the vocabulary.

A dataset is named by a spec string (`parse_dataset_spec`): `numbers` (the
generated task, offline), `multi30k` (with a manual directory of its files),
`tfds:NAME` (a TFDS translation dataset) or `textfiles:PREFIX` (a user's
parallel files). `load_split` gives any split as `{'inputs', 'targets'}`
string pairs, `load_pairs` as Python pairs, and `build_tokenizer` learns (or
reloads) the joint SentencePiece vocabulary of a run.
"""

import dataclasses
import difflib
import os

import tensorflow as tf
from absl import logging

from tfattn.data import monolingual
from tfattn.data import multi30k
from tfattn.data.multi30k import load_multi30k
from tfattn.data.numbers import numbers_dataset
from tfattn.data.textfiles import parallel_dataset
from tfattn.data.tokenizer import load_tokenizer
from tfattn.data.tokenizer import train_tokenizer

__all__ = [
    "DATASET_KINDS",
    "NUMBERS_TOKENIZER_PAIRS",
    "TOKENIZER_MAX_SENTENCES",
    "DatasetSpec",
    "DatasetSpecError",
    "build_tokenizer",
    "check_dataset",
    "load_pairs",
    "load_split",
    "parse_dataset_spec",
    "parse_monolingual_spec",
]

DATASET_KINDS = ("numbers", "multi30k", "tfds", "textfiles")
# Sentences (of both languages together) the vocabulary is learnt from.
TOKENIZER_MAX_SENTENCES = 2_000_000
# Training pairs of the numbers task the vocabulary is learnt from.
NUMBERS_TOKENIZER_PAIRS = 20_000


class DatasetSpecError(ValueError):
    """A dataset spec that cannot work: `argument=value: reason`.

    Args:
        argument: str. The argument at fault (`text`, `source_language`,
            `target_language`, `data_dir` or `manual_dir`).
        value: any. Its value.
        reason: str. Why it cannot work.

    Attributes:
        argument, value, reason: as given, for a caller that names the
            argument its own way (a command-line flag).
    """

    def __init__(self, argument, value, reason):
        """Builds the message from the argument, its value and reason."""
        self.argument, self.value, self.reason = argument, value, reason
        super().__init__(f"{argument}={value!r}: {reason}")


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """Where the training pairs come from (see `parse_dataset_spec`).

    Attributes:
        kind: str. `"numbers"`, `"multi30k"`, `"tfds"` or `"textfiles"`.
        name: str or None. The TFDS name or the text-file prefix.
        source_language, target_language: str or None. Feature keys (TFDS,
            Multi30k) or file suffixes (text files).
        data_dir: str or None. The TFDS data directory.
        manual_dir: str or None. The TFDS manual directory (Multi30k's
            `*.gz` files).
        monolingual: bool. One side only, for a language model: the
            records' `targets` hold the text, `inputs` are empty.
    """

    kind: str
    name: str | None = None
    source_language: str | None = None
    target_language: str | None = None
    data_dir: str | None = None
    manual_dir: str | None = None
    monolingual: bool = False

    def __str__(self):
        text = self.kind + (f":{self.name}" if self.name else "")
        if self.source_language:
            text += f" ({self.source_language}->{self.target_language})"
        elif self.monolingual and self.target_language:
            text += f" ({self.target_language})"
        return text


def parse_dataset_spec(text, source_language=None, target_language=None,
                       data_dir=None, manual_dir=None, monolingual=False):
    """Reads a dataset spec string and checks what it needs.

    Args:
        text: str. `"numbers"`, `"multi30k"`, `"tfds:NAME"` (e.g.
            `"tfds:wmt14_translate/de-en"`) or `"textfiles:PREFIX"` (files
            `PREFIX.train.SRC` and `PREFIX.train.TGT`, or `PREFIX.SRC` and
            `PREFIX.TGT`).
        source_language, target_language: str or None. Required for `tfds`
            and `textfiles`; `multi30k` takes `en`/`de` (default en->de);
            `numbers` takes none.
        data_dir: str or None. TFDS data directory (`multi30k`, `tfds`).
        manual_dir: str or None. TFDS manual directory (`multi30k`, `tfds`).
        monolingual: bool. The text of one language, for a language model
            (`parse_monolingual_spec`). Defaults to `False`.

    Returns:
        A `DatasetSpec`.

    Raises:
        DatasetSpecError: a malformed spec or an impossible combination
            (a `ValueError` naming the argument at fault).
    """
    if not isinstance(text, str) or not text:
        raise DatasetSpecError("text", text, "a dataset spec must be a "
                               "non-empty string")
    kind, sep, name = text.partition(":")
    usage = ("expected 'numbers', 'multi30k', 'tfds:NAME' or "
             "'textfiles:PREFIX'")
    if kind not in DATASET_KINDS:
        raise DatasetSpecError("text", text, f"unknown dataset; {usage}")
    if kind in ("numbers", "multi30k") and sep:
        raise DatasetSpecError("text", text, f"dataset {kind!r} takes no "
                               f"':...' part; {usage}")
    if kind in ("tfds", "textfiles") and not name:
        raise DatasetSpecError("text", text, f"dataset {kind!r} needs a "
                               f"name after ':'; {usage}")
    if monolingual:
        return parse_monolingual_spec(kind, name, source_language,
                                      target_language, data_dir, manual_dir)
    if kind == "numbers":
        _refuse_stray(kind, source_language=source_language,
                      target_language=target_language, data_dir=data_dir,
                      manual_dir=manual_dir)
    elif kind == "multi30k":
        given = (source_language, target_language)
        source_language = source_language or (
            "de" if target_language == "en" else "en")
        target_language = target_language or (
            "de" if source_language == "en" else "en")
        if {source_language, target_language} != {"en", "de"}:
            bad = ("source_language" if given[0] not in (None, "en", "de")
                   or given[1] is None else "target_language")
            raise DatasetSpecError(
                bad, given[bad == "target_language"],
                "Multi30k translates between 'en' and 'de'")
    else:
        for argument, value in (("source_language", source_language),
                                ("target_language", target_language)):
            if not value:
                raise DatasetSpecError(
                    argument, value, f"dataset {text!r} needs "
                    "source_language and target_language (the "
                    "translation's two sides)")
        if source_language == target_language:
            raise DatasetSpecError(
                "target_language", target_language, "source_language and "
                f"target_language must differ (both {source_language!r})")
        if kind == "textfiles":
            _refuse_stray(kind, data_dir=data_dir, manual_dir=manual_dir)
    return DatasetSpec(kind, name or None, source_language, target_language,
                       data_dir or None, manual_dir or None)


def _refuse_stray(kind, **values):
    """Refuses the first of `values` (argument: value) that is set: the
    `kind` dataset takes none of them."""
    for argument, value in values.items():
        if value:
            where = (" (put the path in 'textfiles:PREFIX')"
                     if kind == "textfiles" else "")
            raise DatasetSpecError(
                argument, value,
                f"the {kind!r} dataset takes no {argument}{where}")


def check_dataset(spec, splits=("train",)):
    """Raises FileNotFoundError when the spec's local data is missing.

    A cheap check, made before anything is written: the manual directory
    exists and Multi30k's holds its six files, the text files of `splits`
    exist, and the data directory is a directory if it exists (TFDS creates
    it when it prepares a dataset there).

    Args:
        spec: DatasetSpec. The dataset to check.
        splits: sequence of str. The splits whose text files must exist
            (`textfiles` only). Defaults to `("train",)`.

    Raises:
        FileNotFoundError: a directory or file named above is missing (the
            message names it).
    """
    if spec.data_dir and tf.io.gfile.exists(spec.data_dir) and not \
            tf.io.gfile.isdir(spec.data_dir):
        raise FileNotFoundError(
            f"{spec.data_dir}: the data_dir is not a directory.")
    if spec.manual_dir and not tf.io.gfile.isdir(spec.manual_dir):
        raise FileNotFoundError(
            f"{spec.manual_dir}: the manual_dir directory does not exist.")
    if spec.kind == "multi30k" and spec.manual_dir:
        missing = [n for n in multi30k.FILENAMES if not
                   tf.io.gfile.exists(os.path.join(spec.manual_dir, n))]
        if missing:
            raise FileNotFoundError(
                f"{spec.manual_dir}: the Multi30k manual directory lacks "
                + ", ".join(missing))
    if spec.kind == "textfiles":
        for split in splits:
            if spec.monolingual:
                _text_file(spec, split)
            else:
                _textfile_prefix(spec, split)


def _textfile_prefix(spec, split):
    """`PREFIX.split` when its files exist, else `PREFIX` (train only)."""
    candidates = [f"{spec.name}.{split}"] + (
        [spec.name] if split == "train" else [])
    for prefix in candidates:
        paths = [f"{prefix}.{lang}" for lang in
                 (spec.source_language, spec.target_language)]
        if all(tf.io.gfile.exists(p) for p in paths):
            return prefix
    wanted = " or ".join(
        f"{p}.{{{spec.source_language},{spec.target_language}}}"
        for p in candidates)
    hint = {"validation": " (train.py reads it for --samples, and "
                          "training for eval_every_steps; 0 skips both)",
            "test": " (train.py --eval_split=validation scores the "
                    "validation split instead)"}.get(split, "")
    raise FileNotFoundError(f"No parallel text files for split {split!r}: "
                            f"expected {wanted}{hint}.")


def parse_monolingual_spec(kind, name, source_language, target_language,
                           data_dir, manual_dir):
    """The `DatasetSpec` of a language model's text (see
    `parse_dataset_spec`, whose checks of the spec string ran first).

    Which text: the numbers task's words; Multi30k's `target_language`
    side (`en` by default); a TFDS dataset's `target_language` feature
    (`text` by default); text files `PREFIX.{split}.LANG` (or `PREFIX.LANG`
    for the training split), LANG = `target_language` or `txt`.

    Args:
        kind, name: str. The spec's kind and name.
        source_language: must be None (a language model reads one side).
        target_language: str or None. The language, feature or suffix.
        data_dir, manual_dir: str or None. As in `parse_dataset_spec`.

    Returns:
        A `DatasetSpec` with `monolingual=True`, the language in
        `target_language`.

    Raises:
        DatasetSpecError: a source language, or an impossible combination.
    """
    if source_language:
        raise DatasetSpecError(
            "source_language", source_language, "a language model reads "
            "one side of the data: give --target_language only (the "
            "language, TFDS feature or file suffix)")
    if kind == "numbers":
        _refuse_stray(kind, target_language=target_language,
                      data_dir=data_dir, manual_dir=manual_dir)
    elif kind == "textfiles":
        _refuse_stray(kind, data_dir=data_dir, manual_dir=manual_dir)
    default = {"multi30k": "en", "tfds": "text", "textfiles": "txt"}
    language = target_language or default.get(kind)
    if kind == "multi30k" and language not in ("en", "de"):
        raise DatasetSpecError("target_language", target_language,
                               "Multi30k's text is 'en' or 'de'")
    return DatasetSpec(kind, name or None, None, language, data_dir or None,
                       manual_dir or None, monolingual=True)


def load_split(spec, split="train"):
    """One split of the dataset as `{'inputs', 'targets'}` string pairs.

    Args:
        spec: DatasetSpec.
        split: str. `"train"`, `"validation"` or `"test"`.

    Returns:
        A `tf.data.Dataset` of dicts with `'inputs'` (source) and
        `'targets'` (target) `tf.string` scalars.

    Raises:
        FileNotFoundError, ValueError: missing or malformed data.
    """
    # Only this split's files: eval reads no training text.
    check_dataset(spec, (split,))
    if spec.monolingual:
        return _monolingual_split(spec, split)
    if spec.kind == "numbers":
        return numbers_dataset(split)
    if spec.kind == "textfiles":
        return parallel_dataset(
            _textfile_prefix(spec, split), spec.source_language,
            spec.target_language)
    if spec.kind == "multi30k":
        dataset = load_multi30k(split, data_dir=spec.data_dir,
                                         manual_dir=spec.manual_dir)
    else:
        dataset = _load_tfds(spec, split)
    src, tgt = spec.source_language, spec.target_language
    return dataset.map(lambda ex: {"inputs": ex[src], "targets": ex[tgt]},
                       num_parallel_calls=tf.data.AUTOTUNE)


def _monolingual_split(spec, split):
    """`load_split` of a monolingual spec: `{'inputs': '', 'targets':
    text}` records."""
    if spec.kind == "textfiles":
        path = _text_file(spec, split)
        monolingual.check_text_file(path)
        return monolingual.text_dataset(path)
    if spec.kind == "numbers":
        dataset, key = numbers_dataset(split), "targets"
    elif spec.kind == "multi30k":
        dataset = load_multi30k(split, data_dir=spec.data_dir,
                                manual_dir=spec.manual_dir)
        key = spec.target_language
    else:
        dataset, key = _load_tfds(spec, split), spec.target_language
    return dataset.map(lambda ex: {"inputs": tf.constant(""),
                                   "targets": ex[key]},
                       num_parallel_calls=tf.data.AUTOTUNE)


def _text_file(spec, split):
    """`PREFIX.split.LANG` when it exists, else `PREFIX.LANG` (train
    only)."""
    candidates = [f"{spec.name}.{split}.{spec.target_language}"] + (
        [f"{spec.name}.{spec.target_language}"] if split == "train" else [])
    for path in candidates:
        if tf.io.gfile.exists(path):
            return path
    raise FileNotFoundError(f"No text file for split {split!r}: expected "
                            + " or ".join(candidates) + ".")


def _tfds_name_error(name, error, known):
    """One short line for a TFDS name that does not load: the closest
    dataset names (TFDS's own message lists all of them, 2,000 characters),
    or, for a known dataset, the first sentence of TFDS's reason."""
    base = name.split("/")[0].split(":")[0]
    if base in known:
        reason = str(error).split(". ")[0].strip()
        return f"TFDS dataset {name!r} does not load: {reason}"
    close = difflib.get_close_matches(base, known, n=5, cutoff=0.6)
    hint = (f"; the closest: {', '.join(close)}" if close
            else "; tfds.list_builders() lists them")
    return (f"Unknown TFDS dataset {name!r} (no dataset of that name among "
            f"the {len(known)} of tensorflow-datasets{hint})")


def _load_tfds(spec, split):
    import tensorflow_datasets as tfds

    try:
        builder = tfds.builder(spec.name, data_dir=spec.data_dir)
    except Exception as error:  # TFDS raises several kinds for bad names.
        raise ValueError(_tfds_name_error(
            spec.name, error, tfds.list_builders(
                with_community_datasets=False))) from None
    features = builder.info.features
    keys = list(features.keys()) if hasattr(features, "keys") else []
    missing = [k for k in (spec.source_language, spec.target_language)
               if k and k not in keys]
    if missing:
        raise ValueError(
            f"TFDS dataset {spec.name!r} has no feature(s) "
            f"{', '.join(map(repr, missing))}; its features are "
            f"{', '.join(map(repr, keys))} (use them as --source_language "
            "and --target_language).")
    if not builder.is_prepared():
        try:
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(
                    manual_dir=spec.manual_dir))
        except Exception as error:  # Network and manual-dir errors alike.
            raise FileNotFoundError(
                f"TFDS dataset {spec.name!r} is not prepared in "
                f"{spec.data_dir or 'the default TFDS data directory'} and "
                f"could not be downloaded or built ({type(error).__name__}: "
                f"{str(error)[:300]}). Prepare it with `tfds build "
                f"{spec.name}` and pass --data_dir.") from None
    if builder.info.splits and split not in builder.info.splits:
        raise ValueError(f"TFDS dataset {spec.name!r} has no split "
                         f"{split!r}; it has {', '.join(builder.info.splits)}.")
    return builder.as_dataset(split=split)


def load_pairs(spec, split, limit=None):
    """A split as a list of (source, target) str pairs (at most `limit`).

    Args:
        spec: DatasetSpec.
        split: str. `"train"`, `"validation"` or `"test"`.
        limit: int or None. Keep the split's first `limit` pairs; `None`
            keeps them all. Defaults to `None`.

    Returns:
        A list of (source, target) str tuples, in the split's order.

    Raises:
        FileNotFoundError, ValueError: as `load_split`.
    """
    dataset = load_split(spec, split)
    if limit is not None:
        dataset = dataset.take(limit)
    pairs = []
    # Batched: iterating scalar elements costs about 1 ms each.
    for batch in dataset.batch(4096).as_numpy_iterator():
        pairs += [(s.decode("utf-8"), t.decode("utf-8"))
                  for s, t in zip(batch["inputs"], batch["targets"])]
    return pairs


def build_tokenizer(spec, hp, train_pairs, model_dir, resume=False):
    """The joint vocabulary: loaded on resume, else learnt into `model_dir`.

    Learnt from the source and target sentences of `train_pairs` (at most
    `TOKENIZER_MAX_SENTENCES` sentences) with the hparams' size and model
    type; digits are split for the numbers task. Learning is deterministic,
    so every worker of a multi-worker run learns the same vocabulary.

    Args:
        spec: DatasetSpec.
        hp: HParams.
        train_pairs: the training split (`load_split`).
        model_dir: str or None. Where `spm.model` is read (resume) or
            written (None: learnt in memory only).
        resume: bool. Load `model_dir/spm.model` instead of learning it.
            Defaults to `False`.

    Returns:
        A `SubwordTokenizer`.

    Raises:
        FileNotFoundError: `resume` and `model_dir/spm.model` is missing.
    """
    if resume:
        return load_tokenizer(model_dir)

    def sentences():
        limit = TOKENIZER_MAX_SENTENCES // 2
        if spec.kind == "numbers":
            # Its 40-odd pieces all occur in a few thousand pairs; the
            # whole split would only slow the trainer down.
            limit = NUMBERS_TOKENIZER_PAIRS
        # Batched: iterating scalar elements costs about 1 ms each.
        for batch in train_pairs.take(limit).batch(4096).as_numpy_iterator():
            for source, target in zip(batch["inputs"], batch["targets"]):
                if source:  # A language model's records have none.
                    yield source.decode("utf-8")
                yield target.decode("utf-8")

    logging.info("Learning a %d-piece %s vocabulary from %s.",
                 hp.vocab_size, hp.tokenizer_model_type, spec)
    return train_tokenizer(
        sentences(), model_dir, vocab_size=hp.vocab_size,
        model_type=hp.tokenizer_model_type,
        split_digits=spec.kind == "numbers",
        normalization=hp.tokenizer_normalization,
        mask_piece=hp.task == "masked_lm")
