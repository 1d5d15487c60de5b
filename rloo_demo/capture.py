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

From 1 and 2 it forms the shaped rewards exactly as TRL does (weighted sum, minus ``beta`` times the masked sum of
``logp - logp_ref``), and the baselines with ``rloo_demo.advantages``. It then checks that this arithmetic gives
TRL's advantages, and records TRL's advantages (not its own). A mismatch means that TRL's algorithm changed; it is
recorded in each group as ``parity_error`` rather than hidden.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rloo_demo.advantages import NORMALIZE_EPS, group, leave_one_out_baselines, normalize
from rloo_demo.fast_step import SingleForwardRLOOTrainer

RolloutSink = Callable[[int, list[dict]], None]


class CapturingRLOOTrainer(SingleForwardRLOOTrainer):
    """``RLOOTrainer`` that hands each scored batch, grouped by prompt, to ``rollout_sink(step, groups)``.

    It runs the policy forward once per step (``rloo_demo.fast_step``); the scoring pass still returns detached
    log-probabilities under ``no_grad``, so what is captured here is unchanged."""

    def __init__(self, *args, rollout_sink: RolloutSink | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.rollout_sink = rollout_sink
        self._capture: dict | None = None
        self.last_rollouts: list[dict] = []
        self.last_completion_ids: torch.Tensor | None = None  # local rows, for parity tests

    # 1. raw rewards and texts
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self._capture is not None:
            self._capture["rewards_per_func"] = rewards_per_func.detach().float().cpu()
            self._capture["prompts"] = list(prompts)
            self._capture["completions"] = [c if isinstance(c, str) else str(c) for c in completions]
        return rewards_per_func

    # 2. per-token log-probabilities of policy and reference
    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if self._capture is not None and not torch.is_grad_enabled():
            self._capture["logps"].append(out[0].detach().float())
        return out

    # 3. the batch as the loss will see it
    def _generate_and_score_completions(self, inputs):
        self._capture = {"logps": []}
        try:
            output = super()._generate_and_score_completions(inputs)
            captured = self._capture
        finally:
            self._capture = None
        if self.model.training:
            self._record(captured, output)
        return output

    def _record(self, cap: dict, output: dict) -> None:
        acc = self.accelerator
        mask = output["completion_mask"].float()
        if self.beta != 0.0:
            policy_logps, ref_logps = cap["logps"][0], cap["logps"][1]
            local_kl = ((policy_logps - ref_logps) * mask).sum(-1)
        else:
            local_kl = torch.zeros(mask.size(0), device=mask.device)
        kl = acc.gather(local_kl).float().cpu().tolist()
        advantages = acc.gather(output["advantages"].detach().float()).cpu().tolist()
        lengths = acc.gather(mask.sum(-1)).cpu().tolist()
        prompts = cap["prompts"]
        completions = cap["completions"]
        if acc.num_processes > 1:
            from accelerate.utils import gather_object

            prompts, completions = gather_object(prompts), gather_object(completions)
        self.last_completion_ids = output["completion_ids"].detach().cpu()

        raw = cap["rewards_per_func"]  # already gathered over processes by TRL
        weights = self.reward_weights.float().cpu()
        weighted = (raw * weights.unsqueeze(0)).nansum(dim=1)
        if self.reward_clip_range:
            weighted = weighted.clamp(min=self.reward_clip_range[0], max=self.reward_clip_range[1])
        shaped = (weighted - self.beta * torch.tensor(kl)).tolist()

        k = self.num_generations
        names = list(self.reward_func_names)
        step = self.state.global_step + 1  # the optimisation step this batch is for
        groups = []
        for g, rewards in enumerate(group(shaped, k)):
            rows = range(g * k, (g + 1) * k)
            baselines = leave_one_out_baselines(rewards)
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
                    }
                )
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
        self.last_rollouts = groups
        if self.rollout_sink is not None and acc.is_main_process:
            self.rollout_sink(step, groups)


def _check_parity(groups: list[dict], normalized: bool) -> None:
    """Store in each group the largest gap between our arithmetic and TRL's advantages (and, with normalisation,
    the batch mean and standard deviation that TRL divided by)."""
    raw = [c["raw_advantage"] for g in groups for c in g["completions"]]
    expected = iter(normalize(raw) if normalized else raw)
    for g in groups:
        g["parity_error"] = max(abs(next(expected) - c["advantage"]) for c in g["completions"])
    if normalized:
        n = len(raw)
        mean = sum(raw) / n
        std = (sum((r - mean) ** 2 for r in raw) / (n - 1)) ** 0.5 if n > 1 else 0.0
        for g in groups:
            g["normalization"] = {"mean": mean, "std": std, "eps": NORMALIZE_EPS}


__all__ = ["CapturingRLOOTrainer", "RolloutSink"]
