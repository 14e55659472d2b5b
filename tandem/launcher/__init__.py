"""`tandem up`: a local cluster (the gateway and its workers) as child processes."""
