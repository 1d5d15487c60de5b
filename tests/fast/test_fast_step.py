"""The single-forward RLOO step makes TRL's update, with one policy forward fewer; and the engine's TRL settings.

``python -m pytest tests/fast/test_fast_step.py``
"""

import pytest
import torch
from trl import RLOOTrainer

from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_args import rloo_config
from rloo_demo.fast.fast_step import SingleForwardRLOOTrainer, match_rows
from rloo_demo.fast.lean_decode import multinomial_draw
from rloo_demo.models.policy import load_policy
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import build_reward


def test_match_rows_finds_the_permutation():
    ref = torch.tensor([[1, 2], [3, 4], [5, 6], [3, 4]])
    rows = ref[torch.tensor([2, 0, 3, 1])]
    idx = match_rows(ref, rows)
    assert torch.equal(ref[idx], rows)
    assert match_rows(ref, torch.tensor([[1, 2], [9, 9], [5, 6], [3, 4]])) is None
    assert match_rows(ref, ref[:2]) is None


def _train(trainer_cls, tmp_path, steps=3, draw=None, **overrides):
    config = RunConfig(max_steps=steps, prompts_per_step=3, max_new_tokens=8, beta=0.1, learning_rate=5e-3)
    torch.manual_seed(0)
    model, tok = load_policy(config.policy)
    args = rloo_config(config, tmp_path / trainer_cls.__name__, reward_weights=config.weights, **overrides)
    trainer = trainer_cls(
        model=model,
        args=args,
        reward_funcs=[build_reward(n) for n in config.rewards],
        train_dataset=run_prompts(config, "train"),
        processing_class=tok,
    )
    if draw is not None:
        trainer.lean_draw = draw
    trainer.train()
    keys = ("loss", "grad_norm", "kl", "entropy")
    logged = [{k: h.get(k) for k in keys} for h in trainer.state.log_history if "loss" in h]
    return trainer, logged


def test_single_forward_step_makes_trls_update(tmp_path):
    """Same seed, same samples: TRL's two-forward step and ours log the same figures and end with the same weights.

    Plain SGD, because Adam divides by the gradient's running scale: for weights whose true gradient is 0 (the
    attention's key bias) it would blow float noise of 1e-10 up to full-size steps in either implementation."""
    plain, plain_logs = _train(RLOOTrainer, tmp_path, optim="sgd")
    fast, fast_logs = _train(SingleForwardRLOOTrainer, tmp_path, optim="sgd", draw=multinomial_draw)
    assert fast.forward_passes_saved == 3  # one per step
    assert fast.lean_generate_calls == 3  # its own decode, drawing as generate does: the same samples
    assert not fast.model.is_gradient_checkpointing  # the engine's setting, in effect
    for a, b in zip(plain_logs, fast_logs, strict=True):
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
    for (name, a), b in zip(plain.model.named_parameters(), fast.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)


def test_single_forward_falls_back_with_several_steps_per_generation(tmp_path):
    fast, _ = _train(SingleForwardRLOOTrainer, tmp_path, steps=2, steps_per_generation=2, per_device_train_batch_size=4)
    assert not fast.reuses_policy_forward and fast.forward_passes_saved == 0


def test_engine_turns_gradient_checkpointing_off_for_the_embedded_policy(tmp_path):
    args = rloo_config(RunConfig(), tmp_path)
    assert args.activation_checkpointing is False and args.gradient_checkpointing is False
    from trl import RLOOConfig

    trl_default = RLOOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert trl_default.gradient_checkpointing is True  # what we override


