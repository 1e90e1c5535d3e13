"""Record the slow failures of notebooks 08, 12, 14 and 15 once, into notebooks/transcripts/ (each takes seconds to minutes).

Usage: python tools/record_transcripts.py [NAME ...]   (no name: all; names: see CASES)

Each case runs a script of notebooks/scripts with the course launcher and writes a timeline:
when (seconds after the start) each host printed each line, native log included, with ports,
temporary paths and native stack frames removed; then the launcher's report.
"""
from __future__ import annotations

import re
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python tools/NAME.py`
    sys.path.insert(0, str(ROOT))

from helpers.launch import runner  # noqa: E402
from helpers.launch.result import LOG_NOISE  # noqa: E402

TRANSCRIPTS = ROOT / "notebooks" / "transcripts"
SCRIPTS = ROOT / "notebooks" / "scripts"
CASES = {  # transcript name -> (script, run options)
    "crash_under_plain_jax": ("crash_under_plain_jax.py", {"bare": True, "timeout": 420, "grace": 10}),
    "crash_before_first_collective": ("crash_under_plain_jax.py",
                                      {"bare": True, "timeout": 420, "grace": 10, "args": ["0"]}),
    "host_1_killed_under_plain_jax": ("killed_under_plain_jax.py",
                                      {"bare": True, "timeout": 240, "grace": 200, "args": ["1"]}),
    "backend_never_starts": ("backend_never_starts.py", {"timeout": 240}),
    "backend_never_starts_host_dies": ("backend_never_starts.py", {"bare": True, "timeout": 240, "grace": 200,
                                                                     "args": ["dies"]}),
    "dies_in_barrier_under_plain_jax": ("dies_in_barrier_under_plain_jax.py", {"bare": True, "timeout": 240,
                                                                                "grace": 200}),
    "host_never_joins": ("host_never_joins.py", {"timeout": 60}),
    "host_never_joins_8": ("host_never_joins.py", {"timeout": 60, "args": ["8"]}),
    # --netns, as root: gloo advertises 127.0.1.1 (notebook 08, section 6)
    "gloo_advertises_loopback": ("where_am_i.py", {"netns": True, "etc_hosts": "loopback",
                                                   "timeout": 300}),
    # --netns, as root: hosts with their own hostnames share one trace directory (notebook 15, section 1)
    "one_trace_dir_for_all_hosts": ("traced_steps.py", {"netns": True, "etc_hosts": "address", "timeout": 120, "args": [
        "--trace-dir", "/dev/shm/course-15-one-trace-dir", "--one-dir", "--steps", "2"]}),
}
_NATIVE_FRAME = re.compile(r"^\s*@\s+0x[0-9a-f]+\s")
# The header of a stack dump the launcher asks for before it stops a host; its frames are
# runner.DUMP_FRAME. The launcher's report gives the script's line.
_DUMP_HEADER = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+")
_WIDTH = 150  # characters of a line kept (native log records run to a thousand), but a fatal one
_EXCEPTION = re.compile(r"^[\w.]+(?:Error|Exception): ")  # a traceback's last line: kept whole too
_LOG_PREFIX = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+")  # date, time, thread id


def _tidy(line: str, script: Path) -> str:
    line = _LOG_PREFIX.sub(r"\1 ", line).replace(str(script), script.name)
    line = runner.ADDRESS_PORT.sub(r"\1:<port>", line)
    line = re.sub(r"/tmp/[\w./-]+", "<tmp>", line)
    line = re.sub(r"(?:/[^\s\"':]+)*/site-packages/", "site-packages/", line)
    line = line.replace(f"{ROOT}/", "")
    whole = line.startswith("F ") or _EXCEPTION.match(line)
    return line if len(line) <= _WIDTH or whole else line[:_WIDTH - 3] + "..."


def record(name: str) -> str:
    """Run one case to its end; return its transcript."""
    script, options = CASES[name]
    path = SCRIPTS / script
    lines: list[str] = []
    lock = threading.Lock()
    start = time.monotonic()

    def on_line(host: int, stream: str, line: str) -> None:
        text = line.rstrip("\n")
        dump = _DUMP_HEADER.match(text) or runner.DUMP_FRAME.match(text)
        if not text.strip() or _NATIVE_FRAME.match(text) or dump or (
                stream == "stdout" and LOG_NOISE.match(text)):
            return
        with lock:
            lines.append(f"{time.monotonic() - start:6.1f} s  host {host} {stream:6}| {_tidy(text, path)}")

    result = runner.launch(path, options.get("args", ()), hosts=2, devices_per_host=2,
                            limits=runner.Limits(options["timeout"], options.get("grace", 0.0)),
                            display={str(path): path.name}, on_line=on_line,
                            bare=options.get("bare", False),
                            etc_hosts=options.get("etc_hosts") if options.get("netns") else None)
    command = f"run({script!r}, hosts=2, devices_per_host=2, " + ", ".join(
        f"{k}={v!r}" for k, v in options.items()) + ")"
    return "\n".join([f"$ {command}  # recorded by tools/record_transcripts.py, jax {version('jax')}",
                      *lines, f"launcher: {result.message}", *result.report()]) + "\n"


def main(names: list[str]) -> None:
    for name in names or CASES:
        text = record(name)
        (TRANSCRIPTS / f"{name}.txt").write_text(text)
        print(f"{name}: {len(text.splitlines())} lines")


if __name__ == "__main__":
    main(sys.argv[1:])
