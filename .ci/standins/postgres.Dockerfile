# Stand-in for docker.io/library/postgres:17-alpine: Debian's PostgreSQL (15), with an entrypoint
# that honours POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB on first start, as the official one does.
FROM localhost/debian:bookworm
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql-15 postgresql-client-15 > /dev/null \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
EXPOSE 5432
CMD ["postgres"]
