# tandem's container image: the steps of `make install` (scripts/system-deps.sh's runtime packages,
# torch==2.13.0, then tandem) without the test extra, plus the demo models.
#   CPU (default):  docker build -t tandem:0.1.0-cpu .
#   CUDA:           docker build --build-arg VARIANT=cuda -t tandem:0.1.0-cuda .
# The manifests (deploy/kubernetes/) run `python -m tandem.cli ...` and `mooncake_master ...` in it.
# tests/deploy/test_dockerfile.py checks this file against pyproject.toml and scripts/system-deps.sh.
ARG VARIANT=cpu

FROM python:3.11-slim AS system
# libibverbs1: Mooncake's Transfer Engine; gcc, libc6-dev: tandem.kernels compiles its native CPU
# kernels on first use
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libibverbs1 gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

# the CPU wheel: no CUDA libraries in the image
FROM system AS torch-cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0

# PyPI's Linux wheel brings the CUDA runtime as pip packages; the driver is the node's (NVIDIA
# container toolkit)
FROM system AS torch-cuda
RUN pip install torch==2.13.0

FROM torch-${VARIANT}
# installed, not run from a source tree (pip compiles the installed modules)
COPY pyproject.toml /tmp/src/
COPY tandem /tmp/src/tandem
COPY tandem_demo /tmp/src/tandem_demo
RUN pip install /tmp/src && rm -rf /tmp/src
COPY models /opt/tandem/models
# runs as an unprivileged user (the manifests' runAsUser); its home keeps the compiled kernels
RUN useradd --create-home --uid 1000 tandem
USER 1000
WORKDIR /home/tandem
EXPOSE 8000 8100 7100 50051
CMD ["python", "-m", "tandem.cli", "--help"]
