from tandem.router.load_tracker import LoadTracker, TokenLoad


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_lifecycle_moves_tokens_from_prefill_to_decode_and_out():
    lt = LoadTracker()
    lt.dispatch("r1", "a", pending=300)
    lt.dispatch("r2", "a", pending=50)
    assert lt.load("a") == TokenLoad(350, 0, 2)
    lt.prefill_done("r1", "a", context=301)
    lt.tokens("r1", "a", 4)
    assert lt.load("a") == TokenLoad(50, 305, 2)
    lt.finish("r1", "a")
    lt.finish("r2", "a")
    lt.finish("r2", "a")  # idempotent
    assert lt.load("a") == TokenLoad(0, 0, 0)


def test_disaggregated_entries_are_per_worker():
    lt = LoadTracker()
    lt.dispatch("r", "p", pending=200)
    lt.finish("r", "p")
    lt.dispatch("r", "d", pending=0, context=201)
    assert lt.load("p") == TokenLoad(0, 0, 0)
    assert lt.load("d") == TokenLoad(0, 201, 1)


def test_report_corrects_then_follows_own_changes_then_expires():
    clock = Clock()
    lt = LoadTracker(max_offset_age_s=5.0, clock=clock)
    lt.dispatch("r1", "a", pending=1000)
    # the worker had 900 of it cached and also serves 2000 context tokens for someone else
    lt.report("a", prefill_tokens=100, decode_tokens=2000)
    assert lt.load("a") == TokenLoad(100, 2000, 1)
    lt.dispatch("r2", "a", pending=500)
    assert lt.load("a") == TokenLoad(600, 2000, 2)
    lt.prefill_done("r1", "a", context=1001)  # r1's cache hit no longer discounts r2's prompt
    assert lt.load("a") == TokenLoad(500, 3001, 2)
    clock.t += 6
    assert lt.load("a") == TokenLoad(500, 1001, 2)
    lt.report("a", 0, 0)
    lt.forget("a")
    assert lt.load("a") == TokenLoad(500, 1001, 2)


def test_report_that_raced_with_a_finish_is_ignored():
    """Poll sent while r1 ran; the reply, read after r1 finished, still counts r1's context.
    Applying it would charge the worker a phantom 300 tokens until the next poll."""
    clock = Clock()
    lt = LoadTracker(clock=clock)
    lt.dispatch("r1", "a", pending=0, context=300)
    clock.t += 1
    polled_at = lt.now()
    clock.t += 0.01
    lt.finish("r1", "a")
    clock.t += 0.01
    assert lt.report("a", 0, 300, polled_at) is False
    assert lt.load("a") == TokenLoad(0, 0, 0)
    # the next poll, sent after the finish, applies
    polled_at = lt.now()
    clock.t += 0.01
    assert lt.report("a", 0, 50, polled_at) is True
    assert lt.load("a") == TokenLoad(0, 50, 0)


def test_a_request_caught_in_passing_leaves_nothing_behind():
    """A poll lands while the worker already counts r1's context and the gateway has not yet seen
    its first token: the offset is r1's context. Once r1 ends, the worker must look idle, not
    charged 300 tokens until the next poll. Traffic the gateway cannot see stays charged."""
    clock = Clock()
    lt = LoadTracker(clock=clock)
    lt.dispatch("r1", "a", pending=10)
    clock.t += 0.01
    assert lt.report("a", prefill_tokens=0, decode_tokens=300 + 2000, polled_at=lt.now())
    assert lt.load("a") == TokenLoad(0, 2300, 1)
    lt.prefill_done("r1", "a", context=300)
    lt.tokens("r1", "a", 3)
    lt.finish("r1", "a")
    assert lt.load("a") == TokenLoad(0, 2000 - 3, 0)
    # a request dispatched after the report had no part in its offset
    lt.dispatch("r2", "a", pending=50)
    lt.finish("r2", "a")
    assert lt.load("a") == TokenLoad(0, 1997, 0)


def test_a_request_meets_the_load_of_its_priority_or_better_and_the_offset_in_that_share():
    clock = Clock()
    lt = LoadTracker(clock=clock)
    lt.dispatch("flood", "a", pending=3000, priority=10)
    lt.dispatch("turn", "a", pending=1000, priority=0)
    lt.prefill_done("turn", "a", context=1000)
    lt.dispatch("other", "a", pending=1000, priority=0)
    assert lt.load("a") == TokenLoad(4000, 1000, 3)               # every priority
    assert lt.load("a", 10) == TokenLoad(4000, 1000, 3, 0)
    # a priority-0 request waits behind the priority-0 prefill only; the flood is preemptible
    assert lt.load("a", 0) == TokenLoad(1000, 1000, 2, 1)
    assert lt.load("a", -1) == TokenLoad(0, 0, 0, 3)
    # a report 400 prefill tokens below the tracked 4000: the priority-0 view gets its quarter
    lt.report("a", prefill_tokens=3600, decode_tokens=1000)
    assert lt.load("a") == TokenLoad(3600, 1000, 3)
    assert lt.load("a", 0) == TokenLoad(900, 1000, 2, 1)
