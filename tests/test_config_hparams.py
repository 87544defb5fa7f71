"""Tests of the hparams sets, overrides and JSON (no TensorFlow needed)."""

import builtins
import dataclasses
import inspect
import json
import os

import numpy as np
import pytest

import hparams
from tfattn import config
from tfattn.config import overrides
from tfattn.config import HParams


@pytest.mark.parametrize("name", hparams.names())
def test_every_set_loads_and_round_trips(name):
    hp = hparams.get(name)
    assert isinstance(hp, HParams)
    assert config.from_json(config.to_json(hp)) == hp
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.num_layers = 1


def test_registry_names():
    assert set(hparams.names()) == {
        "tiny",
        "base",
        "big",
        "reference_2017",
        "reference_2019",
        "multi30k",
        "multi30k_reference",
        "gpt_tiny",
        "gpt_multi30k",
        "bert_tiny",
        "bert_multi30k",
    }
    for name, module in hparams.REGISTRY.items():
        assert module.__name__ == f"hparams.{name}"


def test_model_fields_come_first_and_every_field_has_a_comment():
    names = config.field_names()
    assert names[: len(config.MODEL_FIELDS)] == config.MODEL_FIELDS
    assert names[-len(config.DECODING_FIELDS) :] == config.DECODING_FIELDS
    lines = inspect.getsource(HParams).splitlines()
    for name in names:
        (index,) = [
            i
            for i, line in enumerate(lines)
            if line.strip().startswith(f"{name}:")
        ]
        assert lines[index - 1].strip().startswith("#"), name


@pytest.mark.parametrize("name", hparams.names())
def test_every_value_in_a_set_module_is_commented(name):
    source = inspect.getsource(hparams.REGISTRY[name])
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.split("=")[0] in config.field_names() and "=" in stripped:
            assert "#" in line, line


def test_reference_2017_is_the_spec():
    # docs/reference.md §1.7-1.8.
    hp = hparams.get("reference_2017")
    expected = dict(
        flavor="reference_2017",
        batch_size=32,
        tokens_per_batch=None,
        learning_rate_schedule="constant",
        learning_rate=1e-4,
        max_length=10,
        max_train_length=10,
        num_units=512,
        num_layers=6,
        train_epochs=20,
        train_steps=None,
        num_heads=8,
        dropout_rate=0.1,
        attention_dropout_rate=0.1,
        positional_encoding="learned",
        ffn_units=2048,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-8,
        label_smoothing=0.1,
        loss_denominator_epsilon=0.0,
        share_embeddings=False,
        tie_output=False,
        tokenizer_model_type="word",
        beam_size=1,
    )
    assert {k: getattr(hp, k) for k in expected} == expected


def test_reference_2019_is_the_spec():
    # docs/reference.md §2.7-2.10.
    hp = hparams.get("reference_2019")
    expected = dict(
        flavor="reference_2019",
        vocab_size=32000,
        tokenizer_model_type="bpe",
        batch_size=128,
        tokens_per_batch=None,
        learning_rate_schedule="noam",
        learning_rate=3e-4,
        learning_rate_scale=1.0,
        warmup_steps=4000,
        train_epochs=20,
        train_steps=None,
        num_units=512,
        ffn_units=2048,
        num_layers=6,
        num_heads=8,
        max_length=100,
        max_train_length=100,
        dropout_rate=0.3,
        attention_dropout_rate=0.3,
        label_smoothing=0.1,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        loss_denominator_epsilon=1e-7,
        share_embeddings=True,
        tie_output=True,
        positional_encoding="sinusoid",
        beam_size=1,
        shuffle_buffer_size=128 * 128,
    )
    assert {k: getattr(hp, k) for k in expected} == expected


