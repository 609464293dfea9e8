# punctual as a container: the single executable (scripts/build-binary.mjs) on a slim Debian, as a non-root user.
#   docker build --build-arg PUNCTUAL_BUILD_COMMIT=$(git rev-parse HEAD) -t punctual .
#   docker run -p 127.0.0.1:8080:8080 -v punctual-data:/data punctual
# Three nodes with compose, and what to change for production: docs/deploy.md.

# Build stage: the same Node as the one inside the executable (the SEA blob and the Node binary must match,
# and the addon is compiled against this Node's ABI). node:*-bookworm has g++, make, python3 and binutils.
FROM node:20.20.2-bookworm AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY . .
# .git is not in the build context: pass the commit for `punctual --version` (40 hex digits).
ARG PUNCTUAL_BUILD_COMMIT=
ENV NODE_OPTIONS=
RUN PUNCTUAL_BUILD_COMMIT="$PUNCTUAL_BUILD_COMMIT" node scripts/build-binary.mjs

# Runtime stage: no Node, no npm; curl only for the HEALTHCHECK.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 punctual \
 && useradd --system --uid 10001 --gid punctual --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin punctual \
 && install -d -o punctual -g punctual -m 700 /data /var/cache/punctual
COPY --from=build /src/dist/punctual-linux-x64 /usr/local/bin/punctual
# NODE_OPTIONS would still apply to the executable (it is Node inside): cleared. The addon cache is a
# folder of the image, filled below, so the container also runs with --read-only.
ENV NODE_OPTIONS= \
    PUNCTUAL_CACHE_DIR=/var/cache/punctual \
    PUNCTUAL_DATA=/data \
    PUNCTUAL_LISTEN=0.0.0.0:8080 \
    PUNCTUAL_PEER_LISTEN=0.0.0.0:8081
USER punctual:punctual
# Unpacks the SQLite addon into the image and fails the build if the executable cannot run on this base.
RUN punctual doctor
WORKDIR /data
VOLUME ["/data"]
# 8080: client API (HTTP/1.1 and h2c); 8081: Raft peer transport.
EXPOSE 8080 8081
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:8080/healthz || exit 1
# serve handles SIGTERM: stops accepting, finishes or hands over in-flight work, flushes, exits 0.
# Give it time to do so: docker stop --time 30 (compose: stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/punctual"]
CMD ["serve"]
