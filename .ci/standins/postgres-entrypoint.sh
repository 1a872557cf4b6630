#!/bin/sh
set -e
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s' "${POSTGRES_PASSWORD:?}" > /tmp/pwfile
  chown postgres /tmp/pwfile
  su postgres -c "initdb -D '$PGDATA' -U '${POSTGRES_USER:-postgres}' --pwfile=/tmp/pwfile --auth-local=trust --auth-host=scram-sha-256" > /dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  su postgres -c "pg_ctl -D '$PGDATA' -o '-c listen_addresses=' -w start" > /dev/null
  if [ -n "$POSTGRES_DB" ] && [ "$POSTGRES_DB" != "${POSTGRES_USER:-postgres}" ]; then
    su postgres -c "psql -U '${POSTGRES_USER:-postgres}' -d postgres -c 'CREATE DATABASE \"$POSTGRES_DB\"'" > /dev/null
  elif [ "${POSTGRES_USER:-postgres}" != postgres ]; then
    su postgres -c "psql -U '${POSTGRES_USER}' -d postgres -c 'CREATE DATABASE \"$POSTGRES_USER\"'" > /dev/null
  fi
  su postgres -c "pg_ctl -D '$PGDATA' -m fast -w stop" > /dev/null
fi
exec su postgres -c "exec postgres -D '$PGDATA' -c listen_addresses='*'"
