"""The files a run folder writes besides its records (store/folder.py, store/modelcard.py), read back and compared
with what the test expects line for line: the model card with an evaluation, the adapter's portable base, an
evaluation's JSON, the rollouts of one step, and the refusal of a folder that is not a run.

The run folder: crash-safe writes, readers that never break, the rollout index, the process identity that tells
a restarted server from the one that wrote a status, and pruning. Each test injects the fault it guards against.

``python -m pytest tests/store/test_folder.py`` (a few seconds)."""

import errno
import json
import os
from pathlib import Path

import pytest
import yaml

from rloo_demo.config import RunConfig
from rloo_demo.errors import DiskFull, NotFound
from rloo_demo.store import folder as runs_module
from rloo_demo.store.folder import RunFolder, open_run, portable_adapter_config
from rloo_demo.store.jsonl import RolloutIndex, read_jsonl, read_jsonl_counted
from rloo_demo.store.listing import list_runs, mark_interrupted, prune_runs
from rloo_demo.store.modelcard import model_card
from rloo_demo.store.process import is_alive, process_identity

# ----------------------------------------------------------------------------- folder files


CONFIG = dict(
    rewards=["vader_compound", "length_penalty"],
    reward_weights=[1.0, 0.25],
    num_generations=3,
    max_steps=9,
    learning_rate=3e-5,
    beta=0.02,
    prompt_template="plain",
)
EVALUATION = {
    "base_mean_reward": 0.11111,
    "trained_mean_reward": 0.55556,
    "difference": 0.44446,
    "difference_ci95": [0.3, 0.6],
    "num_prompts": 12,
    "heldout_scorers": ["classifier"],
    "per_function": {"vader_compound": {"base": 0.2, "trained": 0.7}, "classifier": {"base": -0.1, "trained": 0.05}},
}


def test_the_model_card_line_for_line(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), **CONFIG)
    metrics = [
        {"step": 1, "reward": -0.125, "kl": 0.0},
        {"step": 2, "reward": 0.0},
        {"step": 3, "reward": 0.5, "kl": 0.0375},
    ]
    card = model_card(config, metrics, EVALUATION)
    head, config_block = card.split("\n## Config\n", 1)
    base = config.policy.removeprefix("embedded:")
    assert head.split("\n") == [
        "---",
        f"base_model: {base}",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags:",
        "- trl",
        "- rloo",
        "- rloo-demo",
        "---",
        f"# {base} trained with RLOO",
        "",
        f"`{base}` post-trained with RLOO (REINFORCE Leave-One-Out) through TRL's `RLOOTrainer` by rloo-demo.",
        "",
        "- reward: 1 x vader_compound + 0.25 x length_penalty",
        f"- K = 3 completions per prompt, {config.prompts_per_step} prompts per step, 3 of 9 steps, lr 3e-05, "
        "beta 0.02",
        f"- prompts: {config.data_source} (plain template)",
        "- training reward -0.125 (step 1) -> +0.500 (step 3), KL to reference 0.037 nats/token",
        "",
        "## Evaluation (held-out prompts, same sampling seed for base and trained)",
        "",
        "- base_mean_reward=0.1111",
        "- trained_mean_reward=0.5556",
        "- difference +0.4445, 95% bootstrap CI [+0.3000, +0.6000] over 12 prompts",
        "- vader_compound: base +0.2000, trained +0.7000",
        "- classifier (not trained on): base -0.1000, trained +0.0500",
        "",
    ]
    yaml_text = config_block.split("```yaml\n", 1)[1].split("\n```", 1)[0]
    assert yaml.safe_load(yaml_text) == config.to_dict()
    lora = model_card(RunConfig(use_lora=True), [], None)
    assert "- lora\n- peft\n---" in lora and "training reward" not in lora and "## Evaluation" not in lora
    assert "0 of 150 steps" in lora or f"0 of {RunConfig().max_steps} steps" in lora


def test_an_evaluation_is_saved_and_written_into_the_model_card(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="ev", **CONFIG))
    run.write_evaluation(EVALUATION)  # no model yet: the JSON alone
    assert run.evaluation() == EVALUATION and not (run.path / "model").exists()
    assert (run.path / "evaluation.json").read_text() == json.dumps(EVALUATION, indent=2) + "\n"
    (run.path / "model").mkdir()
    (run.path / "model" / "config.json").write_text("{}")
    run.write_evaluation({**EVALUATION, "num_prompts": 7})
    card = (run.path / "model" / "README.md").read_text()
    assert "over 7 prompts" in card and "- trained_mean_reward=0.5556" in card


