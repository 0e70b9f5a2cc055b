"""OAuth 2.1 sign-in for the relay: discovery, registration, the grants, and the token store."""
