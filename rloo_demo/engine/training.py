"""One RLOO run: load the models, build TRL's trainer, train, persist. Blocking (``train``) or in a thread
(``TrainingJob``).

The pipeline is the tutorial's: prompts -> K completions per prompt -> reward -> leave-one-out baseline -> policy
update -> checkpoint. The update is TRL's ``RLOOTrainer`` (through ``CapturingRLOOTrainer``, which only records);
this module adds validation before any model loads, the run folder, live metrics, stop, and a lock that lets
other threads copy the policy between two optimiser steps, never during one.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import tempfile
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from rloo_demo.config import RunConfig
from rloo_demo.engine import distributed
from rloo_demo.engine.callbacks import LiveMetricsCallback, MetricsChannel
from rloo_demo.engine.capture import CapturingRLOOTrainer
from rloo_demo.engine.meter import TrainingMeter
from rloo_demo.engine.snapshots import SnapshotCallback
from rloo_demo.engine.trainers import models_held, set_backward_threads, set_step_threads, trainer_for
from rloo_demo.engine.trl_args import peft_config, rloo_config
from rloo_demo.errors import DiskFull
from rloo_demo.i18n import Message
from rloo_demo.models.hub import resolve_model
from rloo_demo.models.model_size import check_policy_fits
from rloo_demo.models.modules import check_lora_targets
from rloo_demo.models.policy import load_policy
from rloo_demo.models.templates import check_template
from rloo_demo.store.folder import RunFolder, is_disk_full_error
from rloo_demo.store.process import process_identity
from rloo_demo.task.data import run_prompts
from rloo_demo.task.rewards import build_reward

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROLLOUT_MEMORY_STEPS = 32  # steps of rollouts a live run keeps in memory; older ones are read from its folder
STOP_STARTER = Message("stop.starter")  # "its starter asked it to stop": a stop reason, as every other one a Message


def check_resources(config: RunConfig) -> None:
    """Resolve every model and read the prompts, so that a missing model, a policy too large for this machine, a
    non-classifier reward model, a reward module that does not load, a chat template the policy lacks or a data file
    without its text column fails before any run folder is made or model loaded."""

    check_policy_fits(config)  # from the safetensors headers (or the hub's metadata): before any download
    folder = resolve_model(config.policy)
    check_lora_targets(config, folder)  # from the policy's config on the meta device: no weights read
    for name in config.rewards:
        build_reward(name)  # classifier rewards resolve their model and check it is one; modules are imported
    check_template(config, folder)
    run_prompts(config, "train", 1, folder)


class WeightsLock(TrainerCallback):
    """Held while the optimiser changes the weights, so a reader can copy a consistent policy. If the step raises
    between the two hooks, ``run_training`` releases it (``release_if_held``): a reader must never wait for ever."""

    def __init__(self):
        self.lock = threading.Lock()
        self._held = False

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.lock.acquire()
        self._held = True

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.release_if_held()

    def release_if_held(self) -> None:
        if self._held:
            self._held = False
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
    stop_reason: str | None = None  # why a stop was asked for: the starter, the budget, an abandoned page, ...
    budget_seconds: float | None = None  # compute budget: wall time from ``budget_started``, loading included
    budget_started: float | None = None  # when the job started (time.time()); the budget's clock runs from here
    trainer: object = None
    # step -> prompt groups of the latest steps, for live readers (older steps: the run folder's rollouts.jsonl)
    rollouts: OrderedDict[int, list[dict]] = field(default_factory=OrderedDict)
    rollout_steps: list[int] = field(default_factory=list)  # every step with rollouts, in order
    started: float | None = None
    finished: float | None = None

    def request_stop(self, reason: str) -> None:
        """Ask the run to stop at the next step boundary; the first reason given is the one recorded."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop_event.set()

    def keep_rollouts(self, step: int, groups: list[dict]) -> None:
        self.rollouts[step] = groups
        if not self.rollout_steps or self.rollout_steps[-1] != step:
            self.rollout_steps.append(step)
        while len(self.rollouts) > ROLLOUT_MEMORY_STEPS:
            self.rollouts.popitem(last=False)

    def policy_snapshot(self):
        """A private copy of the policy as it is between two optimiser steps (``None`` before the trainer exists)."""
        trainer = self.trainer
        if trainer is None:
            return None
        with self.weights.lock:
            model = trainer.accelerator.unwrap_model(trainer.model)
            snap = copy.deepcopy(model)
        return snap.eval()


