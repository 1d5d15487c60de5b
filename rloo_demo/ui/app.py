"""Assemble the Gradio app: four tabs, one timer, page-load re-attachment and the named API endpoints.

Live updates: a ``gr.Timer`` ticks every ``TICK_SECONDS``. Each tick reads the watched run's step count (a cheap
in-memory length for a live run) and redraws the plots and rollouts only when new steps exist, so an idle page or
many watching pages cost the training thread next to nothing.

Sessions: each browser keeps a random client id in localStorage (``gr.BrowserState``). It identifies who started a
run (only they may stop it) and survives page reloads; a reloaded page re-attaches to the run in training.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
from gradio.components.plot import PlotData

from rloo_demo import plots
from rloo_demo.runner import Runner
from rloo_demo.ui import compare_tab, rollouts_tab, runs_tab, train_tab
from rloo_demo.ui.controller import USER_ERRORS, Controller, error_text
from rloo_demo.ui.forms import FORM_FIELDS, config_from_form
from rloo_demo.ui.views import arithmetic_markdown, cli_command, group_rows, groups_html, run_rows, status_line

TICK_SECONDS = 1.0
SIDE_TEXT_CHARS = 40  # completion text in the narrow per-group table; the full text is in the tables beside it

CSS = """
.rloo-error p, .rloo-error li { color: #D9534F; }
.rloo-small p { font-size: 0.85em; opacity: 0.8; }
.rloo-group { margin: 0 0 14px 0; }
.rloo-prompt { margin: 4px 0; }
.rloo-table { border-collapse: collapse; width: 100%; font-size: 0.88em; }
.rloo-table th, .rloo-table td { padding: 3px 6px; border-bottom: 1px solid rgba(128,128,128,0.25); text-align: right; }
.rloo-table td.rloo-text { text-align: left; white-space: normal; }
.rloo-table th:nth-child(2) { text-align: left; }
tr.rloo-pos { background: rgba(61, 190, 139, 0.18); }
tr.rloo-neg { background: rgba(217, 83, 79, 0.18); }
tr.rloo-zero { background: rgba(128, 128, 128, 0.10); }
.rloo-empty { opacity: 0.7; }
"""

HEADER = """# RLOO, live
Train a small language model with **RLOO** (REINFORCE Leave-One-Out) and watch it learn. Press **Start**: the
embedded 1.35M-parameter GPT-2 (pretrained on IMDB reviews) learns to write positive reviews in about a minute on a
CPU. Then open **Rollouts** to see, for every prompt, each completion's reward, its leave-one-out baseline and its
advantage, and **Compare** to sample the base and the trained model side by side."""


@dataclass
class Limits:
    """Caps a public deployment puts on what visitors may ask for (environment variables, see README)."""

    max_steps: int = 2000
    max_new_tokens: int = 128
    max_k: int = 16
    allow_custom_models: bool = True

    @classmethod
    def from_env(cls) -> Limits:
        env = os.environ
        return cls(
            max_steps=int(env.get("RLOO_MAX_STEPS", cls.max_steps)),
            max_new_tokens=int(env.get("RLOO_MAX_NEW_TOKENS", cls.max_new_tokens)),
            max_k=int(env.get("RLOO_MAX_K", cls.max_k)),
            allow_custom_models=env.get("RLOO_ALLOW_CUSTOM_MODELS", "1") not in ("0", "false", "no"),
        )

    def check(self, config) -> None:
        from rloo_demo.config import ConfigError
        from rloo_demo.hub import EMBEDDED_POLICY

        problems = {}
        if config.max_steps > self.max_steps:
            problems["max_steps"] = f"this server allows at most {self.max_steps} steps"
        if config.max_new_tokens > self.max_new_tokens:
            problems["max_new_tokens"] = f"this server allows at most {self.max_new_tokens} new tokens"
        if config.num_generations > self.max_k:
            problems["num_generations"] = f"this server allows K of at most {self.max_k}"
        if not self.allow_custom_models:
            if config.policy != EMBEDDED_POLICY:
                problems["policy"] = f"this server only trains {EMBEDDED_POLICY}"
            if any(r.startswith("classifier:") for r in config.rewards) or config.data_source != "embedded:imdb":
                problems["rewards"] = "this server only allows the embedded rewards and data"
        if problems:
            raise ConfigError(problems)


def as_plot(figure: dict) -> PlotData:
    """A figure dict as gr.Plot's payload. The builders make plain dicts, not ``go.Figure``s: plotly's validation
    costs ~20 ms a figure, GIL time that the training thread in this process would lose at every redraw."""
    return PlotData(type="plotly", plot=json.dumps(figure))


def _records_figures(records: list[dict], smoothing: float) -> list:
    secondary = plots.secondary_figures(records, smoothing)
    figures = [
        plots.reward_figure(records, smoothing),
        plots.kl_figure(records, smoothing),
        secondary["loss"],
        secondary["entropy"],
        secondary["completion_length"],
        secondary["frac_reward_zero_std"],
    ]
    return [as_plot(f) for f in figures]


def build_app(controller: Controller, limits: Limits | None = None) -> gr.Blocks:
    limits = limits or Limits()
    with gr.Blocks(title="RLOO demo") as demo:
        client_id = gr.BrowserState("", storage_key="rloo-demo-client-id")
        watched = gr.State(None)  # name of the run this page follows
        drawn = gr.State(-1)  # last step drawn in the plots (-1: nothing yet)
        drawn_rollout = gr.State(-1)  # last rollout step shown
        tab = gr.State("train")  # the visible tab: a tick only renders what the page shows
        gr.Markdown(HEADER)
        with gr.Tabs():
            with gr.Tab("Train", id="train") as train_tab_el:
                tr = train_tab.build(limits)
            with gr.Tab("Rollouts", id="rollouts") as rollouts_tab_el:
                ro = rollouts_tab.build()
            with gr.Tab("Compare", id="compare") as compare_tab_el:
                cp = compare_tab.build(limits)
            with gr.Tab("Runs", id="runs") as runs_tab_el:
                rs = runs_tab.build()
        timer = gr.Timer(TICK_SECONDS)

        # ------------------------------------------------------------ train
        def start(cid, *values):
            try:
                config = config_from_form(dict(zip(FORM_FIELDS, values, strict=True)), controller.runner.runs_dir)
                limits.check(config)
                name = controller.start(config, cid)
            except USER_ERRORS as exc:
                return gr.skip(), gr.skip(), "**Not started.**\n\n" + error_text(exc)
            return name, -1, ""

        tr.start.click(start, [client_id, *tr.form], [watched, drawn, tr.form_error], api_visibility="private")

        def stop(cid, name):
            if not name:
                return "Nothing to stop."
            return controller.stop(name, cid)

        tr.stop.click(stop, [client_id, watched], [tr.form_error], api_visibility="private")

        for el, tab_id in (
            (train_tab_el, "train"),
            (rollouts_tab_el, "rollouts"),
            (compare_tab_el, "compare"),
            (runs_tab_el, "runs"),
        ):
            el.select(lambda t=tab_id: t, None, tab, api_visibility="private", queue=False)

        def tick(name, last_drawn, smoothing, last_rollout, follow, group_label, visible="train"):
            # A page with nothing to watch, or watching a finished run while another trains, follows the live one.
            active = controller.runner.latest_active()
            if active is not None and active.name != name:
                view = controller.view(name)
                if view is None or not view.live:
                    name, last_drawn, last_rollout = active.name, -1, -1
            view = controller.view(name)
            if view is None or visible not in ("train", "rollouts"):
                return (name, last_drawn, gr.skip(), gr.skip(), *[gr.skip()] * 6, last_rollout, *[gr.skip()] * 5)
            status = status_line(view.status, view.records, view.max_steps, view.elapsed, view.name)
            err = f"**Run failed:** {view.error}" if view.status == "failed" else ""
            if visible == "train" and view.last_step != last_drawn:
                figures = _records_figures(view.records, smoothing)
                last_drawn = view.last_step
            else:
                figures = [gr.skip()] * 6
            steps = controller.rollout_steps(name)
            rollout_updates = [gr.skip()] * 5
            if visible == "rollouts" and steps and follow and steps[-1] != last_rollout:
                last_rollout = steps[-1]
                rollout_updates = list(_rollout_view(name, last_rollout, group_label, steps))
            return (name, last_drawn, status, err, *figures, last_rollout, *rollout_updates)

        rollout_outputs = [ro.step, ro.groups, ro.group, ro.group_plot, ro.table]
        timer.tick(
            tick,
            [watched, drawn, tr.smoothing, drawn_rollout, ro.follow, ro.group, tab],
            [watched, drawn, tr.status, tr.run_error, *tr.plots, drawn_rollout, *rollout_outputs],
            show_progress="hidden",
            # callable by clients (scripts/bench_app.py simulates watching pages with it), hidden from the API docs
            api_name="page_tick",
            api_visibility="undocumented",
            concurrency_limit=None,
            queue=False,  # a plain request: the queue's SSE machinery costs GIL time the training thread would lose
        )

        def redraw(name, smoothing):
            view = controller.view(name)
            return _records_figures(view.records if view else [], smoothing)

        tr.smoothing.release(redraw, [watched, tr.smoothing], tr.plots, api_visibility="private")

        # ------------------------------------------------------------ rollouts
        def _rollout_view(name, step, group_label, steps=None):
            steps = steps if steps is not None else controller.rollout_steps(name)
            groups = controller.rollouts(name, step)
            labels = [f"Prompt {g['group'] + 1}: {g['prompt'][:40]}" for g in groups]
            label = group_label if group_label in labels else (labels[0] if labels else None)
            slider = gr.Slider(minimum=steps[0] if steps else 1, maximum=max(steps[-1] if steps else 1, 2), value=step)
            if not groups:
                return slider, groups_html([]), gr.Dropdown(choices=[], value=None), None, None
            g = groups[labels.index(label)]
            headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS)
            return (
                slider,
                groups_html(groups),
                gr.Dropdown(choices=labels, value=label),
                as_plot(plots.group_figure(g)),
                gr.Dataframe(value=rows, headers=headers),
            )

        def pick_step(name, step, group_label):
            return _rollout_view(name, int(step), group_label)

        ro.step.release(pick_step, [watched, ro.step, ro.group], rollout_outputs, api_visibility="private")

        def pick_group(name, step, group_label):
            groups = controller.rollouts(name, int(step))
            for g in groups:
                if f"Prompt {g['group'] + 1}: {g['prompt'][:40]}" == group_label:
                    headers, rows = group_rows(g, text_chars=SIDE_TEXT_CHARS)
                    return (
                        as_plot(plots.group_figure(g)),
                        gr.Dataframe(value=rows, headers=headers),
                        "Select a row above.",
                    )
            return gr.skip(), gr.skip(), gr.skip()

        ro.group.input(
            pick_group, [watched, ro.step, ro.group], [ro.group_plot, ro.table, ro.arithmetic], api_visibility="private"
        )

        def pick_completion(name, step, group_label, evt: gr.SelectData):
            for g in controller.rollouts(name, int(step)):
                if f"Prompt {g['group'] + 1}: {g['prompt'][:40]}" == group_label:
                    return arithmetic_markdown(g, evt.index[0])
            return "Select a row above."

        ro.table.select(pick_completion, [watched, ro.step, ro.group], ro.arithmetic, api_visibility="private")

        # ------------------------------------------------------------ compare
        def refresh_compare(name, current):
            names = controller.comparable_runs()
            value = current if current in names else (name if name in names else (names[0] if names else None))
            held = _heldout_choices(controller, value)
            return gr.Dropdown(choices=names, value=value), gr.Dropdown(choices=held)

        compare_tab_el.select(refresh_compare, [watched, cp.run], [cp.run, cp.heldout], api_visibility="private")
        cp.refresh.click(refresh_compare, [watched, cp.run], [cp.run, cp.heldout], api_visibility="private")
        cp.heldout.input(lambda p: p, cp.heldout, cp.prompt, api_visibility="private")

        def do_compare(name, prompt, n, max_new, temp, top_p, seed):
            if not name:
                return "Pick a run first (train one on the Train tab).", None, None
            try:
                result = controller.compare(name, prompt, n, max_new, temp, top_p, seed)
            except USER_ERRORS as exc:
                return f"**Error:** {error_text(exc)}", None, None
            tables = []
            for label in ("base", "trained"):
                names = list(result[label][0]["scores"]) if result[label] else []
                # numbers first: the completion text is the wide column and would push them out of view
                rows = [
                    [round(s["reward"], 3), *[round(s["scores"][k], 3) for k in names], s["text"]]
                    for s in result[label]
                ]
                tables.append(gr.Dataframe(value=rows, headers=["reward", *names, "completion"]))
            mean = {k: sum(s["reward"] for s in result[k]) / len(result[k]) for k in ("base", "trained")}
            summary = (
                f"Mean reward ({' + '.join(result['trained_on'])}): base **{mean['base']:+.3f}**, "
                f"trained **{mean['trained']:+.3f}** · same seed {result['seed']} for both"
            )
            return summary, *tables

        cp.sample.click(
            do_compare,
            [cp.run, cp.prompt, cp.num_samples, cp.max_new_tokens, cp.temperature, cp.top_p, cp.seed],
            [cp.summary, cp.base, cp.trained],
            api_visibility="private",
        )

        def do_evaluate(name, n, seed, progress=gr.Progress()):  # noqa: B008 - gradio's progress idiom
            if not name:
                return "Pick a run first.", None
            try:
                result = controller.evaluate(
                    name, n, 1, seed, progress=lambda done, total: progress(done / total, desc="sampling held-out")
                )
            except USER_ERRORS as exc:
                return f"**Error:** {error_text(exc)}", None
            from rloo_demo.evaluation import format_report

            return f"```\n{format_report(result)}\n```", as_plot(plots.eval_histogram(result))

        cp.evaluate.click(
            do_evaluate,
            [cp.run, cp.eval_prompts, cp.eval_seed],
            [cp.eval_report, cp.eval_plot],
            api_visibility="private",
        )

        # ------------------------------------------------------------ runs
        def refresh_runs(selected, details):
            runs = controller.runner.runs()
            names = [r.name for r in runs]
            rows = run_rows([r.summary() for r in runs])
            keep = [n for n in (selected or []) if n in names] or names[:2]
            pick = details if details in names else (names[0] if names else None)
            return (rows, gr.CheckboxGroup(choices=names, value=keep), gr.Dropdown(choices=names, value=pick))

        runs_outputs = [rs.table, rs.overlay_runs, rs.run]
        runs_tab_el.select(refresh_runs, [rs.overlay_runs, rs.run], runs_outputs, api_visibility="private")
        rs.refresh.click(refresh_runs, [rs.overlay_runs, rs.run], runs_outputs, api_visibility="private")

        def overlay(selected, metric, smoothing):
            data = {}
            for n in selected or []:
                view = controller.view(n)
                if view is not None:
                    data[n] = view.records
            return as_plot(plots.overlay_figure(data, metric, smoothing))

        for trigger in (rs.overlay_runs.change, rs.metric.change, rs.smoothing.release):
            trigger(overlay, [rs.overlay_runs, rs.metric, rs.smoothing], rs.overlay, api_visibility="private")

        def details(name):
            if not name:
                return None, "", ""
            run = controller.runner.run(name)
            folder = Path(tempfile.mkdtemp(prefix="rloo-dl-"))
            files = []
            for what in ("metrics", "config", "rollouts", "model"):
                try:
                    files.append(str(controller.export(name, what, folder)))
                except FileNotFoundError:
                    pass
            config = run.config()
            return files, cli_command(config), (run.path / "config.yaml").read_text()

        rs.run.change(details, rs.run, [rs.downloads, rs.command, rs.config], api_visibility="private")

        # ------------------------------------------------------------ page load: identity and re-attachment
        def on_load(cid):
            cid = cid or uuid.uuid4().hex
            return cid, controller.default_run(), -1, -1

        demo.load(on_load, client_id, [client_id, watched, drawn, drawn_rollout], api_visibility="private")

        register_api(controller, limits)
    return demo


def quiet_queue(demo: gr.Blocks) -> None:
    """Trim gradio's queue overheads that compete with the training thread for the GIL and the 2 cores.

    On Linux gradio's queue polls for new events every 1 ms and for progress updates every 10 ms, about 1,100
    wake-ups a second (~40 ms of CPU a second when idle). Each wake-up takes the GIL from the training thread in this
    process. Checking every 20 ms and 100 ms instead costs at most 20 ms of queueing latency. (Private attributes:
    gradio 6 has no setting for them; if they are renamed this does nothing.)"""
    queue = getattr(demo, "_queue", None)
    if queue is not None and hasattr(queue, "sleep_when_free"):
        queue.sleep_when_free = 0.02
        queue.progress_update_sleep_when_free = 0.1
    if queue is not None and hasattr(queue, "ANAYLTICS_CACHE_FREQUENCY"):
        # After every event gradio rebuilds a pandas table of up to 10,000 past events for its monitoring summary
        # (GRADIO_ANALYTICS_CACHE_FREQUENCY=1): a cost per page tick that grows with uptime. Once per 1,000 is enough.
        queue.ANAYLTICS_CACHE_FREQUENCY = 1000


def _heldout_choices(controller: Controller, name: str | None) -> list[str]:
    from rloo_demo.config import RunConfig
    from rloo_demo.evaluation import heldout_prompts

    try:
        config = controller.view(name).config if name else RunConfig()
    except AttributeError:
        config = RunConfig()
    try:
        return list(heldout_prompts(config, 40))
    except (ValueError, FileNotFoundError):
        return []


def register_api(controller: Controller, limits: Limits) -> None:
    """Named endpoints for ``gradio_client`` (documented in the README)."""

    def start_run(config_json: str, client_id: str) -> dict:
        """Start a run from a JSON RunConfig (missing keys take defaults). Returns {"run"} or {"error"}."""
        import json

        from rloo_demo.config import RunConfig

        try:
            config = RunConfig.from_dict(json.loads(config_json or "{}"))
            config.output_dir = controller.runner.runs_dir
            limits.check(config)
            return {"run": controller.start(config, client_id)}
        except (*USER_ERRORS, json.JSONDecodeError) as exc:
            return {"error": error_text(exc)}

    def stop_run(run: str, client_id: str) -> dict:
        """Ask a run to stop at the end of its current step (only its starter may)."""
        return {"message": controller.stop(run, client_id)}

    def poll_metrics(run: str, since_step: int) -> dict:
        """Status and the metric records after ``since_step``."""
        view = controller.view(run)
        if view is None:
            return {"error": f"no run named {run!r}"}
        return {
            "run": run,
            "status": view.status,
            "error": view.error,
            "max_steps": view.max_steps,
            "records": [r for r in view.records if r["step"] > int(since_step)],
        }

    def get_rollouts(run: str, step: int) -> dict:
        """The prompt groups of one step (step <= 0: the latest)."""
        steps = controller.rollout_steps(run)
        groups = controller.rollouts(run, int(step) if int(step) > 0 else None)
        return {"run": run, "steps": steps, "groups": groups}

    def compare(run: str, prompt: str, num_samples: int, seed: int) -> dict:
        """Base vs trained samples for one prompt, same seed, each scored by every reward function."""
        try:
            return controller.compare(run, prompt, int(num_samples), seed=int(seed))
        except USER_ERRORS as exc:
            return {"error": error_text(exc)}

    def list_runs() -> list:
        """Every run on disk with status and key figures, newest first."""
        return [r.summary() for r in controller.runner.runs()]

    for fn in (start_run, stop_run, poll_metrics, get_rollouts, compare, list_runs):
        gr.api(fn, api_name=fn.__name__, concurrency_limit=None)


def main() -> None:
    """Entry point of ``python app.py``."""
    runner = Runner(
        runs_dir=os.environ.get("RLOO_RUNS_DIR", "runs"),
        max_concurrent=int(os.environ.get("RLOO_MAX_CONCURRENT_RUNS", "1")),
        backend=os.environ.get("RLOO_BACKEND", "thread"),
        num_processes=int(os.environ.get("RLOO_NUM_PROCESSES", "2")),
    )
    demo = build_app(Controller(runner), Limits.from_env())
    demo.queue(default_concurrency_limit=4)
    quiet_queue(demo)
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        theme=gr.themes.Soft(),
        css=CSS,
        show_error=True,
    )
