"""Small combinatorics for search spaces."""

from __future__ import annotations

from collections.abc import Sequence

from palm.feasibility import divisors

__all__ = ["divisors", "lehmer_to_permutation", "permutation_to_lehmer", "factorizations"]


def lehmer_to_permutation(code: Sequence[int]) -> list[int]:
    """The permutation whose Lehmer code is ``code`` (digit ``i`` in ``0 .. n-1-i`` picks the
    ``code[i]``-th smallest unused element). Changing a late digit moves few elements, so
    nearby codes are nearby permutations (Laisant 1888; Knuth TAOCP vol. 2, 3.3.2)."""
    n = len(code)
    free = list(range(n))
    out = []
    for i, digit in enumerate(code):
        if not 0 <= digit < n - i:
            raise ValueError(f"Lehmer digit {i} = {digit} not in 0..{n - 1 - i}")
        out.append(free.pop(digit))
    return out


def permutation_to_lehmer(perm: Sequence[int]) -> list[int]:
    """Inverse of :func:`lehmer_to_permutation`."""
    free = sorted(perm)
    code = []
    for x in perm:
        i = free.index(x)
        code.append(i)
        free.pop(i)
    return code


def factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """All ordered ways of writing ``n`` as a product of ``parts`` positive factors."""
    if parts == 1:
        return [(n,)]
    return [(d, *rest) for d in divisors(n) for rest in factorizations(n // d, parts - 1)]
