"""`PositionalEncoding`: sinusoid (paper / 2017 variant / Marian's halves)
or learned positions."""

import numbers

import keras
import numpy as np
from keras import ops

from tfattn.layers.initializers import initializer_arguments
from tfattn.ops import _backend
from tfattn.utils import validation

__all__ = ["KINDS", "PADDING_MODES", "PositionalEncoding",
           "sinusoid_2017_table", "sinusoid_halves_table", "sinusoid_table"]

KINDS = ("sinusoid", "sinusoid_2017", "learned", "sinusoid_halves")
PADDING_MODES = (None, "reference_2019", "reference_2017")

_CONTEXT = "PositionalEncoding"


def sinusoid_table(max_length, num_units):
    """The paper's sinusoid table [max_length, C], float32
    (docs/reference.md §2.3).

    angle(pos, j) = pos / 10000^((j - j mod 2) / C); even j -> sin, odd j ->
    cos. Computed in float64, returned as float32.

    Args:
        max_length: int. Number of positions (rows).
        num_units: int. Width C (columns).

    Returns:
        np.ndarray [max_length, C], float32.
    """
    pos = np.arange(max_length, dtype=np.float64)[:, None]
    j = np.arange(num_units)
    angle = pos / np.power(10000.0, (j - j % 2) / float(num_units))
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def sinusoid_2017_table(max_length, num_units):
    """The 2017 code's final sinusoid table (docs/reference.md §1.3, a6f2fc3).

    angle(pos, j) = pos / 10000^(2·j / C): the exponent uses 2·j, not the
    paper's 2·floor(j/2), so frequencies fall twice as fast and an odd column
    does not share the frequency of the even column before it.

    Args:
        max_length: int. Number of positions (rows).
        num_units: int. Width C (columns).

    Returns:
        np.ndarray [max_length, C], float32.
    """
    pos = np.arange(max_length, dtype=np.float64)[:, None]
    j = np.arange(num_units)
    angle = pos / np.power(10000.0, 2.0 * j / float(num_units))
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle)).astype(np.float32)


def sinusoid_halves_table(max_length, num_units):
    """Marian's sinusoid table [max_length, C], float32: the paper's
    frequencies, sines in the first half of the channels and cosines in the
    second (not interleaved).

    Follows `MarianSinusoidalPositionalEmbedding._init_weight` of Hugging
    Face transformers (modeling_marian.py): angle(pos, j) = pos /
    10000^(2·floor(j/2)/C); columns [0, ceil(C/2)) hold sin of the even
    j's angles, columns [ceil(C/2), C) cos of the odd j's. Computed in
    float64, returned as float32 (as torch.FloatTensor casts it).

    Args:
        max_length: int. Number of positions (rows).
        num_units: int. Width C (columns).

    Returns:
        np.ndarray [max_length, C], float32.
    """
    pos = np.arange(max_length, dtype=np.float64)[:, None]
    j = np.arange(num_units)
    angle = pos / np.power(10000.0, 2.0 * (j // 2) / float(num_units))
    return np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])],
                          axis=1).astype(np.float32)


_TABLES = {"sinusoid": sinusoid_table, "sinusoid_2017": sinusoid_2017_table,
           "sinusoid_halves": sinusoid_halves_table}


