"""Tests of `tfattn.training`: the loop, resume, NaN stop and bad input."""

import dataclasses
import json
import logging
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import hparams
from tests import bounds
from tests.harness import uneven_translation_batches
from tfattn import config
from tfattn.training import run_dir
from tfattn import training
from tfattn.training import loop as training_loop
from tfattn.data import EOS_ID
from tfattn.data import sources
from tfattn.data import training_input
from tfattn.visualize import curves

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One block per stack halves the (dominant) tracing time of a test run.
TEST_HPARAMS = config.parse_overrides(
    hparams.get("tiny"),
    "num_layers=1,log_every_steps=5,checkpoint_every_steps=5,"
    "shuffle_buffer_size=1000",
)
# The shared run also scores 8 validation pairs at steps 15 and 30.
SCORED_HPARAMS = dataclasses.replace(
    TEST_HPARAMS, eval_every_steps=15, eval_sentences=8
)
# sacreBLEU's score from its counts: per order 100·c/t and its log (3
# operations), the sum over the 4 orders (4), then the division by 4, the
# exp and the brevity penalty's product (3).
BLEU_TERMS = 10


def loss_terms(labels, vocab_size):
    """`bounds.assert_close` terms of a token-mean cross-entropy computed
    in two summation orders: one log-softmax over `vocab_size` logits per
    target token, then a sum over the batch's target tokens (labels != 0;
    the largest batch when `labels` holds several, [count, rows, T])."""
    tokens = int(np.max(np.sum(np.asarray(labels) > 0, axis=(-2, -1))))
    return tokens + vocab_size


