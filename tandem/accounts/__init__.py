"""Accounts and their API tokens (`tandem accounts`, the admin API), kept in the queue's database.

model.py (accounts, tokens, scopes, what a request authenticated as), token_format.py (the token
text and its salted hash), store.py (the store over a backend: SQL in sql_store.py, Redis in
redis_store.py; open_store.py picks one from the queue's target), resolver.py (a presented token
-> its credential, cached for a few seconds).
"""
