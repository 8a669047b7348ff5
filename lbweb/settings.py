"""Settings, twelve-factor style: every deployment choice comes from the environment.

LBWEB_VAR_DIR   where state lives (default ./var): SQLite database, Redis socket, secret key
DATABASE_URL    e.g. postgres://user:pass@host/db (default: SQLite under LBWEB_VAR_DIR, WAL)
REDIS_URL       e.g. redis://127.0.0.1:6379/0 (default: lbweb's own Redis on LBWEB_VAR_DIR/redis.sock)
SECRET_KEY      (default: generated once into LBWEB_VAR_DIR/secret_key, mode 0600)
DEBUG           1 to enable Django's debug mode
ALLOWED_HOSTS   comma separated (default: *; see below)
LBWEB_TOKEN_TTL_HOURS, LBWEB_LOGIN_FAILURE_LIMIT, LBWEB_LOGIN_LOCKOUT_MINUTES, LBWEB_HSTS_SECONDS,
LBWEB_PROXY_SSL_HEADER: API tokens, login lockout and HTTPS, below.
LBWEB_OIDC_ALLOW_HTTP_LOCALHOST: an http OpenID Connect issuer on loopback (a test provider), below.
The directories (LDAP, RADIUS, OpenID Connect) and the second factor's policy are in the database
(accounts/models.py): System › Authentication.
"""

import os
import secrets
import socket
from datetime import timedelta
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF

from lbweb.paths import BASE_DIR, ensure_private_dir, haproxy_dir, var_dir, write_private

VAR_DIR = ensure_private_dir(var_dir())  # 0700: database, secret key, TLS key


def _secret_key() -> str:
    if os.environ.get("SECRET_KEY"):
        return os.environ["SECRET_KEY"]
    path = VAR_DIR / "secret_key"
    if not path.exists():
        write_private(path, secrets.token_urlsafe(50).encode())
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("DEBUG", "0") == "1"
# Default "*": an appliance is reached by addresses and names nobody knows at install time (its DHCP
# address, a VRRP VIP, a NAT in front, a DNS name given later), and a wrong list locks the operator out
# of the UI. lbweb builds no absolute URL from the Host header (redirects are relative, no mail is sent) but
# single sign-on's redirect URI, which the provider checks against the one registered, and its session cookie
# is bound to the name the operator logs in under, so a forged Host gains nothing;
# set ALLOWED_HOSTS=lb1.example,198.18.0.10 to refuse every other name (defence in depth, e.g. against
# DNS rebinding).
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "csp",
    # Second factors (TOTP, recovery codes): django-otp's models, in the database like every other row.
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "farms",
    "monitoring",
    "system",
    "accounts",
    "network",
    "l7",
    "cluster",
    "bgp",
    "remotelog",
    # The other processes' packages, for their management commands (manage.py kernel, collector, healthd);
    # they hold no models, and the web imports none of their modules (tests/repo/test_import_contracts.py).
    "dataplane",
    "collector",
    "healthd",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # request.user.is_verified(): whether this session passed its second factor (django-otp); then an account
    # that must show one but has not (a password-only login, e.g. the admin site's) reaches nothing else.
    "django_otp.middleware.OTPMiddleware",
    "accounts.middleware.SecondFactorRequired",
    # A cluster's backup refuses writes, naming the master (cluster/middleware.py).
    "cluster.middleware.BackupRefusesWrites",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
]

# django-axes first: it refuses a locked-out username+address before the password is even checked, whichever
# backend would check it. Then the directories (each off until System › Authentication enables it; their settings
# are in the database, accounts/models.py), then local accounts, the fallback an admin can switch off. The OpenID
# Connect backend answers only the provider's callback (it takes no password).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "accounts.backends.radius.RadiusBackend",
    "accounts.backends.ldap.LdapBackend",
    "accounts.backends.local.LocalBackend",
    "accounts.backends.oidc.OidcBackend",
]
# An OpenID Connect issuer must be https; LBWEB_OIDC_ALLOW_HTTP_LOCALHOST=1 also accepts http on this machine's
# loopback (a test provider), nothing else.
LBWEB_OIDC_ALLOW_HTTP_LOCALHOST = os.environ.get("LBWEB_OIDC_ALLOW_HTTP_LOCALHOST", "0") == "1"
# mozilla-django-oidc's own settings that the database does not hold (accounts/backends/oidc.py supplies the rest).
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATE_CLASS = "accounts.oidc_views.OidcLoginStart"
OIDC_CALLBACK_CLASS = "accounts.oidc_views.OidcCallback"