@keras.saving.register_keras_serializable(package="tfattn")
class PositionalEncoding(keras.layers.Layer):
    """Adds positional information to embeddings, as the paper or a reference.

    Shapes: B = batch, T = length, C = width of the inputs, L = `max_length`.

    Kinds:

    - `"sinusoid"`: the paper's table, sin/cos of pos / 10000^(2·floor(j/2)/C).
      This is also the 2019 reference's `positional_encoding` (§2.3).
    - `"sinusoid_2017"`: the 2017 code's final sinusoid option (§1.3), whose
      exponent is 2·j/C. **It deviates from the paper** (frequencies fall
      twice as fast); use it only to reproduce that code.
    - `"sinusoid_halves"`: Marian's (OPUS-MT's) table: the paper's
      frequencies with all sines in the first half of the channels and all
      cosines in the second (`sinusoid_halves_table`).
    - `"learned"`: the 2017 code's default (§1.3): a trainable [L, C] table,
      Glorot-uniform, weight `embeddings`.

    Sinusoid tables are computed in NumPy at build time (float32) and kept as
    a constant, not as a weight: they are rebuilt from the config when a
    `.keras` file is loaded, so the file does not store them.

    Padding modes (what happens at pad positions):

    - `None`: nothing; every position gets its encoding.
    - `"reference_2019"` (§2.3, `masking=True`): element-wise, wherever
      `x == 0.0` the encoding element is replaced by 0, so all-zero pad rows
      stay zero. (A real token with an embedding element exactly 0.0 also
      loses that element, as in the reference.)
    - `"reference_2017"` (§1.7 G1b steps 2-4): m = sign(Σ_c abs(x)) per
      position, computed before adding; the output is (x + PE) · m, so rows
      that were all zero stay zero.

    Keras masks pass through unchanged.

    Cached decoding: `start_index` offsets the positions, so a decoder fed one
    token at a time calls the layer with `start_index=t`. It may be a scalar
    int tensor; the rows are gathered at `start_index + range(T)`, with a
    static shape when T is static, so one XLA compilation serves every
    `start_index`. Too-long inputs raise a `ValueError` when T and
    `start_index` are known while tracing (eagerly, on every backend). On
    TensorFlow they fail a `tf.debugging` assertion otherwise; XLA drops
    assertions: under `jit_compile` an out-of-range position is not
    reported and its encoding is undefined. The other backends have no
    in-graph assertion: a `start_index` known only inside a compiled
    function (a JAX tracer) is not checked, and its positions are clipped
    to [0, max_length - 1] (an out-of-range position reads the last row).

    One start per row: `start_index` may be an int tensor [B] (prompts of
    different lengths, left-padded, in `CausalLM.generate`); row b then
    adds the rows at `start_index[b] + range(T)`, clipped to
    [0, max_length - 1] and not checked (positions below 0 are left padding
    the caller masks).

    Args:
        kind: one of `"sinusoid"`, `"sinusoid_2017"`, `"learned"`,
            `"sinusoid_halves"`. Defaults to `"sinusoid"`.
        max_length: int. Number of positions L in the table; inputs need
            `start_index + T <= max_length`. Defaults to `512`.
        padding_mode: one of `None`, `"reference_2019"`, `"reference_2017"`.
            Defaults to `None`.
        embeddings_initializer: a Keras initializer of the `"learned"`
            table [max_length, C] (the sinusoids have none). Defaults to
            `"glorot_uniform"`; BERT's is
            `keras.initializers.TruncatedNormal(stddev=0.02)`.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        - x: float tensor [B, T, C], usually the scaled token embeddings.
        - start_index: int or scalar int tensor, the position of `x[:, 0]`,
          or an int tensor [B], one such position per row. Defaults to `0`.

    Returns:
        x + PE[start_index : start_index + T], [B, T, C] (with the padding
        mode applied).

    Example::

        pe = tfattn.layers.PositionalEncoding(max_length=64,
                                              padding_mode="reference_2019")
        y = pe(embeddings)                       # [B, T, C]
        step = pe(next_embedding, start_index=t)  # [B, 1, C], position t
    """

    def __init__(self, kind="sinusoid", max_length=512, padding_mode=None,
                 embeddings_initializer="glorot_uniform", **kwargs):
        """Checks the arguments; the table is made when built."""
        kind = validation.check_choice("kind", kind, KINDS, _CONTEXT)
        initializer = initializer_arguments(
            _CONTEXT, embeddings_initializer=embeddings_initializer)[
                "embeddings_initializer"]
        max_length = validation.check_positive_int(
            "max_length", max_length, _CONTEXT
        )
        padding_mode = validation.check_choice(
            "padding_mode", padding_mode, PADDING_MODES, _CONTEXT
        )
        super().__init__(**kwargs)
        self.kind = kind
        self.max_length = max_length
        self.padding_mode = padding_mode
        self.embeddings_initializer = initializer
        self.supports_masking = True

    def build(self, x_shape, start_index_shape=None):
        shape = validation.check_rank("x", x_shape, 3, "[B, T, C]", _CONTEXT)
        num_units = shape[-1]
        if num_units is None:
            raise validation.invalid_argument(
                "x",
                "a tensor of shape [B, T, C] with a known width C",
                f"<tensor of shape {shape}>",
                _CONTEXT,
            )
        self.num_units = num_units
        if self.kind == "learned":
            self.embeddings = self.add_weight(
                name="embeddings",
                shape=(self.max_length, num_units),
                initializer=self.embeddings_initializer,
                trainable=True,
            )
        else:
            self._table = _constant(
                _TABLES[self.kind](self.max_length, num_units))
        self.built = True

    def table(self):
        """The built layer's positional table.

        Returns:
            np.ndarray [max_length, C], float32: row t is what position t
            adds (before any padding mode).
        """
        table = self._table if self.kind != "learned" else self.embeddings
        return np.asarray(ops.convert_to_numpy(table), np.float32)

    def call(self, x, start_index=0):
        shape = validation.check_rank("x", x, 3, "[B, T, C]", _CONTEXT)
        if shape[-1] is not None and shape[-1] != self.num_units:
            raise validation.invalid_argument(
                "x",
                f"a tensor of width C={self.num_units} (the width the layer "
                "was built for)",
                f"<tensor of shape {shape}>",
                _CONTEXT,
            )
        start = self._check_start_index(start_index)
        if isinstance(start, int) or len(start.shape) == 0:
            pe = ops.cast(self._rows(x, shape, start), x.dtype)[None]
        else:
            pe = ops.cast(self._rows_per_row(x, start), x.dtype)  # [B, T, C]

        if self.padding_mode == "reference_2019":
            return x + ops.where(ops.equal(x, 0), ops.zeros((), x.dtype), pe)
        if self.padding_mode == "reference_2017":
            # [B, T, 1]
            keep = ops.sign(ops.sum(ops.abs(x), axis=-1, keepdims=True))
            return (x + pe) * keep
        return x + pe

    def _rows(self, x, shape, start):
        """The table's rows [T, C] at positions start + range(T)."""
        table = self._table if self.kind != "learned" else self.embeddings
        # A gather, not a slice: XLA treats a slice's start as a compile-time
        # constant (one compilation per decoding step), a gather's indices not.
        if not _backend.is_tensorflow():
            length = ops.shape(x)[1]
            self._check_length(shape, length, start)
            positions = start + ops.arange(length, dtype="int32")  # [T]
            if not isinstance(start, int):  # a tracer went unchecked
                positions = ops.clip(positions, 0, self.max_length - 1)
            return ops.take(table, positions, axis=0)
        tf = _backend.tensorflow()
        length = shape[1] if shape[1] is not None else tf.shape(x)[1]
        checks = self._check_length(shape, length, start)
        with tf.control_dependencies(checks):  # the checks run first
            positions = start + tf.range(length, dtype="int32")  # [T]
        return tf.gather(tf.convert_to_tensor(table), positions)  # [T, C]

    def _rows_per_row(self, x, start):
        """The table's rows [B, T, C] at positions start[b] + range(T),
        clipped to the table (the caller checks the lengths: positions
        below 0 are left padding, masked by the model)."""
        table = self._table if self.kind != "learned" else self.embeddings
        positions = start[:, None] + ops.arange(ops.shape(x)[1],
                                                dtype="int32")[None, :]
        positions = ops.clip(positions, 0, self.max_length - 1)
        return ops.take(ops.convert_to_tensor(table), positions, axis=0)

    def _check_start_index(self, start_index):
        """Returns a Python int, or a scalar int32 tensor."""
        if isinstance(start_index, numbers.Integral) and not isinstance(
            start_index, bool
        ):
            if start_index < 0:
                raise validation.invalid_argument(
                    "start_index", "an integer >= 0", start_index, _CONTEXT
                )
            return int(start_index)
        if isinstance(start_index, (bool, float, str)) or start_index is None:
            raise validation.invalid_argument(
                "start_index",
                "an integer >= 0 or a scalar integer tensor",
                start_index,
                _CONTEXT,
            )
        tensor = ops.convert_to_tensor(start_index)
        dtype = keras.backend.standardize_dtype(tensor.dtype)
        if "int" not in dtype or len(tensor.shape) > 1:
            raise validation.invalid_argument(
                "start_index",
                "an integer >= 0, a scalar integer tensor or one start per "
                "row (an integer tensor [B])",
                f"<tensor of dtype {dtype} and shape {tuple(tensor.shape)}>",
                _CONTEXT,
            )
        return ops.cast(tensor, "int32")

    def _check_length(self, shape, length, start):
        """Raises for static overflows; returns TensorFlow's runtime
        assertions (none on the other backends)."""
        dynamic = not isinstance(start, int)
        static_start = 0 if dynamic else start
        if isinstance(length, int) and length + static_start > self.max_length:
            raise ValueError(
                self._too_long_message(length, static_start, dynamic)
                + f" Received: x=<tensor of shape {shape}>"
            )
        if isinstance(length, int) and not dynamic:
            return []
        if not _backend.is_tensorflow():
            self._check_known_start(shape, length, start)
            return []
        if not _backend.asserts_run():
            return []
        tf = _backend.tensorflow()
        needed = tf.cast(length, "int32") + start
        non_negative = tf.debugging.assert_non_negative(
            start,
            message=f"{_CONTEXT}: Received an invalid value for argument "
            "`start_index`, expected an integer >= 0.",
        )
        fits = tf.debugging.Assert(
            needed <= self.max_length,
            [
                self._too_long_message(None, None, True),
                "sequence length:",
                length,
                "start_index:",
                start,
                "positions needed (start_index + length):",
                needed,
            ],
        )
        return [op for op in (non_negative, fits) if op is not None]

    def _check_known_start(self, shape, length, start):
        """Raises as for a Python int when the tensor `start` has a value
        known while tracing (eager JAX or PyTorch); a tracer passes."""
        value = _backend.static_value(start)
        if value is None:
            return
        value = int(value)
        if value < 0:
            raise validation.invalid_argument(
                "start_index", "an integer >= 0", value, _CONTEXT)
        if length + value > self.max_length:
            raise ValueError(
                self._too_long_message(length, value, False)
                + f" Received: x=<tensor of shape {shape}>"
            )

    def _too_long_message(self, length, start, dynamic_start):
        if length is None:
            received = (
                "received a sequence whose start_index + length exceeds it "
                "(values below)"
            )
            fix = (
                f"construct {_CONTEXT}(max_length=>=start_index + length) "
                "to encode it"
            )
        else:
            received = f"received a sequence of length {length}"
            if start or dynamic_start:
                where = ("start_index" if dynamic_start
                         else f"start_index={start}")
                received += f" starting at {where}"
            fix = (
                f"construct {_CONTEXT}(max_length=>={length + start}) to "
                "encode it"
            )
        return (
            f"{_CONTEXT}: Received an invalid value for argument `x`, expected "
            f"a sequence that fits the positional table: the positional table "
            f"holds max_length={self.max_length} positions; {received}. Pass "
            f"a larger `max_length`: {fix}."
        )

    def compute_output_shape(self, x_shape, start_index_shape=None):
        return tuple(x_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            kind=self.kind,
            max_length=self.max_length,
            padding_mode=self.padding_mode,
            embeddings_initializer=keras.initializers.serialize(
                self.embeddings_initializer),
        )
        return config


def _constant(table):
    """The NumPy `table` as a constant of the backend (not a weight).

    On TensorFlow an eager tensor: `init_scope` lifts it out of any graph
    being traced, and the graphs that use it capture it. Elsewhere the
    NumPy array itself: Keras may build the layer inside a `jax.jit` trace
    (the first `fit` step), and a tensor made there would leak the tracer.
    """
    if not _backend.is_tensorflow():
        return np.asarray(table, np.float32)
    tf = _backend.tensorflow()
    with tf.init_scope():
        return tf.constant(table)
