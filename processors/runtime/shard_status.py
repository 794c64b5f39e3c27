"""Each shard of a sharded log, from its replicas' reports: who owns it, who stands by, how far behind.

A shard host's replica of shard ``k`` reports (``processors/stores/reports.py``) which shard, of how
many, and whether its host serves it. For each log topic with such reports this lists every shard
``0..N-1`` (N: the number of shards the reports say, or past the highest shard reported): its
owners (replicas whose host serves it), its standbys (replicas kept but not served: a standby, or
an owner still catching up), each as its latest report says, and whether an owner has caught up.

Reports are not judged stale here: a report does not carry its replica's ``report_interval_s``, so
no age could be said to be too old for every replica. An owner killed without a word keeps its
last report, which says it serves, and grows old; ``ragbus status`` shows each report's age. A shard
no replica says it serves is shown with no owner: its owner stopped (a stopping replica removes
its report) and no other host serves it yet.
"""

from __future__ import annotations

from ragbus.schema.changelog import ReplicaReport
from ragbus.schema.http import ShardHolder, ShardRow


def host_of(replica: str) -> str:
    """The host part of a replica id ``<processor>@<host>:<data dir>``."""
    _, at, rest = replica.partition("@")
    return rest.partition(":")[0] if at else replica


def shard_rows(reports: list[ReplicaReport]) -> list[ShardRow]:
    """Every shard of each log that shard replicas report on, by log topic then shard."""
    by_log: dict[str, list[ReplicaReport]] = {}
    for report in reports:
        if report.shard is not None:
            by_log.setdefault(report.log_topic, []).append(report)
    rows = []
    for log_topic, found in sorted(by_log.items()):
        count = max(max((r.shards or 0) for r in found), max(r.shard or 0 for r in found) + 1)
        for k in range(count):
            mine = sorted((r for r in found if r.shard == k), key=lambda r: (host_of(r.replica), r.replica))
            owners = [_holder(r) for r in mine if r.serving]
            standbys = [_holder(r) for r in mine if not r.serving]
            rows.append(ShardRow(log_topic=log_topic, shard=k, owners=owners, standbys=standbys,
                                 ready=any(o.caught_up for o in owners)))
    return rows


def _holder(report: ReplicaReport) -> ShardHolder:
    return ShardHolder(host=host_of(report.replica), replica=report.replica, behind=report.behind,
                       caught_up=report.caught_up, reported_at=report.reported_at)
