"""Rate limits and the usage ledger, both kept in the queue's database (SQLite, PostgreSQL or
Redis) so that every gateway of a cluster shares them.

- `limits.py`: the `--rate-limits` file (per account and model, interactive and batch work apart);
- `window.py`: the sliding-window decision, pure;
- `pricing.py`: the `--pricing` file, USD per million tokens by token kind;
- `store.py` and its backends `sql_store.py`, `redis_store.py` (`open_store.py` picks one):
  atomic window counters and the idempotent ledger;
- `meter.py`: admission (reserve) and settlement (reconcile, record) over a store.
"""
