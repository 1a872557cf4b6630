# syntax=docker/dockerfile:1
# The pet store service. CI builds it as written and runs it with docker-compose.yml
# (.ci/compose-check.sh).

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The service alone: the client workspace (client/) is not part of the image.
RUN npm ci --workspaces=false --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build:service

FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    METRICS_HOST=0.0.0.0 \
    METRICS_PORT=9464
WORKDIR /app
COPY package.json package-lock.json ./
# Without the optional embedded database (PGlite): the image always runs on DATABASE_URL.
RUN npm ci --workspaces=false --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY migrations ./migrations
USER node
EXPOSE 3000 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.PORT + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Exec form: signals reach node directly, so SIGTERM drains in-flight requests.
CMD ["node", "--enable-source-maps", "dist/server.js"]
