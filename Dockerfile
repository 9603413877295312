# rill's OpenAI/Anthropic-compatible server in a container.
#
#   docker build -t rill .
#   docker run --rm -p 8080:8080 rill                                   # the built-in demo model
#   docker run --rm -p 8080:8080 -v $PWD/models:/models -e RILL_MODEL=/models/Qwen3.5-35B-A3B-Q4_K_M.gguf rill
#
# Every `rill serve` flag can be set as RILL_<FLAG> (RILL_PARALLEL, RILL_CTX_SIZE, RILL_API_KEY, ...).
# The kernels are chosen at run time from the CPU's features, so one image runs on any x86-64 (or aarch64) host.

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY assets assets
RUN cargo build --release --locked -p rill-cli \
    && cp target/release/rill /usr/local/bin/rill \
    && strip /usr/local/bin/rill

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin rill \
    && mkdir /models && chown rill /models
COPY --from=build /usr/local/bin/rill /usr/local/bin/rill
USER rill
# Listen on every interface inside the container (the default is loopback).
ENV RILL_HOST=0.0.0.0 \
    RILL_PORT=8080
EXPOSE 8080
VOLUME /models
# SIGTERM drains requests in flight, then exits (rill serve's shutdown).
STOPSIGNAL SIGTERM
ENTRYPOINT ["rill", "serve"]
