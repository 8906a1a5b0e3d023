"""From steps to figures, one module per concern; this module names them all in one
place for the code that reads a run's figures:

- harness.run.bottleneck: what limited a step (its CPUs' noise, the driver, the server,
  the quota, the database, an open-loop driver's schedule)
- harness.run.peak: a ramp's peak and what was measured there, the knee, repeats combined
- harness.run.round_figures: confirmation rounds as figures (their load, the rounds that
  count, the intervals, ratios paired round by round)
- harness.run.ratios: ratios to nginx and the TLS tax

Pure functions of results and clock readings (no server, no /proc), unit-tested without a
network.
"""

from harness.run.bottleneck import (
    CONTENDED_CPU_PCT,
    CPU_WAIT_CONTENDED_PCT,
    DATABASE_BACKLOG_RECORDS,
    DATABASE_BOUND_CPU_FRACTION,
    DRIVER_BOUND_CPU_FRACTION,
    RATE_ACHIEVED_FRACTION,
    SATURATED_TICK_AVG_MS,
    SCHEDULE_KEPT_FRACTION,
    SERVER_HEADROOM_FRACTION,
    SERVER_SATURATED_CPU_FRACTION,
    THROTTLED_SATURATED_SHARE,
    behind_schedule,
    cpu_contended,
    cpu_us_per_req,
    database_bound_note,
    is_contended,
    is_driver_bound,
    oom_reason,
    other_cpu_pct,
    reaped_cpu_s,
    server_saturated,
    step_bottleneck,
    step_noise,
    throttle_share,
    throttled,
)
from harness.run.peak import (
    KNEE_FACTOR,
    KNEE_MARGIN_MS,
    NOISY_SPREAD,
    combine_repeats,
    connection_peak_step,
    connection_step_errors,
    find_knee,
    merged_latency,
    step_holds,
    summarize,
)
from harness.run.ratios import (
    with_baseline_ratios,
    with_tls_tax,
)
from harness.run.round_figures import (
    MAX_TRIAL_LOADS,
    PLATEAU_FRACTION,
    TIE_FRACTION,
    round_ratio,
    rounded_pair,
    rounds_offered,
    trial_choice,
    trial_loads,
    trial_note,
    usable_rounds,
    with_rounds,
)

__all__ = [
    "CONTENDED_CPU_PCT",
    "CPU_WAIT_CONTENDED_PCT",
    "DATABASE_BACKLOG_RECORDS",
    "DATABASE_BOUND_CPU_FRACTION",
    "DRIVER_BOUND_CPU_FRACTION",
    "KNEE_FACTOR",
    "KNEE_MARGIN_MS",
    "MAX_TRIAL_LOADS",
    "NOISY_SPREAD",
    "PLATEAU_FRACTION",
    "RATE_ACHIEVED_FRACTION",
    "SATURATED_TICK_AVG_MS",
    "SCHEDULE_KEPT_FRACTION",
    "SERVER_HEADROOM_FRACTION",
    "SERVER_SATURATED_CPU_FRACTION",
    "THROTTLED_SATURATED_SHARE",
    "TIE_FRACTION",
    "behind_schedule",
    "combine_repeats",
    "connection_peak_step",
    "connection_step_errors",
    "cpu_contended",
    "cpu_us_per_req",
    "database_bound_note",
    "find_knee",
    "is_contended",
    "is_driver_bound",
    "merged_latency",
    "oom_reason",
    "other_cpu_pct",
    "reaped_cpu_s",
    "round_ratio",
    "rounded_pair",
    "rounds_offered",
    "server_saturated",
    "step_bottleneck",
    "step_holds",
    "step_noise",
    "summarize",
    "throttle_share",
    "throttled",
    "trial_choice",
    "trial_loads",
    "trial_note",
    "usable_rounds",
    "with_baseline_ratios",
    "with_rounds",
    "with_tls_tax",
]
