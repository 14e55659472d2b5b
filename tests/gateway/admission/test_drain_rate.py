from tandem.gateway.admission.drain_rate import DrainRate


def test_retry_after_is_the_tenants_tokens_over_its_share_of_the_drain_rate():
    d = DrainRate(window_s=10.0)
    for t in range(10):
        d.record(float(t), 100)          # 1000 tokens over 9 s
    assert abs(d.tokens_per_s(9.0) - 1000 / 9) < 1e-9
    # 1000 tokens ahead at half of ~111 tokens/s: 18 s
    assert d.retry_after_s(9.0, 1000, 0.5, cap_s=60) == 18
    assert d.retry_after_s(9.0, 1000, 0.5, cap_s=10) == 10     # capped by the wait bound
    assert d.retry_after_s(9.0, 0, 0.5, cap_s=60) == 1         # at least 1


def test_nothing_drained_in_the_window_answers_the_cap():
    d = DrainRate(window_s=10.0)
    d.record(0.0, 100)
    assert d.retry_after_s(30.0, 100, 1.0, cap_s=60) == 60
