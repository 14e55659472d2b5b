import pytest

from tandem.api.openai.responses_store import ResponseNotFound, ResponseStore, StoredResponse


def entry(n: int) -> StoredResponse:
    return StoredResponse({"id": f"r{n}"}, ({"role": "user", "content": str(n)},))


def test_least_recently_used_goes_first():
    store = ResponseStore(max_entries=2)
    store.put("r1", entry(1))
    store.put("r2", entry(2))
    assert store.get("r1").response == {"id": "r1"}     # r1 now the most recent
    store.put("r3", entry(3))
    assert len(store) == 2
    assert store.get("r3").conversation[0]["content"] == "3"
    assert store.get("r1").response["id"] == "r1"
    with pytest.raises(ResponseNotFound):
        store.get("r2")


def test_unknown_id_is_a_404_naming_the_param():
    with pytest.raises(ResponseNotFound) as e:
        ResponseStore().get("resp_x", "previous_response_id")
    assert e.value.status == 404 and e.value.param == "previous_response_id"
    assert "resp_x" in e.value.message


def test_delete():
    store = ResponseStore()
    store.put("r1", entry(1))
    assert store.delete("r1") and not store.delete("r1")
    assert len(store) == 0
