"""Triton kernels for the GPU: paged attention over the KV cache in place (dense and MLA's latent
cache) and grouped expert GEMMs for MoE. Imported only when chosen (--attention triton,
--moe-kernel triton); on the CPU they run only under Triton's interpreter (TRITON_INTERPRET=1, tests)."""
