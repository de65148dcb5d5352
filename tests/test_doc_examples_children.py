"""The examples of docs/composition.md's sections on child runs, fan-out and signals sent
from a body run as the page shows them, each in a process of its own, and print what the
page says they print."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


def run_example(name: str) -> list[str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_child_run_example_books_one_order_and_reports_the_failed_child() -> None:
    light, heavy = run_example("children.py")
    assert light == "{'order': 'A1', 'shipping': 'booked', 'parcel': 'parcel-A1'}"
    assert heavy.startswith("{'order': 'B2', 'shipping': 'error', 'child': '")
    assert heavy.endswith(".child0'}")


def test_the_fan_out_example_gathers_every_image_in_order() -> None:
    lines = run_example("fanout.py")
    assert [line.split()[0] for line in lines] == [f"img{n:02}-640w.png" for n in range(20)]
    assert all(len(line.split()[1]) == 8 for line in lines)


def test_the_signal_example_delivers_the_payment_once() -> None:
    answer, outcome = run_example("signal_send.py")
    assert answer in ("delivered", "buffered")
    assert outcome == "{'order': 'A1', 'paid': 1299}"


def test_the_page_shows_the_examples_as_they_are() -> None:
    page = (EXAMPLES.parent / "composition.md").read_text()
    shown = 0
    for block in page.split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        first, _, rest = code.partition("\n")
        if not first.startswith("# docs/examples/"):
            continue
        example = first.removeprefix("# ").split(":", 1)[0]
        assert rest.strip() in (EXAMPLES.parent.parent / example).read_text(), example
        shown += 1
    assert shown >= 3
