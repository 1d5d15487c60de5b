"""The named API endpoints for ``gradio_client`` (documented in docs/reference.md). Each calls one controller method, so
the checks and limits are the page's own; every error comes back as ``{"error": message}``, never a traceback."""

from __future__ import annotations

import gradio as gr

from rloo_demo.errors import UserError, Waiting
from rloo_demo.ui.common import caller_of
from rloo_demo.ui.controller import Controller

# Concurrency groups (gradio's concurrency_id) of the endpoints that read runs, and of the page tick (ui.app).
READS, TICK = "reads", "tick"

# What each event costs the server, in milliseconds of its CPU per call: the price the admission middleware charges
# a visitor's one event budget (public.gates.EventGate, Limits.event_ms_per_minute) before gradio queues the event.
# Measured with `python scripts/bench_events.py --costs` (docs/benchmarks.md, "Every event flooded"), rounded up;
# tests/public/test_visitor_budget.py checks that every event of the page with a server function is named here.
EVENT_COSTS: dict[str, float] = {
    # the page's own events
    "train_start": 16,  # a Start resolves its settings (the run's own cost is the compute budget's)
    "train_stop": 2,
    "train_estimate": 3,
    "train_redraw": 6,
    "toy": 12,
    "rollouts_prompts": 9,
    "rollouts_probe": 30,  # sampling's compute is the sampling gate's (its share of the wall time): this is the rest
    "refresh_runs": 9,
    "rollouts_run": 13,
    "rollouts_follow": 11,
    "pin_view": 2,
    "pick_step": 11,
    "pick_group": 6,
    "drop_selection": 2,
    "rollouts_whatif": 5,
    "keep_offset": 6,
    "rollouts_completion": 7,
    "rollouts_token_measure": 6,
    "compare_refresh": 13,
    "compare_heldout": 6,
    "compare_sample": 30,  # as the probe's
    "compare_evaluate": 30,  # as the probe's
    "runs_refresh": 11,
    "overlay": 10,
    "overlay_1": 6,
    "overlay_2": 6,
    "runs_arena": 5,
    "runs_arena_overlay": 6,
    "runs_details": 27,  # an export is built once per run and content (store.export)
    "runs_trl_project": 18,  # the zip built once per run and content (benchmarks.md, "A run as a TRL project")
    "runs_notes": 9,
    "runs_label": 8,
    "ask": 7,
    "lambda": 6,
    "runs_delete": 8,
    "rollouts_open_run": 27,
    "rollouts_row": 7,
    "runs_pick_row": 9,
    "rollouts_open_step": 7,
    "show_train": 2,
    "show_rollouts": 2,
    "show_compare": 2,
    "show_runs": 3,
    "show_lessons": 3,  # a tab switch: the same as show_runs (nothing of its own reaches the server)
    "page_tick": 6,
    "page_load": 26,  # every tab's first drawing, in a session gradio builds for it (25 ms measured, 6 Dec)
    "page_language": 27,  # every tab's texts written again: what its three events cost (14 + 3 + 10) when apart
    # the named endpoints (gradio_client)
    "start_run": 10,
    "stop_run": 8,
    "poll_metrics": 9,
    "get_rollouts": 9,
    "compare": 30,  # as the probe's
    "list_runs": 11,
}
DEFAULT_EVENT_COST = 30.0  # an event the table does not name: as dear as the dearest named one


def register_api(controller: Controller) -> None:
    def answer(call) -> dict:
        try:
            return call()
        except UserError as exc:
            return {"error": controller.error_text(exc)}
        except Exception as exc:  # a bug: logged, and reported as one
            return {"error": controller.error_text(exc)}

    def start_run(config_json: str, client_id: str, request: gr.Request) -> dict:
        """Start a run from a JSON RunConfig (missing keys take defaults). Returns {"run"}, {"error"}, or, when the
        slot is taken, {"waiting": place, "message"}: the run starts by itself when its turn comes, while the
        caller keeps polling (any endpoint from the same address counts)."""

        def start() -> dict:
            try:
                return {"run": controller.start(config_json, caller_of(request, client_id))}
            except Waiting as exc:
                return {"waiting": exc.place, "message": str(exc)}

        return answer(start)

    def stop_run(run: str, client_id: str, request: gr.Request) -> dict:
        """Ask a run to stop at the end of its current step (only its starter, or the operator's token, may)."""
        return answer(lambda: {"message": controller.stop(run, caller_of(request, client_id))})

    def poll_metrics(run: str, since_step: int, request: gr.Request) -> dict:
        """Status and the metric records after ``since_step``."""
        return answer(lambda: controller.poll_metrics(run, since_step, caller_of(request)))

    def get_rollouts(run: str, step: int, request: gr.Request) -> dict:
        """The prompt groups of one step (step <= 0: the latest)."""
        return answer(lambda: controller.get_rollouts(run, step, caller_of(request)))

    def compare(run: str, prompt: str, num_samples: int, seed: int, request: gr.Request) -> dict:
        """Base vs trained samples for one prompt, same seed, each scored by every reward function."""
        defaults = {"max_new_tokens": min(24, controller.limits.max_compare_tokens), "temperature": 1.0, "top_p": 1.0}
        return answer(
            lambda: controller.compare(
                run,
                prompt,
                num_samples,
                defaults["max_new_tokens"],
                defaults["temperature"],
                defaults["top_p"],
                seed,
                caller_of(request),
            )
        )

    def list_runs(request: gr.Request) -> list:
        """Every run on disk with status and key figures, newest first ({"error"} when the caller reads too often)."""
        return answer(lambda: controller.list_runs(caller_of(request)))

    reads = {"concurrency_limit": 8, "concurrency_id": READS}
    gr.api(start_run, api_name="start_run", concurrency_limit=1, concurrency_id="start")
    # Stop only sets a flag: a group of its own, so a visitor's reads waiting in the queue never hold it back
    gr.api(stop_run, api_name="stop_run", concurrency_limit=4, concurrency_id="stop")
    gr.api(poll_metrics, api_name="poll_metrics", **reads)
    gr.api(get_rollouts, api_name="get_rollouts", **reads)
    gr.api(compare, api_name="compare", concurrency_limit=1, concurrency_id="sampling")
    gr.api(list_runs, api_name="list_runs", **reads)
