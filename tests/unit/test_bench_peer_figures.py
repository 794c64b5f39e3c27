"""The FastStream/ragbus comparison's arithmetic: means over turns, ratios, the broker's share of a phase."""

import math

import pytest

from scripts.bench import faststream_compare
from scripts.bench.faststream_compare import FIGURES, BrokerCpu, figures, mean_figures, ratios
from scripts.bench.pingpong import Result


def test_a_turns_figures_come_from_its_result_and_the_brokers_share():
    turn = figures(Result(p50_ms=2.0, p99_ms=9.0, rate=1500.0, samples=200, cpu_ms=0.6), broker_ms=0.2)
    assert turn == {"p50_ms": 2.0, "p99_ms": 9.0, "calls_s": 1500.0, "cpu_ms": 0.6, "broker_ms": 0.2}


def test_the_mean_is_taken_figure_by_figure_over_the_turns():
    first = dict.fromkeys(FIGURES, 1.0)
    second = dict.fromkeys(FIGURES, 3.0) | {"calls_s": 5.0}
    assert mean_figures(iter([first, second])) == dict.fromkeys(FIGURES, 2.0) | {"calls_s": 3.0}


def test_no_turns_have_no_mean():
    with pytest.raises(ValueError, match="no turns"):
        mean_figures([])


def test_ratios_are_ours_over_the_peers_and_a_zero_figure_gives_nan():
    ours = {"p50_ms": 3.0, "p99_ms": 10.0, "calls_s": 2000.0, "cpu_ms": 0.5, "broker_ms": 0.0}
    peer = {"p50_ms": 6.0, "p99_ms": 5.0, "calls_s": 500.0, "cpu_ms": 2.0, "broker_ms": 0.0}
    x = ratios(ours, peer)
    assert (x["p50_ms"], x["p99_ms"], x["calls_s"], x["cpu_ms"]) == (0.5, 2.0, 4.0, 0.25)
    assert math.isnan(x["broker_ms"])


def test_the_brokers_share_is_the_last_two_readings_per_call(monkeypatch):
    seconds = iter([10.0, 10.5, 12.0])
    monkeypatch.setattr(faststream_compare, "cpu_of", lambda pid: next(seconds))
    broker = BrokerCpu(1234)
    with pytest.raises(RuntimeError, match="both ends"):
        broker.last_phase_ms(100)
    assert [broker(), broker(), broker()] == [10.0, 10.5, 12.0]
    assert broker.last_phase_ms(1000) == pytest.approx(1.5)  # (12.0 - 10.5) s over 1000 calls