def test_base_and_big_are_the_paper():
    base, big = hparams.get("base"), hparams.get("big")
    assert (
        base.num_layers,
        base.num_units,
        base.ffn_units,
        base.num_heads,
        base.dropout_rate,
    ) == (6, 512, 2048, 8, 0.1)
    assert (
        big.num_layers,
        big.num_units,
        big.ffn_units,
        big.num_heads,
        big.dropout_rate,
    ) == (6, 1024, 4096, 16, 0.3)
    assert (base.adam_beta1, base.adam_beta2, base.adam_epsilon) == (
        0.9,
        0.98,
        1e-9,
    )
    assert base.learning_rate is None and base.warmup_steps == 4000
    assert (base.beam_size, base.decode_alpha) == (4, 0.6)
    assert (base.train_steps, big.train_steps) == (100_000, 300_000)


def _alphas_matching_fairseq_lenpen_1():
    """fairseq's --lenpen 1 ranks by log p / len; tfattn's penalty is GNMT's
    ((5 + len) / 6) ** alpha. The two reward one more piece alike at length
    L when alpha = ln((L + 1) / L) / ln((L + 6) / (L + 5)): 1.24 to 1.59 for
    Multi30k's 8-20 pieces."""
    lengths = np.arange(8, 21)
    return np.log((lengths + 1) / lengths) / np.log(
        (lengths + 6) / (lengths + 5))


def test_multi30k_decodes_with_the_length_penalty_chosen_on_val():
    """Runs R9 and T1 (bench/README.md): 1.5 over 1.0 on val, +0.11 and
    +0.38; in the range that rewards length as fairseq's --lenpen 1."""
    m30k = hparams.get("multi30k")
    matching = _alphas_matching_fairseq_lenpen_1()
    assert matching.min() <= m30k.decode_alpha <= matching.max()
    assert (m30k.beam_size, m30k.decode_alpha) == (5, 1.5)


def test_multi30k_reference_is_the_published_recipe():
    """LividWo/Revisit-MMT README-baseline.md: transformer_tiny (4+4, 128,
    FFN 256, 4 heads), shared embeddings, dropout 0.3, lr 0.005 inverse-sqrt
    after 2,000 warmup updates, --max-tokens 4096 on 2 GPUs, 8,000 updates,
    beam 5, the last 10 checkpoints averaged (post-norm, fairseq's default)."""
    ref = hparams.get("multi30k_reference")
    assert (ref.num_layers, ref.num_units, ref.ffn_units, ref.num_heads) == (
        4,
        128,
        256,
        4,
    )
    assert ref.share_embeddings and ref.tie_output and not ref.normalize_first
    assert (ref.dropout_rate, ref.label_smoothing) == (0.3, 0.1)
    assert (
        ref.learning_rate_schedule,
        ref.learning_rate,
        ref.warmup_steps,
    ) == ("noam", 5e-3, 2000)
    assert (ref.tokens_per_batch, ref.train_steps) == (8192, 8000)
    assert (ref.keep_checkpoints, ref.average_checkpoints, ref.beam_size) == (
        10,
        10,
        5,
    )
    assert ref.adam_epsilon == 1e-8
    # The set's 1.5 (chosen on val) is in fairseq's --lenpen 1 range.
    matching = _alphas_matching_fairseq_lenpen_1()
    assert matching.min() <= ref.decode_alpha <= matching.max()
    assert ref.decode_alpha == 1.5
    # Ten checkpoints about one pass apart, as fairseq's epoch checkpoints.
    assert ref.checkpoint_every_steps == 60
    assert ref.checkpoint_every_steps * ref.keep_checkpoints <= ref.train_steps


def test_unknown_set_lists_the_known_ones():
    with pytest.raises(ValueError, match="Unknown hparams set 'small'") as e:
        hparams.get("small")
    for name in hparams.names():
        assert name in str(e.value)


