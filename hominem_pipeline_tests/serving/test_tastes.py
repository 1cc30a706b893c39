"""The service's taste models (`serving/tastes.py`) over a real ledger, on the text features a service without a
reward model reads."""

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor

from hominem_pipeline.core.online.ledger import Ledger
from hominem_pipeline.serving.tastes import ServedTastes
from hominem_pipeline_tests.core.test_online import choice, turn


class TextOnlyEngine:
    """What ServedTastes reads of the engine: no reward model (text features alone), and its worker thread."""

    reward = None
    reward_model_path = None

    def __init__(self):
        self._pool = ThreadPoolExecutor(1)

    def run(self, fn) -> Future:
        return self._pool.submit(fn)


class Counted(ServedTastes):
    """The replies each call reads features of."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: list[int] = []

    async def features(self, prompts, replies):
        self.read.append(len(replies))
        return await super().features(prompts, replies)


def test_a_new_choice_reads_its_two_replies_not_all_of_the_person_s_and_forgetting_drops_them():
    ledger = Ledger(["empathy"])
    hello = [{"role": "user", "content": "hello"}]
    for i in range(3):
        ledger.add(turn(f"q{i}", hello, f"How are you today, friend number {i}?"))
        ledger.add(turn(f"s{i}", hello, "Fine."))
    tastes = Counted(TextOnlyEngine(), ledger)

    async def fit():
        return await tastes.model("local")

    assert asyncio.run(fit()).choices == 0 and tastes.read == [1]  # no choice yet: the features' names alone
    ledger.add(choice("c0", "q0", "s0"))
    ledger.add(choice("c1", "q1", "s1"))
    first = asyncio.run(fit())
    ledger.add(choice("c2", "q2", "s2"))
    second = asyncio.run(fit())
    assert tastes.read == [1, 4, 2]  # the new choice's two replies, the earlier ones' features kept
    assert (first.choices, second.choices) == (2, 3) and asyncio.run(fit()) is second  # no new choice: no refit
    ledger.forget("local")
    tastes.forget("local")
    assert tastes._rows == {} and asyncio.run(fit()).choices == 0
