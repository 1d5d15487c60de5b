"""One RLOO run: load the models, build TRL's trainer, train, persist. Blocking (``train``) or in a thread
(``TrainingJob``).

The pipeline is the tutorial's: prompts -> K completions per prompt -> reward -> leave-one-out baseline -> policy
update -> checkpoint. The update is TRL's ``RLOOTrainer`` (through ``CapturingRLOOTrainer``, which only records);
this module adds validation before any model loads, the run folder, live metrics, stop, and a lock that lets
other threads copy the policy between two optimiser steps, never during one.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import traceback
from dataclasses import dataclass, field

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from rloo_demo.callbacks import LiveMetricsCallback, MetricsChannel
from rloo_demo.config import RunConfig
from rloo_demo.runs import RunFolder

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_policy(name: str):
    """``(model, tokenizer)`` for a policy name, with left padding and a pad token, ready for generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rloo_demo.hub import resolve_model

    folder = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32")
    return model, tokenizer


def check_resources(config: RunConfig) -> None:
    """Resolve every model and data name, so that a missing one fails before any model loads."""
    from rloo_demo.hub import resolve_model
    from rloo_demo.rewards import build_reward

    resolve_model(config.policy)
    for name in config.rewards:
        build_reward(name)  # classifier rewards resolve their model; nothing heavy loads yet


class WeightsLock(TrainerCallback):
    """Held while the optimiser changes the weights, so a reader can copy a consistent policy."""

    def __init__(self):
        self.lock = threading.Lock()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.lock.acquire()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.lock.release()


class TqdmProgress(TrainerCallback):
    """A tqdm bar over steps showing the latest reward and KL (for the CLI)."""

    def on_train_begin(self, args, state, control, **kwargs):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=state.max_steps, desc="RLOO", unit="step") if state.is_world_process_zero else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.bar is not None and logs and "reward" in logs:
            self.bar.n = state.global_step
            postfix = {"reward": f"{logs['reward']:.3f}"}
            if "kl" in logs:  # TRL computes no KL when beta = 0
                postfix["kl"] = f"{logs['kl']:.3f}"
            self.bar.set_postfix(postfix)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


@dataclass
class RunState:
    """What other threads may read about a run while it trains."""

    config: RunConfig
    channel: MetricsChannel = field(default_factory=MetricsChannel)
    stop_event: threading.Event = field(default_factory=threading.Event)
    weights: WeightsLock = field(default_factory=WeightsLock)
    run: RunFolder | None = None
    status: str = "pending"
    error: str | None = None
    trainer: object = None
    rollouts: dict[int, list[dict]] = field(default_factory=dict)  # step -> prompt groups, for live readers
    started: float | None = None
    finished: float | None = None

    def policy_snapshot(self):
        """A private copy of the policy as it is between two optimiser steps (``None`` before the trainer exists)."""
        trainer = self.trainer
        if trainer is None:
            return None
        with self.weights.lock:
            model = trainer.accelerator.unwrap_model(trainer.model)
            snap = copy.deepcopy(model)
        return snap.eval()


def train(
    config: RunConfig, state: RunState | None = None, progress: bool = False, stop_file: str | None = None
) -> RunState:
    """Run RLOO to the end (or to a stop request). Never raises for a failure inside training: the error is in
    ``state.error`` and in the run folder's status. Configuration and resolution errors do raise, before anything
    is written."""
    from accelerate import PartialState

    config.validate()
    check_resources(config)
    state = state or RunState(config)
    is_main = PartialState().is_main_process
    if state.run is None and is_main:
        state.run = RunFolder.create(config)
    run = state.run
    state.status, state.started = "running", time.time()
    if run is not None:
        run.set_status("running", pid=os.getpid(), started=state.started)
    try:
        trainer = build_trainer(config, state, progress=progress, stop_file=stop_file)
        state.trainer = trainer
        trainer.train()
        stopped = state.stop_event.is_set() and trainer.state.global_step < config.max_steps
        state.status = "stopped" if stopped else "finished"
        if run is not None:
            run.save_model(trainer.accelerator.unwrap_model(trainer.model), trainer.processing_class)
            run.set_status(state.status, step=trainer.state.global_step, finished=time.time())
            _remove_if_empty(run.path / "trainer")
    except Exception as exc:  # a crash in a reward function, OOM, ...: recorded, not raised
        state.status, state.error = "failed", f"{type(exc).__name__}: {exc}"
        if run is not None:
            run.set_status("failed", error=state.error, traceback=traceback.format_exc(), finished=time.time())
    finally:
        state.finished = time.time()
        state.channel.close()
    return state


def _remove_if_empty(folder) -> None:
    """TRL's output_dir holds only tracker logs; with no tracker it stays empty and would clutter the run."""
    try:
        folder.rmdir()
    except OSError:
        pass


def build_trainer(config: RunConfig, state: RunState, progress: bool = False, stop_file: str | None = None):
    """A ``CapturingRLOOTrainer`` wired to the run folder, the metrics channel, stop and the weights lock."""
    import tempfile

    import torch
    from accelerate import PartialState

    from rloo_demo.capture import CapturingRLOOTrainer
    from rloo_demo.data import prompt_dataset
    from rloo_demo.fast_step import engine_threads
    from rloo_demo.rewards import build_reward

    run = state.run
    model, tokenizer = load_policy(config.policy)
    torch.set_num_threads(engine_threads(config.policy))  # 1 for the embedded policy: see rloo_demo.fast_step
    reward_funcs = [build_reward(name) for name in config.rewards]
    dataset = prompt_dataset(
        config.data_source,
        "train",
        config.prompt_template,
        config.prompt_words,
        text_column=config.text_column,
    )
    trainer_dir = run.path / "trainer" if run is not None else tempfile.mkdtemp(prefix="rloo-rank-")
    args = config.to_rloo_config(trainer_dir, num_processes=PartialState().num_processes, reward_weights=config.weights)
    callbacks = [
        LiveMetricsCallback(
            state.channel, state.stop_event, on_record=run.append_metrics if run else None, stop_file=stop_file
        ),
        state.weights,
    ]
    if progress:
        callbacks.append(TqdmProgress())
    trainer = CapturingRLOOTrainer(
        model=model,
        args=args,
        reward_funcs=reward_funcs,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        rollout_sink=lambda step, groups: _keep_rollouts(state, step, groups),
        peft_config=config.peft_config(),
    )
    # With tqdm off, Trainer prints every log dict to stdout; our channel, files and progress bar replace that.
    trainer.remove_callback(PrinterCallback)
    return trainer


def _keep_rollouts(state: RunState, step: int, groups: list[dict]) -> None:
    """Append a step's groups to the run folder and keep them in memory for live readers."""
    if state.run is not None:
        state.run.append_rollouts(step, groups)
    state.rollouts[step] = groups


class TrainingJob:
    """A run in a background thread. ``start`` validates and creates the run folder synchronously, so errors in
    the settings raise in the caller and the run's name is known at once."""

    def __init__(self, config: RunConfig):
        self.state = RunState(config.validate())
        self.thread: threading.Thread | None = None

    def start(self) -> TrainingJob:
        check_resources(self.state.config)
        self.state.run = RunFolder.create(self.state.config)
        self.thread = threading.Thread(target=train, args=(self.state.config, self.state), daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.state.stop_event.set()

    def join(self, timeout: float | None = None) -> bool:
        if self.thread is not None:
            self.thread.join(timeout)
        return self.done

    @property
    def done(self) -> bool:
        return self.thread is not None and not self.thread.is_alive()

    @property
    def run(self) -> RunFolder:
        return self.state.run
