"""The sans-IO protocol core shared by serve and relay: standard library only.

Nothing here performs I/O, reads a clock on its own, or imports gevent, flask,
werkzeug or requests; callers pass bytes, times and ids in and get decisions out.
"""