def checkpoint_steps(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    if state is None:
        return []
    return sorted(
        int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths
    )


def checkpoint_value(path, prefix):
    (name,) = [
        n for n, _ in tf.train.list_variables(path) if n.startswith(prefix)
    ]
    return tf.train.load_variable(path, name)


def snapshot(directory):
    """Every file under `directory` with its bytes."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = f.read()
    return files


class _Records(logging.Handler):
    """Keeps the records it is handed (caplog's job, in a module fixture)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    @property
    def text(self):
        return "\n".join(r.getMessage() for r in self.records)


@pytest.fixture(scope="module")
def trained_with_log(tmp_path_factory):
    """One short run on the numbers task, shared by several tests, and its
    absl log (INFO and up). The run starts as a large model would (the
    hint's threshold at 0) and times steps 2-3 only (`TIMED_STEPS=2`): the
    start lines' test reads them; neither changes what is trained."""
    model_dir = tmp_path_factory.mktemp("numbers")
    losses = []
    records = _Records()
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.addHandler(records)
    absl_logger.setLevel(logging.INFO)
    try:
        with pytest.MonkeyPatch.context() as patch:
            # The loop reads these from its own module.
            patch.setattr(training_loop, "LARGE_FOR_NUMBERS", 0)
            patch.setattr(training_loop, "TIMED_STEPS", 2)
            result = training.train(
                SCORED_HPARAMS,
                "numbers",
                model_dir,
                steps=30,
                verbose=0,
                on_step_end=lambda step, logs: losses.append(
                    float(logs["loss"])),
            )
    finally:
        absl_logger.removeHandler(records)
        absl_logger.setLevel(level)
    return (result, str(model_dir), losses), records.text


@pytest.fixture(scope="module")
def trained(trained_with_log):
    """The shared run: (its result, its model directory, its losses)."""
    return trained_with_log[0]


@pytest.mark.slow
def test_training_reduces_a_finite_loss(trained):
    result, model_dir, losses = trained
    assert (result.start_step, result.step) == (0, 30)
    assert len(losses) == 30 and np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    assert result.loss is not None and np.isfinite(result.loss)
    assert 0 <= result.accuracy <= 1 and result.tokens_per_second > 0


@pytest.mark.slow
def test_training_writes_its_directory(trained):
    result, model_dir, _ = trained
    assert checkpoint_steps(model_dir) == [20, 25, 30]  # keep_checkpoints=3
    assert result.checkpoint == os.path.join(model_dir, "ckpt-30")
    assert run_dir.load_saved_hparams(model_dir) == dataclasses.replace(
        SCORED_HPARAMS, train_steps=30
    )
    assert os.path.exists(os.path.join(model_dir, "spm.model"))
    events = os.listdir(os.path.join(model_dir, "train"))
    assert any(name.startswith("events.out.tfevents") for name in events)
    assert checkpoint_value(result.checkpoint, "step/") == 30


@pytest.mark.slow
def test_tensorboard_scalars(trained):
    _, model_dir, _ = trained
    summary_dir = os.path.join(model_dir, "train")
    tags = {}
    for name in os.listdir(summary_dir):
        for record in tf.data.TFRecordDataset(os.path.join(summary_dir, name)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append(event.step)
    for tag in ("loss", "accuracy", "learning_rate", "tokens_per_second"):
        assert tags[tag] == [5, 10, 15, 20, 25, 30], tag
    assert tags["validation_bleu"] == [15, 30]
    assert "hparams" in tags


@pytest.mark.slow
def test_validation_bleu_is_greedy_bleu_of_the_first_pairs(trained):
    """The logged score is sacreBLEU of the final model's greedy
    translations of the first `eval_sentences` validation pairs."""
    import sacrebleu

    from tfattn.decoding import translate
    from tfattn.data import sources

    result, model_dir, _ = trained
    pairs = sources.load_pairs(
        sources.parse_dataset_spec("numbers"), "validation", limit=8
    )
    hypotheses = translate.translate_texts(
        result.model, result.tokenizer, [s for s, _ in pairs], beam_size=1
    )
    expected = sacrebleu.corpus_bleu(hypotheses, [[r for _, r in pairs]])
    # Float64 BLEU: its summed log-precisions are at most log 100, and the
    # exp turns their rounding into a relative error of the score.
    bounds.assert_close(result.validation_bleu, expected.score,
                        terms=BLEU_TERMS, dtype="float64",
                        scale=math.log(100.0) * expected.score)
    steps, values, _ = curves.read_scalars(
        os.path.join(model_dir, "train"), "validation_bleu"
    )
    assert steps.tolist() == [15, 30]
    # The summary holds the score rounded once to float32.
    bounds.assert_close(values[-1], expected.score, terms=1)


@pytest.mark.slow
def test_restore_model_matches_the_trained_weights(trained):
    result, model_dir, _ = trained
    model, tokenizer, hp = run_dir.restore_model(model_dir)
    assert hp == result.hparams
    assert tokenizer.vocab_size == result.tokenizer.vocab_size
    for restored, trained_weight in zip(model.weights, result.model.weights):
        np.testing.assert_array_equal(restored.numpy(), trained_weight.numpy())


@pytest.mark.slow
def test_changed_hparams_on_resume_are_refused(trained, tmp_path):
    _, model_dir, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    before = snapshot(copy)
    changed = config.parse_overrides(
        TEST_HPARAMS, "num_heads=2,dropout_rate=0.2"
    )
    with pytest.raises(ValueError, match="differ") as error:
        training.train(changed, "numbers", copy, steps=40, verbose=0)
    message = str(error.value)
    assert "num_heads: saved 4, requested 2" in message
    assert "dropout_rate: saved 0.0, requested 0.2" in message
    assert snapshot(copy) == before
    # Length, intervals and decoding may change; the rest is the saved set.
    longer = dataclasses.replace(TEST_HPARAMS, train_steps=99, beam_size=3)
    resolved = run_dir.resolve_hparams(copy, longer)
    assert (resolved.train_steps, resolved.beam_size) == (99, 3)
    assert run_dir.resolve_hparams(copy) == run_dir.load_saved_hparams(copy)


def test_hparams_without_a_checkpoint_can_be_replaced(tmp_path):
    (tmp_path / "hparams.json").write_text(config.to_json(TEST_HPARAMS))
    other = hparams.get("base")
    assert run_dir.resolve_hparams(tmp_path, other) == other
    assert run_dir.resolve_hparams(tmp_path) == TEST_HPARAMS
    with pytest.raises(ValueError, match="name a hparams set"):
        run_dir.resolve_hparams(tmp_path / "new")


@pytest.mark.slow
def test_checkpoints_without_hparams_are_refused(trained, tmp_path):
    _, model_dir, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    os.remove(copy / "hparams.json")
    with pytest.raises(ValueError, match="no hparams.json"):
        training.train(TEST_HPARAMS, "numbers", copy, verbose=0)


# An interrupted run's resume (at its last checkpoint, with the optimizer's
# state): test_training_run_dir.py's
# test_interrupted_run_resumes_without_the_index_and_past_a_truncated_one.


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    exploding = config.parse_overrides(
        TEST_HPARAMS,
        "learning_rate_schedule=constant,learning_rate=1e30,"
        "checkpoint_every_steps=1",
    )
    with pytest.raises(training.NonFiniteLossError) as error:
        training.train(exploding, "numbers", tmp_path, steps=20, verbose=0)
    step = error.value.step
    assert 1 < step < 20
    assert f"at step {step}" in str(error.value)
    steps = checkpoint_steps(tmp_path)
    assert steps and max(steps) == step - 1
    assert error.value.last_checkpoint == str(tmp_path / f"ckpt-{step - 1}")
    assert error.value.last_checkpoint in str(error.value)


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            dict(text="multi30k", manual_dir="/no/such/dir"),
            "manual_dir directory does not exist",
        ),
        (
            dict(
                text="tfds:wmt14_translate/de-en",
                source_language="de",
                target_language="en",
                data_dir="{file}",
            ),
            "the data_dir is not a directory",
        ),
        (
            dict(
                text="textfiles:/no/such/corpus",
                source_language="en",
                target_language="de",
            ),
            "No parallel text files",
        ),
    ],
)
def test_missing_data_fails_before_anything_is_written(spec, message, tmp_path):
    text = spec.pop("text")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    spec = {k: v.format(file=a_file) for k, v in spec.items()}
    dataset = sources.parse_dataset_spec(text, **spec)
    model_dir = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match=message):
        training.train(TEST_HPARAMS, dataset, model_dir, verbose=0)
    assert not model_dir.exists()


