import os
import subprocess
import sys

from tandem.kv.block_hash import cache_keys, hash_block_tokens, hash_request_blocks
from tandem.types import RequestContext


def test_only_full_blocks_are_hashed():
    assert len(hash_request_blocks(list(range(35)), 16)) == 2
    assert hash_request_blocks(list(range(15)), 16) == []


def test_chain_depends_on_the_whole_prefix():
    a = hash_request_blocks([1] * 16 + [2] * 16, 16)
    b = hash_request_blocks([3] * 16 + [2] * 16, 16)
    assert a[1] != b[1]  # same second block, different parent
    assert a[0] == hash_block_tokens(None, [1] * 16)
    assert a[1] == hash_block_tokens(a[0], [2] * 16)


def test_salt_and_seed_change_every_hash():
    tokens = list(range(64))
    plain = hash_request_blocks(tokens, 16)
    salted = hash_request_blocks(tokens, 16, ("tenant-a",))
    other = hash_request_blocks(tokens, 16, ("tenant-b",))
    seeded = hash_request_blocks(tokens, 16, seed=7)
    for h in (salted, other, seeded):
        assert not set(h) & set(plain)
    assert not set(salted) & set(other)


def test_incremental_extension_equals_full_hash():
    tokens = list(range(100))
    full = hash_request_blocks(tokens, 16)
    head = hash_request_blocks(tokens[:40], 16)
    tail = hash_request_blocks(tokens, 16, start=len(head), parent=head[-1])
    assert head + tail == full


def test_stable_across_processes():
    code = "from tandem.kv.block_hash import hash_request_blocks as h; print(h(list(range(48)), 16, ('salt',), 3))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123"}).stdout.strip()
    assert out == str(hash_request_blocks(list(range(48)), 16, ("salt",), 3))


def test_request_hashes_equal_chained_block_hashes():
    import random

    from tandem.kv.block_hash import hash_block_tokens, hash_request_blocks

    rng = random.Random(0)
    for _ in range(100):
        ids = [rng.randrange(2**31) for _ in range(rng.randrange(0, 120))]
        bs, salt, seed = rng.choice([1, 4, 16]), rng.choice([None, "", "tenant"]), rng.choice([0, 7, -3])
        chained, parent = [], None
        for i in range(len(ids) // bs):
            parent = hash_block_tokens(parent, ids[i * bs:(i + 1) * bs], (salt,) if i == 0 and salt else (), seed)
            chained.append(parent)
        keys = (salt,) if salt else ()
        assert hash_request_blocks(ids, bs, keys, seed) == chained
        for start in range(1, len(chained)):  # extending a hashed prefix
            assert hash_request_blocks(ids, bs, keys, seed, start, chained[start - 1]) == chained[start:]


def test_the_partition_is_salt_then_tenant():
    """cache_keys, exactly: the salt alone as before tenants were hashed, the tenant as a tagged
    pair after it, nothing without either; --share-prefix-cache leaves the tenant out."""
    def first_block(context: RequestContext) -> tuple:
        return cache_keys(context).keys_at(0, 16)

    assert first_block(RequestContext()) == ()
    assert first_block(RequestContext(cache_salt="s")) == ("s",)
    assert first_block(RequestContext(tenant="key-0")) == (("tenant", "key-0"),)
    assert first_block(RequestContext(tenant="key-0", cache_salt="s")) == ("s", ("tenant", "key-0"))
    assert first_block(RequestContext(tenant="key-0", cache_salt="s", share_prefix_cache=True)) == ("s",)
    assert first_block(RequestContext(tenant="key-0", share_prefix_cache=True)) == ()
    # session, priority and parser options never change the partition
    assert first_block(RequestContext(session_id="x", priority=3, tenant="key-1")) == (("tenant", "key-1"),)
    # nothing shared: later blocks take no keys of their own
    assert cache_keys(RequestContext(tenant="key-0", cache_salt="s")).keys_at(1, 16) == ()


def test_tenants_never_share_a_block_and_no_keys_changes_nothing():
    tokens = list(range(64))
    a = hash_request_blocks(tokens, 16, cache_keys(RequestContext(tenant="key-0")))
    b = hash_request_blocks(tokens, 16, cache_keys(RequestContext(tenant="key-1")))
    anonymous = hash_request_blocks(tokens, 16, cache_keys(RequestContext()))
    # a tenant named like a salt is still another partition
    salt_named = hash_request_blocks(tokens, 16, cache_keys(RequestContext(cache_salt="key-0")))
    assert len({*a, *b, *anonymous, *salt_named}) == 16
    assert a == hash_request_blocks(tokens, 16, cache_keys(RequestContext(tenant="key-0", session_id="s")))
    # without API keys (no tenant) the hashes are those of the chain with no extra keys at all
    assert anonymous == hash_request_blocks(tokens, 16)
    assert anonymous[0] == hash_block_tokens(None, tokens[:16])
    # shared: the tenant drops out, the salt still separates
    shared = hash_request_blocks(tokens, 16, cache_keys(RequestContext(tenant="key-0", share_prefix_cache=True)))
    assert shared == anonymous
    # the tenant is an extra key of the first block only; later blocks inherit it by the chain
    assert a[0] == hash_block_tokens(None, tokens[:16], (("tenant", "key-0"),))
    assert a[1] == hash_block_tokens(a[0], tokens[16:32])


def test_tenant_hashes_are_stable_across_processes():
    """Two workers (and the gateway's index) agree on a tenant's hashes: no per-process state."""
    code = ("from tandem.kv.block_hash import cache_keys, hash_request_blocks as h; "
            "from tandem.types import RequestContext as C; "
            "print(h(list(range(48)), 16, cache_keys(C(tenant='key-1', cache_salt='s')), 5))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
            for seed in ("1", "2")}
    want = hash_request_blocks(list(range(48)), 16, cache_keys(RequestContext(tenant="key-1", cache_salt="s")), 5)
    assert outs == {str(want)}
    # exact values, so a change to the hash (which would orphan every tier's blocks) is seen; a
    # salt alone hashes as before tenants were hashed
    assert want == [12787711340073370735, 16606293561422499926, 9770669281533648640]
    assert want[0] == hash_block_tokens(None, list(range(16)), ("s", ("tenant", "key-1")), 5)
    assert hash_request_blocks(list(range(48)), 16, cache_keys(RequestContext(cache_salt="s")), 5) == \
        [3953986030088013325, 15747548929258311566, 16962690711067679648]
