"""A tiny random Marian (OPUS-MT) Hugging Face directory for the tests of
tfattn.interop.marian, and helpers that run it through tfattn and through
the NumPy oracle (tests/reference_numpy_marian.py).

2 + 2 layers, d_model 32, 4 heads, FFN 64; SentencePiece models trained
here on a few multilingual sentences; vocab.json with Marian's special ids;
config.json with MarianConfig's names; model.safetensors with transformers'
tensor names.
"""

import io
import json
import os

import numpy as np
import safetensors.numpy as safetensors_numpy
import sentencepiece as spm

from tfattn.interop import marian
from tfattn.utils.ids import BOS_ID
from tfattn.utils.ids import EOS_ID

SOURCE_TEXTS = [
    "The cat sits on the mat.", "A dog runs in the park.",
    "Le chat est assis sur le tapis.", "Un chien court dans le parc.",
    "Кошка сидит на коврике.", "Собака бежит в парке.",
    "Η γάτα κάθεται στο χαλί.", "猫はマットの上に座っている。",
]
TARGET_TEXTS = [
    "Die Katze sitzt auf der Matte.", "Ein Hund läuft im Park.",
    "Der Hund und die Katze spielen.", "Straße, Größe, Übung!",
]
SOURCE = np.array([[5, 6, EOS_ID]], np.int32)
TARGET_IN = np.array([[BOS_ID, 7, 8]], np.int32)
SAMPLE = ["The cat runs in the parc.", "Le chien est sur le tapis.",
          "Собака сидит.", "Η γάτα.", "猫の上", "Grüße aus Köln?", ""]
CONFIG = dict(
    model_type="marian", architectures=["MarianMTModel"], d_model=32,
    encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
    activation_function="swish", max_position_embeddings=64,
    scale_embedding=True, dropout=0.1, attention_dropout=0.0,
    activation_dropout=0.0, init_std=0.02, eos_token_id=0,
    forced_eos_token_id=0, num_beams=4, max_length=64,
    normalize_before=False, static_position_embeddings=True,
    add_bias_logits=False, share_encoder_decoder_embeddings=True,
    tie_word_embeddings=True, transformers_version="4.44.0",
)


def trained_spm(sentences, size):
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 4), model_writer=model,
        vocab_size=size, character_coverage=1.0, hard_vocab_limit=False,
        minloglevel=2)
    return model.getvalue()


def spm_processor(proto):
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(proto)
    return processor


def marian_vocab(source, target):
    """Marian's layout: </s> 0, <unk> 1, pieces, language codes, <pad>
    last; one piece of the source model left out (it reads as <unk>)."""
    pieces = set()
    for proto in (source, target):
        p = spm_processor(proto)
        pieces |= {p.id_to_piece(i) for i in range(p.get_piece_size())}
    pieces -= {"<unk>", "<s>", "</s>", left_out_pieces(source)}
    names = (["</s>", "<unk>"] + sorted(pieces) + [">>fra<<", ">>deu<<"]
             + ["<pad>"])
    return {piece: i for i, piece in enumerate(names)}


def left_out_pieces(source):
    return [p for p in spm_processor(source).encode("Собака", out_type=str)
            if p != "\u2581"][-1]


def tensor_shape(name, c, f, v):
    """A tensor's torch shape, from its transformers name."""
    if name in ("model.shared.weight", "final_logits_bias"):
        return (v, c) if name.startswith("model") else (1, v)
    if "layer_norm" in name or name.endswith(".bias"):
        return (f,) if ".fc1." in name else (c,)
    return (f, c) if ".fc1." in name else (c, f) if ".fc2." in name else (c, c)


def random_weights(config):
    """Random tensors under transformers' names, torch layout."""
    rng = np.random.default_rng(0)
    weights = {}
    for name in marian.files.expected_names(config):
        value = rng.normal(0, 0.2, tensor_shape(name, config["d_model"], config[
            "encoder_ffn_dim"], config["vocab_size"]))
        if "layer_norm.weight" in name:
            value = 1.0 + 0.5 * value
        weights[name] = value.astype(np.float32)
    return weights


def write_directory(directory, config, weights, files):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as handle:
        handle.write(json.dumps(config, indent=2, sort_keys=True) + "\n")
    safetensors_numpy.save_file(
        weights, os.path.join(directory, "model.safetensors"),
        metadata={"format": "pt"})
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as handle:
            handle.write(data)


def write_checkpoint(tmp_path_factory):
    """(directory, config, weights, tokenizer files) of a tiny Marian,
    written under a new temporary directory."""
    source = trained_spm(SOURCE_TEXTS, 90)
    target = trained_spm(TARGET_TEXTS, 50)
    vocab = marian_vocab(source, target)
    pad = len(vocab) - 1
    config = dict(CONFIG, vocab_size=len(vocab), decoder_vocab_size=len(
        vocab), pad_token_id=pad, decoder_start_token_id=pad,
        bad_words_ids=[[pad]])
    files = {
        "source.spm": source, "target.spm": target,
        "vocab.json": json.dumps(vocab, indent=2).encode(),
        "tokenizer_config.json": json.dumps(dict(
            source_lang="en", target_lang="de", model_max_length=512,
            separate_vocabs=False, tokenizer_class="MarianTokenizer",
        )).encode(),
    }
    directory = str(tmp_path_factory.mktemp("marian") / "opus-mt-tiny")
    weights = random_weights(config)
    write_directory(directory, config, weights, files)
    return directory, config, weights, files


def id_batches(tokenizer, texts, target=False):
    """Marian ids [B, L] padded with Marian's pad, tfattn ids padded
    with 0."""
    rows = [tokenizer.vocabulary.to_marian(tokenizer.encode(t, target))
            for t in texts]
    width = max(len(r) for r in rows)
    pad = tokenizer.vocabulary.pad
    marian_ids = np.array([list(r) + [pad] * (width - len(r))
                           for r in rows], np.int64)
    ours = np.array([list(tokenizer.vocabulary.to_tfattn(r)) + [0] * (
        width - len(r)) for r in rows], np.int32)
    return marian_ids, ours, np.array([len(r) for r in rows])


def teacher_forced(tokenizer, texts):
    """(Marian decoder inputs, tfattn target_in, lengths): the start token
    then the target ids without their last."""
    marian_ids, _, lengths = id_batches(tokenizer, texts, target=True)
    start = np.full((len(texts), 1), tokenizer.vocabulary.pad)
    marian_in = np.concatenate([start, marian_ids[:, :-1]], axis=1)
    ours = tokenizer.vocabulary.to_tfattn(marian_in)
    ours[np.arange(ours.shape[1])[None, :] >= lengths[:, None]] = 0
    return marian_in, ours, lengths


def changed_copy(checkpoint, tmp_path, config=None, weights=None, drop=None,
             files=None):
    directory, base_config, base_weights, base_files = checkpoint
    out = str(tmp_path / "changed")
    write_directory(out, dict(base_config, **(config or {})),
           weights if weights is not None else base_weights,
           dict(base_files, **(files or {})))
    if drop:
        os.remove(os.path.join(out, drop))
    return out
