"""Remote upstreams: an MCPGATE_CONFIG entry with a `url` published like a stdio server, its "child" a RemoteChild
(child.py) that runs the relay's client side in the worker, made by the server's RemoteSpec (spec.py)."""
