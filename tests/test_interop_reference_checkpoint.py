"""Importing checkpoints of the referenced TF1 code (tfattn/
reference_checkpoint.py).

The checkpoints are written here the way the referenced code writes them:
tf.compat.v1 variables created under its scopes in a TF1 graph, so that the
names come from TF1's own scoping rules (`tf.layers`-style uniquified
`dense`, `dense_1`, ...; the 2017 layer norms are plain `tf.Variable`s named
by the name scope, which TF1 uniquifies to `multihead_attention_1` when the
feed-forward re-enters the attention's scope), plus Adam slots and a global
step. The loaded model's logits are compared with the NumPy compositions of
tests/reference_numpy.py fed straight from the checkpoint's arrays, read
by the names docs/reference.md gives (dense = Q, dense_1 = K, dense_2 = V;
beta before gamma).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import tfattn
from tests import bounds
from tests import reference_numpy as ref

V, V_TGT, C, H, F, N, MAXLEN = 13, 11, 8, 2, 16, 2, 10
SOURCE = np.array([[4, 5, 6, 7, 0], [8, 9, 10, 11, 12]], "int32")
TARGET_IN = np.array([[2, 5, 6, 9, 0], [2, 4, 7, 7, 10]], "int32")
v1 = tf.compat.v1


class _ReferenceVariables:
    """Creates the referenced code's variables in the default TF1 graph,
    under its scopes and in its order, with random values (a generator
    seeded by `flavor`)."""

    def __init__(self, flavor):
        self.old = flavor == "reference_2017"
        self.rng = np.random.default_rng(0 if self.old else 1)

    def value(self, shape):
        return (0.4 * self.rng.normal(size=shape)).astype("float32")

    def get(self, name, shape):
        return v1.get_variable(name, initializer=self.value(shape))

    def dense(self, n_in, n_out, kind="dense"):
        with v1.variable_scope(None, default_name=kind):
            self.get(
                "kernel",
                (1, n_in, n_out) if kind == "conv1d" else (n_in, n_out),
            )
            self.get("bias", (n_out,))

    def norm(self):
        with v1.variable_scope("ln"):
            if self.old:
                # G1 `normalize`: tf.Variable(zeros), tf.Variable(ones)
                v1.Variable(self.value((C,)))
                v1.Variable(self.value((C,)))
            else:
                self.get("beta", (C,))
                self.get("gamma", (C,))

    def attention(self, scope):
        with v1.variable_scope(scope):
            for _ in range(3):
                self.dense(C, C)
            self.norm()

    def feed_forward(self, scope):
        with v1.variable_scope(scope):
            self.dense(C, F, "conv1d" if self.old else "dense")
            self.dense(F, C, "conv1d" if self.old else "dense")
            self.norm()

    def stack(self, stack, num_layers):
        """`stack` ("encoder" or "decoder"): its embeddings (2017) and
        `num_layers` blocks."""
        with v1.variable_scope(stack):
            if self.old:
                short = stack[:3]
                with v1.variable_scope(f"{short}_embed"):
                    self.get(
                        "lookup_table",
                        (V if stack == "encoder" else V_TGT, C),
                    )
                with v1.variable_scope(f"{short}_pe"):
                    self.get("lookup_table", (MAXLEN, C))
            for i in range(num_layers):
                with v1.variable_scope(f"num_blocks_{i}"):
                    if stack == "encoder":
                        self.attention("multihead_attention")
                    else:
                        self.attention("self_attention")
                        self.attention("vanilla_attention")
                    self.feed_forward(
                        "multihead_attention"
                        if self.old
                        else "positionwise_feedforward"
                    )

    def model(self, num_layers, extra=None):
        """The whole model, then `extra` ({name: shape}) at the top."""
        if not self.old:
            with v1.variable_scope("shared_weight_matrix"):
                self.get("weight_mat", (V, C))
        for stack in ("encoder", "decoder"):
            self.stack(stack, num_layers)
        if self.old:
            self.dense(C, V_TGT)
        for name, shape in (extra or {}).items():
            self.get(name, shape)


def _write(directory, flavor, num_layers=N, extra=None):
    """A checkpoint as the referenced code's graph names it; returns its
    prefix and {name: array} of the model's variables."""
    graph = tf.Graph()
    with graph.as_default():
        _ReferenceVariables(flavor).model(num_layers, extra)
        model_vars = v1.global_variables()
        # Adam's slots and the global step, as training adds them (the
        # update itself never runs: zero gradients spare building the
        # gradient graph).
        v1.train.AdamOptimizer().apply_gradients(
            [(tf.zeros_like(v), v) for v in model_vars],
            global_step=v1.train.get_or_create_global_step(),
        )
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            values = dict(
                zip([v.op.name for v in model_vars], session.run(model_vars))
            )
            prefix = v1.train.Saver().save(
                session, os.path.join(directory, "model_epoch_1_gs_1")
            )
    return prefix, values


