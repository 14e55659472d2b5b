from tandem.asyncq.event import Event, EventType, batch_end_event, render


def test_render_has_cloudflares_event_shape():
    event = Event(id="e1", type=EventType.SUCCEEDED, batch_id="req-1", account="acct1",
                  model="@cf/meta/llama", payload={"requestId": "req-1", "total": 2},
                  created_at=1746067737.132)
    assert render(event, "sub9") == {
        "type": "cf.workersAi.model.batch.succeeded",
        "source": {"type": "workersAi.model", "modelName": "@cf/meta/llama"},
        "payload": {"requestId": "req-1", "total": 2},
        "metadata": {"accountId": "acct1", "eventSubscriptionId": "sub9",
                     "eventSchemaVersion": 1, "eventTimestamp": "2025-05-01T02:48:57.132Z"},
    }


def test_batch_end_event():
    assert batch_end_event(3, 0, 0) is EventType.SUCCEEDED
    assert batch_end_event(2, 1, 0) is EventType.FAILED
    assert batch_end_event(2, 0, 1) is EventType.FAILED
