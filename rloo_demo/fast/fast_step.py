"""One policy forward pass per RLOO step instead of two, with TRL's own arithmetic unchanged.

TRL's ``RLOOTrainer`` runs the policy twice on the same batch in every step:

1. while scoring, under ``no_grad``: the per-token log-probabilities ``old_per_token_logps``, for the KL term of
   the shaped reward (``r - beta * sum_t (log pi - log pi_ref)``) and for the importance ratio's denominator;
2. in the loss, with gradients: the same log-probabilities again, for the ratio's numerator.

With one optimisation step per generation (``num_iterations == 1`` and ``steps_per_generation == 1``, TRL's
defaults and ours) no weight changes between the two, so pass 2 recomputes pass 1 exactly: the ratio is 1 and only
its gradient is used. ``SingleForwardRLOOTrainer`` therefore runs pass 1 *with* gradients, hands TRL the detached
values, keeps the graph, and gives it to the loss instead of running pass 2. TRL shuffles the rows of the batch
between scoring and loss, so the kept rows are matched to the loss's rows by their token ids and mask; rows that
are identical have identical log-probabilities and gradients, so any match among them is the same.

The policy forward is a small share of the embedded policy's step (``scripts/bench_engine.py --ablation`` times
it; docs/benchmarks.md). Anything this shortcut cannot prove safe (several processes, where DDP's gradient
hooks need the forward to run through the wrapped model; several steps per generation; multimodal inputs;
MoE auxiliary losses; evaluation) falls back to TRL's two passes.

The reference model's scoring pass (with ``beta > 0``) needs the same inputs and nothing from the policy's, so it
starts on a worker thread just before the policy's pass and TRL's call for it picks up the result
(``rloo_demo.fast.overlap`` says when that is allowed); with one torch thread the two passes run on the two cores.

Generation, the largest part of the step, runs through ``rloo_demo.fast.lean_decode`` where it applies (a plain GPT-2
policy, sampling settings it covers, one process or DDP): TRL still pads the prompts and masks what follows each
EOS, but its ``generate`` call gets the engine's decode, which draws one uniform per row instead of
``torch.multinomial``'s one exponential per vocabulary entry. Same distribution, not the same draws: a seeded run
samples other completions than TRL's would (``lean_draw = multinomial_draw`` gives TRL's own, token for token).
"""

from __future__ import annotations

import os

import torch
from trl import RLOOTrainer

from rloo_demo.fast.lean_decode import inverse_cdf_draw, lean_generate, lean_plan
from rloo_demo.fast.overlap import Background, may_overlap
from rloo_demo.trl_compat import trl_scoring

TORCH_DEFAULT_THREADS = torch.get_num_threads()  # before anything here changes it

_MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def match_rows(reference: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
    """Indices ``idx`` with ``reference[idx] == rows`` row by row, or None if a row of ``rows`` has no match."""
    if reference.shape != rows.shape:
        return None
    where = {tuple(r): i for i, r in enumerate(reference.tolist())}
    idx = [where.get(tuple(r)) for r in rows.tolist()]
    if any(i is None for i in idx):
        return None
    return torch.tensor(idx, device=reference.device)


class SingleForwardRLOOTrainer(RLOOTrainer):
    """``RLOOTrainer`` whose scoring pass of the policy is also the loss's forward pass (see the module docstring)."""

    _reference: Background | None = None  # the reference model's scoring pass, while it runs on a worker thread
    backward_threads: int | None = None  # intra-op threads for the backward pass; None: those of the rest of the step

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._scoring_calls: int | None = None  # policy/reference calls so far in the batch being scored
        self._kept: tuple | None = None  # (ids with mask, logps with graph, entropies) of the scoring pass
        self.forward_passes_saved = 0
        self.reuse_policy_forward = True  # False: TRL's two passes (for benchmarks)
        self.lean_generation = True  # False: always generate() (for benchmarks)
        self.lean_draw = inverse_cdf_draw  # lean_decode.multinomial_draw: generate's own draws, token for token
        self.lean_generate_calls = 0
        self.lean_generation_skipped: str | None = None  # why the last generation used generate(), if it did

    def use_backward_threads(self, threads: int) -> None:
        """Run each backward pass on ``threads`` intra-op threads, and the rest of the step on what it has."""
        if self.backward_threads is None:
            # Trainer.training_step calls accelerator.backward: wrapping it on this trainer's accelerator is the one
            # place that sees exactly the backward pass (generation and scoring run inside training_step too).
            backward = self.accelerator.backward

            def backward_with_its_threads(loss, **kwargs):
                n, before = self.backward_threads, torch.get_num_threads()
                if n == before:
                    return backward(loss, **kwargs)
                torch.set_num_threads(n)
                try:
                    return backward(loss, **kwargs)
                finally:
                    torch.set_num_threads(before)

            self.accelerator.backward = backward_with_its_threads
        self.backward_threads = threads

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields):
        """TRL's generation, with ``generate`` replaced by ``rloo_demo.fast.lean_decode`` where that applies: TRL still
        pads the prompts, unwraps the model and masks what follows each completion's EOS."""
        why = None
        if not self.lean_generation:
            why = "turned off"
        elif self.use_vllm or self.use_transformers_continuous_batching:
            why = "another generation backend"
        elif images is not None and any(i is not None for i in images) or multimodal_fields:
            why = "multimodal inputs"
        elif self.is_deepspeed_enabled or self.is_fsdp_enabled:
            why = "DeepSpeed or FSDP shards the weights"
        if why:
            self.lean_generation_skipped = why
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields)
        model = self.accelerator.unwrap_model(self.model_wrapped)
        generate, own = model.generate, model.__dict__.get("generate")

        def lean_or_generate(input_ids, attention_mask, generation_config, **kwargs):
            plan = "other arguments" if kwargs else lean_plan(model, generation_config, input_ids.size(1))
            if isinstance(plan, str):
                self.lean_generation_skipped = plan
                return generate(
                    input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **kwargs
                )
            self.lean_generation_skipped = None
            self.lean_generate_calls += 1
            return lean_generate(model, input_ids, attention_mask, plan, self.lean_draw)

        model.generate = lean_or_generate  # TRL calls generate on this same object (unwrap_model_for_generation)
        try:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields)
        finally:
            if own is None:
                del model.generate
            else:
                model.generate = own

    @property
    def reuses_policy_forward(self) -> bool:
        """Whether the loss may take the scoring pass's graph: the weights cannot change in between."""
        if not self.reuse_policy_forward:
            return False
        args = self.args
        return (
            self.num_iterations == 1
            and args.steps_per_generation == 1
            and self.accelerator.num_processes == 1
            and not self.aux_loss_enabled
        )

    def _generate_and_score_completions(self, inputs):
        self._kept = None
        self._scoring_calls = 0 if (self.model.training and self.reuses_policy_forward) else None
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._scoring_calls = None
            job, self._reference = self._reference, None
            if job is not None:  # not asked for (TRL changed its calls, or an error): let it end before going on
                job.wait()

    def _start_reference(self, input_ids, attention_mask, logits_to_keep, batch_size, kwargs) -> Background | None:
        """The reference model's scoring pass, started on a worker thread beside the policy's (which keeps its graph
        and takes longer), for TRL's next call to pick up; None where TRL will not ask for it or it may not overlap.
        """
        if self.beta == 0.0 or self.ref_model is None or not may_overlap(self, self.model, self.ref_model):
            return None
        score = trl_scoring(self)

        def run():
            logps, _, _ = score(self.ref_model, input_ids, attention_mask, logits_to_keep, batch_size, **kwargs)
            return (input_ids, attention_mask, logits_to_keep), logps

        return Background(run, name="rloo-reference")

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False, **kwargs
    ):
        plain = any(kwargs.get(k) is not None for k in _MULTIMODAL_KEYS) or kwargs.get("compute_aux_loss")
        if self._scoring_calls is not None and not plain and not torch.is_grad_enabled():
            first = self._scoring_calls == 0  # TRL scores the policy first, then the reference
            self._scoring_calls += 1
            if first and model is self.model:
                self._reference = self._start_reference(input_ids, attention_mask, logits_to_keep, batch_size, kwargs)
                with torch.enable_grad():
                    logps, entropies, _ = super()._get_per_token_logps_and_entropies(
                        model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=True, **kwargs
                    )
                self._kept = (torch.cat([input_ids, attention_mask], dim=1), logps, entropies)
                return logps.detach(), (entropies.detach() if compute_entropy else None), None
        if self._reference is not None and model is self.ref_model:
            job, self._reference = self._reference, None
            (ids, mask, keep), logps = job.result()
            if ids is input_ids and mask is attention_mask and keep == logits_to_keep:  # the call it was started for
                return logps, None, None
        if self._kept is not None and torch.is_grad_enabled() and not plain:
            keys, logps, entropies = self._kept
            self._kept = None
            idx = match_rows(keys, torch.cat([input_ids, attention_mask], dim=1))
            if idx is not None and logps.size(1) == logits_to_keep:
                self.forward_passes_saved += 1
                return logps[idx], (entropies[idx] if compute_entropy else None), None
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy=compute_entropy, **kwargs
        )


def engine_threads(policy: str) -> int:
    """Intra-op torch threads for training ``policy``: ``RLOO_TORCH_THREADS`` if set, else 1 for the embedded
    policy and torch's default for any other.

    The embedded policy's matrices are too small to split well over threads: generation is thousands of tiny ops,
    each ending in a barrier, and when another process (or the web server) holds one of the two cores, a 2-thread
    step waits at each barrier for a thread that is not running: with one core busy a 2-thread step takes several
    times its idle time, a 1-thread step about its own. The backward pass is the exception: see
    ``backward_threads``. ``scripts/bench_engine.py`` measures both (docs/benchmarks.md, "The step").
    """
    env = os.environ.get("RLOO_TORCH_THREADS", "").strip()
    if env:
        return max(1, int(env))
    return 1 if policy.strip().startswith("embedded:") else TORCH_DEFAULT_THREADS


def backward_threads(policy: str, num_processes: int = 1) -> int:
    """Intra-op torch threads for the backward pass: up to 2 for the embedded policy on one process, else those of
    ``engine_threads``.

    Its matrices are the step's largest (every token of the batch at once), so 2 threads nearly halve it on 2 idle
    cores, and with a busy core the step slows far less than a whole step on 2 threads does (docs/benchmarks.md).
    A fixed count, not one chosen by timing: 1 and 2 threads sum the gradients in different orders, so a count that
    followed the machine's load would make a seeded run unrepeatable. Several processes
    (or ``RLOO_TORCH_THREADS``) already share out the cores: they keep one count for the whole step.
    """
    threads = engine_threads(policy)
    if os.environ.get("RLOO_TORCH_THREADS", "").strip() or num_processes > 1:
        return threads
    return max(threads, min(2, TORCH_DEFAULT_THREADS)) if policy.strip().startswith("embedded:") else threads


__all__ = ["SingleForwardRLOOTrainer", "backward_threads", "engine_threads", "match_rows"]