def test_an_adapters_base_is_the_policys_name_not_a_local_folder(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 4, "base_model_name_or_path": "/root/.cache/x"}))
    portable_adapter_config(tmp_path, "embedded:tiny-imdb-gpt2")
    text = (tmp_path / "adapter_config.json").read_text()
    assert json.loads(text) == {"base_model_name_or_path": "embedded:tiny-imdb-gpt2", "r": 4}
    assert text == json.dumps({"base_model_name_or_path": "embedded:tiny-imdb-gpt2", "r": 4}, indent=2) + "\n"


def test_the_rollouts_of_one_step(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="ro"))
    run.append_rollouts(1, [{"step": 1, "group": 0}, {"step": 1, "group": 1}])  # each group carries its step
    run.append_rollouts(2, [{"step": 2, "group": 0}])
    assert [(r["step"], r["group"]) for r in run.rollouts()] == [(1, 0), (1, 1), (2, 0)]
    assert [(r["step"], r["group"]) for r in run.rollouts(2)] == [(2, 0)]
    assert run.rollouts(5) == []


def test_a_folder_without_a_config_is_not_a_run(tmp_path):
    with pytest.raises(NotFound, match=r"^'.*nothing' is not a run folder \(no config\.yaml\)$"):
        open_run(tmp_path / "nothing")
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="here"))
    assert open_run(run.path).path == run.path and open_run(str(run.path)).name == "here"


# ----------------------------------------------------------------------------- the model folder, the run's name


def _tiny_policy():
    from rloo_demo.models.policy import load_policy

    return load_policy(RunConfig().policy)


def test_a_saved_model_is_complete_replaces_the_old_one_and_holds_the_weights_it_was_given(tmp_path):
    import torch
    from safetensors.torch import load_file

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="saved"))
    model, tokenizer = _tiny_policy()
    first = run.save_model(model, tokenizer)
    (first / "stale-marker").write_text("from the first save")
    state = {k: v.clone() * 0.5 for k, v in model.state_dict().items()}  # the weights a sharded engine gathered
    final = run.save_model(model, tokenizer, state_dict=state)
    assert final == run.path / "model" and run.model_dir == final
    names = {p.name for p in final.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "tokenizer_config.json"} <= names
    assert "stale-marker" not in names  # the second save replaced the first whole
    assert not (run.path / ".model.tmp").exists() and not (run.path / ".model.old").exists()
    saved = load_file(final / "model.safetensors")
    some = next(k for k in saved if k.endswith("c_attn.weight"))
    torch.testing.assert_close(saved[some], state[some])


def test_a_lora_model_keeps_its_adapter_with_a_portable_base_beside_the_merged_model(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    config = RunConfig(output_dir=str(tmp_path), run_name="lora")
    run = RunFolder.create(config)
    base, tokenizer = _tiny_policy()
    torch.manual_seed(0)
    lora = get_peft_model(base, LoraConfig(r=2, target_modules=["c_attn"], init_lora_weights=False))
    ids = tokenizer("A film", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = lora(ids).logits
    final = run.save_model(lora, tokenizer)
    adapter = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == config.policy
    assert (final / "adapter" / "tokenizer_config.json").is_file() and (final / "config.json").is_file()
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(final)
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, expected, atol=1e-4, rtol=1e-4)


def test_a_full_disk_during_the_save_leaves_no_half_model_and_another_error_passes_through(tmp_path):
    import errno

    from rloo_demo.store.folder import DiskFull

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="full"))
    _, tokenizer = _tiny_policy()

    class Failing:
        def __init__(self, exc):
            self.exc = exc

        def save_pretrained(self, path, **kwargs):
            Path(path).mkdir(parents=True, exist_ok=True)
            (Path(path) / "half.bin").write_bytes(b"x" * 10)
            raise self.exc

    with pytest.raises(DiskFull, match="^disk full: the server's disk filled up while the trained model was saved"):
        run.save_model(Failing(OSError(errno.ENOSPC, "No space left on device")), tokenizer)
    assert not (run.path / ".model.tmp").exists() and run.model_dir is None
    with pytest.raises(PermissionError):
        run.save_model(Failing(PermissionError(errno.EACCES, "denied")), tokenizer)


