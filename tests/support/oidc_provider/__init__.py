"""A throwaway OpenID Connect provider for the login tests: django-oauth-toolkit's OIDC support in a Django project
of its own, run by gunicorn over HTTPS in a process of its own (tests/support/auth_servers.py ``OidcProvider``).

django-oauth-toolkit is a maintained provider from PyPI on the same stack as lbweb (no other runtime to install):
it serves discovery, a JWKS and the authorization-code flow with PKCE, and signs ID tokens with RS256, as the
identity providers lbweb meets do (Keycloak, Entra ID, Authentik). Everything it needs comes from the
environment its starter sets (``OIDC_PROVIDER_DIR``: its database and key; ``OIDC_PROVIDER_ISSUER``).
"""
