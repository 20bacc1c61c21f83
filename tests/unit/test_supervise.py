"""`icegres supervise`'s decision (pure): when a child is replaced, and how fast it is restarted."""

from __future__ import annotations

import pytest

from icegres.cli import SERVE_KEYS, build_parser
from icegres.supervise import ChildState, Policy, child_argv, judge, restart_delay_s

pytestmark = pytest.mark.unit

POLICY = Policy(start_timeout_s=10, health_timeout_s=3, probe_interval_ms=100)


def test_a_starting_child_is_probed_on_ready_and_given_its_start_timeout() -> None:
    child = ChildState(started_at_s=0.0)
    assert child.probe_path == "/ready"
    child, reason = judge(POLICY, child, 9.9, 503)  # replaying: not ready yet, not replaced
    assert reason is None and not child.ready
    _, reason = judge(POLICY, child, 10.1, None)
    assert reason is not None and "not ready within 10 s" in reason
    child, reason = judge(POLICY, child, 5.0, 200)
    assert reason is None and child.ready and child.probe_path == "/health"


@pytest.mark.parametrize("status", [503, None])
def test_a_serving_child_is_replaced_once_health_stays_bad_past_the_limit(status: int | None) -> None:
    child = ChildState(started_at_s=0.0, ready=True, last_ok_at_s=1.0)
    child, reason = judge(POLICY, child, 3.9, status)
    assert reason is None  # 2.9 s of trouble: within the limit
    child, reason = judge(POLICY, child, 4.1, status)
    assert reason is not None and ("503" in reason if status else "did not answer" in reason)


def test_one_good_answer_resets_the_health_clock() -> None:
    child = ChildState(started_at_s=0.0, ready=True, last_ok_at_s=1.0)
    child, _ = judge(POLICY, child, 3.5, 200)
    child, reason = judge(POLICY, child, 6.0, 503)
    assert reason is None and child.last_ok_at_s == 3.5


def test_restart_delay_is_none_after_a_served_child_and_bounded_after_failed_starts() -> None:
    assert restart_delay_s(0) == 0.0
    delays = [restart_delay_s(n) for n in range(1, 12)]
    assert delays == sorted(delays) and delays[0] > 0 and delays[-1] == 5.0


def test_the_child_gets_the_serve_flags_given_and_nothing_else() -> None:
    args = vars(build_parser().parse_args(
        ["supervise", "--ops-port", "9000", "--write-buffer-ms", "200", "--tail-quorum", "a:1,b:2,c:3",
         "--s3-path-style", "--health-timeout-s", "2"]))
    argv = child_argv(args, SERVE_KEYS)
    assert argv == ["--ops-port", "9000", "--write-buffer-ms", "200", "--tail-quorum", "a:1,b:2,c:3",
                    "--s3-path-style"]
    assert vars(build_parser().parse_args(["serve", *argv]))["ops_port"] == 9000
