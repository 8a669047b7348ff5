"""Django authentication backends, one per source of logins; settings.AUTHENTICATION_BACKENDS lists them after
django-axes' (which refuses a locked-out name and address before any of them is asked): RADIUS, LDAP, then local
accounts; the OpenID Connect backend answers only the provider's callback."""
