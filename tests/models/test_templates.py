"""Chat prompts for instruct models: TRL's conversational format, the chat template applied by TRL, and the user turn
and reply (never the template's markers) in rollouts, Compare, ``evaluate`` and ``infer``. The policy is a tiny
Llama with random weights whose tokenizer has a chat template (``tests/chatmodel.py``), trained for 2 steps through
the CLI and through the app. ``python -m pytest tests/models/test_templates.py`` (about two minutes).
"""

import json

import pytest
from apputil import running_app, wait_until
from chatmodel import CHAT_TEMPLATE, MARKERS, build_chat_model

from rloo_demo.chat import prompt_text, to_messages
from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.errors import ConfigError, DataError
from rloo_demo.models.hub import resolve_model
from rloo_demo.models.templates import chat_template_of, check_template, effective_template
from rloo_demo.store.folder import RunFolder
from rloo_demo.task.data import as_run_prompt, prompt_dataset

SYSTEM = "You are a film critic."


@pytest.fixture(scope="module")
def chat_policy(tmp_path_factory):
    return str(build_chat_model(tmp_path_factory.mktemp("tiny-chat-llama")))


def tiny(policy, output_dir, **kw) -> RunConfig:
    return RunConfig(
        policy=policy,
        max_steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_new_tokens=6,
        output_dir=str(output_dir),
        **kw,
    )


def has_marker(text) -> bool:
    return any(m in str(text) for m in MARKERS)


# ----------------------------------------------------------------------------- pure helpers


def test_messages_and_readable_text():
    assert to_messages("Hi") == [{"role": "user", "content": "Hi"}]
    with_system = to_messages("Hi", SYSTEM)
    assert with_system == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]
    assert to_messages(with_system, "another") == with_system  # a conversation's own system message wins
    assert prompt_text(with_system) == "Hi" and prompt_text("plain") == "plain"
    turns = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    assert prompt_text(turns) == "user: a\nassistant: b\nuser: c"


def test_auto_template_follows_the_policy_tokenizer(chat_policy):
    assert chat_template_of(resolve_model("embedded:tiny-imdb-gpt2")) is None
    assert chat_template_of(chat_policy) == CHAT_TEMPLATE
    assert RunConfig().prompt_template == "auto"
    assert effective_template(RunConfig()) == "continuation"  # the embedded default run is unchanged
    assert effective_template(RunConfig(policy=chat_policy)) == "chat"
    assert effective_template(RunConfig(policy=chat_policy, prompt_template="instruction")) == "instruction"
    assert as_run_prompt(RunConfig(policy=chat_policy, system_prompt=SYSTEM), "Hi") == to_messages("Hi", SYSTEM)
    assert as_run_prompt(RunConfig(), "This movie was") == "This movie was"


def test_templates_the_policy_cannot_take_are_refused(chat_policy):
    with pytest.raises(ConfigError, match="need a tokenizer with a chat template"):
        check_template(RunConfig(prompt_template="chat"))
    with pytest.raises(ConfigError, match="only chat prompts have a system message"):
        check_template(RunConfig(system_prompt=SYSTEM))  # auto resolves to continuation for the embedded policy
    assert "system_prompt" in RunConfig(system_prompt=SYSTEM, prompt_template="instruction").problems()
    assert check_template(RunConfig(policy=chat_policy, system_prompt=SYSTEM)) == "chat"
    assert "prompt_template" in RunConfig(prompt_template="bogus").problems()


def test_chat_prompts_from_the_embedded_reviews():
    prompts = prompt_dataset(template="chat", limit=3, system_prompt=SYSTEM)["prompt"]
    assert all(p[0] == {"role": "system", "content": SYSTEM} and p[1]["role"] == "user" for p in prompts)
    assert all(p[1]["content"].startswith("Write one short, clearly positive movie comment") for p in prompts)
    held = prompt_dataset(part="heldout", template="chat", limit=50)["prompt"]
    train = prompt_dataset(template="chat", limit=2000)["prompt"]
    assert not {json.dumps(p) for p in held} & {json.dumps(p) for p in train}


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_a_prompt_column_of_texts_or_messages(tmp_path):
    texts = write_jsonl(tmp_path / "texts.jsonl", [{"prompt": f"Describe film number {i}."} for i in range(60)])
    plain = prompt_dataset(texts, template="continuation")["prompt"]  # used as given, not cut to 8 words
    assert plain and all(p.startswith("Describe film number") for p in plain)
    chat = prompt_dataset(texts, template="chat", system_prompt=SYSTEM)["prompt"]
    assert chat[0] == to_messages(plain[0], SYSTEM)
    held = prompt_dataset(texts, part="heldout", template="continuation")["prompt"]
    assert len(plain) + len(held) == 60 and not set(plain) & set(held)

    conversations = [
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Rate film {i}."}] for i in range(40)
    ]
    messages = write_jsonl(tmp_path / "messages.jsonl", [{"prompt": c} for c in conversations])
    got = prompt_dataset(messages, template="chat", system_prompt=SYSTEM)["prompt"]
    assert got and all(p in conversations for p in got)  # their own system message is kept
    with pytest.raises(DataError, match="need the chat template"):
        prompt_dataset(messages, template="continuation")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": [{"role": "robot", "content": "x"}]}])
    with pytest.raises(DataError, match="row 1 .* a prompt must be a text or a list of messages"):
        prompt_dataset(bad, template="chat")
    # a text column is still raw material for the template, even next to a prompt column
    both = write_jsonl(tmp_path / "both.jsonl", [{"text": f"one two three four {i}", "prompt": "x"} for i in range(30)])
    assert all(p.startswith("one two") for p in prompt_dataset(both, num_words=2)["prompt"])


