"""siege runs repetitions once it knows a rate (its timed mode hangs now and
then): the first step timed, each later one `-r N` sized from the last measured rate."""

from __future__ import annotations

from pathlib import Path

from drivers.base import Target
from drivers.siege import MIN_REPS_PER_USER, SiegeDriver, reps_for
from model.ramps import RampStep
from model.scenarios import SCENARIOS

REPORT = """{\t"transactions":\t\t\t        3000,
\t"availability":\t\t\t      100.00,
\t"elapsed_time":\t\t\t        1.50,
\t"data_transferred":\t\t      144.86,
\t"response_time":\t\t        0.00,
\t"transaction_rate":\t\t     2000.00,
\t"throughput":\t\t\t       94.68,
\t"concurrency":\t\t\t        9.80,
\t"successful_transactions":\t        3000,
\t"failed_transactions":\t\t           0,
\t"longest_transaction":\t\t        0.06,
\t"shortest_transaction":\t\t        0.00
}
"""


def test_reps_carry_the_last_rate_over_to_the_next_step() -> None:
    assert reps_for(None, 10, 2.0) is None  # nothing measured yet: timed
    assert reps_for(2000.0, 10, 2.0) == 400  # 2,000 req/s for 2 s over 10 users
    assert reps_for(2000.0, 20, 2.0) == 200  # twice the users share the same rate
    assert reps_for(10.0, 50, 1.0) == MIN_REPS_PER_USER  # never a start-up-only step


def test_the_first_step_is_timed_and_the_next_runs_repetitions(tmp_path: Path) -> None:
    driver = SiegeDriver()
    target = Target("127.0.0.1", 8080, SCENARIOS["text"])
    first = RampStep(0, offered=10, unit="concurrency", duration_s=2)
    [command] = driver.commands(first, target, tmp_path)
    assert "-t2S" in command and not any(a.startswith("-r") for a in command)
    result = driver.parse(REPORT, target, first, tmp_path)
    assert result.replies == 3000 and result.duration_s == 1.5
    second = RampStep(1, offered=20, unit="concurrency", duration_s=2)
    [command] = driver.commands(second, target, tmp_path)
    assert "-r200" in command and not any(a.startswith("-t") for a in command)