def test_thread_counts_for_the_step_and_its_backward(monkeypatch):
    from rloo_demo.fast import fast_step
    from rloo_demo.fast.fast_step import backward_threads, engine_threads

    monkeypatch.delenv("RLOO_TORCH_THREADS", raising=False)
    # torch's default as on a 4-core machine (under OMP_NUM_THREADS=1 every count here would read 1)
    monkeypatch.setattr(fast_step, "TORCH_DEFAULT_THREADS", 4)
    embedded, hub = "embedded:tiny-imdb-gpt2", "openai-community/gpt2"
    assert engine_threads(embedded) == 1 and backward_threads(embedded) == 2  # two at most for its small matrices
    assert engine_threads(hub) == backward_threads(hub) == 4
    assert backward_threads(embedded, num_processes=2) == 1  # the processes share out the cores already
    assert backward_threads(hub, num_processes=2) == 4
    monkeypatch.setattr(fast_step, "TORCH_DEFAULT_THREADS", 1)
    assert backward_threads(embedded) == 1  # one core: no second thread to take
    monkeypatch.setenv("RLOO_TORCH_THREADS", "3")
    assert engine_threads(embedded) == backward_threads(embedded) == 3  # one count, the user's, for the whole step
    assert backward_threads(embedded, num_processes=1) == 3 and backward_threads(hub, num_processes=2) == 3


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one core: the backward has no second thread to use")
def test_the_backward_runs_on_two_threads_and_the_rest_of_the_step_on_one(tmp_path, monkeypatch):
    from rloo_demo.engine.training import RunState, build_trainer

    monkeypatch.delenv("RLOO_TORCH_THREADS", raising=False)
    config = RunConfig(output_dir=str(tmp_path), max_steps=2, prompts_per_step=2, max_new_tokens=8)
    trainer = build_trainer(config, RunState(config))
    seen = {"generate": [], "backward": []}
    generate, backward = trainer._generate, torch.autograd.backward

    def counting_generate(*args, **kwargs):
        seen["generate"].append(torch.get_num_threads())
        return generate(*args, **kwargs)

    def counting_backward(*args, **kwargs):
        seen["backward"].append(torch.get_num_threads())
        return backward(*args, **kwargs)

    monkeypatch.setattr(trainer, "_generate", counting_generate)
    monkeypatch.setattr(torch.autograd, "backward", counting_backward)
    trainer.train()
    assert seen == {"generate": [1, 1], "backward": [2, 2]}
    assert torch.get_num_threads() == 1  # put back after each backward


def test_the_engine_samples_with_its_own_decode_and_falls_back_to_generate(tmp_path, monkeypatch):
    """The engine's trainer decodes the embedded policy itself (never calling generate); a setting the decode does
    not cover (a repetition penalty) goes to generate, with the reason kept."""
    from transformers import GPT2LMHeadModel

    from rloo_demo.engine.training import RunState, build_trainer

    calls = []
    generate = GPT2LMHeadModel.generate

    def counting(self, *args, **kwargs):
        calls.append(kwargs.get("generation_config"))
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(GPT2LMHeadModel, "generate", counting)
    config = RunConfig(output_dir=str(tmp_path), max_steps=2, prompts_per_step=2, max_new_tokens=8)
    trainer = build_trainer(config, RunState(config))
    trainer.train()
    assert trainer.lean_generate_calls == 2 and trainer.lean_generation_skipped is None and calls == []
    assert "generate" not in trainer.model.__dict__  # put back after each step

    penalised, _ = _train(SingleForwardRLOOTrainer, tmp_path, steps=1, repetition_penalty=1.2)
    assert penalised.lean_generate_calls == 0 and "RepetitionPenalty" in penalised.lean_generation_skipped
    assert len(calls) == 1 and calls[0].repetition_penalty == 1.2  # generate sampled it, with the penalty


# --- the speed path's decisions, on stand-ins (no model, no TRL set-up) --------------------------------------------


def _bare(**attrs):
    from types import SimpleNamespace

    trainer = SingleForwardRLOOTrainer.__new__(SingleForwardRLOOTrainer)
    trainer.reuse_policy_forward = True
    trainer.num_iterations = 1
    trainer.args = SimpleNamespace(steps_per_generation=1, disable_dropout=True)
    trainer.accelerator = SimpleNamespace(num_processes=1, unwrap_model=lambda m: m)
    trainer.aux_loss_enabled = False
    for key, value in attrs.items():
        setattr(trainer, key, value)
    return trainer