def test_bad_train_arguments(tmp_path):
    for kwargs, message in [
        (dict(steps=0), "`steps`"),
        (dict(steps=2, epochs=1), "at most one"),
        (dict(mixed_precision="float16"), "`mixed_precision`"),
    ]:
        with pytest.raises(ValueError, match=message):
            training.train(
                TEST_HPARAMS, "numbers", tmp_path / "run", verbose=0, **kwargs
            )
    assert not (tmp_path / "run").exists()


def _write_corpus(prefix, count):
    pairs = sources.load_pairs(
        sources.parse_dataset_spec("numbers"), "validation", limit=count
    )
    for index, lang in enumerate(("src", "tgt")):
        with open(f"{prefix}.train.{lang}", "w") as f:
            f.write("\n".join(pair[index] for pair in pairs) + "\n")


@pytest.mark.slow
def test_text_files_for_one_epoch(tmp_path):
    _write_corpus(tmp_path / "corpus", 200)
    spec = sources.parse_dataset_spec(
        f"textfiles:{tmp_path / 'corpus'}", "src", "tgt"
    )
    result = training.train(
        TEST_HPARAMS, spec, tmp_path / "run", epochs=1, verbose=0
    )
    expected = training_input.steps_per_epoch(
        result.hparams, result.tokenizer, spec
    )
    assert 200 / 64 <= expected <= 12  # Buckets add partial batches.
    assert result.step == expected
    assert result.hparams.train_epochs == 1
    assert result.hparams.train_steps is None


@pytest.mark.slow
def test_tfds_dataset_with_mock_data(tmp_path):
    import tensorflow_datasets as tfds

    spec = sources.parse_dataset_spec("tfds:wmt14_translate/de-en", "de", "en")
    with tfds.testing.mock_data(num_examples=64):
        result = training.train(
            config.parse_overrides(TEST_HPARAMS, "vocab_size=100"),
            spec,
            tmp_path,
            steps=3,
            verbose=0,
        )
    assert result.step == 3 and np.isfinite(result.loss)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mixed_precision, jit_compile",
    [("mixed_float16", False), ("mixed_bfloat16", False), (None, True)],
)
def test_mixed_precision_and_xla(mixed_precision, jit_compile, tmp_path):
    losses = []
    result = training.train(
        TEST_HPARAMS,
        "numbers",
        tmp_path,
        steps=20,
        mixed_precision=mixed_precision,
        jit_compile=jit_compile,
        verbose=0,
        on_step_end=lambda step, logs: losses.append(float(logs["loss"])),
    )
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    expected = mixed_precision or "float32"
    assert result.model.dtype_policy.name == expected
    # Checkpointed weights stay float32 under mixed precision.
    value = checkpoint_value(result.checkpoint, "model/source_embedding")
    assert value.dtype == np.float32


_MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras
    import hparams
    from tfattn import config
    from tfattn import training

    from tests.harness import uneven_translation_batches

    hp = config.parse_overrides(hparams.get("tiny"), sys.argv[1])
    # One global batch whose two halves hold different numbers of tokens.
    inputs, labels = uneven_translation_batches()
    batch = ({k: v[0] for k, v in inputs.items()}, labels[0])

    def run(strategy):
        \"\"\"Two Adam steps (the losses), then one SGD step of rate 1 from
        the same initial weights through the same distributed step: its
        update is exactly the all-reduced gradient (weights - update).\"\"\"
        def iterator():
            return iter(strategy.experimental_distribute_dataset(
                tf.data.Dataset.from_tensors(batch).repeat()))
        keras.utils.set_random_seed(0)
        trainer = training.build_trainer(strategy, hp, 48, seed=0)
        adam = iterator()
        losses = [float(trainer.train_step(adam)[0]) for _ in range(2)]
        keras.utils.set_random_seed(0)
        model = training.build_trainer(strategy, hp, 48, seed=0).model
        before = [v.numpy() for v in model.trainable_variables]
        with strategy.scope():
            sgd = keras.optimizers.SGD(learning_rate=1.0)
            sgd.build(model.trainable_variables)
        sgd_step = training.make_train_step(
            strategy, model, sgd, trainer.step, hp, None, False)
        sgd_step(iterator())
        after = [v.numpy() for v in model.trainable_variables]
        return losses, [(b - a).tolist() for b, a in zip(before, after)], [
            a.tolist() for a in after]

    # One device, then two replicas, then a short mirrored training.train
    # run, in one process (TensorFlow's start is the costly part).
    single = run(tf.distribute.get_strategy())
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    double = run(mirrored)
    result = training.train(hp, "numbers", sys.argv[2], steps=4,
                            strategy=mirrored, verbose=0)
    print(json.dumps(dict(single=single, double=double,
                          replicas=mirrored.num_replicas_in_sync,
                          labels=labels.tolist(), loss=result.loss,
                          step=result.step)))
