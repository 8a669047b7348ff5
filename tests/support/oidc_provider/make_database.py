"""Make the provider's database: its tables, the test's users and groups, and lbweb's client registration.

Run by tests/support/auth_servers.py ``OidcProvider`` with the provider's settings; reads what to make from the
environment (``OIDC_PROVIDER_USERS``: JSON of name -> [password, groups]; ``OIDC_PROVIDER_CLIENT``: JSON of id, secret
and redirect URI).
"""

import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.oidc_provider.settings")
django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402

call_command("migrate", verbosity=0)
for name, (password, groups) in json.loads(os.environ["OIDC_PROVIDER_USERS"]).items():
    user = User.objects.create_user(name, f"{name}@lbweb.test", password)
    user.groups.set(Group.objects.get_or_create(name=group)[0] for group in groups)
client = json.loads(os.environ["OIDC_PROVIDER_CLIENT"])
Application.objects.create(
    name="lbweb",
    client_id=client["id"],
    client_secret=client["secret"],
    client_type=Application.CLIENT_CONFIDENTIAL,
    authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
    redirect_uris=client["redirect_uri"],
    algorithm=Application.RS256_ALGORITHM,
    skip_authorization=True,
)
