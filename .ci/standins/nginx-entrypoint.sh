#!/bin/sh
set -e
# Docker gives a container its embedded DNS alone (127.0.0.11), which the official image's
# 15-local-resolvers.envsh picks up. Podman lists the host's servers after its own, and those do not
# know the services' names (an NXDOMAIN would empty the upstream), so this stand-in takes the
# engine's server alone: the first.
if [ -n "$NGINX_ENTRYPOINT_LOCAL_RESOLVERS" ]; then
  NGINX_LOCAL_RESOLVERS=$(awk '$1=="nameserver" {print ($2 ~ ":" ? "[" $2 "]" : $2); exit}' /etc/resolv.conf)
  export NGINX_LOCAL_RESOLVERS
fi
mkdir -p /etc/nginx/conf.d
for template in /etc/nginx/templates/*.template; do
  [ -f "$template" ] || continue
  defined=$(printf '${%s} ' $(env | cut -d= -f1))
  envsubst "$defined" < "$template" > "/etc/nginx/conf.d/$(basename "$template" .template)"
done
exec "$@"
