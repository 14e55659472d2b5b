import pytest

from tandem.api.openai.responses_store import ResponseNotFound, ResponseStore, StoredResponse


def entry(n: int, tenant: str | None = None) -> StoredResponse:
    return StoredResponse({"id": f"r{n}"}, ({"role": "user", "content": str(n)},), tenant)


def test_least_recently_used_goes_first():
    store = ResponseStore(max_entries=2)
    store.put("r1", entry(1))
    store.put("r2", entry(2))
    assert store.get("r1", None).response == {"id": "r1"}     # r1 now the most recent
    store.put("r3", entry(3))
    assert len(store) == 2
    assert store.get("r3", None).conversation[0]["content"] == "3"
    assert store.get("r1", None).response["id"] == "r1"
    with pytest.raises(ResponseNotFound):
        store.get("r2", None)


def test_unknown_id_is_a_404_naming_the_param():
    with pytest.raises(ResponseNotFound) as e:
        ResponseStore().get("resp_x", None, "previous_response_id")
    assert e.value.status == 404 and e.value.param == "previous_response_id"
    assert "resp_x" in e.value.message


def test_delete():
    store = ResponseStore()
    store.put("r1", entry(1))
    assert store.delete("r1", None) and not store.delete("r1", None)
    assert len(store) == 0


def test_another_tenants_response_is_unknown():
    """Only its creator reads or deletes a stored response; another tenant (or the anonymous one)
    gets exactly the error of an id that never existed."""
    store = ResponseStore()
    store.put("r1", entry(1, "key-0"))
    for other in ("key-1", None):
        with pytest.raises(ResponseNotFound) as e:
            store.get("r1", other, "previous_response_id")
        with pytest.raises(ResponseNotFound) as unknown:
            store.get("r9", other, "previous_response_id")
        assert (e.value.message.replace("r1", "r9"), e.value.param) == (unknown.value.message, unknown.value.param)
        assert not store.delete("r1", other)
    assert store.get("r1", "key-0").response == {"id": "r1"}
    assert store.delete("r1", "key-0") and len(store) == 0
