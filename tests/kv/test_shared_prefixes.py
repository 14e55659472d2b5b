"""Operator-declared shared prefixes: how far a prompt lies inside one, and how its blocks are
keyed (tandem/kv/shared_prefixes.py, tandem/kv/block_hash.py `Partition`), in every hasher."""

import random

import pytest

from tandem.kv.block_hash import Partition, cache_keys, hash_block_tokens, hash_request_blocks
from tandem.kv.layout import KVLayout
from tandem.kv.shared_prefixes import SharedPrefixes, common_prefix
from tandem.kvstore.keys import KeySpace
from tandem.spec.eagle3_kv import block_hashes as head_hashes
from tandem.types import RequestContext

BS = 16
SYSTEM = list(range(1000, 1040))            # a declared prefix of 40 tokens: 2 whole blocks + 8
DECLARED = SharedPrefixes((tuple(SYSTEM),))


def hashes(tenant: str | None, prompt: list[int], salt: str | None = None,
           declared: SharedPrefixes = DECLARED) -> list[int]:
    """A prompt's block hashes as a route stamps and the engine hashes it."""
    ctx = RequestContext(tenant=tenant, cache_salt=salt, shared_prefix_tokens=declared.match(prompt))
    return hash_request_blocks(prompt, BS, cache_keys(ctx))


def test_common_prefix_finds_the_first_difference_across_chunks():
    rng = random.Random(0)
    a = [rng.randrange(50) for _ in range(1000)]
    for cut in (0, 1, 255, 256, 257, 511, 999):
        b = a[:cut] + [99] + a[cut + 1:]
        assert common_prefix(a, b) == cut
    assert common_prefix(a, a) == 1000
    assert common_prefix(a, a[:300]) == 300 and common_prefix(a[:300], a) == 300
    assert common_prefix((), a) == 0 and common_prefix(tuple(a), list(a)) == 1000


def test_match_is_the_longest_common_prefix_with_any_declared_prefix():
    declared = SharedPrefixes(((1, 2, 3, 4, 5), (1, 2, 9), (7,)))
    assert declared.match([1, 2, 3, 4, 5, 6, 7]) == 5   # the whole first prefix
    assert declared.match([1, 2, 3, 8]) == 3            # leaves it inside
    assert declared.match([1, 2, 9, 9]) == 3            # the second one
    assert declared.match([7, 7]) == 1
    assert declared.match([5, 1, 2]) == 0               # elsewhere: nothing
    assert declared.match([1, 2]) == 2                  # never more than the prompt
    assert SharedPrefixes().match([1, 2, 3]) == 0 and not SharedPrefixes()


def test_split_counts_the_whole_blocks_inside_the_shared_tokens():
    tenant = (("tenant", "a"),)
    assert Partition((), tenant, 40).split(16) == 2
    assert Partition((), tenant, 32).split(16) == 2
    assert Partition((), tenant, 31).split(16) == 1
    assert Partition((), tenant, 15).split(16) == 0
    # a block whose rows depend on one token more (the EAGLE-3 head's) needs that token inside
    assert Partition((), tenant, 32).split(16, 17) == 1
    assert Partition((), tenant, 33).split(16, 17) == 2
    # no tenant: nothing to leave out, so nothing is split
    assert Partition(("s",), (), 40).split(16) == 0
    # a context without a tenant (or with --share-prefix-cache) drops the shared tokens
    assert cache_keys(RequestContext(shared_prefix_tokens=40)) == Partition()
    assert cache_keys(RequestContext(tenant="a", share_prefix_cache=True, shared_prefix_tokens=40)) == Partition()


def test_a_prompt_starting_with_the_declared_prefix_shares_its_whole_blocks_only():
    a = hashes("key-0", SYSTEM + [1, 2, 3] * 10)   # 70 tokens: 4 blocks, 2 inside the prefix
    b = hashes("key-1", SYSTEM + [1, 2, 3] * 10)
    assert len(a) == 4
    assert a[:2] == b[:2]
    assert a[2] != b[2] and a[3] != b[3]   # block 2 holds 8 declared tokens and the tenant's own
    # the shared blocks are keyed without any tenant: the anonymous chain's
    assert a[:2] == hash_request_blocks(SYSTEM, BS)
    # from the split on, the tenant's keys enter the chain
    assert a[2] == hash_block_tokens(a[1], (SYSTEM + [1, 2, 3] * 10)[32:48], (("tenant", "key-0"),))
    # the same prompt without the declaration: nothing shared
    no_decl_a = hashes("key-0", SYSTEM + [1, 2, 3] * 10, declared=SharedPrefixes())
    no_decl_b = hashes("key-1", SYSTEM + [1, 2, 3] * 10, declared=SharedPrefixes())
    assert not set(no_decl_a) & set(no_decl_b)
    # and nothing changed for it: the tenant in block 0, as before shared prefixes existed
    assert no_decl_a[0] == hash_block_tokens(None, SYSTEM[:16], (("tenant", "key-0"),))


