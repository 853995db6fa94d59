# syntax=docker/dockerfile:1
# The gateway's image (docs/operations.md): multi-stage, non-root, a current Node LTS.
#
#   docker build -t tenancy-gateway .
#   docker run --rm -p 8080:8080 -p 9091:9091 tenancy-gateway      # embedded database, for trying it out
#   docker run --rm -e DATABASE_URL=postgres://… -e ENCRYPTION_KEY=… -e REDIS_URL=redis://… tenancy-gateway
#
# .ci/docker-check lints this file and replays its stages without Docker (build, production install,
# the runtime stage's COPYs, ENV, CMD and HEALTHCHECK), so keep RUN lines of the build and deps
# stages to commands that use paths relative to WORKDIR.

# Node 26 is the Active LTS line (LTS since 2026-10-28, maintained until 2029-04-30); trixie
# (Debian 13) is its default Debian and is supported past that date, unlike bookworm. The tag is
# pinned to a patch release; for byte-for-byte reproducible builds also pin its digest
# (node:26.11.1-trixie-slim@sha256:…, from `docker buildx imagetools inspect`) and let Renovate or
# Dependabot bump both. One ARG, so all three stages always share one Node.
ARG NODE_IMAGE=node:26.11.1-trixie-slim

# --- build: all dependencies, TypeScript → dist/ -------------------------------------------------
FROM ${NODE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: the only dependency with an install script is esbuild (a development
# dependency; denied in package.json's allowScripts too), which checks its binary: the build's
# esbuild (tsx, and the console's bundle, docs/console.md) runs the binary of its platform
# package, installed without scripts.
RUN --mount=type=cache,target=/root/.npm,sharing=locked \
    npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# --- deps: production dependencies only ----------------------------------------------------------
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no production dependency has an install script (none is marked
# hasInstallScript in package-lock.json); .ci/docker-check fails if one ever gets one.
RUN --mount=type=cache,target=/root/.npm,sharing=locked \
    npm ci --omit=dev --ignore-scripts --no-audit --no-fund
# The one install step the image needs: postgres.js mended as `postinstall` mends it in a checkout
# (scripts/patch-postgres.mjs;
# docs/decisions/0160-postgres-js-as-installed-mended-where-it-writes.md).
COPY scripts/patch-postgres.mjs ./scripts/
RUN node scripts/patch-postgres.mjs

# --- runtime -------------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
# DATA_DIR: the embedded database (PGlite, used only when DATABASE_URL is unset) needs a writable
# directory, so a plain `docker run` works; mount a volume on /data to keep it across containers.
# With DATABASE_URL set nothing is written, and the root filesystem can be read-only.
# NODE_OPTIONS: V8's old generation capped at 160 MiB. The live heap is about 110 MiB with the
# in-process cache full; Node's own sizing lets garbage pile up to several times that between full
# collections (RSS 259-497 MB against 189-242 MB capped: bench/RESULTS.md at e5da086). Give the container
# 320 MiB or more, or set NODE_OPTIONS to a cap about half its limit.
ENV NODE_ENV=production \
    NODE_OPTIONS=--max-old-space-size=160 \
    PORT=8080 \
    HOST=0.0.0.0 \
    METRICS_PORT=9091 \
    DATA_DIR=/data
# A named user for `ps` and logs; USER below is numeric so that Kubernetes' runAsNonRoot can check
# it without reading /etc/passwd.
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gateway \
    && mkdir /data \
    && chown 10001:10001 /data \
    && chmod 0700 /data
WORKDIR /app
# Everything below is owned by root and read-only for the gateway's user. package.json is needed
# at run time: its "type": "module" makes dist/*.js ES modules.
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /src/dist ./dist
# The route table: GATEWAY_CONFIG defaults to config/gateway.yaml under WORKDIR; mount another
# file (a Kubernetes ConfigMap) over it, or point GATEWAY_CONFIG elsewhere.
COPY config ./config
USER 10001:10001
EXPOSE 8080 9091
# Docker's own check (Kubernetes ignores it and uses the chart's probes). slim images have no curl:
# node's fetch instead, on 127.0.0.1, which HOST=0.0.0.0 covers.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz',{signal:AbortSignal.timeout(4000)}).then(r=>process.exit(r.status===200?0:1),()=>process.exit(1))"]
# node itself, not npm: the base image's entrypoint execs it, so node is PID 1 and gets SIGTERM,
# which the gateway handles (src/signals.ts: stop accepting, finish requests in flight, flush
# usage, close pools). That drain takes up to SHUTDOWN_DELAY_MS + SHUTDOWN_TIMEOUT_MS (0 + 10 s by
# default), so give `docker stop --time` / terminationGracePeriodSeconds more than their sum. No
# init process is needed: the gateway starts no child processes to reap.
# Source maps turn stack traces of the compiled code back into src/*.ts lines; a stack is only
# formatted when an error is logged (5xx, store failures), never for an ordinary 4xx.
# No V8 flags. --no-allocation-site-pretenuring was here for a while: on Node 20 it kept V8 from
# tenuring request-path allocation sites at startup (1.3-2x the CPU per request in most processes),
# but on this image's Node 26 the gateway spent 11-18% more CPU per request with it than without,
# and only one of fourteen processes without it came near that state (bench/RESULTS.md at e5da086).
# The same image runs the CLI: `docker run … tenancy-gateway dist/cli.js migrate`.
CMD ["node", "--enable-source-maps", "dist/main.js"]
