"""A thin ``RLOOTrainer`` subclass that records the numbers behind every advantage.

TRL 1.16 logs each reward function's mean and the batch's advantages, but none of the leave-one-out baselines and
not the per-completion KL. Recomputing them from the logged rewards is wrong whenever ``beta > 0``, because the
baseline is taken over KL-*shaped* rewards. So this subclass captures the trainer's own tensors at three points,
without copying or patching TRL code:

1. ``_calculate_rewards``: the raw score of every reward function, and the prompt and completion texts the reward
   functions saw;
2. ``_get_per_token_logps_and_entropies`` while a batch is being scored: the policy's and the reference model's
   per-token log-probabilities, in the order TRL computes them (policy first, then reference);
3. the output of ``_generate_and_score_completions``: the completion mask and the advantages tensor that goes to
   the loss.

From 1 and 2 it forms the shaped rewards exactly as TRL does (the weighted sum of ``rloo_demo.task.rewards.
combine_scores``, minus ``beta`` times the masked sum of ``logp - logp_ref``), and the baselines with
``rloo_demo.advantages``. It then checks that this arithmetic gives TRL's advantages, and records TRL's advantages
(not its own). A mismatch means that TRL's algorithm changed; it is recorded in each group as ``parity_error``
rather than hidden. A completion that no reward function scored is recorded as TRL treats it: NaN reward, baseline
and raw advantage, left out of its siblings' baselines, and advantage 0.

Each step it also logs what TRL does not (``rloo_demo.engine.diagnostics``): the three KL estimators of every completion
(k1, TRL's, shapes the reward; k2 and k3 are >= 0), the share of groups whose raw scores are all equal, and the
judges of the text (distinct-2, repetition). ``batch_observers`` (the gradient-variance meter) see each training
batch after it is recorded and may add metrics of their own. Two subclass hooks, ``_baselines`` and
``_replace_advantages``, let ``rloo_demo.engine.trainers`` remove the baseline (plain REINFORCE) without patching TRL.

``reward_offset`` (``RunConfig.reward_offset``, the baseline lab) adds a constant C to every completion's reward
before the KL shaping. TRL combines the scores inside ``_generate_and_score_completions`` and offers no hook between
that sum and the KL term, so ``_calculate_rewards`` hands TRL one more score column, C wherever any function scored
(NaN on an unscorable row, which so stays unscorable), and the weights one more weight, 1: TRL's own sum, clip, KL
shaping and leave-one-out baseline then run on ``score + C`` exactly as on any reward. Not a reward function of
weight 1: that would score the unscorable rows (they would get C) and add a ``rewards/offset`` metric. In TRL's log
only ``reward`` moves, by exactly C (its weighted sum includes the column); ``reward_std``, ``rewards/<function>/*``
and the recorded ``scores`` stay the functions' own. The recorded ``weighted_reward``, ``shaped_reward`` and
``baseline`` include C; the leave-one-out advantages do not move (C cancels in r − mean of the others).

The scores reach TRL's reward arithmetic in float64 (``_calculate_rewards``), and the advantages go to the loss in
float32 again. In float32, r + C rounds away the low bits of every reward (float32's spacing is 1.2e-7 at 1 and
7.6e-6 at 100, about VADER's smallest step), which moves the advantages by ~1e-7; Adam blows such noise up to
full-size steps on weights whose true gradient is 0, so a run with C = 1 sampled another token than the run without
by step 10. In float64, C cancels in the baseline to ~1e-16, below the float32 rounding of the advantages: the two
runs sample the same completions (``tests/engine/test_reward_offset.py``). The arithmetic is TRL's, on 16
numbers a step.
With ``record_tokens`` it also keeps, per completion token, the piece of text, the policy's and the reference's
log-probabilities (the tensors above), the policy's entropy (asked of TRL's own scoring call, from the same
logits), and, at the step boundary, the log-probability under the weights right after the optimiser update: one
extra no-grad forward over the step's completions (``rloo_demo.store.tokens`` explains the lists). So a step's
groups are handed to ``rollout_sink`` at the end of the step, not when they are generated.

That extra forward needs only the weights as the update left them, and they stay so until the next step's optimiser
update. So on one process it runs on a worker thread while the next step generates (the embedded policy trains on
one torch thread, leaving the other core free), and the next update, the end of training, or an error waits for it
(``_await_after``). A step's rollouts therefore reach the sink a little after its metrics are logged, never after
the next step's update.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch
from transformers import TrainerCallback
from trl import RLOOTrainer

from rloo_demo.advantages import (
    NORMALIZE_EPS,
    combine_scores,
    final_advantages,
    group,
    leave_one_out_baselines,
    mean_and_std,
    shaped_rewards,
)
from rloo_demo.chat import completion_text, prompt_text
from rloo_demo.engine.diagnostics import kl_estimators, step_diagnostics
from rloo_demo.store.tokens import round_keeping_sum
from rloo_demo.trl_compat import disable_gradient_checkpointing, trl_scoring

RolloutSink = Callable[[int, list[dict]], None]
# trainer, the batch TRL returned -> metrics to log for this step (or None)
BatchObserver = Callable[["CapturingRLOOTrainer", dict], dict[str, float] | None]


class CapturingRLOOTrainer(RLOOTrainer):
    """TRL's ``RLOOTrainer`` plus recording: it hands each step's scored batch, grouped by prompt, to
    ``rollout_sink(step, groups)`` once the step's update is done, and changes nothing TRL computes.

    This is the class to read to see what RLOO records. The engine trains with it as it is or with the optional
    speed-ups of ``rloo_demo.fast`` composed in (``rloo_demo.engine.trainers.with_speedups``); they sit below it
    in the method order, so what it captures is the same either way."""

    baseline_kind = "leave-one-out"  # recorded in every group; "none" for plain REINFORCE (rloo_demo.engine.trainers)
    _after = None  # the last step's "after" pass while a speed-up runs it on a worker thread (``result()``, ``wait()``)

    reward_offset = 0.0  # C, added to every scorable completion's reward before the KL shaping (see above)

    def __init__(
        self,
        *args,
        rollout_sink: RolloutSink | None = None,
        record_tokens: bool = True,
        reward_offset: float = 0.0,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.reward_offset = float(reward_offset)
        if self.reward_offset:  # the weight of the offset column (``_calculate_rewards``); TRL sums it with the rest
            self.reward_weights = torch.cat([self.reward_weights, torch.ones(1, dtype=self.reward_weights.dtype)])
        self.rollout_sink = rollout_sink
        self.record_tokens = record_tokens
        self._capture: dict | None = None
        self._pending: dict | None = None  # this step's groups and local batch, until the step boundary
        self.last_rollouts: list[dict] = []
        self.last_completion_ids: torch.Tensor | None = None  # local rows, for parity tests
        self.batch_observers: list[BatchObserver] = []
        self.add_callback(_StepBoundary(self))

    def train(self, *args, **kwargs):
        try:
            return super().train(*args, **kwargs)
        finally:
            # On success the step boundary callbacks have waited already; on an error the worker may still run, and
            # the caller may inspect or free the model next: wait, and let the training error (if any) win.
            self._await_after(raise_errors=sys.exc_info()[0] is None)

    # 1. raw rewards and texts
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._capture is not None:
            self._capture["rewards_per_func"] = rewards_per_func.detach().float().cpu()
            # A chat run's prompts and completions are messages: keep what a person reads, the user turn and reply
            self._capture["prompts"] = [prompt_text(p) for p in prompts]
            self._capture["completions"] = [completion_text(c) for c in completions]
        # TRL's reward arithmetic (the weighted sum, the KL shaping, the baseline) runs in the dtype of these scores:
        # float64, so that an offset cancels in the baseline far below float32's rounding (see the module docstring)
        rewards_per_func = rewards_per_func.double()
        if self.reward_offset:
            # TRL's rows are gathered over processes already; NaN where no function scored keeps the row unscorable
            scored = ~torch.isnan(rewards_per_func).all(dim=1, keepdim=True)
            column = torch.full_like(rewards_per_func[:, :1], self.reward_offset).masked_fill(~scored, float("nan"))
            rewards_per_func = torch.cat([rewards_per_func, column], dim=1)
        return rewards_per_func

    # 2. per-token log-probabilities of policy and reference
    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        cap = self._capture
        scoring = cap is not None and not torch.is_grad_enabled()
        # The first scoring call is the policy's (pi_old). Its entropies come from the logits it computes anyway;
        # TRL discards them (it only asks for entropies in the loss), and its log-probabilities are unchanged.
        entropy = scoring and self.record_tokens and not cap["logps"] and len(args) < 5  # not passed positionally
        if entropy:
            kwargs["compute_entropy"] = True
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if scoring:
            cap["logps"].append(out[0].detach().float())
            if entropy and out[1] is not None:
                cap["entropy"] = out[1].detach().float()
        return out

    # 3. the batch as the loss will see it
    def _generate_and_score_completions(self, inputs):
        self._capture = {"logps": []}
        try:
            output = super()._generate_and_score_completions(inputs)
            captured = self._capture
        finally:
            self._capture = None
        output["advantages"] = output["advantages"].float()  # the loss's dtype, as TRL's float32 rewards give it
        if self.model.training:
            self._record(captured, output)
            for observe in self.batch_observers:
                self._log_step_metrics(observe(self, output) or {})
        return output

    def _log_step_metrics(self, metrics: dict[str, float]) -> None:
        """Add numbers to this step's log record (TRL averages each key's values over the step)."""
        for key, value in metrics.items():
            self._metrics["train"][key].append(float(value))

    def _baselines(self, rewards: list[float]) -> list[float]:
        """The baseline of each completion of one group (RLOO: the mean of its siblings)."""
        return leave_one_out_baselines(rewards)

    def _replace_advantages(self, output: dict, shaped: list[float]) -> None:
        """Change the advantages the loss will see, given the whole batch's shaped rewards (RLOO: keep TRL's)."""

    def _record(self, cap: dict, output: dict) -> None:
        acc = self.accelerator
        mask = output["completion_mask"].float()
        kl_k2 = kl_k3 = None
        if self.beta != 0.0:
            policy_logps, ref_logps = cap["logps"][0], cap["logps"][1]
            local_kl = ((policy_logps - ref_logps) * mask).sum(-1)
            _, local_k2, local_k3 = kl_estimators(policy_logps - ref_logps, mask)
            kl_k2 = acc.gather(local_k2).float().cpu().tolist()
            kl_k3 = acc.gather(local_k3).float().cpu().tolist()
        else:
            local_kl = torch.zeros(mask.size(0), device=mask.device)
        kl = acc.gather(local_kl).float().cpu().tolist()
        lengths = acc.gather(mask.sum(-1)).cpu().tolist()
        prompts = cap["prompts"]
        completions = cap["completions"]
        if acc.num_processes > 1:
            from accelerate.utils import gather_object

            prompts, completions = gather_object(prompts), gather_object(completions)
        self.last_completion_ids = output["completion_ids"].detach().cpu()
        local_rows = mask.size(0)  # gathered in rank order, the same number of rows per rank
        tokens = self._token_lists(cap, output) if self.record_tokens else None

        raw = cap["rewards_per_func"]  # already gathered over processes by TRL, None already turned into NaN
        names = list(self.reward_func_names)
        weights = self.reward_weights.float().cpu()[: len(names)]  # the functions' (the offset's column is not one)
        # The one combination (NaN for a completion no function scored, TRL's clip range, the offset summed before
        # the clip as TRL sums its column), not a nansum of our own: a nansum turns an unscorable completion into a
        # reward of 0, which TRL does not.
        weighted = combine_scores(raw.T.tolist(), weights.tolist(), self.reward_clip_range, self.reward_offset)
        shaped = shaped_rewards(weighted, kl, self.beta)
        self._replace_advantages(output, shaped)
        advantages = acc.gather(output["advantages"].detach().float()).cpu().tolist()

        k = self.num_generations
        step = self.state.global_step + 1  # the optimisation step this batch is for
        groups = []
        for g, rewards in enumerate(group(shaped, k)):
            rows = range(g * k, (g + 1) * k)
            baselines = self._baselines(rewards)
            completions_out = []
            for j, i in enumerate(rows):
                completions_out.append(
                    {
                        "text": completions[i],
                        "num_tokens": int(lengths[i]),
                        "scores": {n: float(raw[i, f]) for f, n in enumerate(names)},
                        "weighted_reward": float(weighted[i]),
                        "kl": float(kl[i]),
                        "kl_penalty": -self.beta * float(kl[i]),
                        "shaped_reward": float(rewards[j]),
                        "baseline": float(baselines[j]),
                        "raw_advantage": float(rewards[j] - baselines[j]),
                        "advantage": float(advantages[i]),
                        "rank": i // local_rows,  # the process that generated and scored it
                    }
                )
                if tokens is not None:
                    completions_out[-1].update(tokens[i])
            entry = {
                "step": step,
                "group": g,
                "prompt": prompts[g * k],
                "k": k,
                "beta": self.beta,
                "normalize_advantages": bool(self.normalize_advantages),
                "weights": dict(zip(names, weights.tolist(), strict=True)),
                "completions": completions_out,
            }
            groups.append(entry)
        _check_parity(groups, self.normalize_advantages)
        started = time.perf_counter()
        for g in groups:
            g["baseline_kind"] = self.baseline_kind
        if kl_k2 is not None:
            for c, k2, k3 in zip((c for g in groups for c in g["completions"]), kl_k2, kl_k3, strict=True):
                c["kl_k2"], c["kl_k3"] = float(k2), float(k3)
        diagnostics = step_diagnostics(groups)
        diagnostics["diagnostics/seconds"] = time.perf_counter() - started
        self._log_step_metrics(diagnostics)
        self.last_rollouts = groups
        batch = {k: output[k].detach() for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
        self._pending = {"step": step, "groups": groups, "batch": batch}

    def _token_lists(self, cap: dict, output: dict) -> list[dict]:
        """Per completion (all ranks, in rank order): its tokens' pieces, log pi_old, log pi_ref and entropy."""
        mask = output["completion_mask"].bool()
        ids = output["completion_ids"]
        policy = cap["logps"][0]
        ref = cap["logps"][1] if self.beta != 0.0 else None
        ent = cap.get("entropy")
        rows = []
        for r in range(mask.size(0)):
            keep = mask[r]
            row = {"ids": ids[r][keep].tolist(), "token_logp": policy[r][keep].tolist()}
            if ref is not None:
                row["token_ref_logp"] = ref[r][keep].tolist()
            if ent is not None:
                row["token_entropy"] = ent[r][keep].tolist()
            rows.append(row)
        if self.accelerator.num_processes > 1:  # rows differ in length across ranks: gather them as objects
            from accelerate.utils import gather_object

            rows = gather_object(rows)
        tokenizer = getattr(self, "_tokenizer", None) or self.processing_class
        flat = [[t] for row in rows for t in row["ids"]]
        pieces = iter(tokenizer.batch_decode(flat, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        out = []
        for row in rows:
            entry = {"token_texts": [next(pieces) for _ in row["ids"]]}
            for key in ("token_logp", "token_ref_logp", "token_entropy"):
                if key in row:
                    entry[key] = round_keeping_sum(row[key])
            out.append(entry)
        return out

    # 4. the step boundary: the optimiser has updated the weights
    def _finish_step(self, background: bool = False) -> None:
        """Score the step's completions under the updated weights, then hand the step's groups to the sink.
        ``background`` says the call comes from the step boundary callback, where a speed-up may run it on a worker
        thread (``_deliver_after``); see the module docstring."""
        self._await_after()
        pending, self._pending = self._pending, None
        if pending is not None:
            self._deliver_after(pending, background)

    def _deliver_after(self, pending: dict, background: bool) -> None:
        """Deliver a finished step's groups; here on the training thread (``rloo_demo.fast.overlap`` overrides it)."""
        self._deliver(pending)

    def _deliver(self, pending: dict) -> None:
        if self.record_tokens:
            self._record_after(pending)
        if self.rollout_sink is not None and self.accelerator.is_main_process:
            self.rollout_sink(pending["step"], pending["groups"])

    def _await_after(self, raise_errors: bool = True) -> None:
        """Wait for the background "after" pass and the sink, if they run; raise what they raised, as it was (a full
        disk while writing the rollouts must still read as a full disk)."""
        job, self._after = self._after, None
        if job is None:
            return
        if raise_errors:
            job.result()
        else:
            job.wait()

    def _record_after(self, pending: dict) -> None:
        b = pending["batch"]
        input_ids = torch.cat([b["prompt_ids"], b["completion_ids"]], dim=1)
        attention_mask = torch.cat([b["prompt_mask"], b["completion_mask"]], dim=1)
        # The same call TRL scores pi_old with, so before and after are computed alike (autocast, temperature).
        # No lock needed: only the training thread changes the weights, and it waits for this pass before it does.
        score = trl_scoring(self)  # TRL's own, unwrapped: this class's override reads the batch being scored
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            after, _, _ = score(
                self.model,
                input_ids,
                attention_mask,
                b["completion_ids"].size(1),
                self.args.per_device_train_batch_size,
            )
        mask = b["completion_mask"].bool()
        rows = [after[r][mask[r]].float().tolist() for r in range(mask.size(0))]
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            rows = gather_object(rows)
        completions = [c for g in pending["groups"] for c in g["completions"]]
        for c, row in zip(completions, rows, strict=True):
            c["token_logp_after"] = round_keeping_sum(row)


class _StepBoundary(TrainerCallback):
    """Calls the trainer back at each step's end (after the optimiser step, before the step's metrics are logged),
    and waits for the background "after" pass before the next update and at the end of training."""

    def __init__(self, trainer: CapturingRLOOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._finish_step(background=True)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._await_after()  # the last step's "after" pass reads the weights this update changes

    def on_train_end(self, args, state, control, **kwargs):
        self.trainer._await_after()


def _check_parity(groups: list[dict], normalized: bool) -> None:
    """Store in each group the largest gap between our arithmetic and TRL's advantages (and, with normalisation,
    the batch mean and standard deviation that TRL divided by). Undefined (NaN) raw advantages take no part in the
    normalisation and are expected as 0, as TRL zeroes them."""
    raw = [c["raw_advantage"] for g in groups for c in g["completions"]]
    expected = iter(final_advantages(raw, normalized))
    for g in groups:
        g["parity_error"] = max(abs(next(expected) - c["advantage"]) for c in g["completions"])
    if normalized:
        mean, std = mean_and_std(raw)
        for g in groups:
            g["normalization"] = {"mean": mean, "std": std, "eps": NORMALIZE_EPS}


__all__ = ["BatchObserver", "CapturingRLOOTrainer", "RolloutSink"]
