r"""Trains, evaluates and exports a tfattn Transformer.

  python train.py --hparams=tiny --dataset=numbers --model_dir=/tmp/numbers

Modes: train (default), eval (BLEU on the test split), export (a
string-to-string SavedModel), all (the three in turn). A run restarted with
the same --model_dir resumes from its latest checkpoint with its saved
hparams. See `python train.py --helpfull` for every flag.

Exit status: 0 when done; 143 (128 + SIGTERM) when SIGTERM stopped training
after saving a checkpoint (run the same command to resume); 1 on a
non-finite loss or a missing file; 1 with usage help on bad flags or input.
"""

import os
import signal
import sys

from absl import app
from absl import flags
from absl import logging

import hparams as hparams_lib
from tfattn import training

MODES = ("train", "eval", "export", "all")
MIXED_PRECISION = ("off", "mixed_float16", "mixed_bfloat16")

# Hyperparameters.
flags.DEFINE_string(
    "hparams", None,
    "Hparams set: " + ", ".join(hparams_lib.names()) + ". Omit it to resume "
    "with the set saved in --model_dir.")
flags.DEFINE_string(
    "hparams_overrides", "",
    'Comma-separated field=value overrides, e.g. "num_heads=4,'
    'dropout_rate=0.2". Values are parsed by the field\'s type, never run.')
# Data.
flags.DEFINE_string(
    "dataset", "numbers",
    "numbers (generated, offline), multi30k (with --manual_dir), tfds:NAME "
    "or textfiles:PREFIX (files PREFIX[.train].LANG).")
flags.DEFINE_string("data_dir", None, "TFDS data directory.")
flags.DEFINE_string(
    "manual_dir", None,
    "TFDS manual directory: Multi30k's six *.gz files (or a TFDS dataset's "
    "manual files).")
flags.DEFINE_string("source_language", None,
                    "Source feature (TFDS, Multi30k) or file suffix.")
flags.DEFINE_string("target_language", None,
                    "Target feature (TFDS, Multi30k) or file suffix.")
# Run.
flags.DEFINE_string("model_dir", None,
                    "Checkpoints, vocabulary, hparams.json, logs.")
flags.DEFINE_enum("mode", "train", MODES, "What to do.")
flags.DEFINE_enum("strategy", "default", training.STRATEGIES,
                  "tf.distribute strategy (multi_worker_mirrored reads "
                  "TF_CONFIG).")
flags.DEFINE_string("tpu", None,
                    "TPU address or name (\"local\" on a TPU VM); only with "
                    "--strategy=tpu.")
flags.DEFINE_enum("mixed_precision", "off", MIXED_PRECISION,
                  "Mixed precision policy (mixed_float16 adds loss scaling).")
flags.DEFINE_bool("jit_compile", False,
                  "Compile the training step with XLA (batches padded to "
                  "max_train_length).")
flags.DEFINE_integer("train_steps", None,
                     "Train to this step (overrides the hparams' length).",
                     lower_bound=1)
flags.DEFINE_integer("train_epochs", None,
                     "Train for this many epochs (overrides the hparams' "
                     "length).", lower_bound=1)
flags.DEFINE_string("export_dir", None,
                    "Export directory (export and all modes; default "
                    "MODEL_DIR/export).")
flags.DEFINE_integer("average_checkpoints", 1,
                     "Eval and export the average of the last this many "
                     "checkpoints (see the hparams' keep_checkpoints).",
                     lower_bound=1)
flags.DEFINE_integer("seed", 0, "Initialisation, dropout and data seed.")
flags.DEFINE_integer("samples", 100,
                     "After training, translate this many validation pairs "
                     "and log the exact-match rate (0: skip).", lower_bound=0)
flags.DEFINE_bool("progress_bar", True, "Show a progress bar.")

flags.mark_flag_as_required("model_dir")
flags.mark_flags_as_mutual_exclusive(["train_steps", "train_epochs"])

FLAGS = flags.FLAGS


@flags.validator("hparams", message=(
    "Unknown hparams set. Known sets: " + ", ".join(hparams_lib.names())))
def _check_hparams_name(name):
    return name is None or name in hparams_lib.names()


@flags.multi_flags_validator(["hparams", "hparams_overrides"])
def _check_overrides(values):
    # Keys and types are the same for every set: check against any.
    name = values["hparams"] if values["hparams"] in hparams_lib.names() \
        else "base"
    try:
        hparams_lib.parse_overrides(hparams_lib.get(name),
                                    values["hparams_overrides"])
    except ValueError as error:
        raise flags.ValidationError(str(error))
    return True


@flags.multi_flags_validator(["strategy", "tpu", "mixed_precision"])
def _check_strategy(values):
    if (values["strategy"] == "tpu") != bool(values["tpu"]):
        raise flags.ValidationError(
            "--tpu is required with --strategy=tpu and only there.")
    if values["strategy"] == "tpu" and \
            values["mixed_precision"] == "mixed_float16":
        raise flags.ValidationError(
            "TPUs do not compute in float16: use "
            "--mixed_precision=mixed_bfloat16 with --strategy=tpu.")
    return True


@flags.multi_flags_validator(["dataset", "source_language",
                              "target_language", "data_dir", "manual_dir"])
def _check_dataset(values):
    try:
        training.parse_dataset_spec(
            values["dataset"], values["source_language"],
            values["target_language"], values["data_dir"],
            values["manual_dir"])
    except ValueError as error:
        raise flags.ValidationError(str(error))
    return True


@flags.multi_flags_validator(["mode", "export_dir", "train_steps",
                              "train_epochs"])
