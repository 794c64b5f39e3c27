"""The benchmarks' one percentile function, against values worked out by hand."""

import pytest

from scripts.bench.stats import percentile


def test_percentiles_interpolate_linearly_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)  # rank 0.99 * 3 = 2.97 between 3 and 4


def test_a_hundred_samples_give_the_rank_itself_at_whole_percentiles():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)


def test_one_sample_is_every_percentile():
    assert percentile(iter([7.5]), 99) == 7.5


def test_no_samples_or_a_q_out_of_range_is_refused():
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0, 2.0], 101)
