from tandem.asyncq.signature import sign, verify


def test_signature_verifies_only_the_signed_body_secret_and_time():
    body = b'{"type":"cf.workersAi.model.batch.queued"}'
    header = sign("secret", body, 1_700_000_000)
    assert header.startswith("t=1700000000,v1=") and len(header.split("v1=")[1]) == 64
    assert verify("secret", header, body, now=1_700_000_100)
    assert not verify("secret", header, body + b" ", now=1_700_000_100)
    assert not verify("other", header, body, now=1_700_000_100)
    assert not verify("secret", header, body, now=1_700_000_000 + 301)   # a replay, too old
    assert not verify("secret", "v1=abc", body, now=1_700_000_000)
    assert not verify("secret", "garbage", body, now=1_700_000_000)
