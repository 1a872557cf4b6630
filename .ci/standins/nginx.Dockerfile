# Stand-in for docker.io/library/nginx:1.28-alpine: a Debian nginx new enough for `resolve` on an
# upstream server (1.27.3 or later, from forky), with the official image's entrypoint behaviour
# the compose file relies on: templates rendered by envsubst, local resolvers from resolv.conf.
FROM localhost/debian:forky
# The mirror reached here may serve a testing Release file past its Valid-Until date.
RUN apt-get -o Acquire::Check-Valid-Until=false update -qq && apt-get install -y -qq --no-install-recommends nginx gettext-base > /dev/null \
 && rm -rf /var/lib/apt/lists/* /etc/nginx/sites-enabled/* \
 && ln -sf /dev/stdout /var/log/nginx/access.log && ln -sf /dev/stderr /var/log/nginx/error.log
COPY nginx-entrypoint.sh /docker-entrypoint.sh
ENTRYPOINT ["/docker-entrypoint.sh"]
EXPOSE 80
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