def test_which_failures_mean_a_full_disk():
    import errno

    from rloo_demo.store.folder import DiskFull, is_disk_full_error

    class SafetensorError(Exception):
        pass

    def wrapped(exc, depth):
        for _ in range(depth):
            try:
                raise RuntimeError("wrapper") from exc
            except RuntimeError as outer:
                exc = outer
        return exc

    assert is_disk_full_error(OSError(errno.ENOSPC, "x")) and is_disk_full_error(OSError(errno.EDQUOT, "x"))
    assert is_disk_full_error(DiskFull("x"))
    assert is_disk_full_error(SafetensorError("I/O error: No space left on device (os error 28)"))
    assert is_disk_full_error(SafetensorError("os error 28"))
    assert is_disk_full_error(SafetensorError("No space left on device"))  # either wording
    assert not is_disk_full_error(SafetensorError("invalid header"))
    assert not is_disk_full_error(RuntimeError("No space left (os error 28)"))  # the text alone is not enough
    assert not is_disk_full_error(OSError(errno.EACCES, "x")) and not is_disk_full_error(None)
    assert is_disk_full_error(wrapped(OSError(errno.ENOSPC, "x"), 7))  # the cause of a cause ... 7 deep
    assert not is_disk_full_error(wrapped(OSError(errno.ENOSPC, "x"), 8))  # 8 deep: past the chain followed


def test_a_runs_default_name_is_its_time_policy_k_and_beta(monkeypatch):
    import time

    from rloo_demo.store.folder import default_run_name

    monkeypatch.setattr(time, "strftime", lambda fmt: "20261201-153000" if fmt == "%Y%m%d-%H%M%S" else "?")
    named = RunConfig(policy="org/Some_Model v2.1", num_generations=6, beta=0.025)
    assert default_run_name(named) == "20261201-153000-Some-Model-v2.1-k6-b0.025"
    assert default_run_name(RunConfig(policy="embedded:tiny-imdb-gpt2")) == (
        f"20261201-153000-tiny-imdb-gpt2-k{RunConfig().num_generations}-b{RunConfig().beta:g}"
    )
    assert default_run_name(RunConfig(policy="org/+++")).startswith("20261201-153000-policy-")
    long = default_run_name(RunConfig(policy="x" * 60 + ".-"))
    assert long.split("-k")[0] == "20261201-153000-" + "x" * 40


def test_a_cards_config_block_keeps_the_field_order_and_missing_figures_read_as_such(tmp_path):
    config = RunConfig(output_dir=str(tmp_path), **CONFIG)
    card = model_card(config, [{"step": 4}], {**EVALUATION, "heldout_scorers": []})
    block = yaml.safe_dump(config.to_dict(), sort_keys=False).strip()  # the fields in RunConfig's order
    assert card.endswith("## Config\n\n```yaml\n" + block + "\n```\n")
    assert "- training reward +nan (step 1) -> +nan (step 4), KL to reference 0.000 nats/token" in card
    bare = {k: v for k, v in EVALUATION.items() if k != "heldout_scorers"}
    assert "(not trained on)" not in model_card(config, [], bare)


def test_notes_are_written_cut_and_on_one_line_where_a_label_must_be(tmp_path):
    from rloo_demo.store import labels

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="n"))
    got = labels.write_notes(run, label="a\nb" + "L" * 100, note="x\ny" + "N" * 3000)
    assert got == {"label": ("a b" + "L" * 100)[:80], "note": ("x\ny" + "N" * 3000)[:2000]}
    stored = (run.path / labels.NOTES_FILE).read_text()
    assert stored.startswith('{\n  "label": "a bLLL') and stored.endswith("\n}\n")  # indented by two


def test_rollouts_are_written_without_blanks_after_separators(tmp_path):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="c"))
    group = {"step": 1, "group": 0, "completions": [{"text": "a, b: c", "token_logp": [-1.5, -0.25]}]}
    run.append_rollouts(1, [group])
    assert (run.path / "rollouts.jsonl").read_text() == json.dumps(group, separators=(",", ":")) + "\n"


# ----------------------------------------------------------------------------- runs


def make_run(tmp_path, name="r", **status):
    run = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name=name))
    if status:
        run.set_status(**status)
    return run


# ----------------------------------------------------------------------------- writing


def test_create_never_overwrites_an_existing_run(tmp_path):
    first = make_run(tmp_path, "same", status="finished")
    first.append_metrics({"step": 1, "reward": 0.5})
    second = RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="same", max_steps=9))
    assert second.name == "same-2"
    assert first.status()["status"] == "finished" and first.metrics() == [{"step": 1, "reward": 0.5}]
    assert first.config().max_steps == RunConfig().max_steps and second.config().max_steps == 9


