"""Masked-LM quality at an equal budget: `tfattn.MaskedLM` against
keras-hub's `BertMaskedLM` on a `BertBackbone` of the same size, trained
on the same token ids with the same blanks.

One process: a SentencePiece vocabulary (with the `[MASK]` piece) learnt
from one side of Multi30k's training split, every caption as `<s> pieces
</s>` cut to `--length`, the same shuffled batches for both models, the
same blanks (`tfattn.data.MaskGenerator`, 15%, 80-10-10, a seed per
batch), the same optimizer (Adam with a linear warmup then cosine decay),
the same number of steps, Keras `fit` for both (loss: sparse cross-entropy
at the blanks). Then the validation (and test) masked-token accuracy and
perplexity at the blanks, on blanks fixed by a seed, from each model's
logits in NumPy.

Sizes: `bert_multi30k`'s (4 layers of width 128, 4 heads, FFN 256, GELU,
dropout 0.1, head tied to the token table) against keras-hub's BERT
(post-norm, learned positions, a segment embedding, its initializers).
tfattn's layout and initializers are flags; by default `bert_multi30k`'s
(pre-norm, sinusoid, a N(0, C^-0.5) token table times sqrt(C), Glorot
kernels), and BERT's with

    --tfattn_post_norm --tfattn_positional_encoding=learned
    --tfattn_normalize_embeddings --no-tfattn_scale_embeddings
    --tfattn_kernel_initializer=truncated_normal_0.02
    --tfattn_embeddings_initializer=truncated_normal_0.02
    --tfattn_positions_initializer=truncated_normal_0.02

    python bench/masked_lm_quality.py --manual_dir=DIR   # Multi30k's *.gz
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
from tfattn.data import monolingual  # noqa: E402
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
    parser.add_argument("--peak_learning_rate", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--tfattn_post_norm", action="store_true",
                        help="post-norm blocks (BERT's); bert_multi30k's "
                        "are pre-norm")
    parser.add_argument("--tfattn_positional_encoding", default="sinusoid",
                        help="'learned': BERT's")
    parser.add_argument("--tfattn_kernel_initializer",
                        default="glorot_uniform", choices=KERNEL_INITIALIZERS,
                        help="the Dense kernels' initializer "
                        "(tfattn.config.KERNEL_INITIALIZERS)")
    parser.add_argument("--tfattn_embeddings_initializer",
                        default="scaled_normal",
                        choices=("scaled_normal",) + KERNEL_INITIALIZERS,
                        help="the token table's: N(0, 128^-0.5) "
                        "(bert_multi30k's) or a kernel initializer's name "
                        "(BERT's: truncated_normal_0.02)")
    parser.add_argument("--tfattn_scale_embeddings",
                        action=argparse.BooleanOptionalAction, default=True,
                        help="the token rows times sqrt(128) "
                        "(bert_multi30k's; BERT: --no-tfattn_scale_embeddings)")
    parser.add_argument("--tfattn_positions_initializer",
                        default="glorot_uniform", choices=KERNEL_INITIALIZERS,
                        help="the learned position table's (BERT's: "
                        "truncated_normal_0.02)")
    parser.add_argument("--tfattn_normalize_embeddings",
                        action="store_true",
                        help="a layer norm over the embeddings (BERT's)")
    parser.add_argument("--models", default="tfattn,keras-hub",
                        help="which to train, comma-separated")
    return parser.parse_args()


def texts(args, split):
    spec = sources.parse_dataset_spec(
        "multi30k", target_language=args.language,
        manual_dir=args.manual_dir, monolingual=True)
    return [t for _, t in sources.load_pairs(spec, split)]


def masked(masker, rows, seed):
    """MaskGenerator output as NumPy, one stateless seed per 256 rows."""
    parts = [masker(rows[i:i + 256], seed=[seed, i])
             for i in range(0, len(rows), 256)]
    return {k: np.concatenate([p[k].numpy() for p in parts])
            for k in parts[0]}


def _table_initializer(name):
    if name == "scaled_normal":
        return keras.initializers.RandomNormal(stddev=128 ** -0.5)
    return kernel_initializer(name)


def build(args, vocab, kind):
    keras.utils.set_random_seed(args.seed)
    if kind == "tfattn":
        model = tfattn.models.MaskedLM(
            vocab_size=vocab, num_layers=4, num_units=128, num_heads=4,
            ffn_units=256, dropout_rate=args.dropout,
            normalize_first=not args.tfattn_post_norm,
            positional_encoding=args.tfattn_positional_encoding,
            max_length=args.length, activation="gelu",
            embeddings_initializer=_table_initializer(
                args.tfattn_embeddings_initializer), seed=args.seed,
            normalize_embeddings=args.tfattn_normalize_embeddings,
            scale_embeddings=args.tfattn_scale_embeddings,
            positions_initializer=kernel_initializer(
                args.tfattn_positions_initializer),
            kernel_initializer=kernel_initializer(
                args.tfattn_kernel_initializer))
    else:
        import keras_hub

        backbone = keras_hub.models.BertBackbone(
            vocabulary_size=vocab, num_layers=4, num_heads=4, hidden_dim=128,
            intermediate_dim=256, dropout=args.dropout,
            max_sequence_length=args.length)
        model = keras_hub.models.BertMaskedLM(backbone=backbone,
                                              preprocessor=None)
    decay = keras.optimizers.schedules.CosineDecay(
        0.0, args.steps - args.warmup, warmup_target=args.peak_learning_rate,
        warmup_steps=args.warmup)
    model.compile(
        optimizer=keras.optimizers.Adam(decay, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=[])
    return model


def inputs(kind, batch):
    x = {"token_ids": batch["token_ids"],
         "mask_positions": batch["mask_positions"]}
    if kind == "keras-hub":
        x.update(segment_ids=np.zeros_like(batch["token_ids"]),
                 padding_mask=batch["token_ids"] > 0)
    return x


def scores(model, kind, batch):
    """(masked-token accuracy, perplexity at the blanks)."""
    nll, hits, count = 0.0, 0, 0
    for start in range(0, len(batch["token_ids"]), 256):
        part = {k: v[start:start + 256] for k, v in batch.items()}
        logits = np.asarray(model.predict_on_batch(inputs(kind, part)),
                            np.float64)
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        used = part["mask_weights"] > 0
        target = part["mask_ids"]
        picked = np.take_along_axis(log_probs, target[..., None], -1)[..., 0]
        nll -= picked[used].sum()
        hits += int((log_probs.argmax(-1) == target)[used].sum())
        count += int(used.sum())
    return hits / count, math.exp(nll / count)


def main():
    args = parse_args()
    train = texts(args, "train")
    tokenizer = train_tokenizer(train, None, vocab_size=args.vocab,
                                model_type="bpe", mask_piece=True)
    vocab = tokenizer.vocab_size
    masker = tfattn.data.MaskGenerator(
        vocab, mask_token_id=tokenizer.mask_id,
        mask_selection_length=math.ceil(0.15 * args.length) + 1)
    rows = monolingual.encode_texts(tokenizer, train, args.length)
    rng = np.random.default_rng(args.seed)
    order = np.concatenate([rng.permutation(len(rows)) for _ in range(
        args.steps * args.batch // len(rows) + 1)])[:args.steps * args.batch]
    data = masked(masker, rows[order], seed=args.seed)
    evaluation = {split: masked(masker, monolingual.encode_texts(
        tokenizer, texts(args, split), args.length), seed=1000 + i)
        for i, split in enumerate(("validation", "test"))}
    print(f"vocabulary {vocab}, {len(rows)} training captions, {args.steps} "
          f"steps of {args.batch} captions, seed {args.seed}, peak rate "
          f"{args.peak_learning_rate}; tfattn: "
          f"{'post' if args.tfattn_post_norm else 'pre'}-norm, "
          f"{args.tfattn_positional_encoding} positions, "
          f"{args.tfattn_kernel_initializer} kernels, token table "
          f"{args.tfattn_embeddings_initializer}"
          + ("" if args.tfattn_scale_embeddings else " (not scaled)")
          + (f", positions {args.tfattn_positions_initializer}"
             if args.tfattn_positional_encoding == "learned" else "")
          + (", normalized embeddings" if args.tfattn_normalize_embeddings
             else ""))
    for kind in args.models.split(","):
        model = build(args, vocab, kind)
        begin = time.time()
        model.fit(inputs(kind, data), data["mask_ids"],
                  sample_weight=data["mask_weights"], batch_size=args.batch,
                  epochs=1, shuffle=False, verbose=0)
        seconds = time.time() - begin
        result = {split: scores(model, kind, batch)
                  for split, batch in evaluation.items()}
        print(f"{kind}: {model.count_params():,} parameters, trained in "
              f"{seconds:.0f} s; masked-token accuracy / perplexity: "
              f"validation {result['validation'][0]:.2%} / "
              f"{result['validation'][1]:.2f}, test "
              f"{result['test'][0]:.2%} / {result['test'][1]:.2f}")


if __name__ == "__main__":
    main()
