# Shell functions shared by deploy/setup.sh (which the README's deploy/run.sh runs) and deploy/install.sh.
# Sourced, not run: `. deploy/lib.sh`.

# Debian packages lbweb runs on (python-nftables from PyPI loads libnftables1; Redis is lbweb's own on a unix socket;
# util-linux: setpriv, for deploy/privdrop; certbot: ACME certificates, run by the worker, dataplane/l7/acme.py;
# libpcre2-8-0: HAProxy's regex library, loaded by l7/pcre2.py to check host regexes as HAProxy does; rsyslog and
# rsyslog-gnutls: remote syslog over UDP, TCP and TLS, dataplane/syslog/).
LBWEB_APT_PACKAGES=(python3 python3-venv python3-pip nftables libnftables1 conntrack iproute2 redis-server util-linux haproxy libpcre2-8-0 keepalived conntrackd certbot rsyslog rsyslog-gnutls tzdata)
# What pip needs to build the virtualenv: python-ldap (django-auth-ldap's LDAP client: LDAP logins) comes from PyPI
# as source only, compiled against Debian's libldap. Only where a virtualenv is built (setup, install, the .deb's
# build host); the .deb depends on the libraries the result loads (deploy/deb/build.sh), not on these.
LBWEB_BUILD_APT_PACKAGES=(gcc python3-dev libldap2-dev libsasl2-dev)

# lbweb_apt_install PACKAGE...: install those that are missing; apt-get runs only when one is.
lbweb_apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    echo "lbweb: installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
}

# lbweb_install_packages: lbweb's packages, what building its virtualenv needs, and LBWEB_EXTRA_APT; nodejs/npm
# (front-end packages) when npm is missing.
lbweb_install_packages() {
  # shellcheck disable=SC2086  # LBWEB_EXTRA_APT is a space-separated list
  lbweb_apt_install "${LBWEB_APT_PACKAGES[@]}" "${LBWEB_BUILD_APT_PACKAGES[@]}" ${LBWEB_EXTRA_APT:-}
  command -v npm >/dev/null 2>&1 || lbweb_apt_install nodejs npm
}

# lbweb_create_users HOME: the system users of deploy/PROCESSES.md, when absent: lbweb (home HOME, the state
# directory) runs every lbweb process; lbweb-probe (own group, no home) runs only `command` health checks;
# lbweb-haproxy (own group, no home) runs HAProxy, the engine of HTTP farms.
lbweb_create_users() {
  getent group lbweb >/dev/null || groupadd --system lbweb
  getent passwd lbweb >/dev/null ||
    useradd --system --gid lbweb --home-dir "$1" --no-create-home --shell /usr/sbin/nologin lbweb
  getent group lbweb-probe >/dev/null || groupadd --system lbweb-probe
  getent passwd lbweb-probe >/dev/null ||
    useradd --system --gid lbweb-probe --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin lbweb-probe
  getent group lbweb-haproxy >/dev/null || groupadd --system lbweb-haproxy
  getent passwd lbweb-haproxy >/dev/null ||
    useradd --system --gid lbweb-haproxy --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin \
      lbweb-haproxy
}

# lbweb_haproxy_dirs DIR: HAProxy's directories (deploy/PROCESSES.md): conf/ the worker (lbweb) writes and
# HAProxy's group reads, sock/ where HAProxy puts its master socket for lbweb's group, log/ where lbweb's rsyslog
# makes the access log socket HAProxy's group sends to. Setgid: files take the directory's group.
lbweb_haproxy_dirs() {
  install -d -o root -g root -m 0755 "$1"
  install -d -o lbweb -g lbweb-haproxy -m 2750 "$1/conf"
  install -d -o lbweb-haproxy -g lbweb -m 2750 "$1/sock"
  install -d -o lbweb -g lbweb-haproxy -m 2750 "$1/log"
}
