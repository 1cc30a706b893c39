"""The student's own replies, judged by measures nothing in the project trains on: recall of what the person said
earlier in the conversation, general facts the memory files do not hold, checkable instructions kept (IFEval's ids),
and the sameness of replies to varied messages. Each check compares two models on the same items, greedy as the
evaluation decodes, and is decided by the paired rule of `core/evaluation/noise.py`.

- `sets`: the item sets (config/checks/*.jsonl) and how the student reads each item;
- `instructions`: IFEval's instruction checkers (strict and loose);
- `scoring`: each item's score, the sameness measures, and the judgement of two models' replies;
- `generation`: the replies of one adapter (or the base) to the items, kept by key in a reply cache.
"""

from hominem_pipeline.core.evaluation.reply_checks.generation import check_replies
from hominem_pipeline.core.evaluation.reply_checks.scoring import judge_replies
from hominem_pipeline.core.evaluation.reply_checks.sets import ReplyCheckSets, ReplyItem, load_reply_checks

__all__ = ["ReplyCheckSets", "ReplyItem", "check_replies", "judge_replies", "load_reply_checks"]
