"""Multi30k task 1 (English-German) as a TFDS dataset builder.

Multi30k (Elliott et al., 2016) pairs English image descriptions from
Flickr30K with German translations: 29,000 training pairs, 1,014 validation
pairs (`val`) and 1,000 test pairs (`test_2016_flickr`). The builder reads
the gzip files of github.com/multi30k/dataset, `data/task1/raw/`, at commit
`a3d2e0d26b56f3846f66a952536ffed4e401d05a`:

    train.en.gz  train.de.gz  val.en.gz  val.de.gz
    test_2016_flickr.en.gz  test_2016_flickr.de.gz

Online, it downloads them from raw.githubusercontent.com. Offline, put the six
files in a folder and pass it as the TFDS manual directory: `manual_dir=` of
`load_multi30k`, `tfds.download.DownloadConfig(manual_dir=...)`, or a
command's `--manual_dir=...` flag (`tfds build multi30k --imports tfattn.data
--manual_dir=...` also works where apache-beam is installed). Files found
there are used without any download. Either way the decompressed text is
checked against the SHA-256 sums of the official files.

Terms: Multi30K is partly derived from Flickr30K and is provided for
non-commercial research and educational purposes.

The lowercased, normalised, tokenised references of the same repository
(`data/task1/tok/*.lc.norm.tok.{en,de}`) are what published Multi30k BLEU
scores use; `load_tokenized_references` reads them from a folder.
"""

import gzip
import zlib
import hashlib
import os
import socket
import urllib.parse
import urllib.request

import tensorflow as tf
import tensorflow_datasets as tfds
from etils import epath

from tfattn.data.textfiles import ParallelDataError
from tfattn.data.textfiles import decode_lines
from tfattn.utils.validation import check_choice
from tfattn.utils.validation import invalid_argument

__all__ = [
    "COMMIT",
    "CONNECT_TIMEOUT",
    "FILENAMES",
    "LANGUAGES",
    "Multi30k",
    "Multi30kDownloadError",
    "SPLITS",
    "SPLIT_FILES",
    "SPLIT_SIZES",
    "URL_BASE",
    "load_multi30k",
    "load_tokenized_references",
]

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
URL_BASE = (
    "https://raw.githubusercontent.com/multi30k/dataset/"
    f"{COMMIT}/data/task1/raw/"
)
LANGUAGES = ("en", "de")
SPLITS = ("train", "validation", "test")
# TFDS split name -> file stem in data/task1/{raw,tok}.
SPLIT_FILES = {
    "train": "train",
    "validation": "val",
    "test": "test_2016_flickr",
}
SPLIT_SIZES = {"train": 29_000, "validation": 1_014, "test": 1_000}
# SHA-256 of the decompressed text of each official file.
_SHA256 = {
    "train.en.gz": (
        "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"
    ),
    "train.de.gz": (
        "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"
    ),
    "val.en.gz": (
        "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"
    ),
    "val.de.gz": (
        "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"
    ),
    "test_2016_flickr.en.gz": (
        "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182"
    ),
    "test_2016_flickr.de.gz": (
        "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"
    ),
}
FILENAMES = tuple(_SHA256)
# Seconds to wait for a TCP connection before giving up on the download;
# TFDS itself retries an unreachable host for minutes.
CONNECT_TIMEOUT = 10

_CITATION = """\
@inproceedings{elliott-etal-2016-multi30k,
  title = {Multi30K: Multilingual English-German Image Descriptions},
  author = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and
            Specia, Lucia},
  booktitle = {Proceedings of the 5th Workshop on Vision and Language},
  year = {2016},
  pages = {70--74},
  url = {https://aclanthology.org/W16-3210},
}
"""

_MANUAL_INSTRUCTIONS = f"""\
Download these six files of github.com/multi30k/dataset (commit {COMMIT},
folder data/task1/raw/) into one folder, keeping their names:
  {" ".join(FILENAMES)}
then pass that folder as the manual directory: `--manual_dir=FOLDER` on the
command line, `manual_dir=FOLDER` (`tfattn.data.load_multi30k`) or
`tfds.download.DownloadConfig(manual_dir=FOLDER)`.
"""


class Multi30kDownloadError(OSError):
    """The Multi30k files could not be downloaded and are not local either."""