@pytest.fixture(scope="module", params=["reference_2017", "reference_2019"])
def checkpoint(request, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp(request.param))
    prefix, values = _write(directory, request.param)
    return request.param, directory, prefix, values


def _attention(values, scope):
    beta, gamma = (
        ("Variable", "Variable_1")
        if "ln/Variable" in str(list(values))
        else ("beta", "gamma")
    )
    params = {}
    for key, dense in (("q", "dense"), ("k", "dense_1"), ("v", "dense_2")):
        params["w" + key] = values[f"{scope}/{dense}/kernel"]
        params["b" + key] = values[f"{scope}/{dense}/bias"]
    params["beta"] = values[f"{scope}/ln/{beta}"]
    params["gamma"] = values[f"{scope}/ln/{gamma}"]
    return params


def _numpy_logits(flavor, values):
    old = flavor == "reference_2017"
    ln = ("Variable", "Variable_1") if old else ("beta", "gamma")
    kind = "conv1d" if old else "dense"

    def ffn(dense_scope, ln_scope):
        return dict(
            w1=values[f"{dense_scope}/{kind}/kernel"].reshape(C, F),
            b1=values[f"{dense_scope}/{kind}/bias"],
            w2=values[f"{dense_scope}/{kind}_1/kernel"].reshape(F, C),
            b2=values[f"{dense_scope}/{kind}_1/bias"],
            beta=values[f"{ln_scope}/ln/{ln[0]}"],
            gamma=values[f"{ln_scope}/ln/{ln[1]}"],
        )

    params = {"encoder": [], "decoder": []}
    for i in range(N):
        scope = f"encoder/num_blocks_{i}"
        ffn_name = "multihead_attention" if old else "positionwise_feedforward"
        ffn_scope = f"{scope}/{ffn_name}"
        params["encoder"].append(
            dict(
                self=_attention(values, f"{scope}/multihead_attention"),
                ffn=ffn(
                    ffn_scope,
                    f"{scope}/multihead_attention_1" if old else ffn_scope,
                ),
            )
        )
        scope = f"decoder/num_blocks_{i}"
        ffn_name = "multihead_attention" if old else "positionwise_feedforward"
        ffn_scope = f"{scope}/{ffn_name}"
        params["decoder"].append(
            dict(
                self=_attention(values, f"{scope}/self_attention"),
                cross=_attention(values, f"{scope}/vanilla_attention"),
                ffn=ffn(ffn_scope, ffn_scope),
            )
        )
    if not old:
        params["embeddings"] = values["shared_weight_matrix/weight_mat"]
        return ref.transformer_reference_2019(params, SOURCE, TARGET_IN, H)
    params.update(
        source_embeddings=values["encoder/enc_embed/lookup_table"],
        target_embeddings=values["decoder/dec_embed/lookup_table"],
        source_positions=values["encoder/enc_pe/lookup_table"],
        target_positions=values["decoder/dec_pe/lookup_table"],
        output_kernel=values["dense/kernel"],
        output_bias=values["dense/bias"],
    )
    return ref.transformer_reference_2017(params, SOURCE, TARGET_IN, H)


def test_the_written_names_are_the_referenced_codes(checkpoint):
    """TF1's scoping gives the names docs/reference.md describes."""
    flavor, _, _, values = checkpoint
    names = set(values)
    if flavor == "reference_2017":
        assert "encoder/num_blocks_1/multihead_attention/ln/Variable_1" in names
        assert "encoder/num_blocks_1/multihead_attention_1/ln/Variable" in names
        assert (
            "encoder/num_blocks_0/multihead_attention/conv1d_1/kernel" in names
        )
        assert "decoder/num_blocks_0/multihead_attention/ln/Variable" in names
        assert "dense/kernel" in names
    else:
        assert "decoder/num_blocks_1/vanilla_attention/dense_2/bias" in names
        assert "encoder/num_blocks_0/positionwise_feedforward/ln/gamma" in names
    reader = tf.train.load_checkpoint(checkpoint[2])
    stored = reader.get_variable_to_shape_map()
    assert "global_step" in stored and any(
        n.endswith("/Adam_1") for n in stored
    )


