"""HTTP pieces shared by the worker server, the gateway and the benchmark client."""
