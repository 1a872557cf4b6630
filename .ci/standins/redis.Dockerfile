# Stand-in for docker.io/library/redis:7-alpine: Debian's redis-server, listening on every address
# with protected mode off, as the official image builds it.
FROM localhost/debian:bookworm
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server redis-tools > /dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
EXPOSE 6379
CMD ["redis-server"]