def test_the_scoring_pass_is_reused_only_when_no_weight_can_change_before_the_loss():
    from types import SimpleNamespace

    assert _bare().reuses_policy_forward
    assert not _bare(reuse_policy_forward=False).reuses_policy_forward  # the benchmark's switch
    assert not _bare(num_iterations=2).reuses_policy_forward  # a second update on the same batch
    assert not _bare(args=SimpleNamespace(steps_per_generation=2)).reuses_policy_forward
    assert not _bare(accelerator=SimpleNamespace(num_processes=2)).reuses_policy_forward  # DDP's hooks
    assert not _bare(aux_loss_enabled=True).reuses_policy_forward  # MoE's auxiliary loss


def test_the_backward_gets_its_own_thread_count_and_the_step_gets_its_own_back(monkeypatch):
    from types import SimpleNamespace

    threads = [1]
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads[0])
    monkeypatch.setattr(torch, "set_num_threads", lambda n: threads.__setitem__(0, n))
    during = []
    trainer = _bare(accelerator=SimpleNamespace(backward=lambda loss, **kw: during.append((loss, kw, threads[0]))))
    trainer.use_backward_threads(2)
    trainer.accelerator.backward("loss", retain_graph=True)
    assert during == [("loss", {"retain_graph": True}, 2)] and threads == [1]  # two inside, one again after
    wrapped = trainer.accelerator.backward
    trainer.use_backward_threads(1)  # a new count for the same wrapper, not a wrapper around the wrapper
    assert trainer.accelerator.backward is wrapped and trainer.backward_threads == 1
    trainer.accelerator.backward("again", retain_graph=False)  # already at its count: called as it is
    assert during[-1] == ("again", {"retain_graph": False}, 1) and threads == [1]

    def failing(loss, **kw):
        raise RuntimeError("out of memory")

    trainer = _bare(accelerator=SimpleNamespace(backward=failing))
    trainer.use_backward_threads(3)
    with pytest.raises(RuntimeError, match="out of memory"):
        trainer.accelerator.backward("loss")
    assert threads == [1]  # restored after a failed backward too


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"lean_generation": False}, "turned off"),
        ({"use_vllm": True}, "another generation backend"),
        ({"use_transformers_continuous_batching": True}, "another generation backend"),
        ({"images": [None, "an image"]}, "multimodal inputs"),
        ({"multimodal_fields": {"pixel_values": 1}}, "multimodal inputs"),
        ({"is_deepspeed_enabled": True}, "DeepSpeed or FSDP shards the weights"),
        ({"is_fsdp_enabled": True}, "DeepSpeed or FSDP shards the weights"),
    ],
)
def test_a_generation_the_lean_decode_cannot_make_goes_to_trl_and_says_why(monkeypatch, settings, reason):
    calls = []
    monkeypatch.setattr(RLOOTrainer, "_generate_single_turn", lambda self, *args: calls.append(args) or "trl's")
    trainer = _bare(
        lean_generation=True,
        use_vllm=False,
        use_transformers_continuous_batching=False,
        is_deepspeed_enabled=False,
        is_fsdp_enabled=False,
    )
    settings = dict(settings)  # the parameter's own dict is left whole: a second run in one process reads it again
    images, fields = settings.pop("images", None), settings.pop("multimodal_fields", None)
    for key, value in settings.items():
        setattr(trainer, key, value)
    assert trainer._generate_single_turn("ids", images, fields) == "trl's"
    assert calls == [("ids", images, fields)] and trainer.lean_generation_skipped == reason


