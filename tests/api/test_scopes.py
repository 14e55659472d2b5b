"""The scope each route needs and the account a Workers AI path names (tandem/api/scopes.py)."""

import pytest

from tandem.api.scopes import path_account, required_scope, route_path

WAI = "/client/v4/accounts/acc-1/ai/run/@cf/meta/llama"


@pytest.mark.parametrize("path,query,scope", [
    ("/v1/chat/completions", b"", "ai:run"), ("/v1/completions", b"", "ai:run"),
    ("/v1/responses", b"", "ai:run"), ("/v1/responses/resp_1", b"", "ai:run"),
    ("/v1/messages", b"", "ai:run"), ("/v1/messages/count_tokens", b"", "ai:run"),
    (WAI, b"", "ai:run"), (WAI, b"queueRequest=false", "ai:run"),
    (WAI, b"queueRequest=true", "ai:batch"), (WAI, b"queueRequest=TRUE", "ai:batch"),
    (WAI, b"x=1&queueRequest=true", "ai:batch"),
    ("/v1/files", b"", "ai:batch"), ("/v1/files/file-1/content", b"", "ai:batch"),
    ("/v1/batches", b"", "ai:batch"), ("/v1/batches/b1/cancel", b"", "ai:batch"),
    ("/client/v4/accounts/acc-1/ai/batches/r1/events", b"", "ai:batch"),
    ("/client/v4/accounts/acc-1/event_subscriptions/subscriptions", b"", "ai:batch"),
    ("/admin", b"", "admin"), ("/admin/accounts", b"", "admin"), ("//admin/accounts", b"", "admin"),
    ("//v1/files", b"", "ai:batch"),
    ("/v1/models", b"", None), ("/tokenize", b"", None), ("/version", b"", None),
    ("/client/v4/accounts/acc-1/ai/usage", b"", None), ("/administrator", b"", None),
    ("/v1/filesystem", b"", None),
])
def test_required_scope(path, query, scope):
    assert required_scope(path, query) == scope


def test_path_account():
    assert path_account(WAI) == "acc-1"
    assert path_account("/client/v4/accounts/acc-1") == "acc-1"
    assert path_account("/client/v4/accounts/") is None
    assert path_account("/client/v4/accounts") is None
    assert path_account("/v1/chat/completions") is None
    assert path_account("//client/v4/accounts/x/ai/run/m") == "x"


def test_route_path_drops_the_root_path():
    assert route_path({"path": "/api/v1/files", "root_path": "/api"}) == "/v1/files"
    assert route_path({"path": "/apiv1/files", "root_path": "/api"}) == "/apiv1/files"
    assert route_path({"path": "/v1/files"}) == "/v1/files"
