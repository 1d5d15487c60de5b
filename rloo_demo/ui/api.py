"""The named API endpoints for ``gradio_client`` (documented in docs/reference.md). Each calls one controller method, so
the checks and limits are the page's own; every error comes back as ``{"error": message}``, never a traceback."""

from __future__ import annotations

import gradio as gr

from rloo_demo.errors import UserError, Waiting
from rloo_demo.ui.common import caller_of
from rloo_demo.ui.controller import Controller

# The kinds of event (gradio concurrency groups) that only read runs: the admission middleware counts them against a
# visitor's reads before gradio touches them (server.admission). The page tick is its own group (ui.app).
READS, TICK = "reads", "tick"
READ_KINDS = frozenset({READS, TICK})

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