def test_the_reference_pass_starts_beside_the_policys_only_where_trl_will_ask_for_it_and_it_may_overlap(monkeypatch):
    from rloo_demo.fast import fast_step

    policy, ref = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    asked = []
    monkeypatch.setattr(fast_step, "may_overlap", lambda t, *models: asked.append(models) or t.overlap_ok)
    for beta, ref_model, overlap_ok in ((0.0, ref, True), (0.1, None, True), (0.1, ref, False)):
        trainer = _bare(beta=beta, ref_model=ref_model, model=policy, overlap_ok=overlap_ok)
        assert trainer._start_reference("ids", "mask", 4, 2, {}) is None
    assert asked == [(policy, ref)]  # asked only once TRL will score a reference
    seen = []

    def trl_score(self, model, ids, mask, keep, batch, **kw):
        seen.append((self, model, ids, mask, keep, batch, kw))
        return "ref logps", None, None

    monkeypatch.setattr(fast_step, "trl_scoring", lambda t: lambda *a, **kw: trl_score(t, *a, **kw))
    trainer = _bare(beta=0.1, ref_model=ref, model=policy, overlap_ok=True)
    job = trainer._start_reference("ids", "mask", 4, 2, {"temperature": 0.7})
    assert job.result() == (("ids", "mask", 4), "ref logps")
    assert seen == [(trainer, ref, "ids", "mask", 4, 2, {"temperature": 0.7})]


def test_the_after_pass_runs_on_a_worker_only_for_the_step_boundary_with_a_token_record_where_it_may_overlap(
    monkeypatch,
):
    import threading

    from rloo_demo.fast import overlap

    class Base:
        def _deliver_after(self, pending, background):
            self.direct.append((pending, background))

        def _deliver(self, pending):
            self.worker.append((pending, threading.current_thread().name))

    class Trainer(overlap.BackgroundAfterPass, Base):
        model = "the policy"

        def __init__(self, record_tokens):
            self.record_tokens, self.direct, self.worker, self._after = record_tokens, [], [], None

    allowed = []
    monkeypatch.setattr(overlap, "may_overlap", lambda trainer, *models: allowed.append(models) or trainer.ok)
    for background, tokens, ok in ((False, True, True), (True, False, True), (True, True, False)):
        trainer = Trainer(tokens)
        trainer.ok = ok
        trainer._deliver_after({"step": 1}, background)
        assert trainer.direct == [({"step": 1}, background)] and trainer._after is None
    trainer = Trainer(True)
    trainer.ok = True
    trainer._deliver_after({"step": 2}, True)
    trainer._after.result()
    assert trainer.worker == [({"step": 2}, "rloo-after")] and trainer.direct == []
    assert allowed[-1] == ("the policy",)


def test_the_constructor_hands_trl_its_arguments_and_starts_with_nothing_kept_or_skipped(monkeypatch):
    got = []
    monkeypatch.setattr(RLOOTrainer, "__init__", lambda self, *args, **kwargs: got.append((args, kwargs)))
    trainer = SingleForwardRLOOTrainer("a model", args="its config")
    assert got == [(("a model",), {"args": "its config"})]
    assert (trainer._scoring_calls, trainer._kept, trainer.forward_passes_saved) == (None, None, 0)
    assert (trainer.reuse_policy_forward, trainer.lean_generation, trainer.lean_generate_calls) == (True, True, 0)
    assert trainer.lean_generation_skipped is None and trainer.backward_threads is None


def test_scoring_calls_are_counted_only_while_a_training_batch_that_may_reuse_its_pass_is_scored(monkeypatch):
    from types import SimpleNamespace

    seen = []
    monkeypatch.setattr(
        RLOOTrainer,
        "_generate_and_score_completions",
        lambda self, inputs: seen.append(self._scoring_calls) or {"scored": inputs},
    )
    for training, reuse, counted in ((True, True, 0), (False, True, None), (True, False, None)):
        trainer = _bare(model=SimpleNamespace(training=training), reuse_policy_forward=reuse)
        trainer._kept, trainer._reference = "last step's", None
        assert trainer._generate_and_score_completions("batch") == {"scored": "batch"}
        assert seen[-1] == counted and trainer._scoring_calls is None and trainer._kept is None


