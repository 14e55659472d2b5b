"""Durable queue of asynchronous requests: batches of jobs leased to dispatchers that pull only
while the pools have headroom, with batch events posted to subscribers (an outbox).

queue.py is the interface; sqlite_queue.py (default), postgres_queue.py and redis_queue.py the
backends, opened by open_queue.py; dispatcher.py runs jobs; notifier.py delivers events."""
