import pytest

from awa_django.concurrency import Permit, release_all


class Counter:
    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail

    def __call__(self) -> None:
        self.calls += 1
        if self.fail:
            raise RuntimeError("give-back failed")


def test_release__returns_true_once_then_false_without_effect() -> None:
    give_back = Counter()
    permit = Permit("emails", "hard", give_back)
    assert not permit.released
    assert permit.release() is True
    assert permit.release() is False
    assert permit.release() is False
    assert give_back.calls == 1
    assert permit.released


def test_release__counts_as_released_even_when_give_back_raises() -> None:
    give_back = Counter(fail=True)
    permit = Permit("emails", "overflow", give_back)
    with pytest.raises(RuntimeError):
        permit.release()
    assert permit.release() is False
    assert give_back.calls == 1


def test_permit__reports_queue_and_kind() -> None:
    permit = Permit("reports", "local", Counter())
    assert (permit.queue, permit.kind) == ("reports", "local")
    assert "held" in repr(permit)
    permit.release()
    assert "released" in repr(permit)


def test_release_all__counts_only_permits_it_released() -> None:
    counters = [Counter() for _ in range(3)]
    permits = [Permit("q", "hard", c) for c in counters]
    permits[0].release()
    assert release_all(permits) == 2
    assert release_all(permits) == 0
    assert [c.calls for c in counters] == [1, 1, 1]


def test_release_all__releases_the_rest_after_a_failure_then_reraises() -> None:
    counters = [Counter(), Counter(fail=True), Counter()]
    permits = [Permit("q", "hard", c) for c in counters]
    with pytest.raises(RuntimeError, match="give-back failed"):
        release_all(permits)
    assert all(p.released for p in permits)
    assert [c.calls for c in counters] == [1, 1, 1]
