"""Work beside the training thread (``rloo_demo.fast.overlap``): the reference model's scoring pass runs on a worker
thread and gives TRL what its own call would; where that is not safe, nothing runs beside.

(The token record's "after" pass beside the next step: ``tests/store/test_tokens.py``.)

``python -m pytest tests/fast/test_overlap.py``
"""

import threading
from types import SimpleNamespace

import pytest
import torch
from trl import RLOOTrainer

from rloo_demo.config import RunConfig
from rloo_demo.engine.training import RunState, build_trainer
from rloo_demo.fast.overlap import Background, may_overlap


def test_background_returns_the_value_or_raises_in_the_caller():
    seen = {}

    def work(x, y=0):
        seen["thread"], seen["grad"] = threading.current_thread(), torch.is_grad_enabled()
        return x + y

    assert Background(work, 2, y=3).result() == 5
    assert seen["thread"] is not threading.current_thread() and seen["grad"] is False

    def fail():
        raise ValueError("broken")

    job = Background(fail)
    job.wait()  # waiting alone does not raise
    with pytest.raises(ValueError, match="broken"):
        job.result()


def fake(num_processes=1, disable_dropout=True, checkpointing=False):
    model = torch.nn.Linear(2, 2)
    model.is_gradient_checkpointing = checkpointing
    acc = SimpleNamespace(num_processes=num_processes, unwrap_model=lambda m: m)
    return SimpleNamespace(accelerator=acc, args=SimpleNamespace(disable_dropout=disable_dropout)), model


def test_overlap_only_where_it_is_safe():
    trainer, model = fake()
    assert may_overlap(trainer, model)
    assert not may_overlap(*fake(num_processes=2))  # collectives keep their order
    assert not may_overlap(*fake(disable_dropout=False))  # the random generator
    assert not may_overlap(*fake(checkpointing=True))  # the pass would switch it under the other thread
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not may_overlap(trainer, model)  # autocast is per thread
    trainer.overlap_passes = False
    assert not may_overlap(trainer, model)  # turned off, as the benchmark's ablation does


def test_the_reference_pass_runs_beside_the_policys_and_gives_trls_values(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), max_steps=2, prompts_per_step=2, max_new_tokens=8, beta=0.1)
    trainer = build_trainer(config, RunState(config))
    threads, compared = [], []
    trainer.ref_model.register_forward_hook(lambda *_: threads.append(threading.current_thread()))
    engine_call = type(trainer)._get_per_token_logps_and_entropies

    def checked(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        out = engine_call(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if model is self.ref_model:  # TRL's own call, made here in the training thread, for comparison
            with torch.no_grad():
                theirs, _, _ = RLOOTrainer._get_per_token_logps_and_entropies.__wrapped__(
                    self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )
            compared.append(torch.equal(out[0], theirs))
        return out

    trainer._get_per_token_logps_and_entropies = checked.__get__(trainer)
    trainer.train()
    main = threading.current_thread()
    worker_calls = [t for t in threads if t is not main]
    assert len(worker_calls) == 2  # one reference pass per step, each on a worker thread
    assert compared == [True, True]
