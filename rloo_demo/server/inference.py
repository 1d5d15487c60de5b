"""Sampling from runs' policies for Compare, the history probe and Evaluate, with the models they need cached.

Every job goes through the ``SamplingGate`` (one at a time, a rate per visitor, a share of the CPU while a run
trains), after cheap checks that cost a refused caller none of its rate. Base and trained models are kept in a
small LRU (``Limits.model_cache``); a run in training lends a copy of its policy taken between two updates.
"""

from __future__ import annotations

import threading

from rloo_demo.chat import prompt_text
from rloo_demo.config import RunConfig
from rloo_demo.engine import snapshots
from rloo_demo.errors import Busy, InputError, NotFound, UserError
from rloo_demo.eval.evaluation import Scorer, evaluate, heldout_prompts
from rloo_demo.eval.judges import base_perplexity, collapse_warning, judge_texts
from rloo_demo.i18n import Message
from rloo_demo.models.hub import resolve_model
from rloo_demo.models.policy import load_policy
from rloo_demo.models.sampling import fit_prompt, sample
from rloo_demo.public.gates import Caller, SamplingGate, owner_digest
from rloo_demo.public.limits import Limits
from rloo_demo.server.cache import LRU
from rloo_demo.server.readers import RunReader
from rloo_demo.server.runner import Runner
from rloo_demo.task.data import as_run_prompt