def _check_mode(values):
    if values["export_dir"] and values["mode"] not in ("export", "all"):
        raise flags.ValidationError(
            "--export_dir is only used with --mode=export or --mode=all.")
    training_flags = [f"--{n}" for n in ("train_steps", "train_epochs")
                      if values[n] is not None]
    if training_flags and values["mode"] not in ("train", "all"):
        raise flags.ValidationError(
            f"{', '.join(training_flags)} only apply with --mode=train or "
            "--mode=all.")
    return True


def requested_hparams():
    """The --hparams set with --hparams_overrides applied, or None.

    Without --hparams, the overrides (if any) apply to the set saved in
    --model_dir, and None is returned when there are none.
    """
    if FLAGS.hparams:
        base = hparams_lib.get(FLAGS.hparams)
    elif FLAGS.hparams_overrides.strip():
        base = training.load_saved_hparams(FLAGS.model_dir)
        if base is None:
            raise ValueError(
                "--hparams_overrides needs --hparams for a new run (no "
                f"hparams.json in {FLAGS.model_dir}).")
    else:
        return None
    return hparams_lib.parse_overrides(base, FLAGS.hparams_overrides)


def prepare():
    """Checks everything that bad input can break; nothing is written.

    Returns:
        (hparams, dataset spec, strategy).
    """
    spec = training.parse_dataset_spec(
        FLAGS.dataset, FLAGS.source_language, FLAGS.target_language,
        FLAGS.data_dir, FLAGS.manual_dir)
    training.check_dataset(spec)
    if FLAGS.mode in ("train", "all"):
        hp = training.resolve_hparams(FLAGS.model_dir, requested_hparams())
    else:
        hp = requested_hparams()
        if hp is not None:
            training.resolve_hparams(FLAGS.model_dir, hp)
    # MultiWorkerMirroredStrategy must exist before other TensorFlow work.
    strategy = training.make_strategy(FLAGS.strategy, FLAGS.tpu)
    return hp, spec, strategy


def run_train(hp, spec, strategy):
    result = training.train(
        hp, spec, FLAGS.model_dir, strategy=strategy,
        steps=FLAGS.train_steps, epochs=FLAGS.train_epochs,
        mixed_precision=None if FLAGS.mixed_precision == "off"
        else FLAGS.mixed_precision,
        jit_compile=FLAGS.jit_compile, seed=FLAGS.seed,
        verbose=int(FLAGS.progress_bar))
    if result.loss is not None:
        logging.info("Step %d: loss %.4f, token accuracy %.4f, %.0f "
                     "tokens/s, %.1f s.", result.step, result.loss,
                     result.accuracy, result.tokens_per_second,
                     result.seconds)
    if FLAGS.samples and training.is_chief(strategy):
        exact, rows = training.sample_translations(
            result.model, result.tokenizer, result.hparams, spec,
            count=FLAGS.samples)
        for source, reference, hypothesis in rows[:5]:
            print(f"  {source}\n    -> {hypothesis}\n    (reference: "
                  f"{reference})")
        print(f"Exact match on {len(rows)} validation pairs: {exact:.1%}")
    return result


def restore():
    """The trained model (averaged over --average_checkpoints)."""
    try:
        return training.restore_model(
            FLAGS.model_dir, average_last=FLAGS.average_checkpoints)
    except ValueError as error:  # More checkpoints asked than kept.
        logging.error("%s", error)
        sys.exit(f"Error: {error}")


def run_eval(spec):
    from tfattn import data
    from tfattn import evaluation
    model, tokenizer, hp = restore()
    pairs = training.load_pairs(spec, "test")
    references = None
    if spec.kind == "multi30k" and spec.manual_dir:
        tok_dir = os.path.join(spec.manual_dir, os.pardir, "tok")
        try:
            references = data.load_tokenized_references(
                "test", spec.target_language, tok_dir)
        except FileNotFoundError:
            logging.info("No tokenised references in %s.", tok_dir)
    metrics = evaluation.evaluate(
        model, tokenizer, pairs, FLAGS.model_dir, "test",
        beam_size=hp.beam_size, alpha=hp.decode_alpha,
        extra_length=hp.decode_extra_length,
        tokenized_references=references,
        target_language=spec.target_language if references else None)
    print(f"BLEU on the test split: {metrics['bleu']:.2f} "
          f"({metrics['bleu_signature']})")
    if "bleu_tokenized_lowercased" in metrics:
        print("Tokenised, lowercased BLEU: "
              f"{metrics['bleu_tokenized_lowercased']:.2f}")
    return metrics


def run_export():
    from tfattn import export
    model, tokenizer, hp = restore()
    export_dir = FLAGS.export_dir or os.path.join(FLAGS.model_dir, "export")
    path = export.export_translator(
        model, tokenizer, export_dir, beam_size=hp.beam_size,
        alpha=hp.decode_alpha, extra_length=hp.decode_extra_length)
    print(f"Exported a string-to-string translator to {path}")
    return path


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        hp, spec, strategy = prepare()
    except (ValueError, FileNotFoundError) as error:
        raise app.UsageError(str(error))
    try:
        if FLAGS.mode in ("train", "all"):
            run_train(hp, spec, strategy)
        if FLAGS.mode in ("eval", "all"):
            run_eval(spec)
        if FLAGS.mode in ("export", "all"):
            run_export()
    except training.TrainingPreempted as error:
        # 128 + SIGTERM, the status of a process that SIGTERM ended: a
        # scheduler sees the job as interrupted, not finished.
        logging.warning("%s", error)
        sys.exit(128 + signal.SIGTERM)
    except (training.NonFiniteLossError, FileNotFoundError,
            FileExistsError) as error:
        logging.error("%s", error)
        sys.exit(f"Error: {error}")


if __name__ == "__main__":
    app.run(main)
