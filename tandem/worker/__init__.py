"""A worker process: its engine behind the api routes (process.py), and its registration with a gateway."""
