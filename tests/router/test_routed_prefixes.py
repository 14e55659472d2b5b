"""RoutedPrefixes: a routed prompt's blocks count as held by its worker for ttl_s, leading
blocks only, forgotten with the worker, bounded in size (pure logic, a fake clock)."""

from tandem.router.routed_prefixes import RoutedPrefixes


def test_leading_blocks_per_worker_until_the_ttl():
    now = [0.0]
    r = RoutedPrefixes(ttl_s=5.0, clock=lambda: now[0])
    r.routed("a", [1, 2, 3])
    r.routed("b", [1, 9])
    assert r.match([1, 2, 3, 4]) == {"a": 3, "b": 1}
    assert r.match([5, 1]) == {}                 # block 0 decides (hashes are chained)
    now[0] = 4.0
    r.routed("b", [1, 2])                        # routed again: b's entries live on
    now[0] = 5.0
    assert r.match([1, 2, 3]) == {"b": 2}        # a's expired at 5.0
    now[0] = 9.0
    assert r.match([1, 2]) == {} and len(r) == 0


def test_forget_and_capacity():
    r = RoutedPrefixes(ttl_s=5.0, capacity=4, clock=lambda: 0.0)
    r.routed("a", [1, 2])
    r.routed("b", [1, 2])
    r.forget("a")
    assert r.match([1, 2]) == {"b": 2}
    r.routed("c", [7, 8, 9])                     # five entries: b's oldest (block 1) goes
    assert len(r) == 4
    assert r.match([1, 2]) == {} and r.match([7, 8, 9]) == {"c": 3}
