"""The panel's pages, one module per page family, and ``ROUTES``: every path the panel
answers, with the function that answers it. A page's JSON twin is the same path under
``/api`` (``panel.app``)."""

from __future__ import annotations

from rowfleet.panel.app import route
from rowfleet.panel.pages import deck, jobs, limits, models, overview, runs, schedules, workers

ROUTES = (
    route("GET", "/", overview.overview),
    route("GET", "/deck", deck.flight_deck),
    route("GET", "/jobs", jobs.job_list),
    route("GET", "/jobs/bulk", jobs.bulk_confirm),
    route("POST", "/jobs/bulk", jobs.bulk_apply),
    route("GET", "/jobs/{id}", jobs.job_detail),
    route("GET", "/jobs/{id}/{action}", jobs.action_confirm),
    route("POST", "/jobs/{id}/{action}", jobs.action_apply),
    route("GET", "/runs", runs.run_list),
    route("GET", "/runs/{id}", runs.run_detail),
    route("GET", "/runs/{id}/{action}", runs.action_confirm),
    route("POST", "/runs/{id}/{action}", runs.action_apply),
    route("GET", "/workers", workers.worker_list),
    route("POST", "/workers/switch", workers.switch),
    route("GET", "/limits", limits.limit_list),
    route("POST", "/limits", limits.set_limit),
    route("GET", "/schedules", schedules.schedule_list),
    route("GET", "/models", models.model_list),
)
