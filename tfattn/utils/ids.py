"""The token ids every tfattn model and vocabulary share, defined once.

SentencePiece vocabularies made by `tfattn.data.train_tokenizer` put
padding at 0, the unknown piece at 1, `<s>` at 2 and `</s>` at 3 (the 2019
reference's ids), and a masked language model's `[MASK]` at 4. The models
read 0 as padding, start translations and language-model prompts from
`BOS_ID` and stop at `EOS_ID`.
"""

__all__ = ["PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "MASK_ID"]

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
MASK_ID = 4
