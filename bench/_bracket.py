"""A throughput against its raw baseline, measured the way every benchmark here does it.

The machine is shared and its speed drifts, so each figure is set beside the baseline measured
just before and just after it, and the ratio is taken against their mean; REPEATS times, and
the median ratio is the figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

#: ``report(rate, baseline before, baseline after)``: prints one repeat's line.
Report = Callable[[float, float, float], None]


def bracketed(
    measure: Callable[[], float], baseline: Callable[[], float], repeats: int, report: Report
) -> float:
    """The median of ``repeats`` ratios of ``measure()`` to the mean of ``baseline()`` just
    before and just after it (each after-figure is the next repeat's before-figure)."""
    ratios = []
    before = baseline()
    for _ in range(repeats):
        rate = measure()
        after = baseline()
        ratios.append(rate / ((before + after) / 2))
        report(rate, before, after)
        before = after
    return statistics.median(ratios)
