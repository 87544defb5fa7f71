"""Adam's update, alone: tfattn's fused kernel against Keras's Adam.

Both optimizers in one process update the trainable variables of a set's
model (the multi30k set's 173 variables, 2.35M parameters, by default)
with the same fixed gradients, one `apply_gradients` per call inside a
`tf.function`; best of `--rounds` rounds of `--repeats` calls. Checks
first that three updates leave the two models' weights equal.

    python bench/adam.py
    python bench/adam.py --hparams=base
"""

import argparse
import os

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hparams  # noqa: E402
from tfattn.optimization import Adam  # noqa: E402
from tfattn.run_dir import build_model  # noqa: E402
from _timing import best_times  # noqa: E402


def updater(optimizer_class, hp, gradients):
    """(model, apply): a fresh model and a `tf.function` applying
    `gradients` to it with a new `optimizer_class`."""
    model = build_model(hp, hp.vocab_size)
    optimizer = optimizer_class(
        learning_rate=1e-3,
        beta_1=hp.adam_beta1,
        beta_2=hp.adam_beta2,
        epsilon=hp.adam_epsilon,
    )
    optimizer.build(model.trainable_variables)

    @tf.function
    def apply():
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return optimizer.iterations

    return model, apply


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", default="multi30k")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    hp = hparams.get(args.hparams)
    template = build_model(hp, hp.vocab_size)
    start = template.get_weights()
    shapes = [v.shape for v in template.trainable_variables]
    rng = np.random.default_rng(0)
    gradients = [
        tf.constant(rng.normal(size=shape).astype("float32") * 1e-2)
        for shape in shapes
    ]
    models, steps = {}, {}
    for name, optimizer_class in (
        ("tfattn", Adam),
        ("keras", keras.optimizers.Adam),
    ):
        models[name], steps[name] = updater(optimizer_class, hp, gradients)
        models[name].set_weights(start)
    for _ in range(3):
        for step in steps.values():
            step()
    for ours, theirs in zip(
        models["tfattn"].trainable_variables,
        models["keras"].trainable_variables,
    ):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=1e-6)
    timings = best_times(steps, args.rounds, repeats=args.repeats, warmup=0)
    best = {name: t.seconds for name, t in timings.items()}
    count = sum(int(np.prod(shape)) for shape in shapes)
    print(
        f"Adam on the {args.hparams} set's {len(shapes)} variables "
        f"({count:,} parameters); best of {args.rounds} rounds x "
        f"{args.repeats}; weights equal after 3 updates"
    )
    for name in steps:
        print(
            f"{name:7} {best[name] * 1e3:7.2f} ms   "
            f"{best[name] / best['tfattn']:.2f}x tfattn's time"
        )


if __name__ == "__main__":
    main()
