"""How a masked LM's tokenizer reads fill-mask texts and names fillings
(`tfattn.decoding.mlm_evaluation`, and the fill-mask SavedModel,
`tfattn.export.export_masked_lm`, which uses these same functions).

Two vocabularies are read:

- SentencePiece (`tfattn.data.SubwordTokenizer`, learnt with the mask
  piece): a word starts with "▁"; "[MASK]" is a piece of its own, and the
  lone "▁" SentencePiece puts before it is dropped (`without_blank_spaces`).
- WordPiece (a BERT checkpoint's
  `tfattn.interop.wordpiece_tokenizer.WordPieceTokenizer`, recognised by
  its `continuation_prefix`, "##"): a piece without "##" starts a word,
  "##ing" continues one; "[MASK]" in a text is the mask id
  (`tokenize_with_blanks`).

A filling is the string that replaces `[MASK]` in the text as a user
writes it, so that a word split into pieces reads whole: SentencePiece's
"▁hundred" is "hundred" and "ty" stays "ty" ("twen[MASK]" filled reads
"twenty"); WordPiece's "jump" is "jump" and "##ing" is "ing"
("jump[MASK]" filled reads "jumping", as BERT joins "jump ##ing").
"""

import sentencepiece as spm

from tfattn.utils.ids import MASK_ID
from tfattn.utils.ids import UNK_ID

__all__ = ["is_wordpiece", "text_pieces", "without_blank_spaces",
           "filling_words"]


def is_wordpiece(tokenizer):
    """Whether `tokenizer` is a WordPiece one (has a `continuation_prefix`).

    Args:
        tokenizer: any tokenizer.

    Returns:
        bool.
    """
    return bool(getattr(tokenizer, "continuation_prefix", None))


def text_pieces(tokenizer, texts, blanks):
    """Each text's piece ids, before the reading rule cuts them.

    Args:
        tokenizer: SubwordTokenizer or WordPieceTokenizer.
        texts: list of str.
        blanks: bool. Fill-mask's reading: `[MASK]` is the mask id
            (`without_blank_spaces`; WordPiece's `tokenize_with_blanks`).

    Returns:
        list of lists of int.
    """
    if not texts:
        return []
    if blanks and is_wordpiece(tokenizer):
        return tokenizer.tokenize_with_blanks(list(texts)).to_list()
    pieces = tokenizer.tokenize(list(texts)).to_list()
    if blanks:
        pieces = [without_blank_spaces(tokenizer, p) for p in pieces]
    return pieces


def without_blank_spaces(tokenizer, pieces):
    """`pieces` without the lone word-start piece ("▁") that SentencePiece
    puts before a `[MASK]` written as a word ("a [MASK] dog" gives "▁a",
    "▁", "[MASK]", "▁dog"): in training a blank replaces a whole piece,
    word start included, so the text then reads as training's blanks do.
    A WordPiece vocabulary has no such piece: `pieces` unchanged.

    Args:
        tokenizer: SubwordTokenizer (learnt with the mask piece) or
            WordPieceTokenizer.
        pieces: list of int. One text's piece ids.

    Returns:
        list of int.
    """
    if is_wordpiece(tokenizer):
        return list(pieces)
    space, mask = tokenizer.piece_to_id("\u2581"), tokenizer.mask_id
    return [p for i, p in enumerate(pieces)
            if not (p == space and i + 1 < len(pieces)
                    and pieces[i + 1] == mask)]


def _wordpiece_words(tokenizer, ids):
    prefix = tokenizer.continuation_prefix
    words = []
    for token_id in (int(i) for i in ids):
        if not 0 <= token_id < tokenizer.vocab_size:
            token_id = UNK_ID
        piece = tokenizer.id_to_piece(token_id)
        if token_id > MASK_ID and piece.startswith(prefix):
            piece = piece[len(prefix):]
        words.append(piece)
    return words


def filling_words(tokenizer, ids):
    """The words that piece ids stand for as fillings, as a user reads
    them (`fill_mask`, and the fill-mask SavedModel's table): the string
    that replaces `[MASK]` in the text (the module docstring).

    SentencePiece:

    - A piece is what SentencePiece decodes it to alone: "▁hundred" (a
      word start) is "hundred", "ty" (the rest of a word) stays "ty", and
      the lone word-start piece "▁" is "" (a space: the next piece starts
      a word).
    - Special pieces are kept as written ("<pad>", "<unk>", "<s>", "</s>",
      "[MASK]"), where decoding gives "" or " ⁇ ": the user sees that the
      model predicts the end of the text, or a piece it does not know.
    - A byte piece (a byte-fallback vocabulary) is its character when the
      byte is one (ASCII: "<0x41>" is "A"), else kept as written
      ("<0xC3>": one byte of a longer character, which alone decodes to
      nothing readable).

    WordPiece: a piece without its "##" ("##ing" is "ing", "jump" stays
    "jump"); the special tokens are kept as written ("[PAD]", "[UNK]",
    "[CLS]", "[SEP]", "[MASK]").

    Either way, an id past the vocabulary (a model with a larger
    `vocab_size` than its tokenizer) is the unknown piece.

    Args:
        tokenizer: SubwordTokenizer (its `model_proto`) or
            WordPieceTokenizer (its `id_to_piece`).
        ids: iterable of int. Piece ids.

    Returns:
        list of str, one per id.
    """
    if is_wordpiece(tokenizer):
        return _wordpiece_words(tokenizer, ids)
    processor = spm.SentencePieceProcessor()
    processor.LoadFromSerializedProto(tokenizer.model_proto)
    size = processor.get_piece_size()
    words = []
    for token_id in (int(i) for i in ids):
        if not 0 <= token_id < size:
            token_id = UNK_ID
        piece = processor.id_to_piece(token_id)
        if (processor.is_control(token_id) or processor.is_unknown(token_id)
                or processor.is_unused(token_id)
                or (processor.is_byte(token_id)
                    and int(piece[3:5], 16) >= 0x80)):
            words.append(piece)
        else:
            words.append(processor.decode_ids([token_id]))
    return words