# ----------------------------------------------------------------------------- TRL sees the template


def test_trl_tokenizes_through_the_chat_template(chat_policy, tmp_path):
    from rloo_demo.engine.training import RunState, build_trainer

    config = tiny(chat_policy, tmp_path, system_prompt=SYSTEM).validate()
    trainer = build_trainer(config, RunState(config))
    example = trainer.train_dataset[0]["prompt"]
    assert example[0]["role"] == "system" and example[1]["role"] == "user"  # conversational: TRL applies the template
    ids, _, _ = trainer._tokenize_prompts([example])
    seen = trainer.processing_class.decode(ids[0])
    assert seen.startswith(f"<|system|>{SYSTEM}<|end|>\n<|user|>Write one short")
    assert seen.endswith("<|assistant|>")


def test_our_sampler_uses_the_chat_template_too(chat_policy):
    """Compare, evaluate and infer sample with rloo_demo.models.sampling: a chat prompt goes through the template
    there as well (the same ids as the rendered template), and the text that comes back is the reply alone."""
    import torch

    from rloo_demo.models.policy import load_policy
    from rloo_demo.models.sampling import sample, sequence_logprob
    from rloo_demo.models.templates import encode_prompt

    model, tokenizer = load_policy(chat_policy)
    with torch.no_grad():  # random weights give near-uniform logits whatever the context: sharpen them (tied head)
        model.get_input_embeddings().weight.mul_(50)
    chat = to_messages("Hi", SYSTEM)
    rendered = f"<|system|>{SYSTEM}<|end|>\n<|user|>Hi<|end|>\n<|assistant|>"
    assert tokenizer.decode(encode_prompt(tokenizer, chat)) == rendered
    assert encode_prompt(tokenizer, chat) == encode_prompt(tokenizer, rendered)
    got = sample(model, tokenizer, chat, num_samples=2, max_new_tokens=5, seed=1)
    assert got == sample(model, tokenizer, rendered, num_samples=2, max_new_tokens=5, seed=1)
    assert [s["token_ids"] for s in got] != [s["token_ids"] for s in sample(model, tokenizer, "Hi", 2, 5, seed=1)]
    ids = got[0]["token_ids"]
    logp = sequence_logprob(model, tokenizer, chat, ids)
    assert logp == pytest.approx(sequence_logprob(model, tokenizer, rendered, ids))
    assert logp != pytest.approx(sequence_logprob(model, tokenizer, "Hi", ids))


