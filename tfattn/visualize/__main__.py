r"""Draws what a trained model attends to for one sentence.

  python -m tfattn.visualize --model_dir=runs/m30k \
      --text="A dog runs through the snow." --output_dir=runs/m30k/attention

Writes OUT/index.html (the interactive view of every layer and head: pick
the kind, layer and head; hover a token), OUT/{kind}_layer{i}.png (the
selected heads of each selected layer, in a grid) and OUT/scores.npz (the
selected weights, `{kind}_{layer}` arrays [H, T_q, T_k], and the tokens),
and prints the translation and the files. It reads the hparams, vocabulary
and latest checkpoint that `train.py` left in --model_dir, and decodes as
those hparams say. Bad input (a missing or corrupt model directory, bad
indices, an unwritable --output_dir) ends with one line (exit status 1; 2
for stray arguments), and nothing is written; --debug shows the traceback.
"""

import sys

from absl import app
from absl import flags

from tfattn.cli import errors
from tfattn.visualize.cli import run

flags.DEFINE_string("model_dir", None, "A model directory train.py trained.")
flags.DEFINE_string("text", None, "The source sentence.")
flags.DEFINE_string("output_dir", None, "Where the files go (created).")
flags.DEFINE_string("layers", "all", 'Layers to draw: "all" or "0,2,...".')
flags.DEFINE_string("heads", "all", 'Heads to draw: "all" or "0,1,...".')
flags.DEFINE_integer("average_checkpoints", 1,
                     "Use the average of the last N checkpoints.",
                     lower_bound=1)
flags.DEFINE_bool("debug", False,
                  "On an error, show the Python traceback instead of one line.")
flags.mark_flags_as_required(["model_dir", "text", "output_dir"])
FLAGS = flags.FLAGS


def main(argv):
    try:
        if len(argv) > 1:
            raise errors.UsageError(
                f"unexpected arguments: {' '.join(argv[1:])}")
        maps, paths = run(FLAGS.model_dir, FLAGS.text, FLAGS.output_dir,
                          FLAGS.layers, FLAGS.heads,
                          FLAGS.average_checkpoints)
    except Exception as error:  # noqa: BLE001 (the boundary)
        if FLAGS.debug:
            raise
        line, status = errors.command_line_failure(
            error, "drawing the attention", "give a shorter --text")
        print(line, file=sys.stderr)
        sys.exit(status)
    # A language model's maps have no source: they are of the text itself.
    label = "Translation" if maps.source_tokens else "Text"
    print(f"{label}: {maps.translation}")
    for path in paths:
        print(f"Wrote {path}")


if __name__ == "__main__":
    app.run(main)
