"""Multi-process data-parallel training on a CPU (gloo), proven from the run itself: the web app's launch command
really starts 2 processes, each generates its own half of every step, the rollouts hold every group once, the
gradients are synchronised (identical weights on both ranks after the last step), only rank 0 writes, and the
app's subprocess backend starts 2 workers, streams and stops. Also: the accelerate configs in ``configs/`` parse
with accelerate's own parser, and the multi-node one runs as 2 "machines" on this host.

``python -m pytest tests/engine/test_distributed.py`` (about 2 minutes on 2 cores; ``-m "not slow"``: a second).

The pieces of a multi-process run that need no second process (engine/distributed.py, server/subprocess_job.py),
against values worked out here: the parameter checksum bit for bit, the launch block written into config.yaml,
the checksums after training, the threads each process gets, and the exact launch commands."""

import os
import re
import shlex
import subprocess
from pathlib import Path

import psutil
import pytest
import torch
import yaml

from rloo_demo.cli import build_parser, config_from_args
from rloo_demo.config import RunConfig
from rloo_demo.engine import distributed
from rloo_demo.errors import ConfigError
from rloo_demo.server import subprocess_job
from rloo_demo.server.runner import Runner
from rloo_demo.server.subprocess_job import ACCELERATE_LAUNCH, JsonlTail, accelerate_launch, free_port
from rloo_demo.store.folder import RunFolder, open_run
from rloo_demo.store.jsonl import save_config

# ----------------------------------------------------------------------------- distributed


ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
STEPS, PROMPTS, K = 3, 2, 4  # 2 prompts x K=4 = 8 completions per step, 4 on each rank
TRAIN = ["-m", "rloo_demo", "train", "--max-new-tokens", "8", "--prompts-per-step", str(PROMPTS)]


def launch(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)


def check_consistent(run, steps, prompts_per_step, k):
    """Every step logged once; every group of every step in the rollouts exactly once, whole and with TRL's
    advantages."""
    metrics = run.metrics()
    assert [m["step"] for m in metrics] == list(range(1, steps + 1))
    groups = run.rollouts()
    keys = [(g["step"], g["group"]) for g in groups]
    assert sorted(keys) == [(s, g) for s in range(1, steps + 1) for g in range(prompts_per_step)]
    for step in range(1, steps + 1):
        prompts = [g["prompt"] for g in groups if g["step"] == step]
        assert len(set(prompts)) == len(prompts), f"step {step} scored the same prompt twice"
    for g in groups:
        assert len(g["completions"]) == k
        assert g["parity_error"] < 1e-5
        assert sum(c["advantage"] for c in g["completions"]) == pytest.approx(0.0, abs=1e-5)


def ranks_of(run) -> list[dict]:
    return run.status()["launch"]["ranks"]


# ---------------------------------------------------------------------- the web app's launch command, 2 processes


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One 2-process run under the exact command the web app's subprocess backend uses."""
    out = tmp_path_factory.mktemp("ddp")
    cmd = accelerate_launch(2) + TRAIN + ["--max-steps", str(STEPS), "--output-dir", str(out), "--run-name", "ddp"]
    done = launch(cmd)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, open_run(out / "ddp")


