"""Repeated log lines said once with a count (``RepeatCollapser``, the log set-up of
``lockgate worker`` and ``lockgate serve``): on a clock the tests move, then on real time with
its timer, then in a real ``lockgate worker`` process whose workflow warns the same line many
times, flushed when it stops, and a `lockgate serve` process."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from http_support import SERVING_LINE, wait_ready
from lockgate import RunStatus, WorkflowClient
from lockgate._repeats import WINDOW, RepeatCollapser
from lockgate.stores import SQLiteStore

DEADLINE = 60.0
COUNT = re.compile(r"\(repeated (\d+) times? in the last ([0-9.]+) s\)$")


class Lines(logging.Handler):
    """What reaches the output: each record's level and message, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.levelname, record.getMessage()))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup() -> Iterator[tuple[logging.Logger, Lines, Clock, RepeatCollapser]]:
    """A logger of its own writing through a collapser on a clock the test moves."""
    clock, lines = Clock(), Lines()
    collapser = RepeatCollapser(lines, clock=clock, timer=False)
    log = logging.getLogger(f"repeats-test-{id(clock)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(collapser)
    yield log, lines, clock, collapser
    log.removeHandler(collapser)
    collapser.close()


def messages(lines: Lines) -> list[str]:
    return [message for _, _, message in lines.lines]


def test_the_first_line_goes_out_at_once_and_its_count_when_the_window_ends(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, clock, _ = setup
    log.warning("broker %s refused", "b1")
    assert messages(lines) == ["broker b1 refused"]  # not held back for the window
    for _ in range(37):
        clock.now += 0.1
        log.warning("broker %s refused", "b1")
    assert messages(lines) == ["broker b1 refused"]
    log.warning("broker %s refused", "b2")  # another line: written, and b1 goes on counting
    clock.now = 1009.9
    log.warning("broker %s refused", "b1")
    assert messages(lines) == ["broker b1 refused", "broker b2 refused"]
    clock.now = 1010.0  # b1's window, opened at 1000, ends: the next line brings its count
    log.info("tick")
    assert messages(lines) == [
        "broker b1 refused",
        "broker b2 refused",
        "broker b1 refused (repeated 38 times in the last 10 s)",
        "tick",
    ]
    assert lines.lines[2][:2] == (log.name, "WARNING")


def test_a_warning_between_info_lines_is_written_once_and_counted(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    """Lines in between end no series: INFO lines of the same logger and of another, and a
    second warning alternating with the first, are each passed on or counted on their own."""
    log, lines, clock, collapser = setup
    other = log.getChild("feed")
    for n in range(50):
        log.warning("price feed stale")
        log.info("order %d done", n)
        other.error("feed %s away", "f1" if n % 2 else "f2")
        clock.now += 0.1
    collapser.flush()
    said = messages(lines)
    assert [m for m in said if m.startswith("price feed stale")] == [
        "price feed stale",
        "price feed stale (repeated 49 times in the last 5.0 s)",
    ]
    assert [m for m in said if m.startswith("order ")] == [f"order {n} done" for n in range(50)]
    assert [m for m in said if m.startswith("feed ")] == [
        "feed f2 away",
        "feed f1 away",
        "feed f2 away (repeated 24 times in the last 5.0 s)",
        "feed f1 away (repeated 24 times in the last 4.9 s)",
    ]
    assert len(said) == 2 + 50 + 4


def test_each_line_counts_in_a_window_of_its_own(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, clock, _ = setup
    log.warning("a")
    clock.now += 5
    log.warning("b")
    log.warning("a")
    log.warning("b")
    clock.now += 5  # a's window (from 1000) is over, b's (from 1005) is not
    log.info("tick")
    assert messages(lines) == ["a", "b", "a (repeated 1 time in the last 10 s)", "tick"]
    clock.now += 5
    log.info("tock")
    assert messages(lines)[4:] == ["b (repeated 1 time in the last 10 s)", "tock"]


def test_the_lines_counted_at_once_are_bounded(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    """Beyond ``series`` distinct lines, the one counted longest ends: its count now, and its
    next occurrence is written at once."""
    log, lines, clock, collapser = setup
    collapser.most = 2
    log.warning("a")
    log.warning("a")
    clock.now += 1
    log.warning("b")
    log.warning("c")  # a third: a's series ends
    log.warning("a")  # a new series of a: b's ends, with nothing to count
    log.warning("c")
    assert messages(lines) == ["a", "b", "a (repeated 1 time in the last 1.0 s)", "c", "a"]
    collapser.flush()
    assert messages(lines)[5:] == ["c (repeated 1 time in the last 0.0 s)"]


def test_a_line_repeated_without_end_is_written_once_then_once_a_window_as_a_count(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, clock, _ = setup
    for _ in range(31):  # one a second for 30 s
        log.error("store away")
        clock.now += 1
    log.error("store away")
    # The first at once; a count at each window's end, seen at the first line past it.
    assert messages(lines) == [
        "store away",
        "store away (repeated 9 times in the last 10 s)",
        "store away (repeated 10 times in the last 10 s)",
        "store away (repeated 10 times in the last 10 s)",
    ]


def test_a_window_with_no_repeat_ends_the_series(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, clock, collapser = setup
    log.warning("slow")
    clock.now += WINDOW + 1
    log.warning("slow")  # a new series: written at once
    clock.now += 1
    log.warning("slow")
    log.warning("fast")
    assert messages(lines) == ["slow", "slow", "fast"]
    collapser.flush()
    assert messages(lines)[3:] == ["slow (repeated 1 time in the last 1.0 s)"]


def test_info_lines_and_lines_of_another_level_or_logger_are_not_counted(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, _, _ = setup
    for _ in range(3):
        log.info("step done")
    log.warning("same words")
    log.error("same words")
    log.getChild("other").warning("same words")
    assert lines.lines == [
        (log.name, "INFO", "step done"),
        (log.name, "INFO", "step done"),
        (log.name, "INFO", "step done"),
        (log.name, "WARNING", "same words"),
        (log.name, "ERROR", "same words"),
        (f"{log.name}.other", "WARNING", "same words"),
    ]


def test_close_and_flush_write_the_pending_count(
    setup: tuple[logging.Logger, Lines, Clock, RepeatCollapser],
) -> None:
    log, lines, clock, collapser = setup
    log.warning("again")
    log.warning("again")
    clock.now += 2
    collapser.flush()
    log.warning("again")
    collapser.close()
    assert messages(lines) == [
        "again",
        "again (repeated 1 time in the last 2.0 s)",
        "again (repeated 1 time in the last 0.0 s)",
    ]


def test_on_real_time_the_timer_writes_the_count_when_the_window_ends() -> None:
    lines = Lines()
    collapser = RepeatCollapser(lines, window=0.3)
    log = logging.getLogger("repeats-test-timer")
    log.propagate = False
    log.addHandler(collapser)
    try:
        for _ in range(5):
            log.warning("disk full")
        assert messages(lines) == ["disk full"]
        deadline = time.monotonic() + DEADLINE
        while len(lines.lines) < 2:  # nothing else is logged: only the timer can write it
            assert time.monotonic() < deadline, lines.lines
            time.sleep(0.02)
        [first, counted] = messages(lines)
        assert first == "disk full"
        found = COUNT.search(counted)
        assert found is not None, counted
        assert counted.startswith("disk full (repeated 4 times")
        assert float(found.group(2)) >= 0.3
    finally:
        log.removeHandler(collapser)
        collapser.close()


def test_on_real_time_the_timer_writes_each_count_when_its_window_ends() -> None:
    """Two lines counted at once: the timer, armed for the later window first, wakes for the
    earlier one as well."""
    lines = Lines()
    collapser = RepeatCollapser(lines, window=1.0)
    log = logging.getLogger("repeats-test-timers")
    log.propagate = False
    log.addHandler(collapser)
    try:
        log.warning("first")
        time.sleep(0.05)  # not a wait for a state: it makes "second"'s window end later
        log.warning("second")
        log.warning("second")  # the timer is armed for second's window
        log.warning("first")  # and again, for first's, which ends sooner
        deadline = time.monotonic() + DEADLINE
        while len(lines.lines) < 4:  # nothing else is logged: only the timer can write them
            assert time.monotonic() < deadline, lines.lines
            time.sleep(0.02)
        said = messages(lines)
        assert said[:2] == ["first", "second"]
        counts = dict(line.split(" ", 1) for line in said[2:])
        assert set(counts) == {"first", "second"}, said
        for counted in counts.values():
            found = COUNT.search(counted)
            assert found is not None, counted
            assert found.group(1) == "1", counted
            assert float(found.group(2)) >= 1.0, counted
    finally:
        log.removeHandler(collapser)
        collapser.close()


# -- a real worker process ---------------------------------------------------------------------

REPEATS = 50
WORKFLOWS = textwrap.dedent(
    f"""
    import logging

    from lockgate import workflow

    @workflow(name="repeats_warn")
    async def warn(ctx) -> int:
        for _ in range({REPEATS}):
            logging.getLogger("shop.orders").warning("price feed stale")
        return {REPEATS}
    """
)


def test_a_worker_writes_a_repeated_warning_once_and_its_count_when_it_stops(
    tmp_path: Path,
) -> None:
    (tmp_path / "repeats_module.py").write_text(WORKFLOWS)
    SQLiteStore(tmp_path / "lockgate.db").close()
    log = tmp_path / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    command = ["worker", "repeats_module", "--store", "sqlite:///lockgate.db"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command, "--poll-interval", "0.05"],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        store = SQLiteStore(tmp_path / "lockgate.db")
        try:
            submitted = time.monotonic()
            handle = asyncio.run(WorkflowClient(store).submit("repeats_warn"))
            deadline = time.monotonic() + DEADLINE
            while store.get_run("repeats_warn", handle.run_id).status != RunStatus.COMPLETE:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        finally:
            store.close()
        # The first line is out while the worker still runs; its count is not yet while
        # the window, opened after ``submitted``, may still be open.
        while "price feed stale" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        if time.monotonic() - submitted < WINDOW:
            assert "repeated" not in log.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE)
    said = [line for line in log.read_text().splitlines() if "price feed stale" in line]
    assert len(said) == 2, log.read_text()
    assert said[0].endswith(" WARNING shop.orders: price feed stale")
    assert " WARNING shop.orders: price feed stale (repeated " in said[1]
    found = COUNT.search(said[1])
    assert found is not None, said[1]
    assert int(found.group(1)) == REPEATS - 1


SERVED = textwrap.dedent(
    f"""
    import logging
    import os
    import threading
    import time

    from lockgate import workflow

    @workflow(name="repeats_served")
    async def served(ctx) -> int:
        return 1

    def warn() -> None:
        while not os.path.exists(os.environ["REPEATS_GO"]):  # until the test says: serving
            time.sleep(0.01)
        for _ in range({REPEATS}):
            logging.getLogger("shop.feed").warning("price feed stale")
        open(os.environ["REPEATS_DONE"], "w").close()

    threading.Thread(target=warn, daemon=True).start()
    """
)


def test_lockgate_serve_collapses_repeats_as_a_worker_does(tmp_path: Path) -> None:
    """A thread of the served module warns the same line many times once the server is up."""
    (tmp_path / "repeats_served.py").write_text(SERVED)
    SQLiteStore(tmp_path / "lockgate.db").close()
    log, go, done = tmp_path / "serve.log", tmp_path / "go", tmp_path / "done"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKGATE_")}
    command = ["serve", "repeats_served", "--store", "sqlite:///lockgate.db", "--port", "0"]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "lockgate", *command],
            cwd=tmp_path,
            env={**env, "REPEATS_GO": str(go), "REPEATS_DONE": str(done)},
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + DEADLINE
        while not (serving := SERVING_LINE.search(log.read_bytes())):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        wait_ready(serving.group(1).decode())  # its signal handlers are in place
        started = time.monotonic()
        go.touch()
        while not done.exists():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        if time.monotonic() - started < WINDOW:
            assert "repeated" not in log.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=DEADLINE) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=DEADLINE)
    said = [line for line in log.read_text().splitlines() if "price feed stale" in line]
    assert len(said) == 2, log.read_text()
    assert said[0].endswith(" WARNING shop.feed: price feed stale")
    found = COUNT.search(said[1])
    assert found is not None, said[1]
    assert int(found.group(1)) == REPEATS - 1
