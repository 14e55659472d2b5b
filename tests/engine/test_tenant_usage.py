import pytest

from tandem.engine.tenant_usage import TenantUsage, usage_class


def test_usage_halves_every_half_life_and_adds_up():
    u = TenantUsage(half_life_s=10.0)
    u.charge("a", 1000, 0.0)
    assert u.of("a", 10.0) == pytest.approx(500)
    u.charge("a", 100, 10.0)
    assert u.of("a", 20.0) == pytest.approx(300)
    assert u.of("nobody", 5.0) == 0.0


def test_decayed_tenants_are_dropped():
    u = TenantUsage(half_life_s=1.0)
    u.charge("a", 1000, 0.0)
    u.charge("b", 1000, 15.0)
    u.prune(15.0)   # a: 1000 / 2**15 < 1 token
    assert set(u._usage) == {"b"}


def test_classes_double():
    assert [usage_class(t, 100) for t in (0, 99, 100, 299, 300, 700, 1500)] == [0, 0, 1, 1, 2, 3, 4]


def test_half_life_must_be_positive():
    with pytest.raises(ValueError):
        TenantUsage(half_life_s=0)
