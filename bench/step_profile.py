"""Where a training step spends its time: the TensorFlow profiler's op table.

Captures `--steps` steps with `tf.profiler.experimental` and sums the time of
each TensorFlow op over all executor threads (on a 2-core CPU two ops often
run at once, so the sum exceeds the wall time), per step:

- by op type (`_MklMatMul`, `UnsortedSegmentSum`, ...), and
- by op name with layer numbers folded (`.../block_N/self_attention/...`).

    python bench/step_profile.py  # tfattn training step
    python bench/step_profile.py --model keras-hub  # keras-hub's same model
    python bench/step_profile.py --model train.py --policy mixed_bfloat16
        # train.py's step (model, Adam, loss) for a set, at its batch shape

The models and the step are bench/training.py's (float32 by default,
`--policy mixed_bfloat16` for the 16-bit path). Under XLA (`--jit`) the
step is one compiled op and the table says little: profile without it.
"""

import argparse
import collections
import glob
import os
import re
import tempfile
import time

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

import training as training_bench  # noqa: E402  (bench/training.py)


def op_table(logdir, steps):
    """{op type: ms per step}, {folded op name: ms per step} from an xplane."""
    path = sorted(
        glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb"))
    )[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    by_type, by_name = collections.Counter(), collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" not in name or name.startswith("ExecutorState"):
                    continue
                op, op_type = name.rsplit(":", 1)
                ms = event.duration_ps / 1e9 / steps
                by_type[op_type] += ms
                by_name[re.sub(r"_\d+(?=/|$)", "_N", op)] += ms
    return by_type, by_name


def profile(run, steps):
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(steps):
            run()
        tf.profiler.experimental.stop()
        return op_table(logdir, steps)


def training_run(args):
    if args.model == "train.py":
        import hparams
        from training_floor import tfattn_step  # bench/training_floor.py

        step = tfattn_step(
            hparams.get(args.hparams), args.rows, args.length, args.policy
        )
        return lambda: float(step())
    keras.config.set_dtype_policy(args.policy)
    sizes = argparse.Namespace(
        vocab=args.vocab, length=32, units=256, layers=3, heads=4, batch=64
    )
    build = (
        training_bench.keras_hub_model
        if args.model == "keras-hub"
        else training_bench.tfattn_model
    )
    model = build(sizes)
    inputs, labels = training_bench.batches(sizes, 1)[0]
    model(inputs)
    step = training_bench.make_step(
        model, keras.optimizers.Adam(1e-4), args.jit
    )
    return lambda: float(step(inputs, labels))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        choices=["tfattn", "keras-hub", "train.py"],
        default="tfattn",
    )
    parser.add_argument(
        "--hparams", default="multi30k", help="--model train.py"
    )
    parser.add_argument(
        "--rows", type=int, default=128, help="--model train.py"
    )
    parser.add_argument(
        "--length", type=int, default=32, help="--model train.py"
    )
    parser.add_argument("--policy", default="float32")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    run = training_run(args)
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(args.steps):
        run()
    wall = (time.perf_counter() - start) / args.steps * 1e3
    by_type, by_name = profile(run, args.steps)
    total = sum(by_type.values())
    print(
        f"{args.model} training step, {args.policy}, XLA {args.jit}: "
        f"{wall:.0f} ms "
        f"wall; op time summed over threads {total:.0f} ms per step"
    )
    print("\nms/step  share  op type")
    for op_type, ms in by_type.most_common(args.top):
        print(f"{ms:7.1f}  {100 * ms / total:4.1f}%  {op_type}")
    print("\nms/step  share  op (layer numbers folded)")
    for name, ms in by_name.most_common(args.top):
        print(f"{ms:7.1f}  {100 * ms / total:4.1f}%  {name[-100:]}")


if __name__ == "__main__":
    main()