def _check_reachable(url, timeout):
    """Fails fast (OSError) when the download host takes no connection.

    Without it, TFDS's downloader retries an unresolvable host for minutes.
    Skipped when a proxy is configured, since the proxy then makes the
    connection.
    """
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https"):
        return
    if urllib.request.getproxies().get(parsed.scheme):
        return
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    with socket.create_connection((parsed.hostname, port), timeout=timeout):
        pass


def _gunzip(data, path):
    """gzip.decompress, whose errors name no file: here they name `path`."""
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as error:
        raise ParallelDataError(
            path, f"is not a whole gzip file ({error}); fetch it again from "
            "github.com/multi30k/dataset") from None


def _read_gzip_lines(path, filename):
    with tf.io.gfile.GFile(os.fspath(path), "rb") as f:
        data = _gunzip(f.read(), path)
    expected = _SHA256.get(filename)
    if expected is not None:
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise ParallelDataError(
                path,
                f"is not the official Multi30k {filename}: the SHA-256 of its "
                f"decompressed text is {actual}, expected {expected}",
            )
    return decode_lines(data, str(path))


class _ThisFile:
    """A class attribute whose value is this module's path.

    Replaces TFDS's `code_path` lookup, which imports `importlib_resources`;
    tensorflow-datasets 4.9.10 declares that package only for Python < 3.9,
    so the lookup fails on a fresh install (tensorflow/datasets#11212).
    """

    def __get__(self, obj, objtype=None):
        return epath.Path(__file__)


class Multi30k(tfds.core.GeneratorBasedBuilder):
    """Multi30k task 1: English image descriptions and German translations.

    Features: `{'en': tfds.features.Text(), 'de': tfds.features.Text()}`;
    splits: `'train'` (29,000), `'validation'` (1,014, the `val` files),
    `'test'` (1,000, the `test_2016_flickr` files). Leading and trailing
    whitespace of each line is removed. See the module docstring for
    downloading and `manual_dir`.
    """

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Task 1 raw text at commit a3d2e0d."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL_INSTRUCTIONS
    # Where the gzip files are fetched from; tests point it elsewhere.
    url_base = URL_BASE
    code_path = _ThisFile()

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description=(
                "Multi30k task 1: English descriptions of Flickr30K images "
                "with German translations (multi30k/dataset, commit "
                f"{COMMIT[:7]})."
            ),
            features=tfds.features.FeaturesDict(
                {"en": tfds.features.Text(), "de": tfds.features.Text()}
            ),
            supervised_keys=("en", "de"),
            # Keep corpus order: example i is line i of the files, which the
            # tokenised references (and any BLEU against them) rely on.
            disable_shuffling=True,
            homepage="https://github.com/multi30k/dataset",
            citation=_CITATION,
        )

    def _locate_files(self, dl_manager):
        """Paths of the six files: from manual_dir if all are there, else
        downloaded."""
        try:
            manual_dir = dl_manager.manual_dir
        except (AssertionError, ValueError):  # Missing or empty folder.
            manual_dir = None
        if manual_dir is not None:
            found = {name: manual_dir / name for name in FILENAMES}
            missing = [n for n, p in found.items() if not p.exists()]
            if not missing:
                return found
        else:
            missing = list(FILENAMES)
        urls = {name: self.url_base + name for name in FILENAMES}
        try:
            _check_reachable(self.url_base, CONNECT_TIMEOUT)
            return dl_manager.download(urls)
        except Exception as error:  # Whatever the network layer raised.
            reason = f"{type(error).__name__}: {error}"
            if len(reason) > 300:
                reason = reason[:300] + "..."
            where = (
                f"The manual directory {manual_dir} lacks {', '.join(missing)}."
                if manual_dir is not None
                else "No manual directory holds them (none was given, or it "
                "is empty)."
            )
            raise Multi30kDownloadError(
                f"Downloading the Multi30k files from {self.url_base} failed "
                f"({reason}). {where}\n"
                "To build Multi30k without a download, put the six files "
                f"{', '.join(FILENAMES)} in one folder and pass it with "
                "`--manual_dir=FOLDER` (e.g. "
                "`--manual_dir=../shared/data/multi30k/raw`; in Python "
                "`load_multi30k(split, manual_dir=FOLDER)` or "
                "`tfds.download.DownloadConfig(manual_dir=FOLDER)`). "
                "Or pick another dataset, e.g. the generated numbers task "
                "(`tfattn.data.numbers_dataset`), which needs no download."
            ) from error

    def _split_generators(self, dl_manager):
        paths = self._locate_files(dl_manager)
        return {
            split: self._generate_examples(
                {
                    lang: (paths[f"{stem}.{lang}.gz"], f"{stem}.{lang}.gz")
                    for lang in LANGUAGES
                }
            )
            for split, stem in SPLIT_FILES.items()
        }

    def _generate_examples(self, files):
        lines = {
            lang: _read_gzip_lines(path, name)
            for lang, (path, name) in files.items()
        }
        counts = {lang: len(v) for lang, v in lines.items()}
        if counts["en"] != counts["de"]:
            raise ParallelDataError(
                files["en"][0],
                f"line counts differ: {files['en'][0]} has {counts['en']} "
                f"lines but {files['de'][0]} has {counts['de']} lines",
            )
        for i, (en, de) in enumerate(
            zip(lines["en"], lines["de"], strict=True)
        ):
            yield i, {"en": en, "de": de}


