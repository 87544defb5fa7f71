"""Seeds for sublayers: one per random sublayer, all from the model's.

A Keras `SeedGenerator` built from an int seed starts from that seed, so
sublayers handed the same int draw the same numbers: every dropout of a
model built with `seed=0` would then drop the same positions and channels
at every site and step, which is one mask, not many. A layer that owns
random sublayers therefore gives each its own seed, derived from its own
seed and the sublayer's name: distinct streams, and the same ones every
time the model is built with that seed.
"""

import hashlib

__all__ = ["sublayer_seed"]

_SEED_BITS = 31  # Keras and TensorFlow take seeds as int32-range ints.


def sublayer_seed(seed, name):
    """The seed of sublayer `name` of a layer whose seed is `seed`.

    Args:
        seed: int or None. The owning layer's seed.
        name: str. The sublayer's name, unique within its owner.

    Returns:
        None for `seed=None` (each sublayer then draws a random seed of
        its own), else an int in [0, 2^31): a hash of `seed` and `name`,
        the same in every process.
    """
    if seed is None:
        return None
    digest = hashlib.sha256(f"{int(seed)}/{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (1 << _SEED_BITS)
