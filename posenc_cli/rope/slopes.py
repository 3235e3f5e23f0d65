"""ALiBi head slopes as plain Python floats (stdlib only, so ``posenc pick`` can quote them without numpy).

``encodings.alibi_slopes`` wraps this list in an array; there is one recipe in posenc and it lives here.
"""

from __future__ import annotations

from posenc_cli.errors import PosencError

#: Attention heads accepted wherever slopes are quoted (posenc pick --heads): shipped models have at most 128, and
#: pick prints one slope per head, so a bound keeps the answer readable.
MAX_HEADS = 4096


def alibi_slope_list(n_heads: int) -> list[float]:
    """Official ALiBi slopes (Press et al. 2022, ``get_slopes``) for any head count, in head order.

    With ``c = 2**floor(log2(n_heads))``: slopes ``2**(-8h/c)`` for ``h = 1..c``, then, for heads beyond ``c``,
    the odd-numbered entries of the ``2c`` list, ``2**(-4(2j-1)/c)`` for ``j = 1..n_heads-c``. Not sorted.
    """
    if isinstance(n_heads, bool) or int(n_heads) != n_heads or n_heads < 1:
        raise PosencError(f"n_heads must be a positive integer, got {n_heads!r}")
    n = int(n_heads)
    c = 1 << (n.bit_length() - 1)
    first = [2.0 ** (-8.0 * h / c) for h in range(1, c + 1)]
    extra = [2.0 ** (-4.0 * (2 * j - 1) / c) for j in range(1, n - c + 1)]
    return first + extra