def _check_split(split):
    if not isinstance(split, str) or split.split("[")[0] not in SPLITS:
        raise invalid_argument(
            "split",
            "one of 'train', 'validation', 'test' (optionally sliced, e.g. "
            "'train[:10%]')",
            split,
        )
    return split


def load_multi30k(split, data_dir=None, manual_dir=None, shuffle_files=False):
    """Builds Multi30k if needed and returns one split.

    Args:
        split: str. `'train'`, `'validation'` or `'test'`, or a TFDS slice
            such as `'train[:1000]'`.
        data_dir: str or None. TFDS data directory for the prepared dataset
            (and downloads). `None` uses TFDS's default (`~/tensorflow_datasets`
            or `$TFDS_DATA_DIR`). Defaults to `None`.
        manual_dir: str or None. Folder holding the six `*.gz` files; used
            instead of downloading. Defaults to `None`.
        shuffle_files: bool. Passed to `as_dataset` (the data is one shard
            per split, so this barely matters). Defaults to `False`.

    Returns:
        A `tf.data.Dataset` of `{'en': tf.string, 'de': tf.string}` scalars.

    Raises:
        ValueError: `split` is not one of the splits (or a slice of one).
        Multi30kDownloadError: the download failed and `manual_dir` does not
            hold the files.
        ParallelDataError: a file is not whole gzip, not the official file
            (its SHA-256 differs), or the line counts of a split differ.
    """
    _check_split(split)
    builder = Multi30k(data_dir=None if data_dir is None else str(data_dir))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(
            manual_dir=None if manual_dir is None else str(manual_dir)
        )
    )
    return builder.as_dataset(split=split, shuffle_files=shuffle_files)


def load_tokenized_references(split, language, directory):
    """The lowercased, tokenised reference sentences of one split.

    Reads `{stem}.lc.norm.tok.{language}` (or the same name plus `.gz`) of
    multi30k/dataset's `data/task1/tok/` folder, where `stem` is `train`,
    `val` or `test_2016_flickr`. These are the references of published
    tokenised Multi30k BLEU scores (e.g. with `sacrebleu` and
    `tokenize='none'`, applied to lowercased, tokenised hypotheses).

    Args:
        split: str. `'train'`, `'validation'` or `'test'`.
        language: str. `'en'` or `'de'`.
        directory: str or path-like. The folder holding the files, or its
            parent when the files are in a `tok/` subfolder.

    Returns:
        A list of str, one per line, in corpus order.

    Raises:
        ValueError: `split` or `language` is not one of the above.
        FileNotFoundError: no folder of the two holds the file.
        ParallelDataError: the file is not whole gzip, or fails a check of
            `tfattn.data.textfiles.decode_lines`.
    """
    check_choice("split", split, SPLITS)
    check_choice("language", language, LANGUAGES)
    name = f"{SPLIT_FILES[split]}.lc.norm.tok.{language}"
    directory = str(directory)
    candidates = [
        os.path.join(folder, name + ext)
        for folder in (directory, os.path.join(directory, "tok"))
        for ext in (".gz", "")
    ]
    for path in candidates:
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path, "rb") as f:
                data = f.read()
            if path.endswith(".gz"):
                data = _gunzip(data, path)
            return decode_lines(data, path)
    raise FileNotFoundError(
        f"{candidates[0]}: file not found (nor {', '.join(candidates[1:])}); "
        "expected multi30k/dataset's data/task1/tok files"
    )
