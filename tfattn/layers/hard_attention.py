"""`HardAttention`: attention that picks one input, by the maximum of α or
by sampling from it, trained by REINFORCE or straight-through."""

import keras
from keras import ops

from tfattn.utils import validation
from tfattn.layers.attention_base import ScoredAttentionBase
from tfattn.ops.attention import masked_softmax
from tfattn.ops.masking import REFERENCE_MASK_VALUE

__all__ = ["SELECTIONS", "HardAttention"]

SELECTIONS = ("max", "sample")


@keras.saving.register_keras_serializable(package="tfattn")
class HardAttention(ScoredAttentionBase):
    """Hard attention: the output is one value row, v_i, chosen from
    α = softmax(s(k_j, q)) by `selection`: `"max"` takes i = argmax_j α_j,
    `"sample"` draws i ~ α (seeded: the same seed gives the same draws).

    The choice is not differentiable. Two ways to train it:

    - REINFORCE: call with `return_selection=True` to get the chosen index
      and its log-probability log α_i, compute a reward per choice, and
      minimise `tfattn.losses.reinforce_loss(log_prob, reward, baseline)`,
      whose gradient is the REINFORCE estimate of -∇E[reward].
    - `straight_through=True` (with `"sample"`): the Gumbel-softmax
      straight-through estimator. The forward pass outputs the hard choice
      (i = argmax_j (log α_j + g_j), g Gumbel noise: a sample from α); the
      backward pass uses the gradient of the tempered soft weights
      softmax((log α + g) / temperature).

    The scoring functions and their weights are those of `tfattn.Attention`
    (`score`, `units`, the sublayers `key_dense`, `query_dense`,
    `score_dense`, the weight `bilinear_kernel`). A query whose keys are all
    masked gets a zero output and a log-probability of 0.

    Args:
        score: `"dot"`, `"scaled_dot"` (default), `"additive"`, `"bilinear"`.
        selection: `"max"` (default) or `"sample"`.
        units: int or None. Hidden width of the additive score.
        straight_through: bool. Gumbel-softmax straight-through gradients;
            only with `selection="sample"`.
        temperature: float > 0. Temperature of the straight-through soft
            weights. Defaults to `1.0`.
        seed: int or None. Seed of the draws.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`,
            ...).

    Call arguments:
        - query: [B, T_q, D_q], or [B, D_q] for one query per row.
        - keys: [B, T_k, D_k]; values: [B, T_k, D_v] or None (= keys).
        - mask: bool [B, T_k] or broadcastable to [B, T_q, T_k]; True = may
          be chosen.
        - return_attention_scores: bool. Also return α (float32).
        - return_selection: bool. Also return the chosen index (int32) and its
          log-probability log α_index (float32), each [B, T_q] (or [B]).

    Returns:
        The output [B, T_q, D_v] (or [B, D_v]); then α [B, T_q, T_k] if
        asked; then (index, log_prob) if asked.
    """

    context = "HardAttention"

    def __init__(self, score="scaled_dot", selection="max", units=None,
                 straight_through=False, temperature=1.0, seed=None,
                 **kwargs):
        """Checks the arguments (see the class docstring)."""
        super().__init__(score=score, units=units, num_heads=1,
                         causality=False, seed=seed, **kwargs)
        self.selection = validation.check_choice(
            "selection", selection, SELECTIONS, self.context)
        self.straight_through = validation.check_bool(
            "straight_through", straight_through, self.context)
        if straight_through and selection != "sample":
            raise validation.invalid_argument(
                "straight_through", "False with selection='max' (the "
                "straight-through estimator needs sampling: "
                "selection='sample')", straight_through, self.context)
        if (isinstance(temperature, bool)
                or not isinstance(temperature, (int, float))
                or not temperature > 0):
            raise validation.invalid_argument(
                "temperature", "a float > 0", temperature, self.context)
        self.temperature = float(temperature)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, query, keys, values=None, mask=None, training=None,
             return_attention_scores=False, return_selection=False):
        values = self._check_call(query, keys, values, mask)
        keep = self._keep_mask(query, keys, mask)
        single = len(query.shape) == 2
        if single:
            query = query[:, None, :]
        scores = ops.cast(self._scores(query[:, None], keys[:, None])[:, 0],
                          "float32")  # [B, T_q, T_k]
        if keep is not None:
            scores = ops.where(keep, scores, REFERENCE_MASK_VALUE)
        weights = masked_softmax(scores, keep, fully_masked="zero")
        log_weights = ops.log_softmax(scores, axis=-1)
        if self.selection == "max":
            index = ops.argmax(scores, axis=-1)
        else:
            gumbel = -ops.log(-ops.log(keras.random.uniform(
                ops.shape(scores), minval=1e-20, maxval=1.0,
                seed=self.seed_generator)))
            perturbed = log_weights + gumbel
            index = ops.argmax(perturbed, axis=-1)
        index = ops.cast(index, "int32")
        # Exactly the chosen rows [B, T_q, D_v] (a gather, not a product).
        chosen = ops.take_along_axis(values, index[..., None], axis=1)
        one_hot = ops.one_hot(index, ops.shape(scores)[-1], dtype="float32")
        if keep is not None:
            # A query that may see no key chooses nothing: zero output.
            any_key = ops.any(ops.broadcast_to(keep, ops.shape(scores)),
                              axis=-1)
            chosen = ops.where(any_key[..., None], chosen,
                               ops.zeros_like(chosen))
            one_hot = one_hot * ops.cast(any_key[..., None], "float32")
        if self.straight_through:
            soft = ops.softmax(perturbed / self.temperature, axis=-1)
            if keep is not None:
                soft = ops.where(keep, soft, ops.zeros_like(soft))
            # Forward: exactly the chosen row (x - x is exactly 0);
            # backward: the gradient of the soft weights' average.
            surrogate = ops.matmul(ops.cast(soft, values.dtype), values)
            output = chosen + (surrogate - ops.stop_gradient(surrogate))
        else:
            output = chosen
        log_prob = ops.sum(one_hot * log_weights, axis=-1)
        if single:
            output, weights = output[:, 0], weights[:, 0]
            index, log_prob = index[:, 0], log_prob[:, 0]
        results = [output]
        if return_attention_scores:
            results.append(weights)
        if return_selection:
            results += [index, log_prob]
        return results[0] if len(results) == 1 else tuple(results)

    def get_config(self):
        config = super().get_config()
        for name in ("num_heads", "causality"):
            config.pop(name)
        config.update(selection=self.selection,
                      straight_through=self.straight_through,
                      temperature=self.temperature)
        return config