""")


@pytest.mark.slow
def test_two_replicas_equal_one_device(tmp_path):
    """Two replicas each holding half the batch compute the gradient and the
    loss of one device holding all of it, to float32 summation error.

    The replicas sum their halves and the all-reduce adds the two partial
    sums, and oneDNN blocks the halves' matmuls differently from the whole
    (by CPU: AVX2, AVX-512 and AMX give other blockings), so the order of
    float32 sums legitimately differs. The tolerances are set from the sizes
    of the reductions, not from one machine's run.
    """
    overrides = "num_layers=1,log_every_steps=2,checkpoint_every_steps=2"
    done = subprocess.run(
        [sys.executable, "-c", _MIRRORED_SCRIPT, overrides,
         str(tmp_path / "run")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2
    single_losses, single_grads, single_after = report["single"]
    double_losses, double_grads, _ = report["double"]
    labels = np.asarray(report["labels"])
    tokens = int(np.sum(labels > 0))
    bounds.assert_close(double_losses, single_losses,
                        terms=loss_terms(labels, 48))
    # Each gradient entry sums one contribution per target token (more
    # terms inside each: sizes below 64), so its error is bounded by the
    # token count times eps times the largest gradient entry that flows
    # into it (the model's largest: the key biases' gradients are zero in
    # exact arithmetic, softmax ignores them, and hold rounding noise of the
    # kernels' scale). Reading the update back from the weights adds one
    # rounding of the weights (2 ulp of their largest entry).
    gradient_scale = max(np.max(np.abs(g)) for g in single_grads)
    assert gradient_scale > 1e-3  # a real update, not an empty batch
    whole = np.concatenate([np.ravel(g) for g in single_grads])
    halves = np.concatenate([np.ravel(g) for g in double_grads])
    assert np.linalg.norm(whole - halves) <= bounds.bound(
        tokens, np.linalg.norm(whole)
    )
    # Entry by entry: `tokens` terms of the gradients' scale, then two
    # roundings of the weights' (weights - update, read back): n·ε·S with
    # S the terms' mean magnitude.
    terms = tokens + 2
    for one, two, weights in zip(single_grads, double_grads, single_after):
        weight_scale = float(np.max(np.abs(weights)))
        bounds.assert_close(
            two, one, terms=terms,
            scale=(tokens * gradient_scale + 2 * weight_scale) / terms,
        )
    # Adam's updated weights are not compared entry by entry: Adam divides
    # each update by the gradient's own magnitude, so rounding noise in an
    # exactly-zero gradient (the key biases) becomes an update of +-lr whose
    # sign depends on the order of summation.
    assert report["step"] == 4 and np.isfinite(report["loss"])


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


_WORKER_SCRIPT = textwrap.dedent("""
    import json, sys
    import keras
    import numpy as np
    import tensorflow as tf
    import hparams
    from tfattn import config
    from tfattn.training import distribute
    from tfattn import training

    # TF_CONFIG names the cluster and this worker's place in it.
    strategy = distribute.make_strategy("multi_worker_mirrored")
    from tests.harness import uneven_translation_batches

    hp = config.parse_overrides(hparams.get("tiny"), sys.argv[1])
    # Three global batches of 8 rows holding different numbers of tokens.
    inputs, labels = uneven_translation_batches(count=3)
    source = inputs["source"]

    def dataset_fn(context):
        rows = 8 // context.num_input_pipelines
        part = slice(context.input_pipeline_id * rows,
                     (context.input_pipeline_id + 1) * rows)
        return tf.data.Dataset.from_tensor_slices((
            {"source": source[:, part], "target_in": labels[:, part]},
            labels[:, part]))

    keras.utils.set_random_seed(0)
    model, _, _, train_step = training.build_trainer(strategy, hp, 48, seed=0)
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    losses = [float(train_step(iterator)[0]) for _ in range(3)]
    np.savez(sys.argv[2], *[v.numpy() for v in model.weights])
    # Then a short `training.train` run of the same cluster, in the same
    # process (a cluster's start is the costly part): only the chief
    # writes files.
    hp = config.parse_overrides(
        hp, "log_every_steps=2,checkpoint_every_steps=2")
    result = training.train(hp, "numbers", sys.argv[3], steps=4,
                            strategy=strategy, verbose=0)
    print(json.dumps(dict(losses=losses,
                          replicas=strategy.num_replicas_in_sync,
                          train_loss=result.loss, train_step=result.step)))
""")


def _run_workers(tmp_path, count, overrides):
    """Runs `_WORKER_SCRIPT` as `count` workers of one cluster, side by
    side; returns each worker's report with its final weights."""
    ports = _free_ports(count)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    processes = []
    try:
        for index in range(count):
            task = {"type": "worker", "index": index}
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        _WORKER_SCRIPT,
                        overrides,
                        str(tmp_path / f"weights_{index}.npz"),
                        str(tmp_path / "run"),
                    ],
                    cwd=REPO,
                    env=dict(
                        os.environ,
                        PYTHONPATH=REPO,
                        TF_CONFIG=json.dumps(
                            {"cluster": cluster, "task": task}
                        ),
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=600) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    reports = []
    for index, (process, (out, err)) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, err[-3000:]
        report = json.loads(out.strip().splitlines()[-1])
        with np.load(tmp_path / f"weights_{index}.npz") as f:
            names = sorted(f.files, key=lambda k: int(k.split("_")[1]))
            report["weights"] = [f[k] for k in names]
        reports.append(report)
    return reports


# The model of the distributed and XLA comparisons: one block per stack,
# no attention dropout (the same draws on every path).
COMPARED_OVERRIDES = "num_layers=1,attention_dropout_rate=0.0"


@pytest.fixture(scope="module")
def one_device_losses():
    """The plain (not XLA) step's losses on one device holding all 8 rows
    of each of 4 batches, in this process (the default strategy: no
    TensorFlow start to pay): the reference of the two-workers test (the
    first 3: `_WORKER_SCRIPT`'s steps) and of the XLA test (all 4). Returns
    (losses, the labels of the 4 batches)."""
    hp = config.parse_overrides(hparams.get("tiny"), COMPARED_OVERRIDES)
    inputs, labels = uneven_translation_batches(count=4)
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"source": inputs["source"], "target_in": labels}, labels)
    )
    strategy = tf.distribute.get_strategy()
    keras.utils.set_random_seed(0)
    trainer = training.build_trainer(strategy, hp, 48, seed=0)
    batches = iter(strategy.experimental_distribute_dataset(dataset))
    return [float(trainer.train_step(batches)[0]) for _ in range(4)], labels


