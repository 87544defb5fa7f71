"""The benches' one timing loop: the best wall time of several callables,
timed round by round in turn, in one process."""

import collections
import math
import time

import keras
import numpy as np

Timing = collections.namedtuple("Timing", ["seconds", "output"])


def fetched(output):
    """`output` with every tensor in it copied to NumPy, so that a clock
    read after this reads the work done, not only the work dispatched."""
    # `.numpy()` where there is one (TensorFlow), not np.asarray: the
    # latter fails on TensorFlow's bfloat16 scalars. JAX and torch arrays
    # go through keras.ops.convert_to_numpy, which waits for the device.
    def to_numpy(t):
        if hasattr(t, "numpy") and not isinstance(t, np.ndarray):
            return t.numpy()
        if keras.ops.is_tensor(t):
            return keras.ops.convert_to_numpy(t)
        return t

    return keras.tree.map_structure(to_numpy, output)


def best_times(functions, rounds, repeats=1, warmup=1):
    """{name: Timing(seconds, output)} for `functions`, a dict of
    zero-argument callables.

    Each is called `warmup` times first (tracing, compiling, caches), then
    `rounds` times round by round in turn, so that a change in the
    machine's load reaches every one alike. One timed sample is `repeats`
    calls in a row (their outputs are fetched, `fetched`, after the last);
    `seconds` is the best sample divided by `repeats`, `output` the last
    call's output, fetched.
    """
    if rounds < 1 or repeats < 1:
        raise ValueError(
            f"rounds and repeats must be at least 1, got {rounds} and {repeats}"
        )
    for function in functions.values():
        for _ in range(warmup):
            fetched(function())
    best = dict.fromkeys(functions, math.inf)
    outputs = {}
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(repeats):
                output = function()
            outputs[name] = fetched(output)
            seconds = (time.perf_counter() - start) / repeats
            best[name] = min(best[name], seconds)
    return {name: Timing(best[name], outputs[name]) for name in functions}


def run_train_steps(train_step, iterator, steps):
    """(target tokens, last loss) of `steps` calls of a trainer's
    `train_step(iterator)`, which returns (loss, token count, ...)."""
    tokens = 0.0
    for _ in range(steps):
        loss, count = train_step(iterator)[:2]
        tokens += float(count)
    return tokens, loss
