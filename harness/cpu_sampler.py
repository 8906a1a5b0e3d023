"""A CPU sampler attached to a server's whole process tree for one step (`--cpu-profile`).

Python servers are sampled with py-spy (`record --format raw`: collapsed stacks, native
frames, idle frames left out, its subprocesses too), the others (nginx, Node, Ruby) with
`perf record -F 99 -e cpu-clock -g` on every process of the tree, folded from `perf
script` by model.stacks (Node's JS frames named from the symbol map a server started for
the round writes: sampled_server_environment). cpu-clock is the kernel's software timer:
it works where no hardware PMU is exposed (a VM), and samples only what runs on a CPU.

The sampler runs on the load's CPUs (taskset), never the server's; its own CPU seconds
(user + system, read from its exit's rusage) are kept, and a sampler that cannot attach
says why in one line (`error`) instead of failing the case.

py-spy is waited for until it says it samples (or exits), not for a fixed time: with
native frames it checks that it can read a whole stack before it starts; on eventlet
(whose hub runs in a greenlet: py-spy cannot merge the native and Python frames of a
switched stack) that check fails, and its few retries run out only after a second or
more on a loaded machine. It then exits and is started again without native frames. Each
attempt keeps its own log.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from drivers.processes import spawn
from model.stacks import Folded, PerfMap, fold_perf_script, merged, parse_perf_map, parse_pyspy_raw

SAMPLE_RATE_HZ = 99
ATTACH_WAIT_S = 1.0  # perf attaches in well under this (it says nothing when it has)
PYSPY_ATTACH_TIMEOUT_S = 20.0  # py-spy with native frames on a loaded machine: seconds
PYSPY_SAMPLING = "Sampling process"  # py-spy's line once it has attached and samples
PYSPY_COUNTS = re.compile(r"Samples: (?P<samples>\d+) Errors: (?P<errors>\d+)")
STOP_WAIT_S = 15.0
PMU_DEVICE = Path("/sys/bus/event_source/devices/cpu")
# a server started for a profiled round: Node writes its JIT's symbol map for perf
# (/tmp/perf-PID.map, functions only) and runs interpreted functions in native frames of
# their own, so its JS frames have names; a normal round's server pays for neither
NODE_PROFILED_OPTIONS = "--perf-basic-prof-only-functions --interpreted-frames-native-stack"
PERF_MAP = re.compile(r"\((?P<path>/tmp/perf-\d+\.map)\)$", re.MULTILINE)


@dataclass
class SamplerResult:
    """What one sampling gave: the stacks, who sampled and at what rate, its own CPU."""

    sampler: str  # py-spy or perf
    folded: Folded = field(default_factory=dict)
    sample_rate_hz: int = SAMPLE_RATE_HZ
    sampler_cpu_s: float = 0.0
    wall_s: float = 0.0
    error: str | None = None  # why it could not attach or gave nothing (one line)
    note: str | None = None  # what the reader should know (the clock it sampled on)


def is_python(pid: int) -> bool:
    """Whether process `pid` runs a Python interpreter."""
    try:
        name = Path(psutil.Process(pid).exe()).name
    except (psutil.Error, OSError):
        return False
    return name.startswith("python")


def process_tree(root_pids: list[int]) -> list[int]:
    """The roots and all their descendants alive now."""
    pids: list[int] = []
    for pid in root_pids:
        try:
            process = psutil.Process(pid)
            pids += [pid, *(child.pid for child in process.children(recursive=True))]
        except psutil.Error:
            continue
    return sorted(set(pids))


def sampled_server_environment() -> dict[str, str]:
    """What a server started for a profiled round gets in its environment (the harness's
    own NODE_OPTIONS kept): named JS frames for perf (NODE_PROFILED_OPTIONS)."""
    options = [os.environ.get("NODE_OPTIONS", "").strip(), NODE_PROFILED_OPTIONS]
    return {"NODE_OPTIONS": " ".join(filter(None, options))}


def pyspy_lost(logs: Sequence[str]) -> str | None:
    """How many samples the py-spy runs whose `logs` these are could not read (each says
    on its last line), if any: those stacks are missing from the split (a greenlet's,
    most often)."""
    samples = errors = 0
    for log in logs:
        for match in PYSPY_COUNTS.finditer(log):
            samples += int(match["samples"])
            errors += int(match["errors"])
    if not errors:
        return None
    return f"{errors} of {samples} samples could not be read"


def clock_note() -> str:
    """perf's clock as the result says it."""
    if PMU_DEVICE.exists():
        return "perf on the software cpu-clock (99 Hz)"
    return "perf on the software cpu-clock (99 Hz): this machine exposes no hardware PMU"


