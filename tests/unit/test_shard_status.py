"""Each shard's owners and standbys, drawn from its replicas' reports (``runtime/shard_status.py``), and
``ragbus status``'s table of them."""

from __future__ import annotations

import msgspec

from ragbus.cli.status import print_shards
from ragbus.runtime.shard_status import host_of, shard_rows
from ragbus.schema.changelog import ReplicaReport

LOG = "ragbus.changelog.documents"
NOW = 1_000_000.0


def report(shard: int | None, host: str, *, serving: bool | None, behind: int | None = 0, caught_up: bool = True,
           age: float = 1.0, shards: int | None = 3, log: str = LOG) -> ReplicaReport:
    name = "shard-host" if shard is None else f"shard-host.shard-{shard}"
    return ReplicaReport(replica=f"{name}@{host}:/data/{host}/shard-{shard}", log_topic=log, behind=behind,
                         caught_up=caught_up, reported_at=NOW - age, shard=shard, serving=serving,
                         shards=None if shard is None else shards)


def test_the_host_is_the_replica_ids_middle_part():
    assert host_of("shard-host.shard-1@pod-2:/var/lib/ragbus/shard-1") == "pod-2"
    assert host_of("documents-replica@h:C:/data") == "h"
    assert host_of("odd") == "odd"


def test_every_shard_with_its_owner_standbys_and_a_shard_no_one_serves():
    rows = shard_rows([
        report(0, "a", serving=True, behind=3, caught_up=False),
        report(0, "b", serving=False),
        report(0, "c", serving=False, behind=40, caught_up=False),  # a standby, or an owner catching up
        report(1, "b", serving=True, behind=None),
        report(None, "a", serving=None, shards=None),  # an unsharded replica: no shard row
    ])
    assert [(r.log_topic, r.shard) for r in rows] == [(LOG, 0), (LOG, 1), (LOG, 2)]  # 3 shards, said the reports
    zero, one, two = rows
    assert [o.host for o in zero.owners] == ["a"] and zero.owners[0].behind == 3 and not zero.ready
    assert [(s.host, s.behind, s.caught_up) for s in zero.standbys] == [("b", 0, True), ("c", 40, False)]
    assert [o.host for o in one.owners] == ["b"] and one.owners[0].behind is None and one.ready
    assert one.standbys == []
    assert two.owners == [] and two.standbys == [] and not two.ready  # no owner: none of its replicas is left


def test_an_owner_killed_without_a_word_stays_an_owner_whose_report_grows_old():
    rows = shard_rows([report(0, "dead", serving=True, age=600.0, shards=2),
                       report(0, "live", serving=True, age=0.5, shards=2), report(1, "live", serving=True, shards=2)])
    zero, _ = rows
    assert [(o.host, o.reported_at) for o in zero.owners] == [("dead", NOW - 600.0), ("live", NOW - 0.5)]
    assert zero.owners[0].replica == "shard-host.shard-0@dead:/data/dead/shard-0"


def test_without_the_count_the_highest_shard_reported_says_how_many():
    rows = shard_rows([report(2, "a", serving=False, shards=None)])
    assert [(r.shard, [s.host for s in r.standbys], r.owners) for r in rows] == [(0, [], []), (1, [], []),
                                                                                  (2, ["a"], [])]


def test_each_log_on_its_own_and_nothing_without_shard_reports():
    assert shard_rows([]) == [] and shard_rows([report(None, "a", serving=None)]) == []
    rows = shard_rows([report(0, "a", serving=True, shards=1, log="x"), report(0, "b", serving=True, shards=1)])
    assert [(r.log_topic, r.shard, r.owners[0].host) for r in rows] == [(LOG, 0, "b"), ("x", 0, "a")]


def test_ragbus_status_prints_a_line_per_owner_no_owner_and_the_standbys(capsys):
    rows = shard_rows([
        report(0, "a", serving=True, behind=3, caught_up=False, age=2.0),
        report(0, "b", serving=False),
        report(0, "c", serving=False, behind=40, caught_up=False),
        report(1, "dead", serving=True, age=600.0),
        report(1, "b", serving=True, behind=None, age=0.5),
        report(1, "d", serving=False, behind=None, caught_up=False),
    ])
    print_shards(msgspec.to_builtins(rows), NOW)
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert lines == [
        ["LOG", "SHARD", "OWNER", "BEHIND", "READY", "REPORTED", "STANDBYS"],
        [LOG, "0", "a", "3", "no", "2.0s", "ago", "b,", "c", "(catching", "up,", "40", "behind)"],
        [LOG, "1", "b", "-", "yes", "0.5s", "ago", "d", "(catching", "up)"],
        [LOG, "1", "dead", "0", "yes", "10.0m", "ago"],  # killed without a word: its report grows old
        [LOG, "2", "no", "owner", "-", "no", "-", "-"],
    ]
