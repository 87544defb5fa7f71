"""Language-model quality at an equal budget: `tfattn.CausalLM` against
keras-hub's GPT-2 of the same size, trained on the same token ids.

One process: a SentencePiece vocabulary learnt from one side of Multi30k's
training split, every caption as `<s> pieces </s>` cut to `--length`, the
same shuffled batches for both models, the same optimizer (Adam with a
linear warmup then cosine decay), the same number of steps, Keras `fit` for
both (loss: sparse cross-entropy over the non-padding targets). Then the
validation (and test) perplexity per subword, summed over every target
piece in NumPy from each model's logits.

Sizes and settings: `gpt_multi30k`'s (4 pre-norm layers of width 128, 4
heads, FFN 256, GELU, learned positions, N(0, 0.02) kernels, dropout 0.3,
tied head, token table from N(0, 128^-0.5)); keras-hub's `GPT2Backbone`
with the same layers, width, heads, FFN and dropout (its own token table
and initializers). Both train on plain cross-entropy (the set itself adds
label smoothing 0.1).

    python bench/causal_lm_quality.py --manual_dir=DIR   # Multi30k's *.gz
"""

import argparse
import math
import os
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfattn  # noqa: E402
from tfattn.config import KERNEL_INITIALIZERS  # noqa: E402
from tfattn.config import kernel_initializer  # noqa: E402
from tfattn.data import sources  # noqa: E402
from tfattn.data import train_tokenizer  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--manual_dir", required=True)
    parser.add_argument("--language", default="en")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--peak_learning_rate", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--tfattn_embeddings_initializer",
                        default="scaled_normal",
                        help="gpt_multi30k's (N(0, C^-0.5)); "
                        "'glorot_uniform' is CausalLM's default")
    parser.add_argument("--tfattn_activation", default="gelu",
                        help="the feed-forward activation (gpt_multi30k's "
                        "and GPT's 'gelu')")
    parser.add_argument("--tfattn_positional_encoding", default="learned",
                        help="gpt_multi30k's and GPT's 'learned'")
    parser.add_argument("--tfattn_gpt2_embeddings", action="store_true",
                        help="GPT-2's token table: N(0, 0.02), rows not "
                        "scaled by sqrt(C) (overrides the initializer)")
    parser.add_argument("--tfattn_kernel_initializer",
                        default="normal_0.02", choices=KERNEL_INITIALIZERS,
                        help="the Dense kernels' initializer "
                        "(tfattn.config.KERNEL_INITIALIZERS)")
    parser.add_argument("--models", default="tfattn,keras-hub",
                        help="which to train, comma-separated")
    return parser.parse_args()


def texts(args, split):
    spec = sources.parse_dataset_spec(
        "multi30k", target_language=args.language,
        manual_dir=args.manual_dir, monolingual=True)
    return [t for _, t in sources.load_pairs(spec, split)]


def encode(tokenizer, lines, length):
    """[N, length + 1] int32: <s> pieces </s>, cut, right-padded."""
    rows = np.zeros((len(lines), length + 1), np.int32)
    for i, ids in enumerate(tokenizer.tokenize(lines).to_list()):
        row = ([2] + ids + [3])[:length + 1]
        rows[i, :len(row)] = row
    return rows


def schedule(args):
    decay = keras.optimizers.schedules.CosineDecay(
        0.0, args.steps - args.warmup, warmup_target=args.peak_learning_rate,
        warmup_steps=args.warmup)
    return decay


def build(args, vocab, kind):
    keras.utils.set_random_seed(args.seed)
    if kind == "tfattn":
        model = tfattn.CausalLM(
            vocab_size=vocab, num_layers=4, num_units=128, num_heads=4,
            ffn_units=256, dropout_rate=args.dropout, normalize_first=True,
            max_length=args.length, activation=args.tfattn_activation,
            positional_encoding=args.tfattn_positional_encoding,
            embeddings_initializer=(
                keras.initializers.RandomNormal(stddev=0.02)
                if args.tfattn_gpt2_embeddings else _initializer(
                    args.tfattn_embeddings_initializer)),
            scale_embeddings=not args.tfattn_gpt2_embeddings, seed=args.seed,
            kernel_initializer=kernel_initializer(
                args.tfattn_kernel_initializer))
    else:
        import keras_hub

        backbone = keras_hub.models.GPT2Backbone(
            vocabulary_size=vocab, num_layers=4, num_heads=4, hidden_dim=128,
            intermediate_dim=256, dropout=args.dropout,
            max_sequence_length=args.length)
        model = keras_hub.models.GPT2CausalLM(backbone=backbone,
                                              preprocessor=None)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule(args), beta_2=0.98,
                                        epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[])
    return model


def _initializer(name):
    if name == "scaled_normal":  # tfattn.config's, for width 128.
        return keras.initializers.RandomNormal(stddev=128 ** -0.5)
    return name


def inputs(kind, x):
    if kind == "tfattn":
        return x
    return {"token_ids": x, "padding_mask": x > 0}


def perplexity(model, kind, rows):
    """exp(summed NLL / target pieces) over `rows`, in batches."""
    total, count = 0.0, 0
    for start in range(0, len(rows), 256):
        chunk = rows[start:start + 256]
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = np.asarray(model.predict_on_batch(inputs(kind, x)),
                            np.float64)
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, y[..., None], -1)[..., 0]
        total -= picked[y > 0].sum()
        count += int((y > 0).sum())
    return math.exp(total / count)


def main():
    args = parse_args()
    train = texts(args, "train")
    tokenizer = train_tokenizer(train, None, vocab_size=args.vocab,
                                model_type="bpe")
    vocab = tokenizer.vocab_size
    rows = encode(tokenizer, train, args.length)
    rng = np.random.default_rng(args.seed)
    order = np.concatenate([rng.permutation(len(rows)) for _ in range(
        args.steps * args.batch // len(rows) + 1)])[:args.steps * args.batch]
    batches = rows[order].reshape(args.steps, args.batch, -1)
    x, y = batches[..., :-1].reshape(-1, args.length), batches[..., 1:].reshape(
        -1, args.length)
    evaluation = {split: encode(tokenizer, texts(args, split), args.length)
                  for split in ("validation", "test")}
    table = ("GPT-2" if args.tfattn_gpt2_embeddings
             else args.tfattn_embeddings_initializer)
    print(f"vocabulary {vocab}, {len(rows)} training captions, {args.steps} "
          f"steps of {args.batch} captions, seed {args.seed}; tfattn: "
          f"{args.tfattn_activation}, {args.tfattn_positional_encoding} "
          f"positions, {table} embeddings")
    for kind in args.models.split(","):
        model = build(args, vocab, kind)
        begin = time.time()
        model.fit(inputs(kind, x), y, sample_weight=(y > 0).astype("float32"),
                  batch_size=args.batch, epochs=1, shuffle=False, verbose=0)
        seconds = time.time() - begin
        scores = {split: perplexity(model, kind, rows)
                  for split, rows in evaluation.items()}
        print(f"{kind}: {model.count_params():,} parameters, trained in "
              f"{seconds:.0f} s; perplexity per subword: validation "
              f"{scores['validation']:.2f}, test {scores['test']:.2f}")


if __name__ == "__main__":
    main()