def test_overrides_are_parsed_by_the_declared_type():
    hp = config.parse_overrides(
        hparams.get("tiny"),
        " num_heads=2, dropout_rate=0.25,normalize_first=TRUE,"
        "positional_encoding='learned',learning_rate=1e-3,warmup_steps=+10",
    )
    assert (
        hp.num_heads,
        hp.dropout_rate,
        hp.normalize_first,
        hp.positional_encoding,
        hp.learning_rate,
        hp.warmup_steps,
    ) == (2, 0.25, True, "learned", 1e-3, 10)
    assert isinstance(hp.dropout_rate, float)
    hp = config.parse_overrides(hp, "learning_rate=none,dropout_rate=0")
    assert hp.learning_rate is None and hp.dropout_rate == 0.0
    assert config.parse_overrides(hp, "") is hp
    assert config.parse_overrides(hp, None) is hp


@pytest.mark.parametrize(
    "text, message",
    [
        ("num_heads=4.0", "Invalid value for hparams field `num_heads`"),
        ("num_heads=four", "expected an int"),
        ("dropout_rate=abc", "expected a float"),
        ("dropout_rate=nan", "expected a float"),
        ("normalize_first=yes", "expected true or false"),
        ("num_heads='4'", "a quoted value is a string"),
        ("num_heads=none", "expected an int"),
        ("flavor=a b", "quote strings"),
    ],
)
def test_overrides_are_type_checked(text, message):
    with pytest.raises(ValueError, match=message):
        config.parse_overrides(hparams.get("tiny"), text)


def test_unknown_override_lists_the_valid_keys():
    with pytest.raises(ValueError, match="Unknown hparams field 'heads'") as e:
        config.parse_overrides(hparams.get("tiny"), "heads=4")
    for name in config.field_names():
        assert name in str(e.value)


@pytest.mark.parametrize(
    "text",
    [
        "num_heads",
        "=4",
        "num_heads=4,,dropout_rate=0.1",
        "num_heads=4,",
        "num heads=4",
        "flavor='paper",
        "num_heads=2,num_heads=4",
    ],
)
def test_malformed_overrides(text):
    with pytest.raises(ValueError, match="[Mm]alformed|twice"):
        config.parse_overrides(hparams.get("tiny"), text)


