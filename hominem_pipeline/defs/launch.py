"""What the CLI needs from a finished Dagster run."""

from __future__ import annotations


def first_failure(result) -> str:
    """The failed step and the message of the exception that started it (not Dagster's wrapper)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            message = error.message.strip()
            head, _, rest = message.partition(": ")
            if head.split(".")[-1] == error.cls_name:  # "pkg.module.Error: text" -> "Error: text"
                message = f"{error.cls_name}: {rest}"
            return f"{event.step_key}: {message}"
    return "see the run's logs in the Dagster UI"
