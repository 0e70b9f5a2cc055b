"""The instances of a fleet together (REDIS_URL): membership and ids (instances.py), the directory of live
instances (directory.py; an instance gone until its entry is written again: gone.py), forwarding a request to the
instance that holds it (forward.py, its HTTP/1.1 exchange with the owner: exchange.py; peers.py; a POST sent again
after its carrier died: resent.py; streams relayed for others: relayed.py), where a sealed token was issued and its
key (issuer.py), per-principal session caps (caps.py), the Redis client (redis_client.py)."""