def test_the_worker_threads_are_daemons_named_for_what_they_do(monkeypatch):
    from rloo_demo.fast import fast_step
    from rloo_demo.fast.overlap import Background

    job = Background(lambda: 1)
    assert job.result() == 1 and job._thread.name == "rloo-background" and job._thread.daemon
    assert Background(lambda: 2, name="mine")._thread.name == "mine"
    monkeypatch.setattr(fast_step, "may_overlap", lambda *a: True)
    monkeypatch.setattr(fast_step, "trl_scoring", lambda t: lambda *a, **kw: ("logps", None, None))
    trainer = _bare(beta=0.1, ref_model="ref", model="policy")
    job = trainer._start_reference("ids", "mask", 4, 2, {})
    job.result()
    assert job._thread.name == "rloo-reference" and job._thread.daemon


def test_overlap_needs_dropout_declared_off_and_reads_a_model_without_checkpointing_as_safe():
    from types import SimpleNamespace

    from rloo_demo.fast.overlap import may_overlap

    acc = SimpleNamespace(num_processes=1, unwrap_model=lambda m: m)
    model = torch.nn.Linear(2, 2)  # no is_gradient_checkpointing attribute at all
    assert may_overlap(SimpleNamespace(accelerator=acc, args=SimpleNamespace(disable_dropout=True)), model)
    assert not may_overlap(SimpleNamespace(accelerator=acc, args=SimpleNamespace()), model)  # not said: unsafe


def test_a_thread_count_of_zero_from_the_environment_is_one(monkeypatch):
    from rloo_demo.fast.fast_step import engine_threads

    monkeypatch.setenv("RLOO_TORCH_THREADS", "0")
    assert engine_threads("embedded:tiny-imdb-gpt2") == 1
    monkeypatch.setenv("RLOO_TORCH_THREADS", " 2 ")
    assert engine_threads("openai-community/gpt2") == 2


def test_a_one_from_the_environment_keeps_the_backward_on_one_thread_too(monkeypatch):
    from rloo_demo.fast import fast_step
    from rloo_demo.fast.fast_step import backward_threads

    monkeypatch.setattr(fast_step, "TORCH_DEFAULT_THREADS", 4)
    monkeypatch.setenv("RLOO_TORCH_THREADS", "1")
    assert backward_threads("embedded:tiny-imdb-gpt2") == 1  # the user's count, not the embedded policy's two
    monkeypatch.setenv("RLOO_TORCH_THREADS", "  ")
    assert backward_threads("embedded:tiny-imdb-gpt2") == 2  # blank: not set


# --- which scoring call goes where: TRL's own pass recorded, on stand-ins ------------------------------------------


class _Scoring:
    """TRL's ``_get_per_token_logps_and_entropies`` as a recorder: its logps are the kept tokens' ids times a weight
    that carries a graph, its entropies twice those, so a test can tell which rows came back and whether they grew."""

    def __init__(self):
        self.calls = []
        self.weight = torch.ones((), requires_grad=True)

    def __call__(
        self,
        trainer,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        **kwargs,
    ):
        self.calls.append((model, batch_size, compute_entropy, kwargs, torch.is_grad_enabled()))
        logps = input_ids[:, -logits_to_keep:].float() * self.weight
        return logps, (2 * logps if compute_entropy else None), None


def _scoring_trainer(monkeypatch):
    from types import SimpleNamespace

    scoring = _Scoring()
    monkeypatch.setattr(
        RLOOTrainer, "_get_per_token_logps_and_entropies", lambda self, *args, **kwargs: scoring(self, *args, **kwargs)
    )
    policy, ref = SimpleNamespace(name="policy"), SimpleNamespace(name="ref")
    trainer = _bare(model=policy, ref_model=ref, _scoring_calls=0, _kept=None, _reference=None, forward_passes_saved=0)
    started = []
    trainer._start_reference = lambda *args: started.append(args) or None
    return trainer, scoring, policy, ref, started


