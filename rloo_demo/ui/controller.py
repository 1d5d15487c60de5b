"""What the web app does, as plain methods: start and stop runs, read a run's metrics and rollouts, sample from
base and trained models, evaluate. The Blocks in ``rloo_demo.ui.app`` only wire these to components, and the
named API endpoints call them too, so tests exercise them without a server.

A run being trained is read from memory (its metrics channel and rollouts), a finished one from its folder.
"""

from __future__ import annotations

import io
import json
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rloo_demo.config import ConfigError, RunConfig
from rloo_demo.hub import ResolveError
from rloo_demo.runner import Busy, NotOwner, Runner


@dataclass
class RunView:
    """A run as the page sees it, wherever it lives."""

    name: str
    status: str
    error: str | None
    records: list[dict]
    max_steps: int
    elapsed: float | None
    config: RunConfig
    live: bool

    @property
    def last_step(self) -> int:
        return self.records[-1]["step"] if self.records else 0


class Controller:
    def __init__(self, runner: Runner):
        self.runner = runner
        self._models: dict[str, tuple] = {}  # policy folder -> (model, tokenizer), loaded once
        self._models_lock = threading.Lock()
        self._views: dict[str, tuple] = {}  # run name -> (file stamps, RunView) for runs read from disk

    # ------------------------------------------------------------------ runs

    def start(self, config: RunConfig, owner: str) -> str:
        """Start a run and return its name. Raises ``ConfigError`` / ``ResolveError`` / ``Busy`` for the UI to show."""
        active = self.runner.start(config, owner)
        return active.name

    def stop(self, name: str, owner: str) -> str:
        try:
            self.runner.stop(name, owner)
        except (KeyError, NotOwner) as exc:
            return str(exc).strip("'\"")
        return f"stop requested: {name} stops at the end of the current step"

    def default_run(self) -> str | None:
        """The run a fresh page attaches to: the newest one training, else the newest on disk."""
        active = self.runner.latest_active()
        if active is not None:
            return active.name
        runs = self.runner.runs()
        return runs[0].name if runs else None

    def view(self, name: str | None) -> RunView | None:
        if not name:
            return None
        active = self.runner.get_active(name)
        if active is not None:
            st = active.job.state
            records = st.channel.snapshot()
            status = st.status if st.status != "pending" else "starting"
            elapsed = (st.finished or time.time()) - (st.started or active.started)
            return RunView(name, status, st.error, records, st.config.max_steps, elapsed, st.config, live=True)
        try:
            run = self.runner.run(name)
        except KeyError:
            return None
        # Pages poll twice a second; a finished run's files are re-read only when they change.
        stamp = tuple(_mtime(run.path / f) for f in ("status.json", "metrics.jsonl"))
        cached = self._views.get(name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        status = run.status()
        config = run.config()
        elapsed = None
        if status.get("started"):
            elapsed = (status.get("finished") or status.get("updated") or time.time()) - status["started"]
        return RunView(
            name,
            status.get("status", "?"),
            status.get("error"),
            run.metrics(),
            config.max_steps,
            elapsed,
            config,
            False,
        )

    def rollout_steps(self, name: str | None) -> list[int]:
        if not name:
            return []
        active = self.runner.get_active(name)
        if active is not None:
            return sorted(active.job.state.rollouts)
        try:
            return sorted({r["step"] for r in self.runner.run(name).rollouts()})
        except KeyError:
            return []

    def rollouts(self, name: str | None, step: int | None) -> list[dict]:
        """The prompt groups of one step (the latest if ``step`` is None)."""
        if not name:
            return []
        active = self.runner.get_active(name)
        if active is not None:
            data = active.job.state.rollouts
            if not data:
                return []
            return list(data.get(step if step is not None else max(data), []))
        try:
            rows = self.runner.run(name).rollouts()
        except KeyError:
            return []
        if not rows:
            return []
        step = step if step is not None else max(r["step"] for r in rows)
        return [r for r in rows if r["step"] == step]

    def comparable_runs(self) -> list[str]:
        """Runs with a model to compare: every finished run on disk, plus any run training now."""
        names = [a.name for a in self.runner.active()]
        names += [r.name for r in self.runner.runs() if r.model_dir is not None and r.name not in names]
        return names

    # ------------------------------------------------------------------ models

    def _load(self, name: str):
        from rloo_demo.hub import resolve_model
        from rloo_demo.training import load_policy

        folder = resolve_model(name)
        with self._models_lock:
            if folder not in self._models:
                model, tok = load_policy(folder)
                self._models[folder] = (model.eval(), tok)
            return self._models[folder]

    def models_for(self, name: str):
        """``(base, trained, tokenizer, config)`` for a run; a live run gives a snapshot between two updates."""
        active = self.runner.get_active(name)
        if active is not None:
            config = active.job.state.config
            base, tok = self._load(config.policy)
            trained = active.job.state.policy_snapshot()
            if trained is None:
                raise ValueError(
                    "this run's policy is not available yet (it is loading, or it trains in a subprocess); "
                    "compare again once it has a first step, or when it ends"
                )
            return base, trained, tok, config
        run = self.runner.run(name)
        config = run.config()
        if run.model_dir is None:
            raise FileNotFoundError(f"run {name!r} has no trained model (status: {run.status().get('status')})")
        base, tok = self._load(config.policy)
        trained, _ = self._load(str(run.model_dir))
        return base, trained, tok, config

    def compare(
        self,
        name: str,
        prompt: str,
        num_samples: int = 4,
        max_new_tokens: int = 24,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> dict:
        """N samples of base and trained for one prompt with the same seed, each scored by every reward function."""
        from rloo_demo.evaluation import Scorer
        from rloo_demo.sampling import sample

        if not prompt or not prompt.strip():
            raise ValueError("type a prompt, or pick one from the held-out set")
        if not 1 <= int(num_samples) <= 32:
            raise ValueError("number of samples must be between 1 and 32")
        base, trained, tok, config = self.models_for(name)
        scorer = Scorer(config)
        out = {"run": name, "prompt": prompt, "seed": int(seed), "trained_on": scorer.trained.names}
        for label, model in (("base", base), ("trained", trained)):
            texts = [
                s["text"]
                for s in sample(
                    model,
                    tok,
                    prompt,
                    int(num_samples),
                    int(max_new_tokens),
                    float(temperature),
                    float(top_p),
                    int(seed),
                )
            ]
            scores, rewards = scorer([prompt] * len(texts), texts)
            out[label] = [
                {"text": t, "reward": r, "scores": {n: s[i] for n, s in scores.items()}}
                for i, (t, r) in enumerate(zip(texts, rewards, strict=True))
            ]
        return out

    def evaluate(
        self, name: str, num_prompts: int = 32, samples_per_prompt: int = 1, seed: int = 0, progress=None
    ) -> dict:
        from rloo_demo.evaluation import evaluate, heldout_prompts

        if not 1 <= int(num_prompts) <= 512:
            raise ValueError("number of held-out prompts must be between 1 and 512")
        base, trained, tok, config = self.models_for(name)
        prompts = heldout_prompts(config, int(num_prompts))
        result = evaluate(base, trained, tok, config, prompts, int(samples_per_prompt), int(seed), progress=progress)
        if self.runner.get_active(name) is None:
            self.runner.run(name).write_evaluation(result)
        return result

    # ------------------------------------------------------------------ downloads

    def export(self, name: str, what: str, folder: Path) -> Path:
        """Write a download for a run into ``folder``: metrics CSV, config.yaml, rollouts.jsonl or model zip."""
        run = self.runner.run(name)
        folder.mkdir(parents=True, exist_ok=True)
        if what == "metrics":
            import csv

            records = run.metrics()
            keys = sorted({k for r in records for k in r}, key=lambda k: (k != "step", k))
            path = folder / f"{name}-metrics.csv"
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys)
                writer.writeheader()
                writer.writerows(records)
            return path
        if what == "config":
            return run.path / "config.yaml"
        if what == "rollouts":
            return run.path / "rollouts.jsonl"
        if what == "model":
            if run.model_dir is None:
                raise FileNotFoundError(f"run {name!r} has no trained model")
            path = folder / f"{name}-model.zip"
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                for p in sorted(run.model_dir.rglob("*")):
                    if p.is_file():
                        z.write(p, Path("model") / p.relative_to(run.model_dir))
            path.write_bytes(buf.getvalue())
            return path
        raise ValueError(f"unknown download {what!r}")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0


USER_ERRORS = (ConfigError, ResolveError, Busy, ValueError, FileNotFoundError, KeyError)


def error_text(exc: Exception) -> str:
    """A user-facing message for an error the UI expects."""
    if isinstance(exc, ConfigError):
        return "\n".join(f"- **{k}**: {v}" for k, v in exc.problems.items())
    if isinstance(exc, KeyError):
        return str(exc.args[0]) if exc.args else "not found"
    return str(exc)


def to_json(data) -> str:
    return json.dumps(data, indent=2)
