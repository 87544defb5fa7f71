r"""Trains, evaluates and exports a tfattn model of a hparams set's task: a
Transformer translation model, a GPT-style language model, or a BERT-style
masked language model.

  python train.py --hparams=tiny --dataset=numbers --mode=all
  python train.py --hparams=base          # the paper's base model
  python train.py --hparams=gpt_tiny --dataset=numbers --mode=all
  python train.py --hparams=bert_tiny --dataset=numbers --mode=all

Modes: train (default); eval on --eval_split (test by default): BLEU for
translation, perplexity for a language model, masked-token accuracy for a
masked language model; export: a SavedModel (--export_format=ctranslate2:
a CTranslate2 model, for translation and language models); all (the three
in turn). A run restarted with the same --model_dir resumes from its latest
checkpoint with its saved hparams; --model_dir defaults to
runs/HPARAMS_DATASET. See `python train.py --helpfull` for every flag.

Exit status: 0 when done (and for --help); 143 (128 + SIGTERM) when SIGTERM
stopped training after saving a checkpoint (run the same command to resume);
2 for flags that cannot work; 1 for any other failure (a non-finite loss,
bad data, a missing or unwritable file, a model dir in use). Each failure is
one line, `Error: ...`, naming the flag, field or file; --debug shows the
traceback instead.
"""

import importlib.util
import os
import sys


def _error(text):
    """Writes `text` to standard error."""
    print(text, file=sys.stderr)


def _load_startup():
    """`tfattn.utils.startup`, run as a file: imported by name, it would
    first import `tfattn`, and with it TensorFlow, whose start-up banner it
    holds back."""
    package = importlib.util.find_spec("tfattn").submodule_search_locations
    spec = importlib.util.spec_from_file_location(
        "tfattn.utils.startup",
        os.path.join(package[0], "utils", "startup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# train.py is a TensorFlow program (tf.distribute, tf.data, SavedModel): it
# takes the TensorFlow backend over ~/.keras/keras.json, and refuses another
# named in the environment rather than overriding the user's choice.
# TensorFlow's start-up banner and INFO lines are held back;
# TFATTN_VERBOSE_IMPORT=1 or TF_CPP_MIN_LOG_LEVEL=0 shows them.
_startup = _load_startup()
_refusal = _startup.set_environment("train.py")
if _refusal is not None:
    _error(_refusal)
    sys.exit(2)
_startup.import_tensorflow_quietly(_error)
_startup.quiet_tensorflow_logging()

from absl import flags  # noqa: E402

import hparams as hparams_sets  # noqa: E402
from tfattn.cli import commands  # noqa: E402
from tfattn.cli import exits  # noqa: E402
from tfattn.cli import flags as train_flags  # noqa: E402

train_flags.define_flags(hparams_sets)
# `--help` lists the main module's flags: these are train.py's.
flags.adopt_module_key_flags(train_flags)
FLAGS = flags.FLAGS


def model_dir():
    """--model_dir, or runs/HPARAMS_DATASET when it is not given."""
    return train_flags.model_dir(FLAGS)


def requested_hparams(directory):
    """The --hparams set with --hparams_overrides applied, or None.

    Without --hparams, the overrides (if any) apply to the set saved in
    `directory`, and None is returned when there are none.
    """
    return train_flags.requested_hparams(FLAGS, hparams_sets, directory)


def main(argv):
    """The error boundary: every failure ends as one line (see the module
    docstring), SIGTERM as status 143."""
    exits.run_main(_run, argv, FLAGS, _error)


def _run():
    directory = model_dir()
    if not FLAGS.model_dir:
        print(f"Model directory: {directory}")
    command = train_flags.command(FLAGS, hparams_sets, directory)
    commands.run(command, report=print)


def _parse_flags(argv):
    """absl's flag parsing, where a bad flag is one line and status 2."""
    return exits.parse_flags(argv, FLAGS, _error)


def run():
    """`app.run(main)`, where a request for help exits 0 (absl exits 1) and
    a preempted run leaves at once after its checkpoint (143)."""
    exits.run_app(main, _parse_flags)


if __name__ == "__main__":
    run()