def test_create_is_all_or_nothing_on_a_full_disk(tmp_path, monkeypatch):
    def full(self, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RunConfig, "to_text", full)  # config.yaml is the first file written
    with pytest.raises(DiskFull, match="disk is full"):
        RunFolder.create(RunConfig(output_dir=str(tmp_path), run_name="x"))
    assert list(tmp_path.iterdir()) == []  # no half-made folder, no hidden leftovers


def test_status_survives_a_crash_between_write_and_rename(tmp_path, monkeypatch):
    run = make_run(tmp_path, status="running", step=3)

    def crash(src, dst):
        raise OSError("killed between the write and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        run.set_status("finished", step=10)
    monkeypatch.undo()
    st = run.status()
    assert st["status"] == "running" and st["step"] == 3  # the old status, whole


def test_model_appears_only_when_complete(tmp_path):
    from rloo_demo.models.policy import load_policy

    run = make_run(tmp_path)
    model, tok = load_policy("embedded:tiny-imdb-gpt2")

    class BrokenTokenizer:
        def save_pretrained(self, folder):
            raise OSError("disk went away while saving the tokenizer")

    with pytest.raises(OSError):
        run.save_model(model, BrokenTokenizer())
    assert run.model_dir is None and not (run.path / "model").exists()  # the weights alone do not make a model
    assert (run.path / ".model.tmp" / "config.json").is_file()  # they were written, to the temporary folder
    final = run.save_model(model, tok)
    assert final == run.model_dir and not (run.path / ".model.tmp").exists()
    # a second save replaces the model whole; a failure leaves the first one in place
    with pytest.raises(OSError):
        run.save_model(model, BrokenTokenizer())
    assert (run.model_dir / "tokenizer.json").is_file()


# ----------------------------------------------------------------------------- reading


def test_jsonl_reader_skips_and_counts_bad_lines_and_waits_for_a_torn_one(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\nnot json\n\xff\xfe\n[1, 2]\n{"step": 2}\n{"step": 3')
    records, skipped, end = read_jsonl_counted(path)
    assert records == [{"step": 1}, {"step": 2}]  # lines after a bad one are still read
    assert skipped == 3  # not JSON, not UTF-8, not an object; the torn last line is not counted
    assert end == len(b'{"step": 1}\nnot json\n\xff\xfe\n[1, 2]\n{"step": 2}\n')
    assert read_jsonl(path) == records
    with open(path, "ab") as f:
        f.write(b"}\n")
    assert read_jsonl_counted(path, end)[0] == [{"step": 3}]  # completed later, read from where we left off


@pytest.mark.parametrize(
    ("filename", "content", "reason"),
    [
        ("status.json", b"{not json", "status.json is corrupt"),
        ("status.json", b'{"status": "exploded"}', "no valid status"),
        ("status.json", b"\xff\xfe{}", "status.json is corrupt"),
        ("config.yaml", b"\xff\xfe\x00\x01", "config.yaml"),
        ("config.yaml", b"num_generations: 4\nsetting_from_a_newer_version: 1\n", "unknown setting"),
        ("config.yaml", b"max_steps: [1,\n", "not valid YAML"),
    ],
    ids=["bad-json", "bad-status", "not-utf8-status", "not-utf8-config", "unknown-setting", "bad-yaml"],  # plain
    # ids: one with a backslash (the bytes' repr) is not found again when mutmut reselects the test
)
def test_an_unreadable_run_is_listed_as_such_and_breaks_nothing(tmp_path, filename, content, reason):
    good = make_run(tmp_path, "good", status="finished")
    bad = make_run(tmp_path, "bad", status="finished")
    (bad.path / filename).write_bytes(content)
    runs = list_runs(tmp_path)
    assert {r.name for r in runs} == {"good", "bad"}
    summaries = {r.name: r.summary() for r in runs}
    assert summaries["good"]["status"] == "finished"
    assert summaries["bad"]["status"].startswith("unreadable: ") and reason in summaries["bad"]["status"]
    assert bad.unreadable() and good.unreadable() is None


def test_summary_counts_skipped_metric_lines(tmp_path):
    run = make_run(tmp_path, status="finished")
    with open(run.path / "metrics.jsonl", "wb") as f:
        f.write(b'{"step": 1, "reward": 0.1}\n{oops\n{"step": 2, "reward": 0.3, "kl": 0.02}\n')
    s = run.summary()
    assert (s["steps"], s["reward_first"], s["reward_last"], s["kl_last"], s["skipped_lines"]) == (2, 0.1, 0.3, 0.02, 1)


def test_hidden_folders_are_not_runs(tmp_path):
    make_run(tmp_path, "r")
    (tmp_path / ".creating-abc").mkdir()
    (tmp_path / ".creating-abc" / "config.yaml").write_text("max_steps: 1\n")
    assert [r.name for r in list_runs(tmp_path)] == ["r"]


# ----------------------------------------------------------------------------- the rollout index


def groups(step, n=2):
    return [{"step": step, "group": g, "prompt": f"p{step}-{g}", "completions": []} for g in range(n)]


def test_rollout_index_reads_one_step_without_parsing_the_rest(tmp_path, monkeypatch):
    run = make_run(tmp_path)
    for step in range(1, 201):
        run.append_rollouts(step, groups(step))
    index = RolloutIndex(run.path / "rollouts.jsonl")
    assert index.steps() == list(range(1, 201))
    parsed = []
    real = json.loads
    monkeypatch.setattr(runs_module.json, "loads", lambda s, *a, **k: parsed.append(1) or real(s, *a, **k))
    assert [g["prompt"] for g in index.read(117)] == ["p117-0", "p117-1"]
    assert len(parsed) == 2  # the two lines of step 117, not 400
    monkeypatch.undo()
    run.append_rollouts(201, groups(201, 3))
    assert index.steps()[-1] == 201 and len(index.read(201)) == 3  # extended incrementally
    assert index.read(999) == []


def test_rollout_index_handles_torn_corrupt_and_replaced_files(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"step": 1, "group": 0}\n{"step": 2, "gro')
    index = RolloutIndex(path)
    assert index.steps() == [1]  # the torn line waits
    with open(path, "ab") as f:
        f.write(b'up": 0}\n{"step": 3, broken\n')
    assert index.steps() == [1, 2] and index.skipped == 1
    path.write_bytes(b'{"step": 7, "group": 0}\n')  # replaced by a shorter file: the index starts over
    assert index.steps() == [7] and index.read(7) == [{"step": 7, "group": 0}]


# ----------------------------------------------------------------------------- who trains a run


def test_process_identity_tells_a_restarted_pid_from_the_live_one(tmp_path):
    me = process_identity()
    assert me["pid"] == os.getpid() and is_alive(me)
    assert me["pid_created"] is not None and me["boot_time"] is not None
    # the same pid, started at another time: a container's PID 1 after a restart
    assert not is_alive(me | {"pid_created": me["pid_created"] + 1})
    assert not is_alive(me | {"pid_created": me["pid_created"] - 0.05})
    assert not is_alive(me | {"boot_time": me["boot_time"] - 3600})  # another boot
    assert is_alive(me | {"pid_created": me["pid_created"] + 0.005})  # within the clock's resolution
    assert not is_alive({"pid": 2**22 + 12345})
    assert not is_alive({"pid": None}) and not is_alive({})


def test_mark_interrupted_after_a_restart_with_the_same_pid(tmp_path):
    me = process_identity()
    alive = make_run(tmp_path, "alive", status="running", **me)
    reborn = make_run(tmp_path, "reborn", status="running", **(me | {"pid_created": me["pid_created"] - 1}))
    done = make_run(tmp_path, "done", status="finished")
    assert mark_interrupted(tmp_path) == ["reborn"]
    assert alive.status()["status"] == "running" and done.status()["status"] == "finished"
    st = reborn.status()
    assert st["status"] == "failed" and "interrupted" in st["error"]


# ----------------------------------------------------------------------------- retention


def test_prune_keeps_the_newest_and_never_a_running_run(tmp_path):
    me = process_identity()
    names = []
    for i in range(6):
        run = make_run(tmp_path, f"r{i}", status="finished", created=1000.0 + i)
        names.append(run.name)
    oldest_running = make_run(tmp_path, "old-live", status="running", created=1.0, **me)
    deleted = prune_runs(tmp_path, keep=3, max_mb=None)
    assert sorted(deleted) == ["r0", "r1", "r2", "r3"]  # 7 runs, keep 3: the running one counts but stays
    assert sorted(r.name for r in list_runs(tmp_path)) == ["old-live", "r4", "r5"]
    assert oldest_running.path.is_dir()
    assert prune_runs(tmp_path, keep=None, max_mb=None) == []


def test_prune_by_size_and_protected_names(tmp_path):
    for i in range(3):
        run = make_run(tmp_path, f"r{i}", status="finished", created=1000.0 + i)
        (run.path / "blob").write_bytes(b"x" * 400_000)
    assert prune_runs(tmp_path, keep=None, max_mb=1.0, protect={"r0"}) == ["r1"]  # r0 is protected
    assert sorted(r.name for r in list_runs(tmp_path)) == ["r0", "r2"]


def test_the_rollout_index_by_hand(tmp_path):
    """Which lines the index finds, by a count the test makes itself: "step" must be among a line's first 64 bytes
    and an int; other lines are skipped (and counted); an empty line is no record; a replaced file is read anew."""
    import os

    path = tmp_path / "rollouts.jsonl"
    late = b'{"pad": "' + b"x" * 44 + b'", "step": 4}'  # its step's digit is byte 64: not among the first 64
    assert late.index(b"4") == 64
    lines = [
        b"",
        b'{"step": 1, "g": 0}',
        b'[{"step": 2}]',  # a list, not a group
        b'{"step": 1, "step": "x"}',  # JSON keeps the last: a text
        b'{"step": 3, "g": 1}',
        late,
        b'{"step": 1, "g": 2}',
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    index = RolloutIndex(path)
    assert index.steps() == [1, 3]
    assert [g["g"] for g in index.read(1)] == [0, 2] and index.read(3) == [{"step": 3, "g": 1}]
    assert index.skipped == 3 and index.read(4) == []
    fresh = tmp_path / "new.jsonl"  # the file replaced by a longer one (another inode)
    fresh.write_bytes(b'{"step": 7, "g": 9}\n' * 2 + b"\n".join(lines) + b"\n")
    os.replace(fresh, path)
    assert index.steps() == [1, 3, 7] and index.read(7) == [{"step": 7, "g": 9}] * 2
    gone = RolloutIndex(tmp_path / "missing.jsonl")
    assert gone.steps() == [] and gone.read(1) == [] and gone.skipped == 0


def test_an_export_is_its_runs_files_made_again_when_one_of_them_changed(tmp_path):
    from rloo_demo.store.export import export_run

    run = RunFolder.create(RunConfig(output_dir=str(tmp_path / "runs"), run_name="ex"))
    run.set_status("finished")
    exports = tmp_path / "deep" / "exports"  # not there yet: made with its parents
    first = export_run(run, exports)
    assert [p.name for p in first] == ["ex-config.yaml", "ex-metrics.csv"]
    assert first[1].read_bytes() == b"step\r\n"  # no records: a header alone
    assert export_run(run, exports) == first  # nothing changed: the same export

    def touch(name, ns):  # a file's change as its time stamp says it
        path = run.path / name
        if not path.exists():
            path.write_text('{"step": 1}\n')
        os.utime(path, ns=(ns, ns))

    seen = {first[0].parent}
    for name, ns in (("metrics.jsonl", 10**18), ("status.json", 2 * 10**18), ("rollouts.jsonl", 3 * 10**18)):
        if name == "metrics.jsonl":
            run.append_metrics({"step": 1, "reward": 0.5, "b": 2})
            run.append_metrics({"step": 2, "reward": 0.25})
        touch(name, ns)
        folder = export_run(run, exports)[0].parent
        assert folder not in seen, f"a change of {name} made no new export"
        seen.add(folder)
    files = {p.name: p for p in export_run(run, exports)}
    assert files["ex-metrics.csv"].read_bytes() == b"step,b,reward\r\n1,2,0.5\r\n2,,0.25\r\n"  # step first, then a-z
    assert files["ex-rollouts.jsonl"].read_text() == '{"step": 1}\n'


def test_prune_by_size_stops_once_the_rest_fit_exactly(tmp_path):
    def megabyte_runs(root, extra=0):
        root.mkdir()
        for i in range(4):
            run = RunFolder.create(RunConfig(output_dir=str(root), run_name=f"s{i}"))
            run.set_status("finished")
            pad = 1_000_000 - sum(f.stat().st_size for f in run.path.rglob("*") if f.is_file())
            (run.path / "weights.bin").write_bytes(b"0" * (pad + (extra if i == 3 else 0)))  # each 1 MB
        return root

    assert prune_runs(megabyte_runs(tmp_path / "a"), keep=None, max_mb=3.0) == ["s0"]  # 3 MB left: fits exactly
    assert prune_runs(megabyte_runs(tmp_path / "b"), keep=None, max_mb=2.0) == ["s0", "s1"]
    assert prune_runs(megabyte_runs(tmp_path / "c", extra=1), keep=None, max_mb=3.0) == ["s0", "s1"]  # a byte over
