"""The examples of docs/composition.md's sections on chains and retries run as the page shows
them, each in a process of its own, and print what the page says they print."""

from __future__ import annotations

from test_doc_examples_children import run_example


def test_the_chain_example_totals_every_reading_and_resolves_the_first_id() -> None:
    total, resolved = run_example("chains.py")
    assert total == "total 28"
    root, _, _, tail = resolved.split()
    assert tail == f"{root}.c2"  # 7 readings and a close, 3 per run: two hand-ons


def test_the_retry_example_serves_the_finished_step_and_books_the_parcel() -> None:
    assert run_example("retry.py") == [
        "first run: error (the carrier's API is down)",
        "plan: 2 events carried over, in doubt: []",
        "retry .retry1: reservation-A1, parcel-A1",
        "calls: {'reserve_stock': 1, 'book_carrier': 3}",
    ]
