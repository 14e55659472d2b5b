"""The cluster secret: the credential of the cluster itself, as opposed to tenants' API keys.

Every `/internal/*` route (a worker's generate, stats, KV events, role; the gateway's register,
deregister, drain, workers, planner) accepts only a caller presenting it, in the header
`x-tandem-cluster-secret: SECRET` (what tandem sends) or as `Authorization: Bearer SECRET` on an
internal route (for people with curl); tandem/api/auth.py applies the rule. The gateway sends it
on every call to its workers, a worker on every heartbeat to its gateway, a decode worker in
every KV pull from a prefill worker's transfer server (tandem/transfer/control.py), `tandem up`
in its readiness probe and role switches.

Only the CLI reads it (flags, a file, or the environment variable below: tandem/cli/secret_flags.py);
`tandem up` generates one per run and hands it to its children in their environment, where `ps`
does not show it. Configs keep it out of their repr.
"""

from __future__ import annotations

import hmac

HEADER = "x-tandem-cluster-secret"
ENV_VAR = "TANDEM_CLUSTER_SECRET"


def matches(given: bytes | str | None, secret: str | None) -> bool:
    """Whether `given` is the secret, in time independent of where they differ."""
    if given is None or secret is None:
        return False
    if isinstance(given, str):
        given = given.encode()
    return hmac.compare_digest(given, secret.encode())


def headers(secret: str | None) -> dict[str, str]:
    """The request headers that present `secret` (none without one)."""
    return {HEADER: secret} if secret else {}
