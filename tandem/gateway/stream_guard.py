"""Where tandem.gateway.app imports its guard from; the guard is tandem.http.disconnect_guard.

build_app (tandem.server.app) installs a DisconnectGuard on every app, the gateway's included;
the gateway's own one, outermost, watches and the inner one passes requests through.
"""

from tandem.http.disconnect_guard import DisconnectGuard as StreamGuard

__all__ = ["StreamGuard"]
