"""A small shop's background jobs: the application code a test suite would cover.

Placing an order charges the card, mails a receipt and, a day later, asks for a review.
The mailer is a stand-in that can be told to fail, as a real one sometimes does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from sluicegate import App
from sluicegate.context import current_job

app = App(broker="sqlite:///shop.db")  # production's broker; the tests bind a fresh one


@dataclass
class Mailer:
    outbox: list[tuple[str, str]] = field(default_factory=list)
    fail_next: int = 0  # how many sends fail with ConnectionError before one works

    def send(self, to: str, subject: str) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise ConnectionError("mail server unreachable")
        self.outbox.append((to, subject))


mailer = Mailer()


@app.task(queue="billing", max_attempts=2, retry_on=(ConnectionError,))
def charge(order_id: int, cents: int) -> dict[str, int]:
    if cents <= 0:
        raise ValueError(f"order {order_id}: cannot charge {cents} cents")
    return {"order": order_id, "charged": cents}


@app.task(queue="email", max_attempts=3, retry_on=(ConnectionError,))
def send_receipt(order_id: int, email: str) -> dict[str, int]:
    job = current_job()
    mailer.send(email, f"receipt for order {order_id}")
    return {"job": job.id, "attempt": job.attempts}


@app.task(queue="email")
def ask_for_review(order_id: int, email: str) -> None:
    mailer.send(email, f"how was order {order_id}?")


@app.task(queue="reports")
async def daily_report(day: str) -> dict[str, object]:
    await asyncio.sleep(0)  # an async call: a database, an HTTP API
    return {"day": day, "job": current_job().id}


REVIEW_DELAY = 24 * 3600


def place_order(order_id: int, email: str, cents: int) -> None:
    """What the web handler calls: the jobs go to the broker before it returns."""
    charge.enqueue(order_id, cents)
    send_receipt.enqueue(order_id, email)
    ask_for_review.with_options(delay=REVIEW_DELAY).enqueue(order_id, email)
