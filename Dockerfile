# The phalanx image: the `phalanx` binary, and PyTorch with the `phalanx` torch.distributed
# backend for PyTorch scripts. Used by docs/kubernetes.md (Kubeflow Trainer v2).
#   docker build -t phalanx:latest .
# Built in two stages, so the image carries no Rust toolchain.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p phalanx-cli \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q maturin torch==2.15.0 \
 && PATH=/opt/venv/bin:$PATH /opt/venv/bin/pip install -q --no-build-isolation --no-deps ./python

FROM debian:bookworm-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3 iproute2 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/venv /opt/venv
COPY --from=build /src/target/release/phalanx /usr/local/bin/phalanx
COPY --from=build /src/data /opt/phalanx/data
ENV PATH=/opt/venv/bin:$PATH PHALANX_PYTHON=/opt/venv/bin/python
WORKDIR /opt/phalanx
ENTRYPOINT []
CMD ["phalanx", "--help"]
