"""The supervisor's restart backoff and exit descriptions (processes:
tests/integration/local_stack/test_supervision.py)."""

from __future__ import annotations

import random
import signal

import pytest

from functions.local_stack.supervisor import SupervisorPolicy, backoff_delay, describe_exit

POLICY = SupervisorPolicy(backoff_initial_s=1.0, backoff_max_s=30.0)


@pytest.mark.parametrize(("failures", "ceiling"), [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (40, 30.0)])
def test_backoff_doubles_up_to_the_cap_with_half_of_it_jittered(failures: int, ceiling: float) -> None:
    rng = random.Random(7)
    delays = [backoff_delay(failures, POLICY, rng) for _ in range(200)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert max(delays) - min(delays) > ceiling / 4  # jittered: replicas that died together do not return together


def test_describe_exit_names_the_signal_or_the_code() -> None:
    assert describe_exit(-signal.SIGKILL) == "killed by signal SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "killed by signal SIGSEGV"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(0) == "exited with code 0"
