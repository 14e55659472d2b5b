"""A worker process: its HTTP app (the api routes over one engine) and its registration with a gateway."""