def test_loaded_model_equals_the_numpy_reference(checkpoint):
    flavor, directory, prefix, values = checkpoint
    model = tfattn.interop.from_reference_checkpoint(prefix, num_heads=H)
    assert model.flavor == flavor
    assert (model.num_layers, model.num_units, model.ffn_units) == (N, C, F)
    want = _numpy_logits(flavor, values)
    # The encoder's and the decoder's blocks (cross-attention a block of
    # its own) over the longest sequence, then the target vocabulary.
    vocab = V_TGT if flavor == "reference_2017" else V
    terms = bounds.stack_terms(
        N + 2 * N, C, F, max(SOURCE.shape[1], TARGET_IN.shape[1]), vocab
    )
    bounds.assert_close(model((SOURCE, TARGET_IN)), want, terms=terms)
    # A directory reads its latest checkpoint; an explicit flavour agrees.
    again = tfattn.interop.from_reference_checkpoint(
        directory, flavor=flavor, num_heads=H
    )
    for a, b in zip(again.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_other_flavour_and_size_are_refused_by_name(checkpoint):
    flavor, _, prefix, _ = checkpoint
    other = "reference_2019" if flavor == "reference_2017" else "reference_2017"
    with pytest.raises(
        ValueError,
        match=r"`flavor`.*has no .*Received: "
        f"flavor='{other}'",
    ):
        tfattn.interop.from_reference_checkpoint(prefix, flavor=other)
    kwargs = (
        dict(target_vocab_size=V_TGT, max_length=MAXLEN)
        if (flavor == "reference_2017")
        else {}
    )
    for size, pattern in (
        (
            dict(num_units=2 * C),
            r"of another shape \d+: decoder/\S+ "
            r"\([^)]*\) \(the model's \([^)]*16",
        ),
        (dict(num_layers=1), r"not in the model \d+: decoder/num_blocks_1/"),
        (dict(num_layers=3), r"missing \d+: decoder/num_blocks_2/"),
    ):
        model = tfattn.Transformer(
            V,
            **{**dict(num_layers=N, num_units=C), **size},
            num_heads=H,
            ffn_units=F,
            flavor=flavor,
            **kwargs,
        )
        model((SOURCE, TARGET_IN))
        with pytest.raises(ValueError, match=pattern):
            tfattn.interop.load_reference_checkpoint(model, prefix)


def test_left_over_variables_and_bad_paths(tmp_path):
    prefix, _ = _write(
        str(tmp_path),
        "reference_2019",
        num_layers=1,
        extra={"encoder/extra_scale": (C,)},
    )
    with pytest.raises(
        ValueError,
        match=r"not in the model 1: "
        r"encoder/extra_scale",
    ):
        tfattn.interop.from_reference_checkpoint(prefix, num_heads=H)
    with pytest.raises(
        ValueError,
        match=r"`path`.*directory holding one.*"
        "empty",
    ):
        os.makedirs(tmp_path / "empty")
        tfattn.interop.from_reference_checkpoint(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match=r"`path`.*readable TF1 checkpoint"):
        tfattn.interop.from_reference_checkpoint(str(tmp_path / "nothing"))
    with pytest.raises(
        ValueError,
        match=r"`model`.*'reference_2017' or "
        r"'reference_2019'.*flavor='paper'",
    ):
        paper = tfattn.Transformer(
            V, num_layers=1, num_units=C, num_heads=H, ffn_units=F
        )
        paper((SOURCE, TARGET_IN))
        tfattn.interop.load_reference_checkpoint(paper, prefix)


def test_a_checkpoint_of_something_else(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        v1.get_variable("resnet/conv/kernel", initializer=np.ones((3, 3), "f"))
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            prefix = v1.train.Saver().save(session, str(tmp_path / "ckpt"))
    with pytest.raises(
        ValueError,
        match=r"`path`.*shared_weight_matrix/"
        r"weight_mat \(2019\).*resnet/conv",
    ):
        tfattn.interop.from_reference_checkpoint(prefix)
