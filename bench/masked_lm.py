"""BERT-style masked language model: mask generation and training speed
against keras-hub, in one process, same sizes, random weights.

- Mask generation: sentences per second of `tfattn.data.MaskGenerator`
  against `keras_hub.layers.MaskedLMMaskGenerator`, each as the `map` of a
  `tf.data` pipeline over the same batches (64 rows of 16-128 ids, right-
  padded; 15% chosen, 80-10-10, at most 20 blanks per row), the pipeline
  iterated to its end.
- Training: input tokens per second of one `train_on_batch` step (Adam,
  sparse cross-entropy at the blanks) at batch 16 x 128 tokens, 20 blanks
  per row: `tfattn.MaskedLM` against keras-hub's `BertMaskedLM` on a
  `BertBackbone` of the same sizes, each in float32 and in mixed_bfloat16,
  with and without XLA (the best of the four is each side's best setting
  on this CPU).

The models: 4 post-norm layers of width 256, 4 heads, FFN 1024, vocabulary
8,000, 128 positions, GELU, the head tied to the token embedding (BERT's
layout; keras-hub's learned positions and segment embedding against
tfattn's sinusoid: the same matmul sizes).

    python bench/masked_lm.py
    python bench/masked_lm.py --quick        # smaller, for a smoke test
"""

import argparse
import os
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfattn  # noqa: E402
from _timing import best_times  # noqa: E402

MASK_ID, BLANKS = 4, 20


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--sentences", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default="masking,training")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.units, args.vocab = 1, 64, 500
        args.length, args.sentences, args.rounds = 32, 512, 1
    return args


def sentences(args, count, seed=0):
    """[count, length] int32: <s> ids </s> of random lengths, padded."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, args.length), np.int32)
    lengths = rng.integers(14, args.length - 1, count)
    for row, n in enumerate(lengths):
        ids[row, 0], ids[row, n + 1] = 2, 3
        ids[row, 1:n + 1] = rng.integers(5, args.vocab, n)
    return ids


def maskers(args):
    import keras_hub

    ours = tfattn.data.MaskGenerator(
        args.vocab, mask_token_id=MASK_ID, mask_selection_length=BLANKS,
        unselectable_token_ids=(0, 1, 2, 3), seed=0)
    theirs = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=args.vocab, mask_selection_rate=0.15,
        mask_token_id=MASK_ID, mask_selection_length=BLANKS,
        unselectable_token_ids=[0, 1, 2, 3])
    return ours, theirs


def masking(args):
    """Sentences/s of each generator as a tf.data map."""
    ids = sentences(args, args.sentences)
    ours, theirs = maskers(args)

    def pipeline(masker):
        dataset = tf.data.Dataset.from_tensor_slices(ids).batch(64).map(
            masker)

        def run():
            for _ in dataset:
                pass
        return run

    times = best_times({"tfattn": pipeline(ours),
                        "keras-hub": pipeline(theirs)},
                       rounds=args.rounds)
    return {k: len(ids) / v.seconds for k, v in times.items()}


def tfattn_mlm(args):
    keras.utils.set_random_seed(0)
    return tfattn.models.MaskedLM(
        vocab_size=args.vocab, num_layers=args.layers, num_units=args.units,
        num_heads=args.heads, ffn_units=4 * args.units, dropout_rate=0.1,
        max_length=args.length, activation="gelu", seed=0)


def hub_mlm(args):
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=args.vocab, num_layers=args.layers,
        num_heads=args.heads, hidden_dim=args.units,
        intermediate_dim=4 * args.units, dropout=0.1,
        max_sequence_length=args.length)
    return keras_hub.models.BertMaskedLM(backbone=backbone,
                                         preprocessor=None)


def training(args):
    """Input tokens/s of one train_on_batch step, per model and precision."""
    ids = sentences(args, 16, seed=1)
    ours, _ = maskers(args)
    batch = {k: v.numpy() for k, v in ours(ids, seed=[0, 0]).items()}
    x = {"token_ids": batch["token_ids"],
         "mask_positions": batch["mask_positions"]}
    hub_x = dict(x, segment_ids=np.zeros_like(ids),
                 padding_mask=ids > 0)
    y, w = batch["mask_ids"], batch["mask_weights"]
    tokens = ids.size
    rates = {}
    for policy in ("float32", "mixed_bfloat16"):
        for jit in (False, True):
            keras.config.set_dtype_policy(policy)
            loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True)
            mlm, hub = tfattn_mlm(args), hub_mlm(args)
            for model in (mlm, hub):
                model.compile(optimizer=keras.optimizers.Adam(1e-4),
                              loss=loss, weighted_metrics=[],
                              jit_compile=jit)
            mode = f"{policy}{' XLA' if jit else ''}"
            times = best_times({
                f"tfattn {mode}": lambda: mlm.train_on_batch(
                    x, y, sample_weight=w),
                f"keras-hub {mode}": lambda: hub.train_on_batch(
                    hub_x, y, sample_weight=w),
            }, rounds=args.rounds, repeats=3)
            rates.update({k: tokens / v.seconds for k, v in times.items()})
    keras.config.set_dtype_policy("float32")
    return rates


def main():
    args = parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in open(
        "/proc/cpuinfo") if line.startswith("model name")), "?")
    print(f"CPU: {cpu}; Keras {keras.__version__} "
          f"({keras.config.backend()}); {args.layers} layers, width "
          f"{args.units}, vocabulary {args.vocab}")
    if "masking" in args.parts:
        begin = time.time()
        rates = masking(args)
        print(f"\nMask generation, sentences/s ({args.sentences} sentences "
              f"of up to {args.length} ids, batches of 64; "
              f"{time.time() - begin:.0f} s):")
        for name, rate in rates.items():
            print(f"  {name}: {rate:,.0f}")
        print(f"  tfattn / keras-hub: "
              f"{rates['tfattn'] / rates['keras-hub']:.2f}x")
    if "training" in args.parts:
        rates = training(args)
        print(f"\nTraining step, input tokens/s (batch 16 x {args.length}, "
              f"{BLANKS} blanks per row):")
        for name, rate in rates.items():
            print(f"  {name}: {rate:,.0f}")
        ours = max(v for k, v in rates.items() if k.startswith("tfattn"))
        theirs = max(v for k, v in rates.items()
                     if k.startswith("keras-hub"))
        print(f"  best tfattn / best keras-hub: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
