"""Stopping a training run: on SIGTERM (preemption) and on a non-finite loss.

- `StopRequest`: a context manager that turns SIGTERM into a flag the loop
  reads after each step (it then saves and raises `TrainingPreempted`).
- `TrainingPreempted`: training stopped on SIGTERM after saving a
  checkpoint; `train.py` exits with 143 (128 + SIGTERM).
- `NonFiniteLossError`: the loss (or the weights) became NaN or infinite;
  nothing was saved after it.
"""

import signal
import threading

from absl import logging

__all__ = ["NonFiniteLossError", "TrainingPreempted", "StopRequest"]


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss (or weights).

    Args:
        step: int. The step (1-based) whose loss was not finite.
        what: str. What was not finite, e.g. `"loss"` or `"weights"`.
        last_checkpoint: str or None. The last (good) checkpoint kept.

    Attributes:
        step: int. The step (1-based) whose loss was not finite.
        last_checkpoint: str or None. The last (good) checkpoint kept.
    """

    def __init__(self, step, what, last_checkpoint):
        """The message names the step, what was not finite, the checkpoint
        kept and what to change."""
        self.step = step
        self.last_checkpoint = last_checkpoint
        kept = (f"The last good checkpoint, {last_checkpoint}, is kept"
                if last_checkpoint else "No checkpoint had been saved yet")
        super().__init__(
            f"Training stopped: non-finite {what} at step {step}. Nothing was "
            f"saved after it. {kept}. Lower the learning rate (e.g. "
            "--hparams_overrides=learning_rate_scale=0.5), or use float32 "
            "when --mixed_precision was on, then resume."
        )


class TrainingPreempted(RuntimeError):
    """Training stopped on SIGTERM after saving a checkpoint.

    Args:
        step: int. The step training stopped (and saved) at.
        checkpoint: str or None. The checkpoint saved there (None on a
            worker other than the chief).

    Attributes:
        step: int. The step training stopped (and saved) at.
        checkpoint: str or None. The checkpoint saved there.
    """

    def __init__(self, step, checkpoint):
        """The message names the step, the checkpoint and how to resume."""
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(
            f"Training stopped on SIGTERM at step {step} and saved "
            f"{checkpoint or 'a checkpoint (on the chief)'}. Run the same "
            "command again to resume from it.")


class StopRequest:
    """Sets a flag on SIGTERM while training runs (main thread only).

    The previous handler comes back on exit. Outside the main thread (where
    Python allows no signal handlers) it only serves as a flag that stays
    False.

    Attributes:
        requested: bool. Whether SIGTERM arrived in the block.
    """

    def __init__(self):
        """`requested` starts False; no handler is installed until the
        block is entered."""
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame):
        del frame
        logging.warning("Received signal %d: stopping after this step and "
                        "saving a checkpoint.", signum)
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        return False