@pytest.mark.slow
def test_two_workers_match_one_worker_with_the_same_global_batch(
        tmp_path, one_device_losses):
    workers = _run_workers(tmp_path, 2, COMPARED_OVERRIDES)
    assert [w["replicas"] for w in workers] == [2, 2]
    # Both workers hold identical weights (the same all-reduced update).
    assert workers[0]["losses"] == workers[1]["losses"]
    for a, b in zip(workers[0]["weights"], workers[1]["weights"]):
        np.testing.assert_array_equal(a, b)
    # The loss curve of 2 workers x 4 rows = 1 worker x 8 rows, to float32
    # summation error (each worker sums its half, the all-reduce adds them).
    # (uneven_translation_batches(count=4) draws count=3's batches first.)
    _, labels = uneven_translation_batches(count=3)
    single, single_labels = one_device_losses
    np.testing.assert_array_equal(single_labels[:3], labels)
    bounds.assert_close(
        workers[0]["losses"],
        single[:3],
        terms=loss_terms(labels, 48),
        err_msg="2 workers x 4 rows against 1 device x 8 rows",
    )
    # The cluster's `training.train` run: the same loss on both workers,
    # files written by the chief only, the workers' scratch space removed.
    assert [w["train_step"] for w in workers] == [4, 4]
    assert workers[0]["train_loss"] == workers[1]["train_loss"]
    assert checkpoint_steps(tmp_path / "run") == [2, 4]
    assert not (tmp_path / "run" / ".workers").exists()


@pytest.mark.slow
def test_xla_step_matches_the_plain_step(one_device_losses):
    """`jit_compile=True` computes the same loss and update (float32): the
    XLA step's losses on the 4 batches of the plain one's
    (`one_device_losses`, the same seed, hparams and strategy)."""
    hp = config.parse_overrides(hparams.get("tiny"), COMPARED_OVERRIDES)
    plain, labels = one_device_losses
    inputs, _ = uneven_translation_batches(count=4)
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"source": inputs["source"], "target_in": labels}, labels)
    )
    keras.utils.set_random_seed(0)
    train_step = training.build_trainer(
        tf.distribute.get_strategy(), hp, 48, seed=0, jit_compile=True
    ).train_step
    iterator = iter(dataset)
    xla = [float(train_step(iterator)[0]) for _ in range(4)]
    # The weights are compared through the losses they give after 1-3
    # updates, not one by one: Adam turns float rounding in zero gradients
    # (the key projection's bias has none: softmax ignores it) into
    # updates of +-lr that differ between any two compilations. XLA fuses
    # and orders the float32 sums its own way.
    bounds.assert_close(xla, plain, terms=loss_terms(labels, 48))


class _FakeStrategy:
    num_replicas_in_sync = 3


def test_indivisible_global_batch_is_refused_before_anything_is_written(
    tmp_path,
):
    hp = config.parse_overrides(TEST_HPARAMS, "batch_size=64")
    with pytest.raises(
        ValueError,
        match="batch_size=64 is not divisible by the strategy's 3 replicas",
    ) as error:
        training.train(
            hp, "numbers", tmp_path / "run", strategy=_FakeStrategy(), verbose=0
        )
    assert "batch_size=63" in str(error.value)
    assert not (tmp_path / "run").exists()


