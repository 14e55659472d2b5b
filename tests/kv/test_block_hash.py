import subprocess
import sys

from tandem.kv.block_hash import hash_block_tokens, hash_request_blocks


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
    salted = hash_request_blocks(tokens, 16, cache_salt="tenant-a")
    other = hash_request_blocks(tokens, 16, cache_salt="tenant-b")
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
    code = "from tandem.kv.block_hash import hash_request_blocks as h; print(h(list(range(48)), 16, 'salt', 3))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123"}).stdout.strip()
    assert out == str(hash_request_blocks(list(range(48)), 16, "salt", 3))


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
        assert hash_request_blocks(ids, bs, salt, seed) == chained
        for start in range(1, len(chained)):  # extending a hashed prefix
            assert hash_request_blocks(ids, bs, salt, seed, start, chained[start - 1]) == chained[start:]
