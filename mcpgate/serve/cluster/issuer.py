"""Where a sealed token was issued, for every kind a worker seals (the MRTR bridge's requestState, a modern child's
requestState, a task id): this instance's name, written into each token; whether the instance a token names is
still in the directory (`home`); and the kind's key, derived from the cluster key so that every instance derives
the same one and no kind of token opens as another (None on a single instance: the sealer makes its own).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the fleet's modules only in a fleet's worker (REDIS_URL)
    from mcpgate.serve.cluster.instances import Cluster

Home = Literal["here", "forward", "restart"]


def where(issuer: str, here: str, lookup: Callable[[str], str | None]) -> Home:
    """Where what a token names is: on this instance, on another live one (forward the request), or on one gone
    from the directory (what it held died with it)."""
    if issuer == here:
        return "here"
    return "forward" if lookup(issuer) is not None else "restart"


def derived_key(cluster_key: bytes, purpose: bytes) -> bytes:
    """The key of one kind of token (`purpose` names it), the same on every instance of the fleet."""
    return hmac.new(cluster_key, purpose, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Issuer:
    instance: str  # written into each token ("" on a single instance)
    lookup: Callable[[str], str | None]  # an instance's directory entry (None: gone)
    key: bytes | None  # the kind's key in a fleet (None: the sealer's own)

    @classmethod
    def of(cls, fleet: Cluster | None, purpose: bytes) -> Issuer:
        if fleet is None:
            return cls("", lambda _instance: None, None)
        return cls(fleet.instance, fleet.lookup, derived_key(fleet.key, purpose))

    def home(self, issuer: str) -> Home:
        """Where a token this kind of sealer issued on instance `issuer` is to be served."""
        return where(issuer, self.instance, self.lookup)