@pytest.mark.slow
def test_launch_starts_two_processes(ddp_run):
    out, run = ddp_run
    assert sorted(p.name for p in out.iterdir()) == ["ddp"]  # only rank 0 created a run folder
    status = run.status()
    assert status["status"] == "finished" and run.model_dir is not None
    launch_ = status["launch"]
    assert launch_["world_size"] == 2
    assert launch_["backend"] == ("nccl" if launch_["distributed_type"] == "MULTI_GPU" else "gloo")
    assert [r["rank"] for r in launch_["ranks"]] == [0, 1]
    assert len({r["pid"] for r in launch_["ranks"]}) == 2
    assert status["pid"] == launch_["ranks"][0]["pid"]  # rank 0 wrote the folder
    assert all(r["torch_threads"] == max(1, len(os.sched_getaffinity(0)) // 2) for r in launch_["ranks"])


@pytest.mark.slow
def test_config_yaml_records_the_launch_and_still_loads(ddp_run):
    _, run = ddp_run
    raw = yaml.safe_load((run.path / "config.yaml").read_text())
    assert raw["launch"]["world_size"] == 2
    assert [r["pid"] for r in raw["launch"]["ranks"]] == [r["pid"] for r in ranks_of(run)]
    assert run.config().max_steps == STEPS  # RunConfig.load sets the launch block aside
    args = build_parser().parse_args(["train", "--config", str(run.path / "config.yaml"), "--max-steps", "9"])
    config = config_from_args(args)  # the same file again with --config, a flag on top
    assert config.max_steps == 9 and config.prompts_per_step == PROMPTS


@pytest.mark.slow
def test_each_rank_generated_its_own_half(ddp_run):
    _, run = ddp_run
    groups = run.rollouts()
    for step in range(1, STEPS + 1):
        by_rank: dict[int, list] = {0: [], 1: []}
        for g in (g for g in groups if g["step"] == step):
            for c in g["completions"]:
                by_rank[c["rank"]].append((g["prompt"], c["text"]))
        assert len(by_rank[0]) == len(by_rank[1]) == PROMPTS * K // 2  # each rank scored its share of the step
        assert not {p for p, _ in by_rank[0]} & {p for p, _ in by_rank[1]}  # no prompt group on both ranks
        assert [t for _, t in by_rank[0]] != [t for _, t in by_rank[1]]


@pytest.mark.slow
def test_rollouts_hold_every_group_of_every_step_once(ddp_run):
    _, run = ddp_run
    check_consistent(run, STEPS, PROMPTS, K)


@pytest.mark.slow
def test_token_records_are_gathered_in_the_order_of_the_completions(ddp_run):
    """Issue #10: each rank's per-token lists (of different lengths on each rank) reach rank 0 in the same order as
    the completions, so every completion's lists are its own: one entry per token, its pieces make its text, and
    Σ(log π − log π_ref) is the KL that rank gathered as a tensor."""
    _, run = ddp_run
    completions = [c for g in run.rollouts() for c in g["completions"]]
    assert {c["rank"] for c in completions} == {0, 1}
    for c in completions:
        for key in ("token_texts", "token_logp", "token_ref_logp", "token_entropy", "token_logp_after"):
            assert len(c[key]) == c["num_tokens"], key
        assert "".join(c["token_texts"]).replace("<|endoftext|>", "") == c["text"]
        assert sum(c["token_logp"]) - sum(c["token_ref_logp"]) == pytest.approx(c["kl"], abs=1e-3)


@pytest.mark.slow
def test_gradients_are_synchronised(ddp_run):
    _, run = ddp_run
    r0, r1 = ranks_of(run)
    assert r0["params_step"] == r1["params_step"] == STEPS
    assert r0["params_sha256_start"] == r1["params_sha256_start"]  # both started from the same weights
    assert r0["params_sha256_end"] == r1["params_sha256_end"]  # and took the same steps: all-reduced gradients
    assert r0["params_sha256_end"] != r0["params_sha256_start"]  # the steps did change the weights


# ---------------------------------------------------------------------- the web app's subprocess backend


def descendants(pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(pid).children(recursive=True)}


@pytest.mark.slow
def test_subprocess_backend_starts_two_workers_streams_and_stops(tmp_path):
    runner = Runner(str(tmp_path), backend="subprocess", num_processes=2)
    config = RunConfig(max_steps=300, prompts_per_step=PROMPTS, max_new_tokens=8)
    active = runner.start(config, owner="me")
    job, state = active.job, active.job.state
    first = state.channel.wait_for(0, timeout=300)
    assert first and first[0]["step"] == 1
    # while it trains: 2 ranks, 2 distinct pids, both live processes under the launcher the app started
    pids = [r["pid"] for r in ranks_of(job.run)]
    assert len(set(pids)) == 2
    assert set(pids) <= descendants(job.proc.pid)
    assert all(psutil.pid_exists(p) for p in pids)
    state.channel.wait_for(2, timeout=120)
    runner.stop(active.name, "me")
    assert job.join(timeout=300)
    assert state.status == "stopped", state.error
    run = open_run(tmp_path / active.name)
    steps = len(run.metrics())
    assert 2 <= steps < 300
    check_consistent(run, steps, PROMPTS, K)
    assert {r["params_step"] for r in ranks_of(run)} == {steps}  # both ranks stopped at the same step
    assert [r["step"] for r in state.channel.snapshot()] == list(range(1, steps + 1))  # streamed all of them
    assert sorted(state.rollouts) == list(range(1, steps + 1))
    assert not list(tmp_path.glob(".*.stop"))
    assert not any(psutil.pid_exists(p) for p in pids)  # the workers ended with the launcher


# ---------------------------------------------------------------------- launch command and configs (fast)


def test_launch_command_starts_n_processes_without_cpu_flag():
    cmd = accelerate_launch(2, port=29555)
    assert "--cpu" not in cmd  # with --cpu accelerate 1.15 starts one process whatever --num_processes says
    assert "--multi_gpu" in cmd and cmd[cmd.index("--num_processes") + 1] == "2"
    assert cmd[cmd.index("--main_process_port") + 1] == "29555"
    assert "--multi_gpu" not in accelerate_launch(1)  # accelerate refuses --multi_gpu with one process


def test_launch_block_is_not_a_setting(tmp_path):
    path = tmp_path / "config.yaml"
    save_config(RunConfig(max_steps=7), path)
    with open(path, "a") as f:
        f.write(yaml.safe_dump({"launch": {"world_size": 2, "backend": "gloo", "ranks": []}}))
    assert RunConfig.load(path).max_steps == 7
    with pytest.raises(ConfigError, match="launch"):  # a settings dict (the API) still rejects it
        RunConfig.from_dict({"max_steps": 7, "launch": {}})


EXPECTED = {
    "ddp.yaml": ("MULTI_GPU", 1, {}),
    "zero2.yaml": ("DEEPSPEED", 1, {"zero_stage": 2}),
    "zero3.yaml": ("DEEPSPEED", 1, {"zero_stage": 3, "zero3_save_16bit_model": True}),
    "fsdp.yaml": ("FSDP", 1, {"fsdp_version": 2, "fsdp_state_dict_type": "FULL_STATE_DICT"}),
    "multinode.yaml": ("MULTI_GPU", 2, {"main_process_port": 29500}),
}


def test_every_config_is_covered():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_accelerate_config_parses(name):
    """Parsed as ``accelerate launch --config_file`` does. DeepSpeed and FSDP cannot run here (no GPU)."""
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = str(CONFIGS / name)
    kind, machines, expect = EXPECTED[name]
    config = load_config_from_file(path)  # rejects unknown top-level keys
    assert isinstance(config, ClusterConfig)
    assert config.distributed_type.value == kind and config.num_machines == machines
    assert config.mixed_precision == "no"  # bf16 is the run's --bf16, not accelerate's autocast on top
    parser = launch_command_parser()
    known = vars(parser.parse_args(["x.py"]))
    nested = {**config.deepspeed_config, **config.fsdp_config}
    assert set(nested) <= set(known), f"keys accelerate launch does not know: {set(nested) - set(known)}"
    # resolve the file into launch arguments, as accelerate launch does before it picks a launcher
    args, _, _ = _validate_launch_command(parser.parse_args(["--config_file", path, "-m", "rloo_demo", "train"]))
    launcher = {"MULTI_GPU": args.multi_gpu, "DEEPSPEED": args.use_deepspeed, "FSDP": args.use_fsdp}
    assert [k for k, on in launcher.items() if on] == [kind]
    assert args.num_machines == machines and not args.cpu
    for key, value in expect.items():
        assert getattr(args, key) == value, key


@pytest.mark.slow
def test_multinode_config_runs_as_two_machines_on_one_host(tmp_path):
    """configs/multinode.yaml with 1 CPU process per "machine", both on this host: rank 1 joins rank 0's rendezvous
    as machine 1, and only rank 0 writes."""
    port = free_port()
    base = [*ACCELERATE_LAUNCH, "--config_file", str(CONFIGS / "multinode.yaml"), "--num_processes", "2"]
    base += ["--main_process_ip", "127.0.0.1", "--main_process_port", str(port), "--num_cpu_threads_per_process", "1"]
    train = [*TRAIN, "--max-steps", "2", "--output-dir", str(tmp_path), "--run-name", "mn"]
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    procs = [
        subprocess.Popen(
            [*base, "--machine_rank", str(r), *train], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=600)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mn"]
    run = open_run(tmp_path / "mn")
    launch_ = run.status()["launch"]
    assert launch_["world_size"] == 2
    assert [(r["rank"], r["node_rank"], r["local_rank"]) for r in launch_["ranks"]] == [(0, 0, 0), (1, 1, 0)]
    check_consistent(run, 2, PROMPTS, K)


def scaling_commands() -> list[list[str]]:
    """Every command of the README's "Scaling out" section, continuation lines joined."""
    section = (ROOT / "docs" / "operating.md").read_text().split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip() and not line.startswith("#")]


def test_readme_scaling_commands_start_several_processes(monkeypatch):
    """The README's launch commands, resolved as ``accelerate launch`` resolves them: none is the one-process one."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    monkeypatch.chdir(ROOT)  # the commands name configs/ relative to the repository
    commands = scaling_commands()
    assert len(commands) >= 8
    for cmd in commands:
        if cmd[0] == "torchrun":
            assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
            continue
        assert cmd[:2] == ["accelerate", "launch"], cmd
        args, _, _ = _validate_launch_command(launch_command_parser().parse_args(cmd[2:]))
        assert not args.cpu and (args.multi_gpu or args.use_deepspeed or args.use_fsdp), cmd
        assert args.num_processes >= 2 and args.module and args.training_script == "rloo_demo", cmd


def test_jsonl_tail_waits_for_complete_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    tail = JsonlTail(path)
    assert tail.read() == []
    path.write_text('{"step": 1}\n{"step": 2')
    assert tail.read() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('}\n{"step": 3}\n')
    assert tail.read() == [{"step": 2}, {"step": 3}]
    assert tail.read() == []


def test_jsonl_tail_skips_a_corrupt_line_and_goes_on(tmp_path):
    """A corrupt line (not JSON, not UTF-8, not an object) is skipped and counted, never raised: the follower of a
    subprocess run must not die on what a crashed writer left."""
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2, torn\n\xff\xfe\n[1, 2]\n{"step": 3}\n')
    tail = JsonlTail(path)
    assert tail.read() == [{"step": 1}, {"step": 3}]
    assert tail.skipped == 3
    with open(path, "ab") as f:
        f.write(b'{"step": 4}\n')
    assert tail.read() == [{"step": 4}]


# ----------------------------------------------------------------------------- distributed units


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
        "world_size": 2,
        "backend": "gloo",
        "distributed_type": "MULTI_CPU",
        "ranks": [
            {
                "rank": r,
                "local_rank": r,
                "node_rank": 0,
                "host": "h",
                "pid": 100 + r,
                "torch_threads": 1,
                "params_sha256_start": "ab",
            }
            for r in range(2)
        ],
    }
    before = (run.path / "config.yaml").read_text()
    distributed.write_launch_block(run.path / "config.yaml", {"ranks": launch.pop("ranks"), **launch})
    text = (run.path / "config.yaml").read_text()
    assert text.startswith(before.rstrip("\n") + "\nlaunch:\n  world_size: 2\n")  # appended, no blank line
    block = yaml.safe_load(text)["launch"]
    assert block == {
        "world_size": 2,
        "backend": "gloo",
        "distributed_type": "MULTI_CPU",
        "ranks": [
            {"rank": 0, "node_rank": 0, "host": "h", "pid": 100},
            {"rank": 1, "node_rank": 0, "host": "h", "pid": 101},
        ],
    }
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
    mine = {
        "rank": 1,
        "local_rank": 0,
        "node_rank": 3,
        "host": "node-b",
        "pid": os.getpid(),
        "torch_threads": 3,
        "params_sha256_start": distributed.param_digest(model),
    }
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
    common = [
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--num_cpu_threads_per_process",
    ]
    assert subprocess_job.accelerate_launch(1) == [*base, "1", *common, "2"]
    assert subprocess_job.accelerate_launch(2, port=29612, threads=3) == [
        *base,
        "2",
        *common,
        "3",
        "--multi_gpu",
        "--main_process_port",
        "29612",
    ]
    two = subprocess_job.accelerate_launch(2)
    assert two[two.index("--num_cpu_threads_per_process") + 1] == "1" and "--cpu" not in two
    assert 0 < int(two[-1]) < 65536  # a free port of its own
    cmd = subprocess_job.launch_command(Path("/c.yaml"), Path("/stop"), 1, 90.5)
    assert cmd[len(subprocess_job.accelerate_launch(1)) :] == [
        "-m",
        "rloo_demo",
        "train",
        "--config",
        "/c.yaml",
        "--stop-file",
        "/stop",
        "--max-seconds",
        "90.5",
    ]
    assert "--max-seconds" not in subprocess_job.launch_command(Path("/c"), Path("/s"), 1)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match=r"^3 processes but 2 GPU\(s\): one process per GPU; use at most 2$"):
        subprocess_job.accelerate_launch(3)
