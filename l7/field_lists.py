"""The fields an operator sets on each HTTP-farm model: what ``services`` writes, forms and the API show, the
configuration document carries and the audit trail records. A module that imports nothing, below the models
(their ``audit_state()``) and everything above them."""

L7FARM_FIELDS = (
    "redirect_ports",
    "http2",
    "hsts_max_age",
    "forwarded_headers",
    "timeout_client",
    "timeout_server",
    "timeout_connect",
    "timeout_http_request",
    "timeout_keep_alive",
    "timeout_tunnel",
    "headers",
    "redirects",
    "error_pages",
    "retry_on",
    "retries",
    "redispatch",
    "accept_proxy",
    "proxy_trusted",
    "default_certificate",
)
SERVICE_FIELDS = (
    "name",
    "position",
    "hosts",
    "host_regex",
    "path_prefix",
    "scheduler",
    "persistence",
    "persistence_ttl",
    "persistence_header",
    "cookie_name",
    "queue_timeout",
    "reuse",
    "headers",
)
BACKEND_OPTION_FIELDS = (
    "service",
    "capacity",
    "tls",
    "tls_verify",
    "tls_sni",
    "slowstart",
    "passive_errors",
    "send_proxy",
)
CERTIFICATE_FIELDS = ("name", "certificate", "chain", "private_key", "acme_domains")