def prepare(config: RunConfig, state: RunState | None = None, resources_checked: bool = False, **status) -> RunState:
    """The steps before any model loads, each taken once on a run's way down: the config checked (one checked
    already, by the controller or the CLI, is trusted: ``RunConfig.checked``), its resources checked unless the
    caller has (the runner does, before it takes its lock), and the run folder made, here only, with ``status``
    in its status.json. Raises for a configuration or resolution error, before anything is written."""
    config.validate()
    if not resources_checked:
        check_resources(config)
    state = state or RunState(config)
    # Each process must know its rank before anything is written: only rank 0 creates and writes the run folder.
    if state.run is None and distributed.init_distributed().is_main_process:
        state.run = RunFolder.create(config, **status)
    return state


def train(
    config: RunConfig,
    state: RunState | None = None,
    progress: bool = False,
    stop_file: str | None = None,
    trainer_cls: type | None = None,
) -> RunState:
    """Check and prepare a run (``prepare``), then train it to the end (``run_training``), blocking: the CLI's
    way. Configuration and resolution errors raise, before anything is written; a failure inside training does not."""
    state = prepare(config, state)
    return run_training(state, progress=progress, stop_file=stop_file, trainer_cls=trainer_cls)


def run_training(
    state: RunState, progress: bool = False, stop_file: str | None = None, trainer_cls: type | None = None
) -> RunState:
    """Run a prepared run's RLOO to the end (or to a stop request). Never raises for a failure inside training: the
    error is in ``state.error`` and in the run folder's status."""
    config, run = state.config, state.run
    state.status, state.started = "running", time.time()
    try:
        if run is not None:
            run.set_status("running", started=state.started, **process_identity())
        trainer = build_trainer(config, state, progress=progress, stop_file=stop_file, trainer_cls=trainer_cls)
        state.trainer = trainer
        acc = trainer.accelerator
        launch = distributed.launch_record(acc, acc.unwrap_model(trainer.model))  # every rank sends its part
        if run is not None:
            run.set_status("running", launch=launch, models=models_held(trainer))
            distributed.write_launch_block(run.path / "config.yaml", launch)
        trainer.train()
        stopped = state.stop_event.is_set() and trainer.state.global_step < config.max_steps
        state.status = "stopped" if stopped else "finished"
        distributed.record_final_params(launch, acc.unwrap_model(trainer.model), trainer.state.global_step)
        # Sharded engines (FSDP, ZeRO-3) hold a slice per rank: every rank takes part in gathering the full weights.
        sharded = acc.distributed_type.value in ("FSDP", "DEEPSPEED")
        weights = acc.get_state_dict(trainer.model_wrapped) if sharded else None
        if run is not None:
            run.save_model(acc.unwrap_model(trainer.model), trainer.processing_class, state_dict=weights)
            reason = state.stop_reason if stopped else None
            run.set_status(
                state.status, step=trainer.state.global_step, finished=time.time(), reason=reason, launch=launch
            )
            _remove_if_empty(run.path / "trainer")
    except Exception as exc:  # a crash in a reward function, OOM, a full disk, ...: recorded, not raised
        _record_failure(state, exc)
    finally:
        state.weights.release_if_held()  # an error inside the optimiser step left it held
        state.finished = time.time()
        if state.status in ("pending", "running"):  # a BaseException (SystemExit, ...) ended the thread
            state.status, state.error = "failed", state.error or "training ended without a status"
        state.channel.close()
        if run is None and state.trainer is not None:  # another rank's scratch output_dir (see build_trainer)
            shutil.rmtree(state.trainer.args.output_dir, ignore_errors=True)
    return state


def _record_failure(state: RunState, exc: Exception) -> None:
    """Mark the run failed in memory first (what the page shows), then on disk if the disk still takes it."""
    disk_full = is_disk_full_error(exc)  # an OSError ENOSPC, or safetensors' SafetensorError saving the model
    state.status = "failed"
    if isinstance(exc, DiskFull):  # it says which write failed
        state.error = str(exc)
    else:
        state.error = "disk full: the run could not write its files" if disk_full else f"{type(exc).__name__}: {exc}"
    if state.run is None:
        return
    try:
        state.run.set_status("failed", error=state.error, traceback=traceback.format_exc(), finished=time.time())
    except OSError as write_error:
        state.error += f" (status.json could not be updated either: {write_error.strerror or write_error})"


def _remove_if_empty(folder) -> None:
    """TRL's output_dir holds only tracker logs; with no tracker it stays empty and would clutter the run."""
    try:
        folder.rmdir()
    except OSError:
        pass


