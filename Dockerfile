# syntax=docker/dockerfile:1
# CPU image of Reverie: every role in one process on the embedded store by default; with
# REDIS_URL and ROLES (or `serve --roles …`) one role of a scale-out (compose.yaml shows both).
#
#   docker build -t reverie .
#   docker run -p 8080:8080 -p 40000-40099:40000-40099/udp -v reverie-data:/data reverie
#
# Debian 12 (bookworm) like our machines, so setup/debian-packages.txt is the package list here
# too: the build stage installs `run` + `build` packages, compiles the native addons (our
# GStreamer addon, better-sqlite3) and the server (TypeScript → dist/, `npm run build`); the
# runtime stage has only the `run` packages, the runtime dependencies and dist/, no sources.
ARG NODE_IMAGE=node:22-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY setup/ setup/
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(setup/packages run build) \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json .npmrc ./
COPY media/gst/ media/gst/
# Every dependency: the build needs TypeScript (a dev dependency); pruned after the build.
RUN npm ci --no-audit --no-fund
COPY . .
# dist/: the server as JavaScript with its pages, word lists and the addon (bin/build.js), so no
# process or worker thread loads tsx at start. Then runtime dependencies only.
RUN npm run build \
 && npm prune --omit=dev --no-audit --no-fund

FROM ${NODE_IMAGE}
WORKDIR /app
COPY setup/ setup/
RUN apt-get update -q \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(setup/packages run) \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /app/node_modules node_modules/
COPY --from=build /app/dist dist/
COPY package.json ./
COPY bin/ bin/
# The image's user `node` (uid 1000) owns only the data volume.
RUN mkdir -p /data && chown node:node /data
USER node

# Listen on every interface; WebRTC on a fixed UDP range so it can be published (one port per
# publisher or viewer session: 100 here). Behind Docker's NAT browsers need the host's address:
# set WEBRTC_ANNOUNCED_ADDRESSES (docs/operations.md, "Ports and NAT").
# WHEP_VIEWERS_PER_NODE: each publisher and each WHEP viewer holds one port of the UDP range;
# the 100 ports carry the streams and 90 viewers (widen the range and this together).
# MALLOC_ARENA_MAX: two glibc malloc arenas, against fragmentation under stream churn
# (docs/operations.md "Memory").
ENV NODE_ENV=production \
    MALLOC_ARENA_MAX=2 \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data \
    WEBRTC_UDP_PORT_RANGE=40000-40099 \
    WHEP_VIEWERS_PER_NODE=90
VOLUME ["/data"]
EXPOSE 8080/tcp 40000-40099/udp

# Readiness, not just liveness: the container is healthy once it serves and its store answers.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

# SIGTERM drains (DRAIN_TIMEOUT, 25 s) before the engine's 10 s default kill: compose sets stop_grace_period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "bin/reverie.js"]
CMD ["serve"]
