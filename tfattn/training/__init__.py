"""Training: one custom loop that serves every `tf.distribute` strategy.

`train(hparams, dataset, model_dir, strategy, ...)` trains a model of the
hparams' task in `model_dir` and returns a `TrainResult`; a SIGTERM stops it
with `TrainingPreempted` after a checkpoint, a non-finite loss with
`NonFiniteLossError`. This package hands the names on; the code lives in
its modules:

- `loop`: `train`, `train_prepared`, `TrainResult` (the loop, resume,
  preemption: its docstring says how);
- `step`: `Trainer`, `build_trainer`, `make_train_step` (one step);
- `preparation`: `prepare_training` (every check before a write);
- `run_dir`, `checkpoints`: what a model directory holds;
- `precision`, `memory`, `distribute`, `optimization`, `preemption`.
"""

from tfattn.utils.backend import require_tensorflow_backend

require_tensorflow_backend("tfattn.training")

from tfattn.training.loop import LARGE_FOR_NUMBERS  # noqa: E402
from tfattn.training.loop import SUMMARY_DIRNAME  # noqa: E402
from tfattn.training.loop import TIMED_STEPS  # noqa: E402
from tfattn.training.loop import TIMING_SECONDS  # noqa: E402
from tfattn.training.loop import TrainResult  # noqa: E402
from tfattn.training.loop import train  # noqa: E402
from tfattn.training.loop import train_prepared  # noqa: E402
from tfattn.training.preemption import NonFiniteLossError  # noqa: E402
from tfattn.training.preemption import TrainingPreempted  # noqa: E402
from tfattn.training.step import Trainer  # noqa: E402
from tfattn.training.step import build_trainer  # noqa: E402
from tfattn.training.step import make_train_step  # noqa: E402

__all__ = [
    "TIMED_STEPS",
    "TIMING_SECONDS",
    "LARGE_FOR_NUMBERS",
    "SUMMARY_DIRNAME",
    "TrainResult",
    "train",
    "train_prepared",
    # From their own modules.
    "Trainer",
    "build_trainer",
    "make_train_step",
    "NonFiniteLossError",
    "TrainingPreempted",
]
