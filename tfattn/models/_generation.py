"""What `CausalLM.generate` and `Transformer.generate` share (private): the
checks of the generation settings, and the search compiled once per shape
and setting.

Both models generate in one dialect: `generate(inputs, max_new_tokens,
sampler, stop_token_ids, seed, jit_compile)` checks its arguments, runs the
model's in-graph `search` compiled for the call's (bucketed) shapes and
settings, and returns `(ids, scores)` as NumPy arrays. A compiled function
is kept per key on the model, so later calls with the same buckets and
settings do not trace again (`generate_traces` counts the traces).
"""

import keras

from tfattn.decoding import checked_stop_ids
from tfattn.decoding import samplers as samplers_lib
from tfattn.utils import validation

__all__ = ["GenerationSettings", "checked_settings", "compiled"]


class GenerationSettings:
    """The checked settings of one `generate` call.

    Attributes:
        sampler: `Sampler`.
        stop_ids: int or tuple of ints (`()`: no token ends a row).
        words: int32 NumPy array [2]. The seed's two words.
        jit_compile: bool.
    """

    def __init__(self, sampler, stop_ids, words, jit_compile):
        """Keeps the checked settings."""
        self.sampler = sampler
        self.stop_ids = stop_ids
        self.words = words
        self.jit_compile = jit_compile


def checked_settings(sampler, stop_token_ids, seed, jit_compile, vocab_size,
                     context):
    """Checks `generate`'s common settings.

    Args:
        sampler: a `Sampler` or its name.
        stop_token_ids: int, tuple of ints in [1, vocab_size), or None.
        seed: int in [-2**63, 2**63) (or a scalar int tensor).
        jit_compile: Python bool.
        vocab_size: int. The vocabulary the model emits.
        context: str. The model; prefixes the messages.

    Returns:
        GenerationSettings.

    Raises:
        ValueError: naming the argument that is wrong.
    """
    sampler = samplers_lib.get(sampler)
    stop_ids = checked_stop_ids(stop_token_ids, context, "stop_token_ids",
                                allow_none=True)
    ids = stop_ids if isinstance(stop_ids, tuple) else (stop_ids,)
    if any(not 0 < i < vocab_size for i in ids):
        raise validation.invalid_argument(
            "stop_token_ids", f"ids in [1, {vocab_size}) (0 is padding, "
            "never emitted; the others lie outside the vocabulary, so no "
            "row would stop)", stop_token_ids, context)
    words = samplers_lib.seed_words(seed, context)
    validation.check_bool("jit_compile", jit_compile, context)
    return GenerationSettings(sampler, stop_ids, words, jit_compile)


def compiled(model, search, jit_compile):
    """`search` compiled for one key: a `tf.function` under TensorFlow
    (`jit_compile`: with XLA), `jax.jit` with the weights as arguments
    under JAX, eager otherwise.

    Args:
        model: the Keras model whose variables `search` reads.
        search: callable of tensors -> tensors (traced once per key).
        jit_compile: bool.

    Returns:
        callable with `search`'s signature.
    """
    backend = keras.config.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        function = tf.function(search, jit_compile=jit_compile,
                               autograph=False, reduce_retracing=False)
        # One function per key, each traced once by design: TensorFlow's
        # "frequent retracing" warning counts the traces of all of them
        # (one Python body) and would misread several settings as
        # retracing.
        function._omit_frequent_tracing_warning = True
        return function
    if backend == "jax":
        import jax

        variables = list(model.variables)

        def stateless(values, *args):
            with keras.StatelessScope(
                    state_mapping=list(zip(variables, values))):
                return search(*args)

        jitted = jax.jit(stateless)
        return lambda *args: jitted([v.value for v in variables], *args)
    return search