class Inference:
    """Compare, probe and evaluate runs' policies, within this server's limits."""

    def __init__(self, runner: Runner, limits: Limits, reader: RunReader):
        self.runner, self.limits, self.reader = runner, limits, reader
        self._models = LRU(max(1, limits.model_cache))  # model folder -> (model, tokenizer)
        self._models_lock = threading.Lock()
        self.sampling = SamplingGate(limits, training=lambda: bool(runner.active()))

    def heldout_choices(self, name, limit: int = 40) -> list[str]:
        view = self.reader.view(name)
        config = view.config if view is not None and view.config is not None else RunConfig()
        try:  # a chat run's prompts are messages: the dropdown offers their user turns
            return [prompt_text(p) for p in heldout_prompts(config, limit)]
        except UserError:
            return []

    def _load(self, name: str):
        folder = resolve_model(name)
        with self._models_lock:
            cached = self._models.get_fresh(folder)
            if cached is None:
                model, tok = load_policy(folder)
                cached = (model.eval(), tok)
                self._models.put(folder, cached)
            return cached

    def _check_comparable(self, name) -> None:
        """Cheap checks before a sampling job is admitted: a refusal costs the caller none of its rate."""
        if not isinstance(name, str) or not name:
            raise InputError(Message("inference.pick_run"))
        if self.runner.get_active(name) is None:
            run = self.runner.run(name)
            if run.model_dir is None:
                raise NotFound(Message("inference.no_model", name=repr(name), status=str(run.status().get("status"))))

    def models_for(self, name):
        """``(base, trained, tokenizer, config)`` for a run; a live run gives a snapshot between two updates."""
        active = self.runner.get_active(name) if isinstance(name, str) else None
        if active is not None:
            config = active.config
            base, tok = self._load(config.policy)
            trained = active.policy_snapshot()
            if trained is None:
                raise Busy(Message("inference.not_yet"))
            return base, trained, tok, config
        run = self.runner.run(name)
        if run.unreadable():
            raise NotFound(Message("controller.unreadable", name=repr(name), reason=run.unreadable()))
        config = run.config()
        if run.model_dir is None:
            raise NotFound(Message("inference.no_model", name=repr(name), status=str(run.status().get("status"))))
        base, tok = self._load(config.policy)
        trained, _ = self._load(str(run.model_dir))
        return base, trained, tok, config

    def compare(self, name, prompt, num_samples, max_new_tokens, temperature, top_p, seed, caller: Caller) -> dict:
        """N samples of base and trained for one prompt with the same seed, each scored by every reward function."""
        args = self.limits.sampling_request(num_samples, max_new_tokens, temperature, top_p, seed, prompt)
        self._check_comparable(name)
        # before the gate, so a refusal costs no rate: a prompt past the policy's context is cut to fit, and said
        prompt, cut = self._fit(name, args["prompt"], args["max_new_tokens"])
        with self.sampling(caller.key):
            base, trained, tok, config = self.models_for(name)
            scorer = Scorer(config)
            asked = as_run_prompt(config, prompt)  # the user turn of a chat, as the policy saw its prompts
            out = {"run": name, "prompt": prompt, "seed": args["seed"], "trained_on": scorer.trained.names, **cut}
            out["judges"] = {}
            for label, model in (("base", base), ("trained", trained)):
                samples = sample(
                    model,
                    tok,
                    asked,
                    args["num_samples"],
                    args["max_new_tokens"],
                    args["temperature"],
                    args["top_p"],
                    args["seed"],
                )
                texts = [s["text"] for s in samples]
                scores, rewards = scorer([prompt] * len(texts), texts)
                out[label] = [
                    {"text": t, "reward": r, "scores": {n: s[i] for n, s in scores.items()}}
                    for i, (t, r) in enumerate(zip(texts, rewards, strict=True))
                ]
                # judges of the text itself: diversity, repetition and how likely the base model finds it
                judged = judge_texts(texts)
                ids = [s["token_ids"] for s in samples]
                judged["base_perplexity"] = base_perplexity(base, tok, [asked] * len(ids), ids)
                out["judges"][label] = judged
            out["collapse_warning"] = collapse_warning(out["judges"]["trained"], out["judges"]["base"])
        return out

    def _fit(self, name: str, prompt: str, max_new_tokens: int) -> tuple[str, dict]:
        """The prompt as the run's policy can read it with the new tokens, and what was cut: Compare, the probe
        and the API all sample through here. A prompt past the context loses its first tokens (the completion
        continues its end) and the answer says how many, as ``prompt_cut`` (numbers) and ``prompt_note`` (a
        sentence); found from the tokenizer and config alone, before any model loads or the visitor's sampling
        rate is spent."""
        active = self.runner.get_active(name)
        config = active.config if active is not None else self.runner.run(name).config()
        render = lambda p: as_run_prompt(config, p)  # noqa: E731 - what the policy reads: a chat wraps the text
        fitted, dropped, had, context = fit_prompt(resolve_model(config.policy), prompt, max_new_tokens, render)
        if not dropped:
            return prompt, {}
        note = (
            f"the prompt was {had:,} tokens long and this policy reads {context:,} tokens, {max_new_tokens} of them "
            f"for the completion: its first {dropped:,} tokens were dropped"
        )
        return fitted, {"prompt_cut": {"dropped": dropped, "tokens": had, "context": context}, "prompt_note": note}

    def probe(self, name, prompt, num_samples, seed, caller: Caller) -> dict:
        """The history of one prompt (the Rollouts tab's probe): K completions from the base policy, from each
        snapshot the run kept and from its latest policy, with the same seed for each. Sampling: it goes through
        the same gate as Compare (one job at a time, a rate per visitor, a share of the CPU while a run trains).
        Snapshots are loaded one at a time and dropped, not cached: they would push Compare's models out."""
        args = self.limits.probe_request(prompt, num_samples, seed)
        if not isinstance(name, str) or not name:
            raise InputError(Message("inference.pick_run"))
        active = self.runner.get_active(name)
        run = active.run if active is not None else self.runner.run(name)
        if active is None and run.unreadable():
            raise NotFound(Message("controller.unreadable", name=repr(name), reason=run.unreadable()))
        ahead = active.config if active is not None else run.config()
        prompt, cut = self._fit(name, args["prompt"], min(ahead.max_new_tokens, self.limits.max_compare_tokens))
        args["prompt"] = prompt
        with self.sampling(caller.key):
            config = active.config if active is not None else run.config()
            base, tok = self._load(config.policy)
            kept = snapshots.list_snapshots(run.path)
            policies = [(0, "base policy (step 0)", lambda: base)]
            for step, folder in kept:
                policies.append((step, f"step {step}", lambda f=folder: snapshots.load_snapshot(f, config.policy)))
            latest = self._latest_policy(active, run)
            if latest is not None and all(step != latest[0] for step, _ in kept):
                policies.append(latest)
            max_new = min(config.max_new_tokens, self.limits.max_compare_tokens)
            steps = snapshots.probe(
                policies,
                tok,
                args["prompt"],
                args["num_samples"],
                max_new,
                args["seed"],
                Scorer(config),
                config.temperature,
                config.top_p,
                asked=as_run_prompt(config, args["prompt"]),  # the user turn of a chat, as in Compare and training
            )
        return {
            "run": name,
            "prompt": args["prompt"],
            "seed": args["seed"],
            "num_samples": args["num_samples"],
            "max_new_tokens": max_new,
            "snapshot_every": config.snapshot_every,
            "kept": snapshots.KEEP_SNAPSHOTS,
            "steps": steps,
            **cut,
        }

    def _latest_policy(self, active, run):
        """``(step, label, load)`` of a run's newest policy: a copy of the one in training, or the saved model."""
        if active is not None:
            snap = active.policy_snapshot()  # None while loading, or for a run in a subprocess
            if snap is None:
                return None
            step = active.latest_step()
            return (step, f"now (step {step}, training)", lambda: snap)
        if run.model_dir is None:
            return None
        step = run.status().get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) else 0
        return (step, f"final (step {step})", lambda: self._load(str(run.model_dir))[0])

    def evaluate(self, name, num_prompts, seed, caller: Caller, progress=None, samples_per_prompt: int = 1) -> dict:
        """Base vs trained on held-out prompts. The result is saved into the run's folder only for the run's own
        starter (and never while it trains): a visitor cannot overwrite another's evaluation or model card."""
        args = self.limits.eval_request(num_prompts, seed)
        self._check_comparable(name)
        gate = self.sampling

        def paced(done, total):  # between prompts: keep to sampling's share while a run trains (SamplingGate.pace)
            gate.pace()
            if progress:
                progress(done, total)

        with gate(caller.key):
            base, trained, tok, config = self.models_for(name)
            prompts = heldout_prompts(config, args["num_prompts"])
            result = evaluate(base, trained, tok, config, prompts, samples_per_prompt, args["seed"], progress=paced)
        if self.runner.get_active(name) is None:
            run = self.runner.run(name)
            if self.may_write(run, caller):
                run.write_evaluation(result)
                result["saved"] = True
        result.setdefault("saved", False)
        return result

    def may_write(self, run, caller: Caller) -> bool:
        """Only a run's starter (or, on a local server, anyone) changes what is saved in its folder."""
        if not self.limits.public:
            return True
        recorded = run.status().get("owner")
        return bool(caller.client_id) and recorded == owner_digest(caller.client_id)
