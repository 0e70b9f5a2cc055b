"""The instances of a fleet together (REDIS_URL): membership and ids (instances.py), forwarding a request to
the instance that holds it (forward.py, peers.py), per-principal session caps (caps.py), the Redis client
(redis_client.py)."""
