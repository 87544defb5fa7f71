"""Which Keras backend runs, and a clear refusal where only TensorFlow will do.

The layers, models, losses, schedules and searches run on every Keras
backend. Training (`tf.distribute`), the SavedModel and CTranslate2 exports
and the TF1 checkpoint import are TensorFlow programs: they call
`require_tensorflow_backend` when imported, so that a user who set another
backend gets one line that says what to set, not a traceback from deep in
TensorFlow.
"""

import keras

__all__ = ["is_tensorflow", "require_tensorflow_backend"]


def is_tensorflow():
    """Whether Keras runs on TensorFlow.

    Returns:
      True when `keras.config.backend()` is "tensorflow".
    """
    return keras.config.backend() == "tensorflow"


def require_tensorflow_backend(component):
    """Refuses to go on under a Keras backend other than TensorFlow.

    Args:
      component: what needs TensorFlow, as the user knows it (a module or
        program name); it starts the error message.

    Raises:
      RuntimeError: naming `component`, the backend Keras is set to, and how
        to choose TensorFlow.
    """
    backend = keras.config.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            f"{component} runs on Keras's TensorFlow backend only, and Keras "
            f"is set to {backend!r}: set KERAS_BACKEND=tensorflow (the "
            "layers, models, losses and searches run on every backend)"
        )