class CpuSampler:
    """Samples a process tree from `start` to `stop`; the raw files go in `out_dir`."""

    def __init__(self, out_dir: Path, load_cpus: str | None) -> None:
        self.out_dir = out_dir
        self.load_cpus = load_cpus
        self.sampler = ""
        self.processes: list[tuple[subprocess.Popen[bytes], Path]] = []  # (sampler, output)
        self.logs: dict[int, Path] = {}  # each sampler's pid → its stdout and stderr
        self.error: str | None = None
        self.started_s = 0.0
        self.result: SamplerResult | None = None  # once stopped
        self.without_native = False  # py-spy's native frames failed on it: sampled without

    def _command(self, argv: list[str]) -> list[str]:
        taskset = shutil.which("taskset")
        if self.load_cpus and taskset:
            return [taskset, "-c", self.load_cpus, *argv]
        return argv

    def start(self, root_pids: list[int]) -> None:
        """Attach to the tree of `root_pids`: one py-spy per root when every process is
        Python's, else one perf on every process of the tree (nginx under its Python
        wrapper too)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        tree = process_tree(root_pids)
        python = bool(tree) and all(is_python(pid) for pid in tree)
        self.sampler = "py-spy" if python else "perf"
        program = shutil.which(self.sampler) or (
            "/usr/bin/perf" if not python and Path("/usr/bin/perf").exists() else None
        )
        if program is None:
            self.error = f"{self.sampler} not found: run `harness doctor --install`"
            return
        if python:
            commands = [
                (self._pyspy(program, pid, self.out_dir / f"py-spy-{pid}.txt"), pid)
                for pid in root_pids
            ]
        else:
            data = self.out_dir / "perf.data"
            pids = ",".join(map(str, tree))
            argv = [program, "record", "-F", str(SAMPLE_RATE_HZ), "-e", "cpu-clock", "-g"]
            commands = [([*argv, "-p", pids, "-o", str(data)], 0)]
        self.started_s = time.monotonic()
        self._launch(commands)
        failed = [(p, o) for p, o in self.processes if p.poll() is not None]
        if python and failed:  # py-spy's native unwinding failed on this server: without
            self.without_native = True
            self.processes = [(p, o) for p, o in self.processes if p.poll() is None]
            retries = [
                (argv, pid) for argv, pid in commands if Path(argv[-1]) in {o for _, o in failed}
            ]
            without = [([a for a in argv if a != "--native"], pid) for argv, pid in retries]
            self._launch(without, log_suffix="-without-native")
        for process, _ in self.processes:
            if process.poll() is not None:
                self.error = f"{self.sampler} could not attach: {self._log_tail(process)}"

    def _launch(self, commands: list[tuple[list[str], int]], log_suffix: str = "") -> None:
        """Start each sampler command (its output after `-o`), then wait for them to attach
        (each log `<sampler>-<pid><log_suffix>.log`)."""
        started = []
        for argv, pid in commands:
            output = Path(argv[argv.index("-o") + 1])
            log_path = self.out_dir / f"{self.sampler}-{pid}{log_suffix}.log"
            with log_path.open("wb") as log:  # spawn: it dies with the harness, as every child
                process = spawn(self._command(argv), stdout=log, stderr=log)
            self.processes.append((process, output))
            self.logs[process.pid] = log_path
            started.append(process)
        if self.sampler != "py-spy":
            time.sleep(ATTACH_WAIT_S)
            return
        deadline = time.monotonic() + PYSPY_ATTACH_TIMEOUT_S
        while time.monotonic() < deadline and not all(
            process.poll() is not None or PYSPY_SAMPLING in self._log_text(process)
            for process in started
        ):
            time.sleep(0.05)

    def _log_text(self, process: subprocess.Popen[bytes]) -> str:
        """What `process` has written to its log so far ("" when there is none)."""
        log = self.logs.get(process.pid)
        try:
            return log.read_text(errors="replace") if log is not None else ""
        except OSError:
            return ""

    def _pyspy(self, program: str, pid: int, output: Path) -> list[str]:
        rate = str(SAMPLE_RATE_HZ)
        options = ["--native", "--subprocesses", "-o", str(output)]  # -o's value last
        return [program, "record", "--format", "raw", "-r", rate, "--pid", str(pid), *options]

    def _log_tail(self, process: subprocess.Popen[bytes]) -> str:
        lines = [line for line in self._log_text(process).splitlines() if line.strip()]
        errors = [line for line in lines if line.lstrip().startswith("Error")]
        if errors:  # py-spy's own message, before its backtrace
            return errors[0].strip()
        return lines[-1].strip() if lines else f"exit status {process.returncode}"

    def stop(self) -> SamplerResult:
        """Stop sampling (SIGINT: each writes what it has), reap, read the stacks."""
        result = SamplerResult(self.sampler or "none", error=self.error)
        result.wall_s = round(time.monotonic() - self.started_s, 3) if self.started_s else 0.0
        parts: list[Folded] = []
        for process, output in self.processes:
            result.sampler_cpu_s += _interrupt_and_reap(process)
            if result.error is None:
                parts.append(self._read(output))
        result.sampler_cpu_s = round(result.sampler_cpu_s, 3)
        result.folded = merged(parts)
        if self.sampler == "perf":
            result.note = clock_note()
        else:
            frames = (
                "no native frames (they failed here)" if self.without_native else "native frames"
            )
            result.note = f"py-spy (99 Hz; {frames}, idle frames left out, subprocesses)"
            lost = pyspy_lost([self._log_text(process) for process, _ in self.processes])
            if lost:
                result.note += f"; {lost}"
        if result.error is None and not result.folded:
            result.error = f"{self.sampler} gave no samples: {self._log_tail(self.processes[0][0])}"
        self.result = result
        return result

    def _read(self, output: Path) -> Folded:
        if not output.exists():
            return {}
        if self.sampler == "py-spy":
            return parse_pyspy_raw(output.read_text(errors="replace"))
        perf = shutil.which("perf") or "/usr/bin/perf"
        script = subprocess.run(
            [perf, "script", "-i", str(output)],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        return fold_perf_script(script.stdout, self._perf_maps(script.stdout))

    def _perf_maps(self, script: str) -> dict[str, PerfMap]:
        """The JIT symbol maps the sampled processes wrote (Node's, named by `perf
        script`), read; each moved beside the samples (a server's map would otherwise stay
        in /tmp after it, one per profiled round)."""
        maps: dict[str, PerfMap] = {}
        for path in sorted({match["path"] for match in PERF_MAP.finditer(script)}):
            source = Path(path)
            try:
                text = source.read_text(errors="replace")
            except OSError:
                continue
            (self.out_dir / source.name).write_text(text)
            source.unlink(missing_ok=True)
            maps[path] = parse_perf_map(text)
        return maps


def _interrupt_and_reap(process: subprocess.Popen[bytes]) -> float:
    """SIGINT `process`, wait for it (killed past STOP_WAIT_S), return its CPU seconds
    and its children's (user + system, from its exit's rusage; its clock just before the
    interrupt when another reaper took its exit status first)."""
    if process.returncode is not None:
        return 0.0
    before_s = _cpu_s(process.pid)
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_WAIT_S
    while True:
        try:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: what it had used until the interrupt
            process.returncode = 0
            return before_s
        if pid == process.pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            return usage.ru_utime + usage.ru_stime
        if time.monotonic() > deadline:
            process.kill()
        time.sleep(0.05)


@contextlib.contextmanager
def sampling(sampler: CpuSampler | None, root_pids: Callable[[], list[int]]) -> Iterator[None]:
    """The server's process tree (`root_pids()`) sampled while the block runs, when a
    `sampler` is given (a profiled round's step; its result is then `sampler.result`)."""
    if sampler is None:
        yield
        return
    sampler.start(root_pids())
    try:
        yield
    finally:
        sampler.stop()


def _cpu_s(pid: int) -> float:
    """A live process's CPU seconds (user + system; 0 when it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system
