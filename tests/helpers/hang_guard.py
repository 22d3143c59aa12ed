"""Hang guards for the verifier's regexes that hold on a slow or loaded machine: the time on a megabyte input is
compared with the time on a quarter of it. A linear rule takes ~4x as long on the whole; a quadratic one 16x, and
a catastrophic one never finishes. A fixed budget (the earlier `< 5 s`) failed a linear rule on a loaded CI machine
(5.3 s), and a budget loose enough for every machine would let a cubic rule on a short input through."""

from __future__ import annotations

import time
from collections.abc import Callable

FLOOR_S = 2.0  # below this the input is handled fast on any machine seen: no need to time a quarter of it
CEILING_S = 60.0  # no rule may take this long on a megabyte, however loaded the machine
GROWTH = 10.0  # whole vs quarter: linear ~4, quadratic ~16 (room for a 2.5x swing in load between the two)


def timed(run: Callable[[str], object], text: str) -> tuple[object, float]:
    started = time.perf_counter()
    result = run(text)
    return result, time.perf_counter() - started


def assert_linear(run: Callable[[str], object], build: Callable[[int], str], n: int = 1_000_000) -> object:
    """`run(build(n))`'s result, after checking its time grows at most linearly in n (see the module's note)."""
    text = build(n)
    result, whole = timed(run, text)
    label = repr(text[:40])
    assert whole < CEILING_S, f"{label}: {whole:.1f} s on {len(text)} characters"
    if whole > FLOOR_S:
        small = build(n // 4)
        _, quarter = timed(run, small)
        if whole >= GROWTH * quarter:  # a burst of load on one of the two timings (a 2-rank test beside it: 10x seen
            # on a linear rule, 5.7 s vs 0.37 s): both again, the faster of each; a superlinear rule fails again
            whole = min(whole, timed(run, text)[1])
            quarter = min(quarter, timed(run, small)[1])
        assert whole < GROWTH * quarter, (
            f"{label}: {whole:.2f} s on n={n} vs {quarter:.2f} s on n/4: grows faster than linearly")
    return result