_IDS = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])
_MASK = torch.ones_like(_IDS)


def test_the_policys_scoring_pass_keeps_its_graph_for_the_loss_and_hands_trl_detached_values(monkeypatch):
    trainer, scoring, policy, ref, started = _scoring_trainer(monkeypatch)
    with torch.no_grad():
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
            policy, _IDS, _MASK, 2, batch_size=3, compute_entropy=False, temperature=0.7
        )
    # TRL's pass ran once, with grad and entropies on (the loss needs both), and the caller's batch size and kwargs
    assert scoring.calls == [(policy, 3, True, {"temperature": 0.7}, True)]
    assert started == [(_IDS, _MASK, 2, 3, {"temperature": 0.7})]  # the reference starts beside it, same inputs
    assert torch.equal(logps, torch.tensor([[2.0, 3.0], [5.0, 6.0], [8.0, 9.0]])) and not logps.requires_grad
    assert entropies is None and trainer._scoring_calls == 1
    keys, kept, kept_entropies = trainer._kept
    assert torch.equal(keys, torch.cat([_IDS, _MASK], dim=1)) and kept.requires_grad
    assert torch.equal(kept_entropies, 2 * kept)
    with torch.no_grad():  # then the reference: TRL's own pass, as asked
        trainer._get_per_token_logps_and_entropies(ref, _IDS, _MASK, 2, batch_size=3)
    assert scoring.calls[-1] == (ref, 3, False, {}, False) and trainer._scoring_calls == 2
    assert len(started) == 1

    # the loss's pass on the same rows in another order takes the kept graph: no second forward
    order = [2, 0, 1]
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
        policy, _IDS[order], _MASK[order], 2, batch_size=3, compute_entropy=True
    )
    assert len(scoring.calls) == 2 and trainer.forward_passes_saved == 1 and trainer._kept is None
    assert torch.equal(logps.detach(), torch.tensor([[8.0, 9.0], [2.0, 3.0], [5.0, 6.0]])) and logps.requires_grad
    assert torch.equal(entropies.detach(), 2 * logps.detach())
    logps.sum().backward()
    assert scoring.weight.grad == 33.0  # the graph of the scoring pass, for the kept rows


def test_the_scoring_pass_entropies_come_back_when_trl_asks_for_them(monkeypatch):
    trainer, scoring, policy, _, _ = _scoring_trainer(monkeypatch)
    with torch.no_grad():
        logps, entropies, _ = trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 1, compute_entropy=True)
    assert torch.equal(entropies, 2 * logps) and not entropies.requires_grad
    assert scoring.calls == [(policy, None, True, {}, True)]


def test_only_the_first_scoring_call_on_the_policy_itself_keeps_a_graph(monkeypatch):
    trainer, scoring, policy, ref, started = _scoring_trainer(monkeypatch)
    with torch.no_grad():  # a first call on another model: TRL's pass, nothing kept, nothing started
        trainer._get_per_token_logps_and_entropies(ref, _IDS, _MASK, 2)
        assert trainer._kept is None and started == [] and scoring.calls == [(ref, None, False, {}, False)]
        assert trainer._scoring_calls == 1
        trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2)  # the policy, but not first
    assert trainer._kept is None and started == [] and scoring.calls[-1] == (policy, None, False, {}, False)
    assert trainer._scoring_calls == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"compute_aux_loss": True},
        {"pixel_values": "images"},
        {"token_type_ids": "types"},
        {"image_position_ids": "positions"},
    ],
)
def test_multimodal_or_auxiliary_loss_calls_go_to_trl_untouched(monkeypatch, kwargs):
    trainer, scoring, policy, _, started = _scoring_trainer(monkeypatch)
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2, batch_size=2, **kwargs)
    assert scoring.calls == [(policy, 2, False, kwargs, False)] and trainer._scoring_calls == 0
    assert trainer._kept is None and started == []
    trainer._kept = (torch.cat([_IDS, _MASK], dim=1), torch.zeros(3, 2), torch.zeros(3, 2))  # even with one kept
    trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2, batch_size=2, **kwargs)
    assert scoring.calls[-1] == (policy, 2, False, kwargs, True) and trainer.forward_passes_saved == 0
    with torch.no_grad():  # a multimodal key that is present but None is not multimodal
        trainer._scoring_calls, trainer._kept = 0, None
        trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2, pixel_values=None)
    assert trainer._kept is not None and trainer._scoring_calls == 1


