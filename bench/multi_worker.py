"""Two workers against one: MultiWorkerMirroredStrategy on 127.0.0.1.

The parent starts one worker process (no TF_CONFIG: a single local worker)
and then two (a TF_CONFIG cluster on free local ports), each timing the step
`train.py` runs (`tfattn.training.build_trainer`) on the same global batch,
split evenly between the workers. Workers are separate processes by nature,
so unlike the other scripts this one cannot keep everything in one process;
both configurations run back to back from the same parent. Reported: global
target tokens per second and the two-worker / one-worker ratio.

On one machine two workers share its cores (and, with --split_threads, each
gets its share of intra-op threads), so this measures the cost of the
collective all-reduce, not a speed-up: a speed-up needs workers on separate
machines.

    python bench/multi_worker.py
    python bench/multi_worker.py --split_threads
"""

import argparse
import json
import os
import socket
import subprocess
import sys

import _repo  # noqa: F401  (puts the repository root on sys.path)

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def worker(args):
    import keras
    import numpy as np
    import tensorflow as tf

    import hparams
    from tfattn import config
    from tfattn.training import distribute
    from tfattn import training
    from _timing import best_times

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    strategy = distribute.make_strategy("multi_worker_mirrored")
    hp = config.parse_overrides(
        hparams.get("base"),
        f"num_layers={args.layers},num_units={args.units},"
        f"num_heads={args.heads},ffn_units={4 * args.units},max_length=64,"
        f"max_train_length={args.length},vocab_size={args.vocab}",
    )

    def dataset_fn(context):
        rows = args.batch // context.num_input_pipelines
        rng = np.random.default_rng(context.input_pipeline_id)
        ids = rng.integers(4, args.vocab, (3, rows, args.length))
        inputs = {
            "source": ids[0].astype("int32"),
            "target_in": ids[1].astype("int32"),
        }
        return tf.data.Dataset.from_tensors(
            (inputs, ids[2].astype("int32"))
        ).repeat()

    keras.utils.set_random_seed(0)
    step = training.build_trainer(strategy, hp, args.vocab, seed=0).train_step
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    (timing,) = best_times(
        {"step": lambda: step(iterator)[0]},
        args.rounds,
        repeats=args.steps,
        warmup=2,
    ).values()
    print(
        json.dumps(
            {
                "seconds_per_step": timing.seconds,
                "replicas": strategy.num_replicas_in_sync,
            }
        )
    )


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_cluster(args, workers):
    """Starts `workers` worker processes; returns their reports."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cores = os.cpu_count() or 1
    threads = max(1, cores // workers) if args.split_threads else 0
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        f"--threads={threads}",
    ] + [
        f"--{k}={getattr(args, k)}"
        for k in (
            "batch",
            "length",
            "vocab",
            "layers",
            "units",
            "heads",
            "steps",
            "rounds",
        )
    ]
    cluster = {"worker": [f"localhost:{p}" for p in free_ports(workers)]}
    processes = []
    try:
        for index in range(workers):
            env = dict(os.environ, PYTHONPATH=repo)
            env.pop("TF_CONFIG", None)
            if workers > 1:
                env["TF_CONFIG"] = json.dumps(
                    {
                        "cluster": cluster,
                        "task": {"type": "worker", "index": index},
                    }
                )
            processes.append(
                subprocess.Popen(
                    command,
                    cwd=repo,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=3600) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    reports = []
    for process, (out, err) in zip(processes, outputs):
        if process.returncode:
            raise RuntimeError(f"a worker failed:\n{err[-3000:]}")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch", type=int, default=64, help="Global batch (sentences)."
    )
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--split_threads",
        action="store_true",
        help="Give each worker cores / workers threads.",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--threads", type=int, default=0, help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    tokens = args.batch * args.length
    print(
        f"global batch {args.batch} x {args.length}, {args.layers}+"
        f"{args.layers} layers, width {args.units}, vocabulary "
        f"{args.vocab}; {os.cpu_count()} cores; split threads "
        f"{args.split_threads}"
    )
    speeds = {}
    for workers in (1, 2):
        reports = run_cluster(args, workers)
        seconds = max(r["seconds_per_step"] for r in reports)
        speeds[workers] = tokens / seconds
        print(
            f"{workers} worker(s): {1000 * seconds:6.0f} ms/step, "
            f"{speeds[workers]:6.0f} target tokens/s"
        )
    print(f"two workers / one worker: {speeds[2] / speeds[1]:.2f}x")


if __name__ == "__main__":
    main()