def test_a_prompt_not_starting_with_it_is_all_per_tenant():
    prompt = [5] + SYSTEM + [1] * 20
    assert not set(hashes("key-0", prompt)) & set(hashes("key-1", prompt))


def test_a_prompt_leaving_the_prefix_inside_shares_the_whole_blocks_before():
    declared = SharedPrefixes((tuple(range(1000, 1064)),))   # 4 whole blocks
    prompt = list(range(1000, 1035)) + [7] * 40              # leaves it at token 35
    a, b = hashes("key-0", prompt, declared=declared), hashes("key-1", prompt, declared=declared)
    assert a[:2] == b[:2] and all(x != y for x, y in zip(a[2:], b[2:]))
    # a prompt of the declared tokens only, shorter than the declaration: all its whole blocks
    short = list(range(1000, 1048))
    assert hashes("key-0", short, declared=declared) == hashes("key-1", short, declared=declared)


def test_the_salt_still_separates_shared_blocks():
    prompt = SYSTEM + [1] * 30
    a, b = hashes("key-0", prompt, salt="s"), hashes("key-1", prompt, salt="s")
    assert a[:2] == b[:2]
    assert not set(a) & set(hashes("key-1", prompt, salt="t"))
    assert a[0] == hash_block_tokens(None, SYSTEM[:16], ("s",))


@pytest.mark.parametrize("shared", [0, 15, 16, 40, 64, 70])
def test_extending_a_hashed_prefix_equals_hashing_at_once(shared):
    """The engine and the tiers hash as tokens arrive (start, parent): the split is the same."""
    tokens = list(range(80))
    part = Partition(("s",), (("tenant", "a"),), shared)
    whole = hash_request_blocks(tokens, BS, part)
    chained, parent = [], None
    for i in range(5):
        parent = hash_block_tokens(parent, tokens[i * BS:(i + 1) * BS], part.keys_at(i, BS))
        chained.append(parent)
    assert whole == chained
    for start in range(1, 5):
        assert hash_request_blocks(tokens, BS, part, start=start, parent=whole[start - 1]) == whole[start:]


def test_tier_keys_name_shared_blocks_without_the_tenant():
    space = KeySpace.of(KVLayout(model="m", dtype="float32", block_size=BS, num_layers=1,
                                 num_kv_heads=1, head_dim=4), 0)
    prompt = SYSTEM + [1] * 30
    ka = space.keys(hashes("key-0", prompt), cache_keys(RequestContext(tenant="key-0", shared_prefix_tokens=40)), BS)
    kb = space.keys(hashes("key-1", prompt), cache_keys(RequestContext(tenant="key-1", shared_prefix_tokens=40)), BS)
    assert ka[:2] == kb[:2] and ka[0].split("/")[1] == "-"
    assert all(x != y for x, y in zip(ka[2:], kb[2:]))
    # a slice starting past the split (a lookup from block 2 on) is named as the whole list
    part = cache_keys(RequestContext(tenant="key-0", shared_prefix_tokens=40))
    assert space.keys(hashes("key-0", prompt)[1:], part, BS, start=1) == ka[1:]


def test_the_eagle3_heads_blocks_share_only_when_their_extra_token_is_declared():
    """The head's block b holds rows that depend on tokens up to (b+1)*bs: one past the block."""
    prompt = SYSTEM[:32] + [7] * 40                 # shares exactly 32 tokens: 2 engine blocks
    a = head_hashes(prompt, 4, BS, cache_keys(RequestContext(tenant="key-0", shared_prefix_tokens=32)))
    b = head_hashes(prompt, 4, BS, cache_keys(RequestContext(tenant="key-1", shared_prefix_tokens=32)))
    assert a[0] == b[0] and a[1] != b[1]   # block 1's rows depend on token 32, the tenant's own
    a = head_hashes(prompt, 4, BS, cache_keys(RequestContext(tenant="key-0", shared_prefix_tokens=33)))
    b = head_hashes(prompt, 4, BS, cache_keys(RequestContext(tenant="key-1", shared_prefix_tokens=33)))
    assert a[:2] == b[:2] and a[2] != b[2]
