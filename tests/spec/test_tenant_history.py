"""Tenant histories: outputs joined with separators, the oldest dropped past the bound, the least
recently used tenant dropped past the tenant bound."""

from tandem.spec.tenant_history import OutputHistory, TenantHistories
from tandem.spec.token_index import SEPARATOR as S


def test_outputs_are_separated_and_the_oldest_dropped():
    h = OutputHistory(max_tokens=12)
    h.add([1, 2, 3])
    h.add([4, 5, 6])
    assert h.index.tokens.tolist() == [1, 2, 3, S, 4, 5, 6, S]
    h.add([7, 8, 9])     # 12 tokens would fit exactly ... 8 + 4 = 12
    assert h.index.tokens.tolist() == [1, 2, 3, S, 4, 5, 6, S, 7, 8, 9, S]
    h.add([10, 11])      # over: drop the oldest down to 3/4 of 12 (9) with the new one
    assert h.index.tokens.tolist() == [7, 8, 9, S, 10, 11, S]
    assert h.index.positions(10).tolist() == [4]


def test_an_output_longer_than_the_bound_keeps_its_end():
    h = OutputHistory(max_tokens=4)
    h.add([1, 2, 3, 4, 5, 6])
    assert h.index.tokens.tolist() == [4, 5, 6, S]


def test_least_recently_used_tenant_goes_and_single_tokens_are_ignored():
    hs = TenantHistories(max_tokens_per_tenant=100, max_tenants=2)
    hs.add(("a", None), [1, 2])
    hs.add(("b", None), [3, 4])
    hs.add(("c", None), [5])          # one token (a handed-over prefill): not kept
    assert len(hs) == 2
    assert hs.get(("a", None)) is not None   # a is now the most recent
    hs.add(("c", None), [5, 6])
    assert hs.get(("b", None)) is None and hs.get(("a", None)) is not None
    assert hs.get(("c", None)).index.tokens.tolist() == [5, 6, S]