def test_the_loss_pass_runs_again_where_the_kept_rows_do_not_fit(monkeypatch):
    trainer, scoring, policy, _, _ = _scoring_trainer(monkeypatch)
    kept = (torch.cat([_IDS, _MASK], dim=1), torch.zeros(3, 2), torch.zeros(3, 2))
    trainer._kept = kept
    other = _IDS.clone()
    other[0, 0] = 99  # a row the scoring pass never saw
    trainer._get_per_token_logps_and_entropies(policy, other, _MASK, 2, batch_size=3)
    assert scoring.calls == [(policy, 3, False, {}, True)] and trainer._kept is None
    trainer._kept = kept
    trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 1)  # the same rows, fewer tokens kept
    assert len(scoring.calls) == 2 and trainer.forward_passes_saved == 0


def test_the_reference_started_beside_the_policy_is_picked_up_only_by_the_call_it_was_started_for(monkeypatch):
    from rloo_demo.fast.overlap import Background

    trainer, scoring, policy, ref, _ = _scoring_trainer(monkeypatch)
    trainer._scoring_calls = None  # past the scoring count: only the reference's pickup is under test
    trainer._reference = Background(lambda: ((_IDS, _MASK, 2), "its logps"))
    assert trainer._get_per_token_logps_and_entropies(ref, _IDS, _MASK, 2) == ("its logps", None, None)
    assert scoring.calls == [] and trainer._reference is None
    trainer._reference = Background(lambda: ((_IDS, _MASK, 2), "its logps"))
    trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2)  # not the reference: left for its call
    assert trainer._reference is not None and scoring.calls[-1][0] is policy
    for ids, mask, keep in ((_IDS.clone(), _MASK, 2), (_IDS, _MASK.clone(), 2), (_IDS, _MASK, 1)):
        trainer._reference = Background(lambda: ((_IDS, _MASK, 2), "its logps"))
        logps, _, _ = trainer._get_per_token_logps_and_entropies(ref, ids, mask, keep, batch_size=4)
        assert scoring.calls[-1] == (ref, 4, False, {}, True) and trainer._reference is None  # asked anew
        assert torch.equal(logps.detach(), ids[:, -keep:].float())


def test_the_loss_pass_leaves_the_entropies_out_when_trl_does_not_ask(monkeypatch):
    trainer, scoring, policy, _, _ = _scoring_trainer(monkeypatch)
    with torch.no_grad():
        trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2)
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(policy, _IDS, _MASK, 2, compute_entropy=False)
    assert entropies is None and trainer.forward_passes_saved == 1 and len(scoring.calls) == 1


class _Generating:
    """A policy whose ``generate`` (its class's) records its arguments, as TRL's generation step calls it."""

    def __init__(self):
        self.generated = []

    def generate(self, **kwargs):
        self.generated.append(kwargs)
        return "generate's ids"


_PROMPT = torch.zeros(2, 5, dtype=torch.long)


