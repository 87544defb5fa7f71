"""Kyubyong/transformer's 2019 code (`hparams.py`, docs/reference.md §2.10).

Every value the reference sets is copied: vocab_size 32000 (one joint
sentencepiece BPE model), batch_size 128, lr 0.0003 as the peak of
noam_scheme with warmup_steps 4000, num_epochs 20, d_model 512, d_ff 2048,
num_blocks 6, num_heads 8, maxlen1 = maxlen2 = 100, dropout_rate 0.3, label
smoothing 0.1 (hard-coded; `--smoothing` is unused), Adam with TF's defaults
0.9/0.999/1e-8 and the loss denominator's +1e-7 (§2.9). Decoding is greedy
over at most maxlen2 = 100 tokens.
"""

from tfattn.config import HParams

HPARAMS = HParams(
    # Model.
    task="translation",  # A Transformer on sentence pairs.
    flavor="reference_2019",  # Linear projections, no W^O, id-based masks.
    num_layers=6,  # --num_blocks 6.
    num_units=512,  # --d_model 512.
    num_heads=8,  # --num_heads 8.
    ffn_units=2048,  # --d_ff 2048.
    dropout_rate=0.3,  # --dropout_rate 0.3 (embedding sum).
    attention_dropout_rate=0.3,  # The same rate on the attention weights.
    normalize_first=False,  # Post-norm.
    positional_encoding="sinusoid",  # Sinusoid, zeroed at padding.
    max_length=100,  # --maxlen1 = --maxlen2 = 100 (the PE table).
    share_embeddings=True,  # One joint embedding matrix...
    tie_output=True,  # ...also used as the output projection (Eᵀ).
    embeddings_initializer="glorot_uniform",  # xavier_initializer, as the
                                              # 2019 code.
    vocab_size=32000,  # --vocab_size 32000.
    tokenizer_model_type="bpe",  # prepro.py: --model_type=bpe.
    tokenizer_normalization="nmt_nfkc",  # SentencePiece default; cased.
    activation="relu",  # tf.nn.relu, as the reference.
    kernel_initializer="glorot_uniform",  # tf.layers.dense's, as the reference.
    normalize_embeddings=False,  # The reference has none.
    scale_embeddings=True,  # * sqrt(d_model), as the reference.
    positions_initializer="glorot_uniform",  # Sinusoids: unused.
    # Training.
    tokenizer_sampling_alpha=0.0,  # The reference samples none.
    batch_size=128,  # --batch_size 128 sentence pairs.
    tokens_per_batch=None,  # Batches in sentences.
    max_train_length=100,  # len + 1 > maxlen1 or maxlen2 is dropped.
    shuffle_buffer_size=16384,  # shuffle(128 * batch_size).
    learning_rate_schedule="noam",  # noam_scheme...
    learning_rate=0.0003,  # ...peaking at --lr 0.0003...
    learning_rate_scale=1.0,  # ...exactly.
    warmup_steps=4000,  # --warmup_steps 4000.
    adam_beta1=0.9,  # tf.train.AdamOptimizer defaults:
    adam_beta2=0.999,  # beta2 = 0.999,
    adam_epsilon=1e-8,  # epsilon = 1e-8.
    label_smoothing=0.1,  # label_smoothing(inputs, epsilon=0.1).
    rdrop_alpha=0.0,  # The reference trains one pass per batch.
    loss_denominator_epsilon=1e-7,  # Σ CE·nonpadding / (Σ nonpadding + 1e-7).
    train_steps=None,  # Length given in epochs.
    train_epochs=20,  # --num_epochs 20.
    checkpoint_every_steps=1534,  # One epoch (~1,534 batches; §2.11).
    keep_checkpoints=20,  # Saver(max_to_keep=num_epochs).
    log_every_steps=100,  # TensorBoard and progress bar interval.
    eval_every_steps=0,  # The references log no validation score.
    eval_sentences=200,  # (Pairs of that score, if turned on.)
    mask_selection_rate=0.15,  # Masked LM only: BERT's 15% blanks...
    mask_token_rate=0.8,  # ...80% of them [MASK]...
    random_token_rate=0.1,  # ...10% a random piece, 10% unchanged.
    whole_word_masking=False,  # Pieces chosen one by one.
    # Decoding.
    beam_size=1,  # Greedy argmax decoding.
    decode_alpha=0.0,  # No length penalty.
    decode_extra_length=100,  # Capped at maxlen2 = 100 by the PE table.
    average_checkpoints=1,  # Evaluate the last checkpoint.
)
