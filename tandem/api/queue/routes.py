"""The asynchronous batch API's routes and job runners, by wire format, over one QueueService.

The service (tandem/api/queue/service.py) stores and dispatches jobs but knows no wire format: a
job is stored under the API that queued it ("openai": /v1/batches, "workers_ai":
`?queueRequest=true`), and the runner of that API turns it back into engine requests and
formats its result.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from tandem.api.openai.batch_api import batch_routes, run_openai_job
from tandem.api.openai.files_api import file_routes
from tandem.api.queue.service import JobRunner, QueueService
from tandem.api.workers_ai.batch_events_api import batch_event_routes
from tandem.api.workers_ai.queued_api import run_workers_ai_job
from tandem.api.workers_ai.subscriptions_api import subscription_routes

JOB_RUNNERS: dict[str, JobRunner] = {"workers_ai": run_workers_ai_job, "openai": run_openai_job}


def queue_routes(service: QueueService) -> list[BaseRoute]:
    return [*file_routes(service), *batch_routes(service), *subscription_routes(service),
            *batch_event_routes(service)]