@pytest.mark.parametrize(
    "text, field",
    [
        ("num_heads=3", "num_units"),
        ("dropout_rate=1.5", "dropout_rate"),
        ("flavor=transformer", "flavor"),
        ("batch_size=none", "batch_size"),
        ("train_epochs=3", "train_steps"),
        ("normalize_first=true,flavor=reference_2019", "normalize_first"),
        ("learning_rate_schedule=constant,learning_rate=none", "learning_rate"),
        ("max_train_length=1000", "max_train_length"),
        ("embeddings_initializer=zeros", "embeddings_initializer"),
        ("kernel_initializer=zeros", "kernel_initializer"),
        ("kernel_initializer=normal_0.02", "kernel_initializer"),
        ("normalize_embeddings=true", "normalize_embeddings"),
        ("task=language_model,normalize_embeddings=true",
         "normalize_embeddings"),
        ("scale_embeddings=false", "scale_embeddings"),
        ("task=masked_lm,flavor=reference_2019,scale_embeddings=false",
         "scale_embeddings"),
        ("task=masked_lm,positions_initializer=zeros",
         "positions_initializer"),
        ("task=language_model,positions_initializer=normal_0.02",
         "positions_initializer"),
        ("tokenizer_normalization=lowercase", "tokenizer_normalization"),
        ("eval_every_steps=-1", "eval_every_steps"),
        ("eval_sentences=0", "eval_sentences"),
        ("tokenizer_sampling_alpha=1.0", "tokenizer_sampling_alpha"),
        ("tokenizer_sampling_alpha=-0.1", "tokenizer_sampling_alpha"),
        ("tokenizer_model_type=char,tokenizer_sampling_alpha=0.1",
         "tokenizer_sampling_alpha"),
        ("learning_rate_schedule=cosine,learning_rate=none", "learning_rate"),
        (
            "learning_rate_schedule=cosine,learning_rate=1e-3,warmup_steps=50,"
            "train_steps=50",
            "train_steps",
        ),
    ],
)
def test_overridden_sets_are_validated(text, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        config.parse_overrides(hparams.get("tiny"), text)


def test_commas_inside_quotes_do_not_split():
    items = overrides._split_items("a='x,y',b=\"1,2\",c=3")
    assert items == ["a='x,y'", 'b="1,2"', "c=3"]


def test_code_in_overrides_is_never_executed(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"

    def refuse(*args, **kwargs):
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    for field in (
        "num_layers",
        "dropout_rate",
        "normalize_first",
        "flavor",
        "learning_rate",
    ):
        with pytest.raises(ValueError):
            config.parse_overrides(hparams.get("tiny"), f"{field}={payload}")
        with pytest.raises(ValueError):
            config.parse_overrides(hparams.get("tiny"), f'{field}="{payload}"')
    assert not marker.exists()
    # A valid string still parses with eval and exec unavailable.
    hp = config.parse_overrides(hparams.get("tiny"), "flavor=paper")
    assert hp.flavor == "paper"


def test_json_round_trip_and_errors():
    hp = config.parse_overrides(hparams.get("tiny"), "learning_rate=none")
    text = config.to_json(hp)
    data = json.loads(text)
    assert list(data) == list(config.field_names())
    assert config.from_json(text) == hp
    with pytest.raises(ValueError, match="not valid JSON"):
        config.from_json("{")
    with pytest.raises(ValueError, match="unknown fields \\['extra'\\]"):
        config.from_json(json.dumps(dict(data, extra=1)))
    del data["num_heads"]
    with pytest.raises(ValueError, match="missing fields \\['num_heads'\\]"):
        config.from_json(json.dumps(data))
    data["num_heads"] = "4"
    with pytest.raises(ValueError, match="`num_heads`"):
        config.from_json(json.dumps(data))


def test_json_saved_before_a_field_was_added_still_loads():
    hp = hparams.get("tiny")
    data = json.loads(config.to_json(hp))
    for name in config.ADDED_FIELDS:
        del data[name]
    old = config.from_json(json.dumps(data))
    for name, value in config.ADDED_FIELDS.items():
        assert getattr(old, name) == value
    # The values that reproduce an old run are those of the sets that
    # predate the fields.
    assert old == dataclasses.replace(hp, **config.ADDED_FIELDS)


def test_scaled_normal_embeddings_have_std_num_units_to_the_minus_half():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from tfattn import Transformer

    hp = dataclasses.replace(
        hparams.get("tiny"),
        num_units=64,
        num_heads=2,
        embeddings_initializer="scaled_normal",
    )
    model = Transformer(**config.model_kwargs(hp, 4000), seed=1)
    model.build(((2, 3), (2, 3)))
    table = model.source_embedding.embeddings.numpy()
    # 256,000 draws of N(0, 64^-0.5 = 0.125): the sample std and mean lie
    # within 5 of their standard errors (sigma/sqrt(2n) and sigma/sqrt(n);
    # tests/bounds.py's assert_sampled allows 5 too) of sigma and 0.
    sigma, draws = 64 ** -0.5, table.size
    assert abs(table.std() - sigma) < 5 * sigma / np.sqrt(2 * draws)
    assert abs(table.mean()) < 5 * sigma / np.sqrt(draws)
    glorot = Transformer(**config.model_kwargs(hparams.get("tiny"), 4000))
    assert glorot.embeddings_initializer.__class__.__name__ == "GlorotUniform"
    restored = Transformer.from_config(model.get_config())
    assert restored.embeddings_initializer.stddev == 0.125


@pytest.mark.parametrize("task, cls, name, expected", [
    ("language_model", "CausalLM", "normal_0.02", ("RandomNormal", 0.02)),
    ("masked_lm", "MaskedLM", "truncated_normal_0.02",
     ("TruncatedNormal", 0.02)),
    ("masked_lm", "MaskedLM", "glorot_uniform", ("GlorotUniform", None)),
])
def test_kernel_initializer_reaches_the_language_models(task, cls, name,
                                                        expected):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tfattn

    hp = dataclasses.replace(hparams.get("tiny"), task=task,
                             kernel_initializer=name)
    model = getattr(tfattn.models, cls)(**config.model_kwargs(hp, 50))
    initializer = model.kernel_initializer
    assert type(initializer).__name__ == expected[0]
    assert getattr(initializer, "stddev", None) == expected[1]


@pytest.mark.parametrize("name", ["reference_2017", "reference_2019"])
def test_reference_sets_refuse_an_embedding_layer_norm(name):
    # The references have none (and the 2017 one finds padding from zero
    # rows); a masked LM of their flavour is otherwise allowed.
    config.parse_overrides(hparams.get(name), "task=masked_lm")
    with pytest.raises(ValueError, match="`normalize_embeddings`.*" + name):
        config.parse_overrides(hparams.get(name),
                               "task=masked_lm,normalize_embeddings=true")


@pytest.mark.parametrize("normalize_embeddings", [True, False])
def test_normalize_embeddings_reaches_the_masked_lm(normalize_embeddings):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import numpy as np
    import tfattn

    hp = dataclasses.replace(hparams.get("tiny"), task="masked_lm",
                             normalize_embeddings=normalize_embeddings)
    model = tfattn.models.MaskedLM(**config.model_kwargs(hp, 50))
    model(np.ones((1, 4), "int32"))
    assert model.text_encoder.normalize_embeddings is normalize_embeddings
    norms = [w.path for w in model.weights if "embedding_layer_norm" in w.path]
    assert len(norms) == (2 if normalize_embeddings else 0)


def test_berts_embeddings_reach_the_masked_lm():
    # BERT's tables: truncated N(0, 0.02) token and position rows, the
    # token rows not scaled by sqrt(C).
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tfattn

    hp = config.parse_overrides(
        hparams.get("tiny"), "task=masked_lm,positional_encoding=learned,"
        "embeddings_initializer=truncated_normal_0.02,scale_embeddings=false,"
        "positions_initializer=truncated_normal_0.02")
    model = tfattn.models.MaskedLM(**config.model_kwargs(hp, 50))
    for name in ("embeddings_initializer", "positions_initializer"):
        initializer = getattr(model, name)
        assert type(initializer).__name__ == "TruncatedNormal", name
        assert initializer.stddev == 0.02
    assert model.scale_embeddings is False
    lm = tfattn.models.CausalLM(**config.model_kwargs(dataclasses.replace(
        hp, task="language_model", positions_initializer="glorot_uniform"),
        50))
    assert lm.scale_embeddings is False


def test_differences_and_field_groups():
    tiny = hparams.get("tiny")
    other = dataclasses.replace(tiny, num_heads=2, train_steps=5)
    assert config.differences(tiny, other) == ["num_heads", "train_steps"]
    assert config.differences(tiny, other, ignore=config.RESUMABLE_FIELDS) == [
        "num_heads"
    ]
    groups = (
        set(config.MODEL_FIELDS)
        | set(config.training_fields())
        | set(config.DECODING_FIELDS)
    )
    assert groups == set(config.field_names())


def test_model_kwargs_build_a_transformer():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from tfattn import Transformer

    for name in ("tiny", "reference_2017", "reference_2019"):
        hp = dataclasses.replace(
            hparams.get(name),
            num_layers=1,
            num_units=16,
            num_heads=2,
            ffn_units=8,
        )
        model = Transformer(**config.model_kwargs(hp, 50))
        assert model.flavor == hp.flavor
        assert model.share_embeddings == hp.share_embeddings
