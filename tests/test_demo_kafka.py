"""``lockgate demo --kafka`` as a real process: its own broker and Valkey, two workers, one
killed mid-stream; it exits 0 with the count that every event and record is in exactly one
run, after a journal replay from a partition and an offset, and leaves nothing running.
Interrupted while it starts, it stops what it had started."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from lockgate.dev import port_in_use

COMMAND = [sys.executable, "-m", "lockgate", "demo", "--kafka"]


def _processes_under(folder: str) -> list[str]:
    """Command lines of live processes that name ``folder`` (the demo's services and workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if folder in cmdline:
            found.append(cmdline)
    return found


def _wait_gone(folder: str, ports: list[int]) -> None:
    deadline = time.monotonic() + 30
    while _processes_under(folder) or any(port_in_use(p) for p in ports):
        assert time.monotonic() < deadline, f"left running: {_processes_under(folder)} {ports}"
        time.sleep(0.1)


def test_the_kafka_demo_counts_every_event_and_record_in_exactly_one_run() -> None:
    done = subprocess.run(COMMAND, capture_output=True, text=True, timeout=400)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "worker 1 killed with SIGKILL mid-stream" in out
    assert re.search(r"worker 2 owns every partition now", out), out
    assert re.search(r"\$ lockgate journal replay --partition 0 --from-offset \d+ --journal", out)
    assert re.search(r"^replayed \d+ events of \d+ runs", out, re.MULTILINE), out
    last = out.strip().splitlines()[-1]
    assert last == (
        "exactly once: OK: 120 of 120 order events in exactly one demo_basket run ("
        + last.split("(", 1)[1].split(")", 1)[0]
        + "), 60 of 60 payment records in exactly one demo_payment run (60 runs)"
    ), last
    folder = re.search(r"Valkey on 127\.0\.0\.1:(\d+) .*, in (\S+)", out)
    broker = re.search(r"Kafka broker on 127\.0\.0\.1:(\d+)", out)
    assert folder is not None, out
    assert broker is not None, out
    _wait_gone(folder[2], [int(folder[1]), int(broker[1])])
    assert not Path(folder[2]).exists()
    workers = [int(pid) for pid in re.findall(r"worker \d started \(pid (\d+)\)", out)]
    assert len(workers) == 2
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()]


def test_the_kafka_demo_interrupted_while_starting_stops_what_it_started(tmp_path: Path) -> None:
    log = tmp_path / "demo.txt"
    with log.open("wb") as sink:
        demo = subprocess.Popen(COMMAND, stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "starting a Kafka broker" not in log.read_text():
            assert demo.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        found = re.search(r"Valkey on 127\.0\.0\.1:(\d+) .*, in (\S+)", log.read_text())
        assert found is not None
        port, folder = int(found[1]), found[2]
        assert port_in_use(port)
        # The broker's JVM is on its way up (or fetching its jars): a Ctrl-C now.
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130, log.read_text()
        _wait_gone(folder, [port])
        assert not Path(folder).exists()
        assert "lockgate: interrupted; stopping what the demo started" in log.read_text()
    finally:
        if demo.poll() is None:
            os.kill(demo.pid, signal.SIGKILL)
            demo.wait()


def test_the_kafka_demo_without_java_says_what_to_install(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env |= {"PATH": str(tmp_path / "bin"), "LOCKGATE_KAFKA_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(COMMAND, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "lockgate: error: java not found: Kafka needs Java 17 or newer on PATH (or JAVA_HOME); "
        "install Java 17 and Maven"
    ]


def test_the_kafka_demos_view_redraws_on_a_terminal_and_prints_changes_when_piped() -> None:
    import io

    from lockgate.demo._board import Board
    from lockgate.demo._kafka import HEADERS

    first = [("worker 1", "alive", "trigger partitions [0, 1]"), ("demo_basket", "0/0", "-")]
    second = [("worker 1", "killed", "held [0, 1]"), ("demo_basket", "0/0", "-")]
    live = Board(io.StringIO(), live=True, headers=HEADERS)
    live.show(first)
    live.show(second)
    live.close()
    drawn = live.stream.getvalue()
    # Drawn, redrawn, and left on screen at the end.
    assert len(re.findall(r"^WHAT +STATE +DETAIL", drawn, re.MULTILINE)) == 3
    assert "\x1b[4F\x1b[J" in drawn  # back up over the four lines drawn, then clear
    piped = Board(io.StringIO(), live=False, headers=HEADERS)
    piped.show(first)
    piped.show(second)
    lines = [line.split("  ", 2)[-1] for line in piped.stream.getvalue().splitlines()]
    assert lines == [
        "worker 1  alive  trigger partitions [0, 1]",
        "demo_basket  0/0  -",
        "worker 1  killed  held [0, 1]",
    ]
