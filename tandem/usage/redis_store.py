"""The usage store on Redis (the queue's server, keys under `tandem:usage:`): each change is one
Lua script, atomic on the server and timed by the server's clock.

Keys:
- `w:<window index>:<key>`: a hash {r, i, o} of one window's counts, expiring 3 windows after
  it was last admitted to (a reconciliation never recreates one that expired);
- `seen:<entry key>`: set (NX) when an entry is recorded, expiring after SEEN_TTL_S;
- `day:<YYYY-MM-DD>:<account>`: the ledger, a hash of "<model>\\x1f<count>" -> sum, where count is
  requests, input_uncached, input_cached or output; `accounts`: every account recorded.
"""

from __future__ import annotations

import datetime as dt

import redis.asyncio as aioredis

from tandem.usage.limits import Limit
from tandem.usage.pricing import TokenUsage
from tandem.usage.store import SEEN_TTL_S, LedgerRow, Reconcile, UsageEntry
from tandem.usage.window import Counts, WindowState

SEP = "\x1f"
_COUNTS = ("requests", "input_uncached", "input_cached", "output")

# ARGV: key, window_s, cost r/i/o, limit r/i/o (-1: none), now ('' = the server's clock)
# -> {now as text, window index, admitted 0/1, prev r/i/o, cur r/i/o}; window.fits in Lua
CONSUME = """
local P = KEYS[1]
local key, W = ARGV[1], tonumber(ARGV[2])
local cost = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local lim = {tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])}
local now
if ARGV[9] ~= '' then now = tonumber(ARGV[9])
else local t = redis.call('TIME'); now = tonumber(t[1]) + tonumber(t[2]) / 1000000 end
local idx = math.floor(now / W)
local e = now - idx * W
local ck = P .. 'w:' .. string.format('%d', idx) .. ':' .. key
local pk = P .. 'w:' .. string.format('%d', idx - 1) .. ':' .. key
local function read(k)
  local v = redis.call('HMGET', k, 'r', 'i', 'o')
  return {tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0}
end
local prev, cur = read(pk), read(ck)
local ok = 1
for d = 1, 3 do
  if lim[d] >= 0 and prev[d] * (1.0 - e / W) + cur[d] + cost[d] > lim[d] then ok = 0 end
end
if ok == 1 then
  local names = {'r', 'i', 'o'}
  for d = 1, 3 do
    if cost[d] ~= 0 then redis.call('HINCRBY', ck, names[d], cost[d]) end
    cur[d] = cur[d] + cost[d]
  end
  if redis.call('EXISTS', ck) == 1 then redis.call('PEXPIRE', ck, math.ceil(W * 3000)) end
end
return {string.format('%.17g', now), idx, ok, prev[1], prev[2], prev[3], cur[1], cur[2], cur[3]}
"""

# ARGV: reconcile key ('' = none), window index, delta r/i/o, entry key ('' = none), account,
# model, day, input_uncached, input_cached, output, seen ttl -> 1 if the entry was recorded now
SETTLE = """
local P = KEYS[1]
if ARGV[1] ~= '' then
  local ck = P .. 'w:' .. ARGV[2] .. ':' .. ARGV[1]
  if redis.call('EXISTS', ck) == 1 then
    redis.call('HINCRBY', ck, 'r', ARGV[3])
    redis.call('HINCRBY', ck, 'i', ARGV[4])
    redis.call('HINCRBY', ck, 'o', ARGV[5])
  end
end
if ARGV[6] == '' then return 0 end
if not redis.call('SET', P .. 'seen:' .. ARGV[6], '1', 'NX', 'EX', ARGV[13]) then return 0 end
local h = P .. 'day:' .. ARGV[9] .. ':' .. ARGV[7]
local f = ARGV[8] .. '\\31'
redis.call('HINCRBY', h, f .. 'requests', 1)
redis.call('HINCRBY', h, f .. 'input_uncached', ARGV[10])
redis.call('HINCRBY', h, f .. 'input_cached', ARGV[11])
redis.call('HINCRBY', h, f .. 'output', ARGV[12])
redis.call('SADD', P .. 'accounts', ARGV[7])
return 1
"""


def _limit_arg(value: int | None) -> int:
    return -1 if value is None else value


def days(since: str, until: str) -> list[str]:
    """Every UTC day from `since` to `until`, inclusive."""
    d, end = dt.date.fromisoformat(since), dt.date.fromisoformat(until)
    out = []
    while d <= end:
        out.append(d.isoformat())
        d += dt.timedelta(days=1)
    return out


class RedisUsageStore:
    """A `UsageStore` (tandem/usage/store.py) on Redis."""

    def __init__(self, url: str, prefix: str = "tandem:usage:") -> None:
        self._r = aioredis.Redis.from_url(url, decode_responses=True)
        self._p = prefix
        self._consume = self._r.register_script(CONSUME)
        self._settle = self._r.register_script(SETTLE)

    async def consume(self, key: str, cost: Counts, limit: Limit, window_s: float,
                      now: float | None = None) -> WindowState:
        out = await self._consume(keys=[self._p], args=[
            key, repr(window_s), cost.requests, cost.input_tokens, cost.output_tokens,
            _limit_arg(limit.requests), _limit_arg(limit.input_tokens),
            _limit_arg(limit.output_tokens), "" if now is None else repr(now)])
        n = [int(x) for x in out[1:]]
        return WindowState(now=float(out[0]), index=n[0], prev=Counts(*n[2:5]), cur=Counts(*n[5:8]),
                           admitted=bool(n[1]), window_s=window_s)

    async def settle(self, reconcile: Reconcile | None, entry: UsageEntry | None) -> bool:
        if reconcile is None and entry is None:
            return False
        r = reconcile
        e = entry
        args = [r.key if r else "", r.index if r else 0, *((r.delta.requests, r.delta.input_tokens,
                                                            r.delta.output_tokens) if r else (0, 0, 0)),
                e.key if e else "", e.account if e else "", e.model if e else "", e.day if e else "",
                *((e.usage.input_uncached, e.usage.input_cached, e.usage.output) if e else (0, 0, 0)),
                SEEN_TTL_S]
        return bool(await self._settle(keys=[self._p], args=args))

    async def ledger(self, account: str | None, since: str, until: str) -> list[LedgerRow]:
        accounts = [account] if account is not None else sorted(
            await self._r.smembers(self._p + "accounts"))
        pairs = [(day, a) for day in days(since, until) for a in accounts]
        async with self._r.pipeline(transaction=False) as pipe:
            for day, a in pairs:
                pipe.hgetall(self._p + "day:" + day + ":" + a)
            hashes = await pipe.execute()
        rows = []
        for (day, a), h in zip(pairs, hashes):
            per_model: dict[str, dict[str, int]] = {}
            for field, value in h.items():
                model, _, count = field.rpartition(SEP)
                per_model.setdefault(model, {})[count] = int(value)
            for model in sorted(per_model):
                c = per_model[model]
                rows.append(LedgerRow(account=a, model=model, day=day, requests=c.get("requests", 0),
                                      usage=TokenUsage(c.get("input_uncached", 0),
                                                       c.get("input_cached", 0), c.get("output", 0))))
        return rows

    async def close(self) -> None:
        await self._r.aclose()
