"""Seeing what a model attends to.

- `attention_maps(model, tokenizer, text)`: translate a sentence and return
  its pieces and the attention of every layer and head (encoder
  self-attention, decoder masked self-attention, encoder-decoder attention).
- `plot_attention(weights, query_tokens, key_tokens, path)`: labelled
  heatmaps (one panel per head) with matplotlib (the `viz` extra).
- `write_html(scores, source_tokens, target_tokens, path)`: one
  self-contained page in the manner of Tensor2Tensor's attention view.
- `write_attention_summaries(...)`: the same maps as TensorBoard images.
- `curves.plot_curve(log_dir, path)`: a run's TensorBoard scalars (e.g.
  `validation_bleu` and `loss`) as a PNG, from its event files.
- `python -m tfattn.visualize --model_dir=DIR --text="..." --output_dir=OUT`
  does all of it for a model that `train.py` trained.
"""

from tfattn.visualize.html import write_html
from tfattn.visualize.maps import KINDS
from tfattn.visualize.maps import AttentionMaps
from tfattn.visualize.maps import attention_maps
from tfattn.visualize.maps import query_and_key_tokens
from tfattn.visualize.maps import write_attention_summaries
from tfattn.visualize.plot import plot_attention

__all__ = [
    "KINDS",
    "AttentionMaps",
    "attention_maps",
    "plot_attention",
    "query_and_key_tokens",
    "write_attention_summaries",
    "write_html",
]
