"""Native CPU kernels, compiled from C on first use and loaded with ctypes (tandem.kernels.build)."""
