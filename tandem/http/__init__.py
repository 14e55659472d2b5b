"""The keep-alive HTTP/1.1 client shared by the gateway (calls to workers) and the benchmark client."""
