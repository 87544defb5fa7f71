"""Tests of `tfattn.data.sources`: dataset specs and their checks."""

import pytest

from tfattn.data import sources


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        ("numbers:x", {}, "takes no ':...' part"),
        ("wmt", {}, "text='wmt': unknown dataset"),
        ("tfds:", {}, "needs a name"),
        ("tfds:wmt14_translate/de-en", {}, "needs source_language"),
        (
            "textfiles:/tmp/x",
            dict(source_language="en", target_language="en"),
            "must differ",
        ),
        ("numbers", dict(source_language="en"), "takes no source_language"),
        ("multi30k", dict(source_language="fr"), "between 'en' and 'de'"),
        (
            "textfiles:/tmp/x",
            dict(source_language="en", target_language="de", data_dir="/tmp"),
            "no data_dir",
        ),
    ],
)
def test_malformed_dataset_specs(text, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sources.parse_dataset_spec(text, **kwargs)


def test_dataset_spec_defaults():
    spec = sources.parse_dataset_spec("multi30k", manual_dir="/m")
    assert (spec.source_language, spec.target_language) == ("en", "de")
    spec = sources.parse_dataset_spec("multi30k", target_language="en")
    assert (spec.source_language, spec.target_language) == ("de", "en")


def test_incomplete_multi30k_manual_dir(tmp_path):
    (tmp_path / "train.en.gz").write_bytes(b"")
    spec = sources.parse_dataset_spec("multi30k", manual_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="lacks train.de.gz"):
        sources.check_dataset(spec)


@pytest.mark.parametrize("normalization", ["nmt_nfkc", "nmt_nfkc_cf"])
def test_build_tokenizer_uses_the_sets_normalization(tmp_path, normalization):
    import hparams
    from tfattn import config

    hp = config.parse_overrides(
        hparams.get("tiny"), f"tokenizer_normalization={normalization}"
    )
    spec = sources.parse_dataset_spec("numbers")
    pairs = sources.load_split(spec, "train").take(500)
    tokenizer = sources.build_tokenizer(spec, hp, pairs, str(tmp_path))
    assert tokenizer.normalization == normalization
    assert tokenizer.folds_case == normalization.endswith("_cf")
    # A resumed run reads the rule back from the model directory.
    reloaded = sources.build_tokenizer(spec, hp, None, str(tmp_path), True)
    assert reloaded.normalization == normalization


def test_a_split_needs_only_its_own_text_files(tmp_path):
    """Eval reads the test split alone: no training text is required
    (issue 57: `--mode=eval` asked for PREFIX.txt to score PREFIX.test)."""
    (tmp_path / "text.test.txt").write_text("a b\nc d\n")
    spec = sources.parse_dataset_spec(
        f"textfiles:{tmp_path}/text", monolingual=True
    )
    assert sources.load_pairs(spec, "test") == [("", "a b"), ("", "c d")]
    with pytest.raises(FileNotFoundError, match="split 'train'"):
        sources.load_pairs(spec, "train")
    for lang, text in (("en", "one\n"), ("de", "eins\n")):
        (tmp_path / f"pair.test.{lang}").write_text(text)
    spec = sources.parse_dataset_spec(f"textfiles:{tmp_path}/pair", "en", "de")
    assert sources.load_pairs(spec, "test") == [("one", "eins")]


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(text="wmt"), "text"),
        (dict(text="numbers", data_dir="/d"), "data_dir"),
        (dict(text="multi30k", source_language="en", target_language="en"),
         "target_language"),
        (dict(text="multi30k", source_language="fr"), "source_language"),
        (dict(text="tfds:x", source_language="en"), "target_language"),
        (dict(text="textfiles:x", monolingual=True, source_language="de"),
         "source_language"),
        (dict(text="textfiles:x", monolingual=True, manual_dir="/m"),
         "manual_dir"),
    ],
)
def test_a_spec_error_names_its_argument(kwargs, argument):
    with pytest.raises(sources.DatasetSpecError) as info:
        sources.parse_dataset_spec(**kwargs)
    assert info.value.argument == argument
    assert str(info.value).startswith(f"{argument}=")
