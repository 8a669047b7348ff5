"""An appliance with something of every kind a backup holds, and a way to make the database a fresh appliance's."""

from __future__ import annotations

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from accounts import second_factor
from accounts import services as accounts
from bgp import services as bgp
from cluster import services as cluster
from farms import health_services, services
from l7 import services as l7
from network import services as network
from network.models import NetworkSettings
from remotelog import services as remotelog

BIND_PASSWORD = "bind-secret-of-the-directory"
TOTP_KEY = "3132333435363738393031323334353637383930"  # RFC 6238's test secret, as django-otp keeps it (hex)


def build(actor, *, vip: str = "198.18.100.20", backends: tuple[str, ...] = ("198.18.1.11", "198.18.1.12")) -> None:
    """Farms (L4 and HTTPS), a policy, a health check, a certificate, accounts of each role with a second factor,
    LDAP with its bind password, RADIUS with its secret, the network's DNS, and the cluster's settings."""
    policy = services.policy_create(name="blocked", type="deny", elements="198.18.200.0/24", actor=actor)
    farm = services.farm_create(
        name="web", vip=vip, ports="80", mode="dnat", scheduler="rr", policies=[policy], actor=actor
    )
    for address in backends:
        services.backend_create(farm=farm, address=address, actor=actor)
    health_services.health_check_create(farm=farm, type="http", http_path="/health", interval=3, actor=actor)
    cert = l7.certificate_self_signed(name="shop-cert", names=["shop.example.com"], actor=actor)
    shop = services.farm_create(name="shop", vip="198.18.100.21", ports="443", mode="https", actor=actor)
    l7.farm_options_update(farm=shop, certificates=[cert], default_certificate=cert, hsts_max_age=600, actor=actor)
    api = l7.service_create(farm=shop, name="api", path_prefix="/api", actor=actor)
    backend = services.backend_create(farm=shop, address="198.18.1.13", port=8080, actor=actor)
    l7.backend_options_update(backend=backend, service=api, capacity=40, actor=actor)

    User = get_user_model()
    for role in ("operator", "viewer"):
        user = User.objects.create_user(f"{role}-1", f"{role}@example.com", f"{role}-password-1")
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    secured = User.objects.create_user("secured", "", "secured-password-1")
    secured.groups.add(Group.objects.get_or_create(name="admin")[0])
    device = accounts.totp_unconfirmed(secured)
    device.key = TOTP_KEY
    device.save()
    device.confirmed = True
    device.save()
    second_factor.recovery_codes_new(secured)

    accounts.ldap_update(
        enabled=True, server_uris="ldap://198.18.0.7", security="starttls", bind_dn="cn=lbweb,dc=example,dc=com",
        bind_password=BIND_PASSWORD, user_search_base="ou=people,dc=example,dc=com",
        group_search_base="ou=groups,dc=example,dc=com", admin_group="cn=admins,ou=groups,dc=example,dc=com",
        actor=actor,
    )  # fmt: skip
    accounts.radius_update(server="198.18.0.8", secret="radius-shared-secret", actor=actor)
    accounts.login_policy_update(second_factor_role="admin", actor=actor)
    remotelog.syslog_server_create(name="siem", host="198.18.0.9", port=514, transport="tcp", actor=actor)
    bgp.peer_create(name="router-1", address="198.18.0.1", asn=65001, password="tcp-md5-secret", actor=actor)
    bgp.announcement_update(announcement=bgp.announcement_of(farm), med=10, communities="65000:100", actor=actor)
    network.settings_update(settings=NetworkSettings.load(), dns_servers="198.18.0.53", ntp_servers="ntp.example")
    cluster.cluster_update(
        vrid=77, vrrp_version=2, auth_pass="vrrp-pw", management_address="198.18.2.100/24",
        token="cluster-token-0123456789", actor=actor,
    )  # fmt: skip


def wipe(keep_username: str = "admin") -> None:
    """The database of a freshly installed appliance: every app's rows gone, one ``admin`` account left (as
    deploy/run.sh makes it), the roles' groups kept (migrations make them)."""
    User = get_user_model()
    for label in (
        "farms",
        "l7",
        "accounts",
        "network",
        "cluster",
        "remotelog",
        "bgp",
        "system",
        "otp_totp",
        "otp_static",
    ):
        for model in apps.get_app_config(label).get_models():
            if model._meta.model_name not in ("auditevent",):
                model.objects.all().delete()
    User.objects.exclude(username=keep_username).delete()
    admin = User.objects.get(username=keep_username)
    admin.set_password("the-fresh-appliance-password")  # deploy/run.sh's LBWEB_ADMIN_PASSWORD, or a generated one
    admin.save()
