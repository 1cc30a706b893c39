"""What the CLI needs from a finished Dagster run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def first_failure(events) -> str:
    """The failed step among a run's `events` and the message of the exception that started it (not Dagster's
    wrapper)."""
    for event in events:
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


DEFINITIONS_MODULE = "hominem_pipeline.definitions"  # what `hominem ui` serves: `dagster dev -m <this>`


def ui_job_origin(job_name: str, working_directory: str):
    """The origin the project's Dagster UI gives job `job_name`: its code location (`dagster dev -m
    DEFINITIONS_MODULE`, named after the module), the location's single repository, the job. A run
    created with it is listed under that job (the Overview's timeline, the job's runs) and can be
    re-executed from the UI; a run without one is in the run list only."""
    import sys

    from dagster._core.definitions.repository_definition import SINGLETON_REPOSITORY_NAME
    from dagster._core.remote_origin import (
        ManagedGrpcPythonEnvCodeLocationOrigin,
        RemoteJobOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

    target = LoadableTargetOrigin(
        executable_path=sys.executable, module_name=DEFINITIONS_MODULE, working_directory=working_directory
    )
    location = ManagedGrpcPythonEnvCodeLocationOrigin(loadable_target_origin=target, location_name=DEFINITIONS_MODULE)
    return RemoteJobOrigin(
        repository_origin=RemoteRepositoryOrigin(
            code_location_origin=location, repository_name=SINGLETON_REPOSITORY_NAME
        ),
        job_name=job_name,
    )


def execute_in_process(job_fn, keys, run_config: dict, tags: dict, working_directory: str):
    """Dagster's `execute_job` (the run recorded in the project's instance, executed here), with the
    run created under the UI's origin for the job (`ui_job_origin`). Returns the JobExecutionResult
    (a context manager, as `execute_job`'s)."""
    from dagster._core.execution.api import execute_run

    job, instance, run = create_run(job_fn, keys, run_config, tags, working_directory)
    return execute_run(job, run, instance)


def create_run(job_fn, keys, run_config: dict, tags: dict, working_directory: str):
    """(the reconstructable job, the instance, the run) for `keys` of the job `job_fn` returns, created in
    the instance under the UI's origin for the job, not started."""
    from dagster import DagsterInstance, reconstructable

    job = reconstructable(job_fn)
    definition = job.get_definition()
    instance = DagsterInstance.get()
    run = instance.create_run_for_job(
        job_def=definition,
        run_config=run_config,
        tags={**definition.run_tags, **tags},
        asset_selection=frozenset(keys),
        job_code_origin=job.get_python_origin(),
        remote_job_origin=ui_job_origin(definition.name, working_directory),
    )
    return job, instance, run


@dataclass
class QueuedRun:
    """A run submitted to the instance's queue, once it ended: what `hominem run` reports of it."""

    run_id: str
    success: bool
    events: list  # its asset materializations (DagsterEvents)
    failure: str | None


def submit_and_wait(
    job_fn,
    keys,
    run_config: dict,
    tags: dict,
    working_directory: str,
    poll_seconds: float = 2.0,
    on_status: Callable[[str], None] | None = None,
) -> QueuedRun:
    """The run created as `execute_in_process` creates it, then submitted to the instance's run coordinator
    (a deployment's QueuedRunCoordinator: the daemon dequeues and launches it), and followed until it ends."""
    import time

    from dagster import DagsterEventType, DagsterRunStatus

    _, instance, run = create_run(job_fn, keys, run_config, tags, working_directory)
    instance.submit_run(run.run_id, workspace=None)  # the queued coordinator reads only the run
    done = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    status = None
    while True:
        current = instance.get_run_by_id(run.run_id)
        if current.status != status:
            status = current.status
            if on_status:
                on_status(status.value)
        if status in done:
            break
        time.sleep(poll_seconds)
    records = instance.get_records_for_run(
        run.run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE}, limit=100_000
    ).records
    events = [r.event_log_entry.dagster_event for r in records]
    materialized = [e for e in events if e.event_type == DagsterEventType.ASSET_MATERIALIZATION]
    success = status == DagsterRunStatus.SUCCESS
    failed = [e for e in events if e.event_type == DagsterEventType.STEP_FAILURE]
    return QueuedRun(
        run.run_id,
        success,
        materialized,
        None if success else first_failure(failed) if failed else f"the run ended {status.value}",
    )
