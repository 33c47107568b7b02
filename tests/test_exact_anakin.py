"""Exact chunk schedules of the Anakin runner (jrl/run/anakin.py): hand-computed expectations
that tell every operator and bound apart (tools/mutation.py's targets)."""

import pytest

from jrl.run import anakin


@pytest.mark.parametrize(
    "n,reports,want",
    [
        # target = ceil(12 / 4) = 3 divides 12
        (12, 4, [3] * 4),
        # target 3; divisors of 10 in [1, 6]: 1, 2, 5; 2 is the closest
        (10, 4, [2] * 5),
        # target 3; 2 and 4 are equally close: the smaller wins
        (8, 3, [2] * 4),
        # target 3; 1 and 5 are equally close: the smaller wins (the lower bound is 1, not 2)
        (5, 2, [1] * 5),
        # one report, or none: the whole run is one chunk (target 5)
        (5, 1, [5]),
        (5, 0, [5]),
        # target 7: 7 and 14 lie in [3, 14]
        (14, 2, [7, 7]),
        # target 5: 97 is prime, no divisor in [2, 10]: five-step chunks and the remainder
        (97, 20, [5] * 19 + [2]),
        # target 5: 121's divisor 11 lies just past the upper bound 2 * 5 = 10
        (121, 25, [5] * 24 + [1]),
        # target 6: 26's divisor 2 lies just below the lower bound 6 // 2 = 3
        (26, 5, [6] * 4 + [2]),
        # target 1: one iteration a chunk
        (7, 20, [1] * 7),
        # target 1: divisors 1 and 2 lie in [1, 2]; 1 is the target
        (4, 4, [1] * 4),
        # target 6: 143 = 11 * 13; its divisor 11 lies at the upper end of [3, 12]
        (143, 24, [11] * 13),
    ],
)
def test_chunk_lengths_by_hand(n, reports, want):
    assert anakin.chunk_lengths(n, reports) == want


def test_remaining_chunks_after_a_boundary_by_hand():
    # 12 iterations in 4 reports: chunks of 3 ending at 3, 6, 9, 12
    assert anakin._remaining_chunks(12, 4, 0) == [3, 3, 3, 3]
    assert anakin._remaining_chunks(12, 4, 3) == [3, 3, 3]
    assert anakin._remaining_chunks(12, 4, 6) == [3, 3]
    assert anakin._remaining_chunks(12, 4, 12) == []
    with pytest.raises(ValueError, match="not a chunk boundary"):
        anakin._remaining_chunks(12, 4, 5)
