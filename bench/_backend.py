"""What the benches need per Keras backend: a compiled gradient step of a
layer, a compiled matmul, and running a script once per backend.

A bench compares tfattn with a peer inside one process, so both run on the
same backend; `--backends=tensorflow,jax` runs the whole script once per
backend (a child process each, since Keras's backend is fixed when it is
imported) and prints each child's table under its backend's name.
"""

import os
import subprocess
import sys

import keras
import numpy as np


def backend():
    """The Keras backend this process runs."""
    return keras.config.backend()


def run_per_backend(backends):
    """Runs this script again once per backend named in `backends` (a comma
    list), each child with KERAS_BACKEND set and `--backends` dropped, and
    returns True; returns False when `backends` is empty or only this
    process's own backend (the caller then runs the bench itself)."""
    names = [b for b in backends.split(",") if b]
    if not names or names == [backend()]:
        return False
    argv = [a for a in sys.argv if not a.startswith("--backends")]
    for name in names:
        print(f"== backend: {name}", flush=True)
        done = subprocess.run([sys.executable] + argv,
                              env=dict(os.environ, KERAS_BACKEND=name))
        if done.returncode:
            print(f"backend {name}: exit status {done.returncode}")
    return True


def loss_and_grad_step(layer, call, x):
    """A compiled step: loss = Σ call(layer, x)² in float32, its gradient
    with respect to the layer's trainable weights and x; returns a
    zero-argument callable giving (loss, gradients).

    TensorFlow: `tf.function` and a GradientTape. JAX: `jax.jit` of
    `jax.value_and_grad` over `layer.stateless_call`. torch: eager autograd.
    """
    name = backend()
    if name == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=False)
        def tf_step():
            with tf.GradientTape() as tape:
                y = call(layer, x)
                loss = tf.reduce_sum(tf.cast(y, "float32") ** 2)
            return loss, tape.gradient(loss, layer.trainable_variables + [x])

        return tf_step
    if name == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        frozen = [v.value for v in layer.non_trainable_variables]

        def loss_fn(weights, inputs):
            def stateless(lyr, xx):
                y, _ = lyr.stateless_call(weights, frozen, *xx[0], **xx[1])
                return y

            y = call(_Stateless(layer, stateless), inputs)
            return keras.ops.sum(keras.ops.cast(y, "float32") ** 2)

        compiled = jax.jit(jax.value_and_grad(loss_fn, argnums=(0, 1)))
        x_value = x.value if hasattr(x, "value") else x
        return lambda: compiled(trainable, x_value)
    if name == "torch":
        import torch

        def torch_step():
            x.value.requires_grad_(True)
            y = call(layer, x.value)
            loss = keras.ops.sum(keras.ops.cast(y, "float32") ** 2)
            params = [v.value for v in layer.trainable_variables]
            grads = torch.autograd.grad(loss, params + [x.value])
            return loss.detach(), grads

        return torch_step
    raise ValueError(f"no gradient step for the {name!r} backend")


class _Stateless:
    """Stands for a layer inside a JAX trace: calling it calls the layer's
    `stateless_call` with the traced weights."""

    def __init__(self, layer, stateless):
        self._layer, self._stateless = layer, stateless

    def __call__(self, *args, **kwargs):
        return self._stateless(self._layer, (args, kwargs))


def matmul_step(size, dtype):
    """A compiled [size, size] @ [size, size] product of standard normals in
    `dtype`: the process's matmul rate, the ceiling the benches quote."""
    a = keras.ops.cast(
        keras.ops.convert_to_tensor(
            np.random.default_rng(1).normal(size=(size, size)), "float32"),
        dtype)
    name = backend()
    if name == "tensorflow":
        import tensorflow as tf

        product = tf.function(lambda: (tf.matmul(a, a),))
        return product
    if name == "jax":
        import jax

        product = jax.jit(lambda m: (m @ m,))
        return lambda: product(a)
    return lambda: (keras.ops.matmul(a, a),)


def variable(array):
    """`array` as a value the step can differentiate: a tf.Variable under
    TensorFlow (the tape watches it), a Keras variable elsewhere."""
    if backend() == "tensorflow":
        import tensorflow as tf

        return tf.Variable(array)
    return keras.Variable(array, trainable=False)


def compiled(function, owner):
    """`function(*arrays)` compiled for the backend, reading the weights of
    `owner` (a layer or model, or a list of Keras variables):
    `tf.function(jit_compile=True)` on TensorFlow; on JAX `jax.jit` with
    the weights passed in as arguments through a `keras.StatelessScope`
    (closing over them would fold every weight into the program as a
    constant); eager elsewhere."""
    name = backend()
    if name == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True)
    if name == "jax":
        import jax

        variables = list(getattr(owner, "variables", owner))

        def pure(values, *arrays):
            with keras.StatelessScope(
                    state_mapping=list(zip(variables, values))):
                return function(*arrays)

        jitted = jax.jit(pure)
        return lambda *arrays: jitted([v.value for v in variables], *arrays)
    return function
