"""The streaming demo's workflows, served by ``lockgate worker lockgate.demo._streams``.

``demo_basket`` is a ``Debounce`` on its trigger topic: a customer's order events become one run
once the customer has been quiet for a second (or after three seconds at most). ``demo_payment``
is bound to the topic ``demo.payments``: every record there is a run of its own.
"""

from __future__ import annotations

from typing import Any

from lockgate import Debounce, KafkaTopic, WorkflowContext, step, workflow
from lockgate.demo._kafka import PAYMENTS_TOPIC


@step
async def pack(customer: str, items: list[str]) -> str:
    return f"basket of {len(items)} for {customer}"


@step
async def settle(order: str, amount: int) -> str:
    return f"settled {order} ({amount})"


@workflow(
    name="demo_basket",
    trigger=Debounce(key="customer", window_seconds=1.0, max_wait_seconds=3.0),
)
async def demo_basket(
    ctx: WorkflowContext, key: str, events: list[dict[str, Any]], count: int
) -> str:
    packed: str = await pack(key, [str(event["item"]) for event in events])
    return packed


@workflow(name="demo_payment", topic=KafkaTopic(PAYMENTS_TOPIC, max_concurrency=16))
async def demo_payment(ctx: WorkflowContext, value: dict[str, Any]) -> str:
    settled: str = await settle(str(value["order"]), int(value["amount"]))
    return settled
