"""Length buckets: compiled programs (XLA, `jax.jit`) are made per input
shape, so generation pads lengths up to a few bucket sizes and compiles
once per bucket instead of once per length."""

__all__ = ["MIN_BUCKET", "bucket"]

#: The smallest bucket: shorter lengths all pad to it.
MIN_BUCKET = 8


def bucket(n):
    """The bucket of a length: 0 for 0, else the next power of two >= 8.

    Args:
        n: int >= 0.

    Returns:
        int. Shapes compile once per bucket, not once per length.
    """
    if n <= 0:
        return 0
    size = MIN_BUCKET
    while size < n:
        size *= 2
    return size