def test_each_worker_reads_its_own_shard(tmp_path, monkeypatch):
    """The sharding policy: input pipeline i reads pairs i, i + n, ..."""
    pairs = [(f"s{i}", f"t{i}") for i in range(12)]
    monkeypatch.setattr(
        training_input,
        "load_split",
        lambda spec, split: tf.data.Dataset.from_tensor_slices(
            {"inputs": [p[0] for p in pairs], "targets": [p[1] for p in pairs]}
        ),
    )
    seen = {}

    def fake_make_batches(dataset, tokenizer, **kwargs):
        seen.setdefault("kwargs", kwargs)
        return dataset.take(6)

    monkeypatch.setattr(training_input, "make_batches", fake_make_batches)

    class TwoWorkers:
        num_replicas_in_sync = 2

        def distribute_datasets_from_function(self, dataset_fn):
            return [
                dataset_fn(
                    tf.distribute.InputContext(
                        num_input_pipelines=2,
                        input_pipeline_id=i,
                        num_replicas_in_sync=2,
                    )
                )
                for i in range(2)
            ]

    hp = config.parse_overrides(TEST_HPARAMS, "batch_size=64")
    shards = training_input.distributed_batches(
        TwoWorkers(), hp, None, None, seed=0, static_shapes=False
    )
    read = [
        [x["inputs"].decode() for x in shard.as_numpy_iterator()]
        for shard in shards
    ]
    assert read == [
        [f"s{i}" for i in range(0, 12, 2)],
        [f"s{i}" for i in range(1, 12, 2)],
    ]
    assert seen["kwargs"]["batch_size"] == 32


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_training_batches_sample_segmentations_by_the_hparams(
        tmp_path, monkeypatch, alpha):
    """Subword regularisation: each pass over the split tokenizes a pair
    anew (alpha > 0), or always the same way (alpha = 0)."""
    from tfattn.data import train_tokenizer
    sentence = "Three girls jump near a river."
    tokenizer = train_tokenizer(
        [sentence, "Two dogs run in the park.", "A man waits."] * 20,
        tmp_path, vocab_size=40, model_type="bpe")
    monkeypatch.setattr(
        training_input, "load_split",
        lambda spec, split: tf.data.Dataset.from_tensors(
            {"inputs": sentence, "targets": sentence}))
    hp = config.parse_overrides(
        TEST_HPARAMS,
        f"batch_size=1,shuffle_buffer_size=1,tokenizer_sampling_alpha={alpha}")
    batches = training_input.distributed_batches(
        tf.distribute.get_strategy(), hp, tokenizer, None, seed=0,
        static_shapes=False)
    sources = {tuple(features["source"].numpy()[0])
               for features, _ in batches.take(30)}
    best = tuple(tokenizer.tokenize(sentence).numpy()) + (EOS_ID,)
    assert (sources == {best}) == (alpha == 0.0)
    assert {tokenizer.detokenize(tf.constant(s)).numpy()
            for s in sources} == {sentence.encode()}
    # The memory estimate and the precision probe size batches as the
    # training batches tokenize: longer where segmentations are sampled.
    sample = training_input.sample_lengths(
        training_input.load_split(None, "train").repeat(50),
        training_input.training_tokenizer(tokenizer, hp), max_length=64)
    assert (sample.mean > len(best)) == (alpha > 0)


@pytest.mark.slow
def test_restore_model_averages_the_last_checkpoints(trained, tmp_path):
    _, model_dir, _ = trained
    paths = tf.train.get_checkpoint_state(model_dir).all_model_checkpoint_paths
    assert len(paths) >= 2
    model, _, _ = run_dir.restore_model(model_dir, average_last=2)
    # Independent of restore_model: the mean read straight from the files.
    for weight in model.weights:
        key = weight.path.split("/", 1)[1]
        expected = np.mean(
            [
                checkpoint_value(p, "model/" + key.replace("/", ".S"))
                for p in paths[-2:]
            ],
            axis=0,
        )
        # A mean of two checkpoints: their sum, then a rounding to float32.
        bounds.assert_close(weight.numpy(), expected, terms=2, err_msg=key)


@pytest.mark.parametrize(
    "average_last, message",
    [
        (0, "expected a positive int. Received: average_last=0"),
        (1.5, "Received: average_last=1.5"),
        (99, "Cannot average the last 99 checkpoints"),
    ],
)
@pytest.mark.slow
def test_restore_model_refuses_bad_averages(trained, average_last, message):
    _, model_dir, _ = trained
    with pytest.raises(ValueError, match=message):
        run_dir.restore_model(model_dir, average_last=average_last)


@pytest.mark.slow
def test_start_lines_give_size_speed_projection_and_a_hint(trained_with_log):
    """The shared run's start lines (it ran with the hint's threshold at 0
    and `TIMED_STEPS=2`)."""
    (result, _, _), text = trained_with_log
    parameters = f"{result.model.count_params():,} parameters"
    assert parameters in text and "on numbers from step 0 to 30" in text
    assert re.search(
        r"[0-9.]+ s/step \(measured over steps 2-3\): about "
        r"0h00m to step 30",
        text,
    )
    assert "sized for a large corpus" in text and "--dataset=tfds:" in text
