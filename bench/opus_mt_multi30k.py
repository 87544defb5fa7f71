"""An OPUS-MT-shaped Hugging Face Marian directory for Multi30k, before any
training: what `train.py --init_from=DIR` fine-tunes on real text when no
real OPUS-MT weights can be downloaded.

The directory is what `Helsinki-NLP/opus-mt-en-de` holds, at a chosen size
(by default the `multi30k` sets' 4 + 4 layers of width 128, 4 heads, FFN
256): `source.spm` and `target.spm`, unigram SentencePiece models learnt
on the training split's English and German sides (as OPUS-MT's are learnt
on each side), one `vocab.json` of both models' pieces in Marian's layout
(`</s>` 0, `<unk>` 1, `<pad>` last), `config.json` with `MarianConfig`'s
names and OPUS-MT's options (post-norm, swish, scaled embeddings, static
sinusoids, shared and tied embeddings), and `model.safetensors` drawn as
transformers initialises a `MarianMTModel` (normal(0, `init_std`) weights,
zero biases and logits bias, unit layer norms).

    python bench/opus_mt_multi30k.py --manual_dir=DIR \\
        --out=checkpoints/opus-mt-multi30k
    python train.py --hparams=multi30k_reference --dataset=multi30k \\
        --manual_dir=DIR --init_from=checkpoints/opus-mt-multi30k \\
        --model_dir=runs/opus_mt --mode=all
"""

import argparse
import gzip
import io
import json
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)
import numpy as np


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manual_dir", required=True,
                        help="Multi30k's raw files (train.en.gz, ...).")
    parser.add_argument("--out", required=True,
                        help="The directory to write (must not exist).")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=256)
    parser.add_argument("--pieces", type=int, default=8000,
                        help="Pieces of each side's SentencePiece model "
                        "(at most).")
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def read_lines(manual_dir, name):
    path = os.path.join(manual_dir, name)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def sentencepiece_model(lines, pieces):
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model,
        vocab_size=pieces, model_type="unigram", character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2)
    return model.getvalue()


def marian_vocab(*models):
    import sentencepiece

    pieces = set()
    for proto in models:
        processor = sentencepiece.SentencePieceProcessor()
        processor.LoadFromSerializedProto(proto)
        pieces |= {processor.id_to_piece(i)
                   for i in range(processor.get_piece_size())}
    pieces -= {"<unk>", "<s>", "</s>", "<pad>"}
    names = ["</s>", "<unk>"] + sorted(pieces) + ["<pad>"]
    return {piece: i for i, piece in enumerate(names)}


def marian_config(args, vocab_size):
    pad = vocab_size - 1
    return dict(
        model_type="marian", architectures=["MarianMTModel"],
        d_model=args.units, encoder_layers=args.layers,
        decoder_layers=args.layers, encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads, encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn, activation_function="swish",
        max_position_embeddings=512, scale_embedding=True,
        dropout=args.dropout, attention_dropout=0.0, activation_dropout=0.0,
        init_std=0.02, vocab_size=vocab_size, decoder_vocab_size=vocab_size,
        pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
        forced_eos_token_id=0, bad_words_ids=[[pad]], num_beams=4,
        max_length=512, normalize_before=False,
        static_position_embeddings=True, add_bias_logits=False,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        transformers_version="4.44.0")


def initial_weights(config, seed):
    """transformers' `MarianPreTrainedModel._init_weights`: linear and
    embedding weights from normal(0, init_std), the padding row, biases
    and the logits bias zero, layer norms one and zero."""
    from tests.marian_fixtures import tensor_shape
    from tfattn.interop import marian

    rng = np.random.default_rng(seed)
    c, f, v = config["d_model"], config["encoder_ffn_dim"], config[
        "vocab_size"]
    weights = {}
    for name in marian.files.expected_names(config):
        shape = tensor_shape(name, c, f, v)
        if "layer_norm.weight" in name:
            value = np.ones(shape)
        elif name.endswith(".bias") or name == "final_logits_bias":
            value = np.zeros(shape)
        else:
            value = rng.normal(0.0, config["init_std"], shape)
        weights[name] = value.astype(np.float32)
    weights["model.shared.weight"][config["pad_token_id"]] = 0.0
    return weights


def main():
    args = parse_args()
    if os.path.exists(args.out):
        raise SystemExit(f"--out: {args.out} exists; name a new directory")
    from tests.marian_fixtures import write_directory

    source = sentencepiece_model(
        read_lines(args.manual_dir, "train.en.gz"), args.pieces)
    target = sentencepiece_model(
        read_lines(args.manual_dir, "train.de.gz"), args.pieces)
    vocab = marian_vocab(source, target)
    config = marian_config(args, len(vocab))
    files = {
        "source.spm": source, "target.spm": target,
        "vocab.json": json.dumps(vocab, ensure_ascii=False, indent=2).encode(),
        "tokenizer_config.json": json.dumps(dict(
            source_lang="en", target_lang="de", model_max_length=512,
            separate_vocabs=False, tokenizer_class="MarianTokenizer",
        )).encode(),
    }
    write_directory(args.out, config, initial_weights(config, args.seed),
                    files)
    print(f"Wrote {args.out}: vocabulary {len(vocab):,}, "
          f"{args.layers}+{args.layers} layers of width {args.units}")


if __name__ == "__main__":
    main()