def build_trainer(
    config: RunConfig,
    state: RunState,
    progress: bool = False,
    stop_file: str | None = None,
    trainer_cls: type | None = None,
):
    """The run's trainer (``CapturingRLOOTrainer``, or another estimator's: ``rloo_demo.engine.trainers``) wired to
    the run folder, the metrics channel, stop, the weights lock and, if asked for, the gradient-variance meter.
    ``trainer_cls`` replaces the estimator's class with a subclass of it (tests record with one)."""

    run = state.run
    model, tokenizer = load_policy(config.policy)
    set_step_threads(config.policy)
    reward_funcs = [build_reward(name) for name in config.rewards]
    dataset = run_prompts(config, "train")  # lists of messages for a chat run: TRL applies the chat template
    trainer_dir = run.path / "trainer" if run is not None else tempfile.mkdtemp(prefix="rloo-rank-")
    num_processes = distributed.init_distributed().num_processes
    names = {"run_name": run.name} if run is not None else {}  # the run's name in trackers (trackio, wandb)
    args = rloo_config(config, trainer_dir, num_processes=num_processes, reward_weights=config.weights, **names)
    callbacks = [
        LiveMetricsCallback(
            state.channel,
            state.stop_event,
            on_record=run.append_metrics if run else None,
            stop_file=stop_file,
            budget_seconds=state.budget_seconds,
            budget_started=state.budget_started,
            on_stop=state.request_stop,
        ),
        state.weights,
    ]
    if progress:
        callbacks.append(TqdmProgress())
    # rloo: CapturingRLOOTrainer; reinforce: the same without a baseline; grpo: TRL's GRPOTrainer (see trainers)
    trainer_class, args, extra = trainer_for(
        config.estimator,
        args,
        {
            "rollout_sink": lambda step, groups: _keep_rollouts(state, step, groups),
            "record_tokens": config.record_tokens,
            "reward_offset": config.reward_offset,
        },
        trainer_cls=trainer_cls,
    )
    trainer = trainer_class(
        model=model,
        args=args,
        reward_funcs=reward_funcs,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=peft_config(config),
        **extra,
    )
    set_backward_threads(trainer, config.policy, num_processes)
    if config.variance_every and isinstance(trainer, CapturingRLOOTrainer):
        trainer.batch_observers.append(TrainingMeter(config.variance_every, config.seed))
    # With tqdm off, Trainer prints every log dict to stdout; our channel, files and progress bar replace that.
    trainer.remove_callback(PrinterCallback)
    if run is not None and config.snapshot_every > 0:
        if trainer.accelerator.distributed_type.value in ("FSDP", "DEEPSPEED"):
            # Each rank holds a slice of the weights; gathering them every N steps is not worth it for a probe.
            logging.getLogger(__name__).warning("snapshot_every is ignored under FSDP / DeepSpeed: no snapshots")
        else:
            policy = lambda: trainer.accelerator.unwrap_model(trainer.model)  # noqa: E731
            trainer.add_callback(SnapshotCallback(run.path, config.snapshot_every, policy))
    return trainer


def _keep_rollouts(state: RunState, step: int, groups: list[dict]) -> None:
    """Append a step's groups to the run folder and keep the latest in memory for live readers."""
    if state.run is not None:
        state.run.append_rollouts(step, groups)
    state.keep_rollouts(step, groups)


class TrainingJob:
    """A run in a background thread. The config is checked when the job is made (a checked one is trusted), and
    ``start`` prepares the run (``prepare``: its resources, unless the caller checked them, and its folder)
    synchronously, so errors in the settings raise in the caller and the run's name is known at once; the thread
    only trains."""

    def __init__(self, config: RunConfig, budget_seconds: float | None = None):
        self.state = RunState(config.validate(), budget_seconds=budget_seconds)
        self.thread: threading.Thread | None = None
        self.status_extra: dict = {}  # written into status.json when the folder is made (e.g. the owner's hash)

    def start(self, resources_checked: bool = False) -> TrainingJob:
        self.state.budget_started = time.time()  # the slot is this run's from now: loading counts against its budget
        prepare(self.state.config, self.state, resources_checked, **self.status_extra)
        self.thread = threading.Thread(target=run_training, args=(self.state,), daemon=True)
        self.thread.start()
        return self

    def stop(self, reason: str = STOP_STARTER) -> None:
        self.state.request_stop(reason)

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
