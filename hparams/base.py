"""The paper's base model (Vaswani et al. 2017, Table 3 "base", §5).

WMT 2014 English-German setting: a shared BPE vocabulary of about 37,000
tokens, batches of about 25,000 source and 25,000 target tokens, 100,000
steps, Adam(0.9, 0.98, 1e-9), the paper's learning-rate formula with 4,000
warmup steps, residual and embedding dropout 0.1, label smoothing 0.1, beam
4 with length penalty 0.6 and outputs up to the input length + 50.
"""

from tfattn.config import HParams

HPARAMS = HParams(
    # Model.
    task="translation",  # A Transformer on sentence pairs.
    flavor="paper",  # Projections, W^O, residual dropout: the paper's model.
    num_layers=6,  # N = 6 (Table 3).
    num_units=512,  # d_model = 512.
    num_heads=8,  # h = 8.
    ffn_units=2048,  # d_ff = 2048.
    dropout_rate=0.1,  # P_drop = 0.1 (residuals and embedding sums).
    attention_dropout_rate=0.0,  # The paper names no attention dropout.
    normalize_first=False,  # Post-norm: LayerNorm(x + Sublayer(x)).
    positional_encoding="sinusoid",  # §3.5 sinusoids.
    max_length=256,  # Not in the paper; tensor2tensor's length limit.
    share_embeddings=True,  # §3.4: one matrix for both embeddings...
    tie_output=True,  # ...and the pre-softmax projection.
    embeddings_initializer="glorot_uniform",  # Keras's default.
    vocab_size=37000,  # §5.1: shared source-target vocabulary of ~37,000.
    tokenizer_model_type="bpe",  # Byte-pair encoding.
    tokenizer_normalization="nmt_nfkc",  # SentencePiece's default; cased.
    activation="relu",  # The paper's ReLU.
    kernel_initializer="glorot_uniform",  # Keras's default.
    normalize_embeddings=False,  # The paper has no embedding layer norm.
    scale_embeddings=True,  # §3.4: the rows times sqrt(d_model).
    positions_initializer="glorot_uniform",  # Keras's (sinusoids: unused).
    # Training.
    tokenizer_sampling_alpha=0.0,  # The paper samples no segmentations.
    batch_size=None,  # Batches are sized in tokens, not sentences.
    tokens_per_batch=25000,  # §5.1: ~25,000 source + ~25,000 target tokens.
    max_train_length=256,  # Same as max_length.
    shuffle_buffer_size=100_000,  # Pairs shuffled ahead of bucketing.
    learning_rate_schedule="noam",  # §5.3, equation (3).
    learning_rate=None,  # None: the paper's d_model^-0.5 factor.
    learning_rate_scale=1.0,  # The formula as printed.
    warmup_steps=4000,  # warmup_steps = 4000.
    adam_beta1=0.9,  # β1 = 0.9.
    adam_beta2=0.98,  # β2 = 0.98.
    adam_epsilon=1e-9,  # ε = 1e-9.
    label_smoothing=0.1,  # ε_ls = 0.1 (§5.4).
    rdrop_alpha=0.0,  # The paper trains one pass per batch.
    loss_denominator_epsilon=0.0,  # Plain mean over non-pad target tokens.
    train_steps=100_000,  # Base models: 100,000 steps (12 hours on 8 P100).
    train_epochs=None,  # Length given in steps.
    checkpoint_every_steps=1000,  # Every 1,000 steps (and at the end).
    keep_checkpoints=5,  # The paper averages the last 5 checkpoints.
    log_every_steps=100,  # TensorBoard and progress bar interval.
    eval_every_steps=0,  # No validation BLEU during training...
    eval_sentences=200,  # ...(this many pairs when it is on).
    mask_selection_rate=0.15,  # Masked LM only: BERT's 15% blanks...
    mask_token_rate=0.8,  # ...80% of them [MASK]...
    random_token_rate=0.1,  # ...10% a random piece, 10% unchanged.
    whole_word_masking=False,  # Pieces chosen one by one.
    # Decoding.
    beam_size=4,  # §6.1: beam size 4...
    decode_alpha=0.6,  # ...length penalty α = 0.6...
    decode_extra_length=50,  # ...maximum output length input + 50.
    average_checkpoints=1,  # Evaluate the last checkpoint.
)
