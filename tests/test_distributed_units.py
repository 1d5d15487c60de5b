"""The pieces of a multi-process run that need no second process (engine/distributed.py, server/subprocess_job.py),
against values worked out here: the parameter checksum bit for bit, the launch block written into config.yaml,
the checksums after training, the threads each process gets, and the exact launch commands."""

import os
from pathlib import Path

import pytest
import torch
import yaml

from rloo_demo.config import RunConfig
from rloo_demo.engine import distributed
from rloo_demo.server import subprocess_job
from rloo_demo.store.folder import RunFolder


def _model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def test_the_parameter_checksum_is_bit_for_bit_in_the_order_of_the_names():
    import hashlib

    a, b = _model(0), _model(0)
    assert distributed.param_digest(a) == distributed.param_digest(b)
    h = hashlib.sha256()
    for name, p in a.named_parameters():
        h.update(name.encode())
        h.update(p.detach().numpy().tobytes())
    assert distributed.param_digest(a) == h.hexdigest()
    with torch.no_grad():
        b[1].bias.add_(1e-7)  # one float's last bits
    assert distributed.param_digest(a) != distributed.param_digest(b)


def test_the_launch_block_holds_the_public_keys_and_the_config_still_loads(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="l", max_steps=7))
    launch = {
        "world_size": 2, "backend": "gloo", "distributed_type": "MULTI_CPU",
        "ranks": [{"rank": r, "local_rank": r, "node_rank": 0, "host": "h", "pid": 100 + r, "torch_threads": 1,
                   "params_sha256_start": "ab"} for r in range(2)],
    }
    before = (run.path / "config.yaml").read_text()
    distributed.write_launch_block(run.path / "config.yaml", {"ranks": launch.pop("ranks"), **launch})
    text = (run.path / "config.yaml").read_text()
    assert text.startswith(before.rstrip("\n") + "\nlaunch:\n  world_size: 2\n")  # appended, no blank line
    block = yaml.safe_load(text)["launch"]
    assert block == {"world_size": 2, "backend": "gloo", "distributed_type": "MULTI_CPU",
                     "ranks": [{"rank": 0, "node_rank": 0, "host": "h", "pid": 100},
                               {"rank": 1, "node_rank": 0, "host": "h", "pid": 101}]}
    assert list(block) == ["world_size", "backend", "distributed_type", "ranks"]  # the public keys, then the ranks
    assert run.config().max_steps == 7 and not (run.path / ".config.yaml.tmp").exists()


def test_the_checksums_after_training_are_added_only_where_every_rank_holds_the_whole_model():
    model = _model(1)
    launch = {"distributed_type": "MULTI_CPU", "ranks": [{"rank": 0}]}
    distributed.record_final_params(launch, model, 12)  # one process: gather gives this rank's alone
    assert launch["ranks"] == [{"rank": 0, "params_sha256_end": distributed.param_digest(model), "params_step": 12}]
    sharded = {"distributed_type": "FSDP", "ranks": [{"rank": 0}]}
    distributed.record_final_params(sharded, model, 12)
    assert sharded["ranks"] == [{"rank": 0}]
    assert distributed.gather({"x": 1}) == [{"x": 1}]


def _launch(monkeypatch, kind, process_index=1, env_group_rank="3"):
    import socket
    from types import SimpleNamespace

    import accelerate

    fake = SimpleNamespace(process_index=process_index, local_process_index=0, num_processes=2, backend="gloo")
    monkeypatch.setattr(accelerate, "PartialState", lambda: fake)
    monkeypatch.setattr(socket, "gethostname", lambda: "node-b")
    monkeypatch.setenv("GROUP_RANK", env_group_rank)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    sent = []
    monkeypatch.setattr(distributed, "gather", lambda mine: sent.append(mine) or [{"rank": 0}, mine])
    accelerator = SimpleNamespace(distributed_type=SimpleNamespace(value=kind))
    return accelerator, sent


def test_the_launch_record_holds_this_ranks_part_beside_the_others_and_its_checksum_where_replicated(monkeypatch):
    model = _model(4)
    accelerator, sent = _launch(monkeypatch, "MULTI_CPU")
    record = distributed.launch_record(accelerator, model)
    mine = {"rank": 1, "local_rank": 0, "node_rank": 3, "host": "node-b", "pid": os.getpid(), "torch_threads": 3,
            "params_sha256_start": distributed.param_digest(model)}
    assert sent == [mine]
    assert record == {"world_size": 2, "backend": "gloo", "distributed_type": "MULTI_CPU", "ranks": [{"rank": 0}, mine]}
    accelerator, sent = _launch(monkeypatch, "FSDP")  # ranks hold slices: nothing to compare, no checksum
    assert "params_sha256_start" not in distributed.launch_record(accelerator, model)["ranks"][1]
    monkeypatch.delenv("GROUP_RANK")  # one machine: node 0
    assert distributed.launch_record(accelerator, model)["ranks"][1]["node_rank"] == 0


def test_processes_share_out_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert [subprocess_job.threads_per_process(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]


def test_the_launch_commands_word_for_word(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    base = [*subprocess_job.ACCELERATE_LAUNCH, "--num_processes"]
    common = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--num_cpu_threads_per_process"]
    assert subprocess_job.accelerate_launch(1) == [*base, "1", *common, "2"]
    assert subprocess_job.accelerate_launch(2, port=29612, threads=3) == [
        *base, "2", *common, "3", "--multi_gpu", "--main_process_port", "29612"
    ]
    two = subprocess_job.accelerate_launch(2)
    assert two[two.index("--num_cpu_threads_per_process") + 1] == "1" and "--cpu" not in two
    assert 0 < int(two[-1]) < 65536  # a free port of its own
    cmd = subprocess_job.launch_command(Path("/c.yaml"), Path("/stop"), 1, 90.5)
    assert cmd[len(subprocess_job.accelerate_launch(1)):] == [
        "-m", "rloo_demo", "train", "--config", "/c.yaml", "--stop-file", "/stop", "--max-seconds", "90.5"
    ]
    assert "--max-seconds" not in subprocess_job.launch_command(Path("/c"), Path("/s"), 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"^3 processes but 2 GPU\(s\): one process per GPU; use at most 2$"):
        subprocess_job.accelerate_launch(3)