def _generation_trainer(monkeypatch, model, extra=None):
    """A stand-in trainer whose TRL generation step calls ``model.generate`` once, as TRL does, with ``extra``
    keyword arguments besides its own; what TRL's step was handed and got back is in ``trl``."""
    from types import SimpleNamespace

    from rloo_demo.fast import fast_step

    trl = []

    def trls_step(self, prompt_ids, images, multimodal_fields):
        unwrapped = self.accelerator.unwrap_model(self.model_wrapped)
        out = unwrapped.generate(input_ids=_PROMPT, attention_mask="mask", generation_config="config", **(extra or {}))
        trl.append((prompt_ids, images, multimodal_fields, out))
        return out

    monkeypatch.setattr(RLOOTrainer, "_generate_single_turn", trls_step)
    plans, lean = [], []
    monkeypatch.setattr(fast_step, "lean_plan", lambda m, config, length: plans.append((m, config, length)) or "no")
    monkeypatch.setattr(fast_step, "lean_generate", lambda *args: lean.append(args) or "lean ids")
    trainer = _bare(
        lean_generation=True,
        use_vllm=False,
        use_transformers_continuous_batching=False,
        is_deepspeed_enabled=False,
        is_fsdp_enabled=False,
        model_wrapped=model,
        lean_generate_calls=0,
        lean_generation_skipped="earlier",
        lean_draw="a draw",
        accelerator=SimpleNamespace(num_processes=1, unwrap_model=lambda m: m),
    )
    return trainer, trl, plans, lean


def test_generate_is_swapped_for_the_lean_decode_only_during_trls_step_where_a_plan_exists(monkeypatch):
    from rloo_demo.fast import fast_step

    model = _Generating()
    trainer, trl, plans, lean = _generation_trainer(monkeypatch, model)
    plan = object()  # a plan (anything but a reason, a text)
    monkeypatch.setattr(fast_step, "lean_plan", lambda m, config, length: plans.append((m, config, length)) or plan)
    assert trainer._generate_single_turn("prompts", [None, None], None) == "lean ids"  # text only: no images
    assert plans == [(model, "config", 5)] and lean == [(model, _PROMPT, "mask", plan, "a draw")]
    assert trl == [("prompts", [None, None], None, "lean ids")] and model.generated == []
    assert trainer.lean_generate_calls == 1 and trainer.lean_generation_skipped is None
    assert "generate" not in model.__dict__  # the class's own generate again


def test_without_a_plan_generate_gets_trls_arguments_and_the_reason_is_kept(monkeypatch):
    model = _Generating()
    trainer, trl, plans, lean = _generation_trainer(monkeypatch, model)
    assert trainer._generate_single_turn("prompts", None, None) == "generate's ids"
    assert model.generated == [{"input_ids": _PROMPT, "attention_mask": "mask", "generation_config": "config"}]
    assert lean == [] and trainer.lean_generate_calls == 0 and trainer.lean_generation_skipped == "no"


def test_a_generate_call_with_arguments_the_decode_does_not_take_goes_to_generate_whole(monkeypatch):
    model = _Generating()
    trainer, trl, plans, lean = _generation_trainer(monkeypatch, model, extra={"streamer": "s"})
    assert trainer._generate_single_turn("prompts", None, None) == "generate's ids"
    assert model.generated == [
        {"input_ids": _PROMPT, "attention_mask": "mask", "generation_config": "config", "streamer": "s"}
    ]
    assert plans == [] and lean == [] and trainer.lean_generation_skipped == "other arguments"


def test_a_generate_of_the_models_own_is_put_back_after_the_step(monkeypatch):
    model = _Generating()
    own = model.generate  # an attribute of the instance (a wrapper such as PEFT's would set one)
    model.generate = own
    trainer, trl, plans, lean = _generation_trainer(monkeypatch, model)
    trainer._generate_single_turn("prompts", None, None)
    assert model.__dict__["generate"] is own and model.generated[0]["generation_config"] == "config"
