"""--cluster-secret / --cluster-secret-file (or TANDEM_CLUSTER_SECRET) for `tandem serve`,
`gateway` and `up`: the cluster's own credential (tandem/cluster_secret.py). The one place that
reads it; configs get the value.

Precedence: --cluster-secret, then --cluster-secret-file, then the environment variable. The
flag shows in `ps`; the file (mode 0600) or the environment do not, which is how `tandem up`
passes the secret it generates to its children. Surrounding whitespace (a file's final newline)
is dropped; an empty secret, or one with other characters than printable ASCII (it travels in
an HTTP header), is a usage error.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Mapping, Sequence

from tandem.cluster_secret import ENV_VAR


def add_cluster_secret_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cluster-secret", default=None, metavar="SECRET",
                   help="the credential /internal/* routes accept (workers, gateway and tandem up "
                        "share it); shows in `ps`: prefer --cluster-secret-file or the "
                        f"{ENV_VAR} environment variable")
    g.add_argument("--cluster-secret-file", default=None, metavar="FILE",
                   help="read the cluster secret from FILE (keep it mode 0600; the same file on "
                        "every host of the cluster)")


def cluster_secret_from_args(args: argparse.Namespace, verb: str,
                             environ: Mapping[str, str] = os.environ) -> str | None:
    """The secret the flags or the environment give, None for none; SystemExit when it is empty
    or its file cannot be read."""
    if args.cluster_secret is not None:
        value, where = args.cluster_secret, "--cluster-secret"
    elif args.cluster_secret_file is not None:
        where = f"--cluster-secret-file {args.cluster_secret_file}"
        try:
            with open(args.cluster_secret_file) as f:
                value = f.read()
                mode = os.fstat(f.fileno()).st_mode
        except OSError as exc:
            raise SystemExit(f"tandem {verb}: {where}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            print(f"tandem {verb}: warning: {args.cluster_secret_file} is readable by other users; "
                  f"chmod 600 it", file=sys.stderr)
    elif environ.get(ENV_VAR) is not None:
        value, where = environ[ENV_VAR], f"${ENV_VAR}"
    else:
        return None
    value = value.strip()
    if not value:
        raise SystemExit(f"tandem {verb}: {where} gives an empty cluster secret")
    if not all("!" <= c <= "~" for c in value):   # it travels in an HTTP header
        raise SystemExit(f"tandem {verb}: {where}: a cluster secret is printable ASCII without spaces "
                         f"(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return value


def check_distinct(secret: str | None, api_keys: Sequence[str], verb: str) -> None:
    """A secret that is also a tenant key would open /internal routes to that tenant."""
    if secret is not None and secret in api_keys:
        raise SystemExit(f"tandem {verb}: the cluster secret must differ from every --api-key")


def exposure_warning(*, gateway: bool, registers: bool, api_keys: Sequence[str],
                     secret: str | None) -> str | None:
    """What to log at start-up when /internal routes run without a secret (None: nothing to say;
    a lone `tandem serve` keeps its routes open without a word, as before)."""
    if secret is not None:
        return None
    fix = "give the gateway and every worker the same --cluster-secret-file (tandem up does it itself)"
    if gateway:
        if api_keys:
            return ("--api-key without --cluster-secret: the /internal routes (register, deregister, "
                    "drain, workers, planner) are closed to everyone, tenant keys included, so no "
                    f"worker can register with this gateway; {fix}")
        return ("no --cluster-secret: the /internal routes (register, deregister, drain, workers, "
                "planner) answer anyone who can reach this gateway, and its calls to workers carry "
                f"no credential; {fix}")
    if not registers:
        return None
    if api_keys:
        return ("--api-key without --cluster-secret: this worker's /internal routes are closed to "
                f"everyone, its gateway included, which therefore cannot use it; {fix}")
    return ("--gateway without --cluster-secret: this worker's /internal routes (generate, role, "
            "stats, KV events, KV release) answer anyone who can reach its port, and its KV "
            f"transfer server serves anyone; {fix}")
