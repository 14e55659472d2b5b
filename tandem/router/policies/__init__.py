"""Routing policies: pure functions of a Snapshot (see base.py). `make_policy` builds one by name."""

from __future__ import annotations

from tandem.router.policies.affinity import Affinity, AffinityConfig
from tandem.router.policies.base import Policy
from tandem.router.policies.combined import Combined
from tandem.router.policies.least_requests import LeastRequests
from tandem.router.policies.prefix_aware import PrefixAware, PrefixAwareConfig
from tandem.router.policies.round_robin import RoundRobin
from tandem.router.policies.token_aware import TokenAware, TokenAwareConfig

POLICY_NAMES = ("default", "round_robin", "least_requests", "token_aware", "prefix_aware", "affinity")


def make_policy(name: str) -> Policy:
    """A policy with default settings; raises ValueError naming the choices."""
    builders = {
        "default": Combined,
        "round_robin": RoundRobin,
        "least_requests": LeastRequests,
        "token_aware": TokenAware,
        "prefix_aware": PrefixAware,
        "affinity": Affinity,
    }
    if name not in builders:
        raise ValueError(f"unknown routing policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
    return builders[name]()


__all__ = ["Affinity", "AffinityConfig", "Combined", "LeastRequests", "POLICY_NAMES", "Policy",
           "PrefixAware", "PrefixAwareConfig", "RoundRobin", "TokenAware", "TokenAwareConfig",
           "make_policy"]