def test_the_probe_samples_a_chat_run_through_its_template(chat_policy, tmp_path, monkeypatch):
    """The probe (Rollouts, history of a prompt) asks the policy as Compare does and as training did: the typed text
    as the user turn of the chat template, after the run's system prompt; its rewards score the typed text."""
    from rloo_demo.engine import snapshots
    from rloo_demo.models.policy import load_policy
    from rloo_demo.models.sampling import sample
    from rloo_demo.models.templates import encode_prompt
    from rloo_demo.public.gates import Caller
    from rloo_demo.public.limits import LOCAL
    from rloo_demo.server import inference
    from rloo_demo.server.runner import Runner
    from rloo_demo.ui.controller import Controller

    config = tiny(chat_policy, tmp_path, system_prompt=SYSTEM, snapshot_every=1)
    run = RunFolder.create(config)  # a finished chat run, no snapshot kept: the probe's one column is the base policy
    run.set_status("finished")
    asked = []
    scored = []

    def recording_sample(model, tok, prompt, *args):
        asked.append(encode_prompt(tok, prompt))
        return sample(model, tok, prompt, *args)

    class RecordingScorer(inference.Scorer):
        def __call__(self, prompts, texts):
            scored.append(list(prompts))
            return super().__call__(prompts, texts)

    monkeypatch.setattr(snapshots, "sample", recording_sample)
    monkeypatch.setattr(inference, "Scorer", RecordingScorer)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        out = controller.probe(run.name, "Tell me about a film.", 2, 3, Caller("me", "10.0.0.1"))
    finally:
        controller.close()
    model, tokenizer = load_policy(chat_policy)
    expected = encode_prompt(tokenizer, as_run_prompt(config, "Tell me about a film."))
    rendered = f"<|system|>{SYSTEM}<|end|>\n<|user|>Tell me about a film.<|end|>\n<|assistant|>"
    assert tokenizer.decode(expected) == rendered
    assert asked == [expected]  # one column (the base policy), sampled from the templated prompt
    assert [s["step"] for s in out["steps"]] == [0]
    want = sample(model, tokenizer, as_run_prompt(config, "Tell me about a film."), 2, 6, 1.0, 1.0, 3)
    assert [s["text"] for s in out["steps"][0]["samples"]] == [w["text"] for w in want]
    assert scored == [["Tell me about a film."] * 2]  # the rewards read the typed text, as Compare's do
    assert out["prompt"] == "Tell me about a film." and not has_marker(json.dumps(out))


# ----------------------------------------------------------------------------- 2 steps through the CLI


def test_two_steps_through_the_cli(chat_policy, tmp_path, capsys):
    data = write_jsonl(tmp_path / "p.jsonl", [{"prompt": f"Say something kind about film {i}."} for i in range(40)])
    argv = ["train", "--policy", chat_policy, "--max-steps", "2", "--prompts-per-step", "2", "--num-generations", "2"]
    argv += ["--max-new-tokens", "6", "--output-dir", str(tmp_path / "runs"), "--run-name", "chat-cli"]
    argv += ["--data-source", data, "--system-prompt", SYSTEM, "--rewards", "length_penalty", "keyword:kind"]
    assert cli_main(argv) == 0, capsys.readouterr().err
    run = RunFolder(tmp_path / "runs" / "chat-cli")
    assert run.status()["status"] == "finished"
    assert run.config().prompt_template == "auto"
    groups = run.rollouts()
    assert len(groups) == 4  # 2 steps x 2 prompts
    for g in groups:
        assert g["prompt"].startswith("Say something kind about film") and not has_marker(g["prompt"])
        assert all(isinstance(c["text"], str) and not has_marker(c["text"]) for c in g["completions"])
    assert "rewards/keyword_kind/mean" in run.metrics()[-1]
    capsys.readouterr()

    assert cli_main(["infer", "--run", str(run.path), "--prompt", "Hello there", "--max-new-tokens", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "user: Hello there" and out[1].startswith("assistant: ")
    assert not has_marker("\n".join(out))

    assert cli_main(["evaluate", "--run", str(run.path), "--num-prompts", "2", "--samples-per-prompt", "1"]) == 0
    report = capsys.readouterr().out
    prompts = [line for line in report.splitlines() if line.strip().startswith("prompt :")]
    assert prompts and all("Say something kind about film" in line for line in prompts)
    assert not has_marker(report)


# ----------------------------------------------------------------------------- 2 steps through the app


def test_two_steps_through_the_app(chat_policy, tmp_path):
    from gradio_client import Client

    from rloo_demo.public.limits import LOCAL

    with running_app(tmp_path / "runs", limits=LOCAL) as (url, controller):
        client = Client(url, verbose=False)
        settings = {
            "policy": chat_policy,
            "system_prompt": SYSTEM,
            "max_steps": 2,
            "prompts_per_step": 2,
            "num_generations": 2,
            "max_new_tokens": 6,
        }
        started = client.predict(json.dumps(settings), "me", api_name="/start_run")
        assert "run" in started, started
        run = started["run"]
        wait_until(lambda: client.predict(run, 0, api_name="/poll_metrics")["status"] != "running", timeout=300)
        assert client.predict(run, 0, api_name="/poll_metrics")["status"] == "finished"
        groups = client.predict(run, 0, api_name="/get_rollouts")["groups"]
        assert groups and all(g["prompt"].startswith("Write one short, clearly positive movie") for g in groups)
        assert not has_marker(json.dumps(groups))
        choices = controller.heldout_choices(run, limit=3)
        assert choices and all(isinstance(c, str) and not has_marker(c) for c in choices)
        both = client.predict(run, "Tell me about a film.", 2, 0, api_name="/compare")
        assert both["prompt"] == "Tell me about a film." and len(both["trained"]) == 2
        assert not has_marker(json.dumps(both))
