"""Tests of `tfattn.data.sources`: dataset specs and their checks."""

import pytest

from tfattn.data import sources


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        ("numbers:x", {}, "takes no ':...' part"),
        ("wmt", {}, "Unknown dataset 'wmt'"),
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
