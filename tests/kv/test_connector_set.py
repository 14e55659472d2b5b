"""ConnectorSet: the first connector that offers tokens loads them; every connector sees finishes;
kept blocks are released only when every connector that kept them has released them."""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.kv.connector import (ConnectorEvents, ExternalMatch, FinishedKV, KVConnector, KVConnectorScheduler,
                                 KVConnectorWorker, KVLoad, KVSave)
from tandem.kv.connector_set import connector_set


@dataclass
class _Req:
    request_id: str
    all_token_ids: list = field(default_factory=lambda: list(range(20)))
    cache_keys: tuple = ()
    kv_handle: object = None
    prefill_only: bool = False
    num_preemptions: int = 0
    num_computed_tokens: int = 19
    finish_reason: object = "stop"


class _Sched(KVConnectorScheduler):
    def __init__(self, offers: int, keeps: bool) -> None:
        self.offers, self.keeps = offers, keeps

    def match(self, req, num_local_tokens, block_size):
        return ExternalMatch(num_local_tokens, self.offers, True) if self.offers else None

    def load(self, req, match, first_block, dst_block_ids):
        return KVLoad(req.request_id, first_block, tuple(dst_block_ids), source=self.offers)

    def request_finished(self, req, block_ids, block_hashes, admitted):
        if not self.keeps:
            return FinishedKV()
        return FinishedKV(keep_blocks=True, saves=(KVSave(req.request_id, tuple(block_ids), (), 8),))


class _Worker(KVConnectorWorker):
    def __init__(self) -> None:
        self.loads, self.saves, self.to_release = [], [], []

    def start_loads(self, loads):
        self.loads += loads
        return {}

    def start_saves(self, saves):
        self.saves += saves

    def give_up(self, handle):
        pass

    def drop(self, request_id):
        pass

    def poll(self):
        events = ConnectorEvents(released=self.to_release)
        self.to_release = []
        return events

    def busy(self):
        return False

    def close(self):
        pass


def _set(*parts):
    return connector_set([KVConnector(_Sched(offers, keeps), _Worker()) for offers, keeps in parts])


def test_a_single_connector_is_used_as_is():
    one = KVConnector(_Sched(0, False), _Worker())
    assert connector_set([one]) is one


def test_the_first_connector_that_offers_loads_and_its_worker_gets_the_load():
    c = _set((0, False), (8, False), (16, False))
    req = _Req("a")
    match = c.scheduler.match(req, 4, 4)
    assert match.num_external_tokens == 8
    load = c.scheduler.load(req, match, 1, [7, 9])
    assert load.connector == 1 and load.source == 8
    assert c.worker.start_loads([load]) == {}
    assert [w.loads for w in c.worker.parts] == [[], [KVLoad("a", 1, (7, 9), 8, 0)], []]


def test_blocks_are_released_once_every_keeper_released_them():
    c = _set((0, True), (0, False), (0, True))
    req = _Req("a")
    done = c.scheduler.request_finished(req, [3, 4], [], admitted=True)
    assert done.keep_blocks and [s.connector for s in done.saves] == [0, 2]
    c.worker.start_saves(done.saves)
    first, _, third = c.worker.parts
    assert len(first.saves) == len(third.saves) == 1
    first.to_release = ["a"]
    assert c.worker.poll().released == []      # the third still holds them
    third.to_release = ["a"]
    assert c.worker.poll().released == ["a"]
    third.to_release = ["a"]
    assert c.worker.poll().released == []      # reported once


def test_nothing_kept_when_no_connector_keeps():
    c = _set((0, False), (0, False))
    done = c.scheduler.request_finished(_Req("a"), [1], [], admitted=True)
    assert not done.keep_blocks and done.saves == ()