ROOT_URLCONF = "lbweb.urls"
WSGI_APPLICATION = "lbweb.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "farms.roles.role_context",
                "accounts.context.account_context",
                "farms.liveness.liveness_context",
                "lbweb.navigation.navigation_context",
                "cluster.views.cluster_context",
                "l7.views.certificate_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'lbweb.sqlite3'}",
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets the worker read while the web writes; IMMEDIATE avoids lock-upgrade deadlocks.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# -- HTTPS, cookies and browser security headers -----------------------------------------------
# gunicorn serves TLS itself (lbweb/gunicorn_conf.py), so every request of a browser is HTTPS and the
# cookies can be Secure; HttpOnly keeps them from scripts (no page script reads them: the CSRF token
# comes from the form); SameSite=Lax keeps them off cross-site subrequests and POSTs while a link from
# elsewhere (a ticket, a mail) still opens the UI logged in, which Strict would not.
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SECURE = True
CSRF_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
# HSTS: browsers ignore it on a connection whose certificate they do not trust (the self-signed one
# made at first start), so it binds only once the operator installs a trusted certificate, and then
# for a year, the usual value. includeSubDomains stays off: the names under the appliance's own name
# may be services this load balancer fronts, which lbweb cannot promise to serve over HTTPS.
SECURE_HSTS_SECONDS = int(os.environ.get("LBWEB_HSTS_SECONDS", str(365 * 24 * 3600)))
SECURE_HSTS_INCLUDE_SUBDOMAINS = False
SECURE_HSTS_PRELOAD = False
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Behind a reverse proxy that terminates TLS, e.g. LBWEB_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO: only
# then is the header trusted (a client could otherwise claim HTTPS over plain HTTP).
if os.environ.get("LBWEB_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (os.environ["LBWEB_PROXY_SSL_HEADER"], "https")
# Content-Security-Policy (django-csp): only lbweb's own scripts, styles, images and API calls; no inline
# script or style attribute (the pages keep theirs in static/), nothing may frame the UI.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

# -- login lockout (django-axes) -----------------------------------------------------------------
# LBWEB_LOGIN_FAILURE_LIMIT failures for one username from one address lock that pair out for
# LBWEB_LOGIN_LOCKOUT_MINUTES, for the UI login, the admin site and the API's token login alike. The
# pair, not the username alone: otherwise anyone could lock the real admin out from anywhere. The
# address is the connection's (REMOTE_ADDR): no X-Forwarded-For is believed.
AXES_FAILURE_LIMIT = int(os.environ.get("LBWEB_LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("LBWEB_LOGIN_LOCKOUT_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
# What axes keeps of a failed login's form: never the password, a second factor's code, nor the authorization code
# of a refused single sign-on.
AXES_SENSITIVE_PARAMETERS = ["password", "otp_token", "code"]

# -- API tokens (django-rest-knox) ---------------------------------------------------------------
# Stored as SHA-512 digests (a stolen database holds no usable token), each with its own expiry and
# revocable alone. Ten hours by default: a working day of scripts or an operator's shift, after which a
# leaked token is worthless; long-lived automation asks for a fresh one (POST /api/v1/auth/login/ or
# manage.py create_token --ttl-hours).
LBWEB_TOKEN_TTL = timedelta(hours=float(os.environ.get("LBWEB_TOKEN_TTL_HOURS", "10")))
REST_KNOX = {
    "TOKEN_TTL": LBWEB_TOKEN_TTL,
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Front-end packages come from npm (package.json, installed by deploy/setup.sh), served as our own static files.
CHARTJS_DIST = BASE_DIR / "node_modules" / "chart.js" / "dist"
if CHARTJS_DIST.is_dir():
    STATICFILES_DIRS.append(("vendor/chart.js", CHARTJS_DIST))
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "farms:farm_list"
LOGOUT_REDIRECT_URL = "login"

# HTTP farms (l7/): HAProxy reads conf/ (written by the worker) and listens for its master CLI in sock/;
# see deploy/PROCESSES.md for the owners and modes.
LBWEB_HAPROXY_DIR = haproxy_dir()  # the appliance's /run/lbweb-haproxy, one per state directory otherwise
LBWEB_HAPROXY_CONF_DIR = LBWEB_HAPROXY_DIR / "conf"
LBWEB_HAPROXY_SOCKET = os.environ.get("LBWEB_HAPROXY_SOCKET", str(LBWEB_HAPROXY_DIR / "sock" / "master.sock"))
LBWEB_CERT_WARN_DAYS = int(os.environ.get("LBWEB_CERT_WARN_DAYS", "21"))
# ACME (dataplane/l7/acme.py): the directory URL of the CA, the account's e-mail, certbot's state.
LBWEB_ACME_SERVER = os.environ.get("LBWEB_ACME_SERVER", "")
LBWEB_ACME_EMAIL = os.environ.get("LBWEB_ACME_EMAIL", "")
LBWEB_ACME_DIR = Path(os.environ.get("LBWEB_ACME_DIR", str(VAR_DIR / "acme")))

REDIS_SOCKET = VAR_DIR / "redis.sock"
REDIS_URL = os.environ.get("REDIS_URL") or f"unix://{REDIS_SOCKET}"
_BROKER_URL = REDIS_URL.replace("unix://", "redis+socket://", 1) if REDIS_URL.startswith("unix://") else REDIS_URL

CELERY_BROKER_URL = _BROKER_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "dataplane"
# The worker's tasks live in the worker's package (dataplane/); their names are those they had when they sat in
# the web apps (farms.tasks.*, ...), so beat's schedule, the routes and messages already queued keep working.
# Only the worker imports them: the web sends tasks by name.
CELERY_IMPORTS = (
    "dataplane.tasks",
    "dataplane.l7.tasks",
    "dataplane.cluster.tasks",
    "dataplane.network.tasks",
    "dataplane.bgp.tasks",
    "dataplane.syslog.tasks",
)
CELERY_TASK_ROUTES = {
    "farms.tasks.*": {"queue": "dataplane"},
    "network.tasks.*": {"queue": "dataplane"},
    "l7.tasks.*": {"queue": "dataplane"},
    "cluster.tasks.*": {"queue": "dataplane"},
    "bgp.tasks.*": {"queue": "dataplane"},
    "syslog.tasks.*": {"queue": "dataplane"},
    "system.tasks.*": {"queue": "dataplane"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# The worker runs one task at a time (``-c 1``) in its own process: prefork's pool process beside a main
# process that only dispatches cost ~117 MB more at 10,000 farms (bench/control_plane.py: the summed peak of
# the worker's processes), and crash containment does not need it: libnftables and netlink run in the
# kernel writer process (dataplane/kernel/sandbox.py), which the worker restarts when it dies. The worker's
# heartbeat is a thread, so it beats while a task runs.
CELERY_WORKER_POOL = "solo"
CELERY_BEAT_SCHEDULE = {
    "reconcile": {
        "task": "farms.tasks.reconcile",
        "schedule": float(os.environ.get("LBWEB_RECONCILE_SECONDS", "30")),
    },
    "acme-renew": {"task": "l7.tasks.acme_renew", "schedule": 12 * 3600.0},  # when 30 days or fewer are left
    # leastconn farms: weights from live conntrack counts (one query and nothing else when no farm uses it).
    "least-connections": {
        "task": "farms.tasks.balance_least_connections",
        "schedule": float(os.environ.get("LBWEB_LEASTCONN_SECONDS", "5")),
    },
    # HA pair: record this node's transitions, tell the peer our role, push the configuration if it missed some.
    "cluster-heartbeat": {"task": "cluster.tasks.heartbeat", "schedule": 2.0},
    # BGP: the routes follow what can serve here (a farm applied, a drain period over) within one beat.
    "bgp-heartbeat": {"task": "bgp.tasks.heartbeat", "schedule": 2.0},
    # Scheduled backups (System › Backup): written when the last one is the schedule's interval old.
    "backup": {
        "task": "system.tasks.scheduled_backup",
        "schedule": float(os.environ.get("LBWEB_BACKUP_CHECK_SECONDS", "300")),
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# The worker waits this long after an apply before the next one, so a burst of
# writes becomes a handful of transactions instead of one per write.
LBWEB_APPLY_COALESCE_SECONDS = float(os.environ.get("LBWEB_APPLY_COALESCE_SECONDS", "0.2"))
# This appliance's name in a cluster (cluster.models.Node.name); its cluster files live in VAR_DIR/cluster.
LBWEB_NODE_NAME = os.environ.get("LBWEB_NODE_NAME") or socket.gethostname()
LBWEB_CLUSTER_DIR = Path(os.environ.get("LBWEB_CLUSTER_DIR") or VAR_DIR / "cluster")
# BGP (bgp/, dataplane/bgp/): BIRD's file, control socket and pid file, written by the worker, run by its wrapper.
LBWEB_BGP_DIR = Path(os.environ.get("LBWEB_BGP_DIR") or VAR_DIR / "bgp")
# The worker makes sure the kernel forwards packets (an LB that does not route balances nothing).
LBWEB_MANAGE_SYSCTL = os.environ.get("LBWEB_MANAGE_SYSCTL", "1") == "1"

# Monitoring: the collector samples every LBWEB_METRICS_INTERVAL seconds; a conntrack census (active
# connections, SNAT ports) walks the whole table, so it is spaced out to cost at most this share of one core.
LBWEB_METRICS_INTERVAL = float(os.environ.get("LBWEB_METRICS_INTERVAL", "2"))
LBWEB_METRICS_CENSUS_BUDGET = float(os.environ.get("LBWEB_METRICS_CENSUS_BUDGET", "0.015"))
# The dashboard warns when the conntrack table is fuller than this share of nf_conntrack_max.
LBWEB_CONNTRACK_WARN = float(os.environ.get("LBWEB_CONNTRACK_WARN", "0.8"))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "knox.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Roles (admin, operator, viewer) by Django group: farms/roles.py.
    "DEFAULT_PERMISSION_CLASSES": ["farms.api.permissions.RolePermission"],
    "DEFAULT_FILTER_BACKENDS": ["farms.filtersets.FilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "farms.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "lbweb.api_schema.AutoSchema",
    "EXCEPTION_HANDLER": "farms.api.exceptions.exception_handler",
    # JSON bodies with a depth and a size limit, answered in JSON (lbweb/api_parsers.py); forms as DRF's.
    "DEFAULT_PARSER_CLASSES": [
        "lbweb.api_parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}


def _management_ports() -> tuple[int, ...]:
    """The TCP ports lbweb's own UI and API (and its redirect to them) listen on, on every address of the
    appliance: a farm may not take them on one of the appliance's own addresses (farms/validation.py,
    ``management_errors``). Where lbweb binds itself (deploy/run.sh, the tests) they are LBWEB_BIND's and
    LBWEB_HTTP_BIND's; the appliance's sockets are systemd's, whose unit says them
    (deploy/systemd/lbweb-web.service: LBWEB_MANAGEMENT_PORTS)."""
    listed = os.environ.get("LBWEB_MANAGEMENT_PORTS")
    if listed:
        return tuple(sorted({int(port) for port in listed.replace(",", " ").split()}))
    binds = (os.environ.get("LBWEB_BIND", "0.0.0.0:8000"), os.environ.get("LBWEB_HTTP_BIND", "0.0.0.0:8080"))
    return tuple(sorted({int(bind.rsplit(":", 1)[-1]) for bind in binds}))


LBWEB_MANAGEMENT_PORTS = _management_ports()

# The largest body the endpoints that take whole documents accept (the configuration and nftlb imports, the
# cluster's sync: lbweb/api_parsers.py); every other endpoint takes Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB).
LBWEB_IMPORT_MAX_BYTES = int(os.environ.get("LBWEB_IMPORT_MAX_BYTES", str(64 * 1024 * 1024)))

SPECTACULAR_SETTINGS = {
    "TITLE": "lbweb API",
    "DESCRIPTION": "Farms (virtual services) and backends of a kernel (nftables) load balancer.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"BackendHealthEnum": "farms.choices.BackendHealthChoices"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "lbweb": {
            "handlers": ["console"],
            "level": os.environ.get("LBWEB_LOG_LEVEL", "INFO"),
        },
        # A request that fails (500) with its traceback, in the web's journal: Django's own handlers print it
        # only with DEBUG and otherwise mail ADMINS, which an appliance has not (a 500 left no trace at all).
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# healthd's heartbeat older than this shows as "health checking stopped".
LBWEB_HEALTHD_STALE_SECONDS = float(os.environ.get("LBWEB_HEALTHD_STALE_SECONDS", "5"))
# A worker's, beat's or collector's heartbeat older than this shows as "<process> not running" on every page.
LBWEB_PROCESS_STALE_SECONDS = float(os.environ.get("LBWEB_PROCESS_STALE_SECONDS", "5"))
# Changes waiting longer than this for the worker show as "N changes waiting for X s" on every page.
LBWEB_APPLY_STALL_SECONDS = float(os.environ.get("LBWEB_APPLY_STALL_SECONDS", "10"))
# Configuration versions kept (each holds the whole export document): farms/versions.py.
LBWEB_CONFIG_VERSIONS_KEEP = int(os.environ.get("LBWEB_CONFIG_VERSIONS_KEEP", "200"))
# Where the worker writes the network as systemd files, in /etc's layout (systemd/network/, ...):
# /etc on the appliance, lbweb's state directory elsewhere (dataplane/network/applier.py).
LBWEB_NETWORK_DIR = os.environ.get("LBWEB_NETWORK_DIR", str(VAR_DIR / "network"))
