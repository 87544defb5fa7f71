"""Kyubyong/transformer's 2017 code (`hyperparams.py`, docs/reference.md §1.8).

Every value the reference sets is copied: batch_size 32, lr 0.0001
(constant, Adam 0.9/0.98/1e-8, §1.7), maxlen 10, hidden_units 512,
num_blocks 6, num_epochs 20, num_heads 8, dropout_rate 0.1, sinusoid False
(learned positions), and the d_ff = 4·C = 2048 of train.py. Decoding is
greedy over at most maxlen = 10 tokens (§1.9).

One thing tfattn cannot express exactly: the reference builds two word
vocabularies, one per language, keeping words seen at least min_cnt = 20
times (|de| = 9,796 and |en| = 8,767 with 4 specials). tfattn's vocabulary is
one joint SentencePiece model; `word` pieces with the size of the union,
9,796 + 8,767 - 4 = 18,559, are the closest equivalent, and the model keeps
separate source and target tables as the reference does.
"""

from tfattn.config import HParams

HPARAMS = HParams(
    # Model.
    task="translation",  # A Transformer on sentence pairs.
    flavor="reference_2017",  # ReLU projections, no W^O, zero-row masks.
    num_layers=6,  # num_blocks = 6.
    num_units=512,  # hidden_units = 512.
    num_heads=8,  # num_heads = 8.
    ffn_units=2048,  # feedforward(num_units=[4*C, C]) in train.py.
    dropout_rate=0.1,  # dropout_rate = 0.1 (embedding sum).
    attention_dropout_rate=0.1,  # The same rate on the attention weights.
    normalize_first=False,  # Post-norm inside every sublayer.
    positional_encoding="learned",  # sinusoid = False.
    max_length=10,  # maxlen = 10 (tokens incl. </S>; the PE table size).
    share_embeddings=False,  # Separate de and en embeddings.
    tie_output=False,  # Output Dense with bias, untied.
    embeddings_initializer="glorot_uniform",  # xavier_initializer, as the
                                              # 2017 code.
    vocab_size=18559,  # Union of the min_cnt=20 word vocabularies (above).
    tokenizer_model_type="word",  # Whitespace words, not subwords.
    tokenizer_normalization="nmt_nfkc",  # SentencePiece default; cased.
    activation="relu",  # tf.nn.relu, as the reference.
    kernel_initializer="glorot_uniform",  # tf.layers.dense's, as the reference.
    normalize_embeddings=False,  # The reference has none.
    scale_embeddings=True,  # * sqrt(d_model), as the reference.
    positions_initializer="glorot_uniform",  # As the reference's
                                             # xavier_initializer.
    # Training.
    tokenizer_sampling_alpha=0.0,  # The reference samples none.
    batch_size=32,  # batch_size = 32 sentence pairs.
    tokens_per_batch=None,  # Batches in sentences.
    max_train_length=10,  # Pairs with max(len x, len y) > maxlen dropped.
    shuffle_buffer_size=1024,  # shuffle_batch capacity 64·N = 2,048, min 32·N.
    learning_rate_schedule="constant",  # No warmup or decay.
    learning_rate=0.0001,  # lr = 0.0001.
    learning_rate_scale=1.0,  # Unused by the constant schedule.
    warmup_steps=1,  # Unused by the constant schedule.
    adam_beta1=0.9,  # beta1 = 0.9.
    adam_beta2=0.98,  # beta2 = 0.98.
    adam_epsilon=1e-8,  # epsilon = 1e-8.
    label_smoothing=0.1,  # label_smoothing(epsilon=0.1).
    rdrop_alpha=0.0,  # The reference trains one pass per batch.
    loss_denominator_epsilon=0.0,  # Σ loss·istarget / Σ istarget.
    train_steps=None,  # Length given in epochs.
    train_epochs=20,  # num_epochs = 20.
    checkpoint_every_steps=1703,  # One epoch (~1,703 batches; §1.9).
    keep_checkpoints=20,  # Not in hyperparams.py: every epoch kept.
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
    decode_extra_length=10,  # Capped at maxlen = 10 by the PE table.
    average_checkpoints=1,  # Evaluate the last checkpoint.
)
