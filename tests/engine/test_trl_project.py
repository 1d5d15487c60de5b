"""``python -m rloo_demo export-trl`` and the Runs tab's zip (engine/trl_project.py): the files it writes, the
command it prints, its refusals as one ``error:`` line with status 2, and the zip's layout.

``python -m pytest tests/engine/test_trl_project.py`` (a few seconds)."""

import zipfile

import yaml

from rloo_demo.cli import main as cli_main
from rloo_demo.config import RunConfig
from rloo_demo.engine.trl_project import ZIP_SUFFIX, zip_trl_project
from rloo_demo.store.folder import RunFolder


def _run(root, name="done", status="finished", **config) -> RunFolder:
    run = RunFolder.create(RunConfig(output_dir=str(root), run_name=name, max_steps=3, **config))
    run.set_status(status)
    return run


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_export_trl_writes_the_project_and_prints_its_command(tmp_path, capsys):
    run = _run(tmp_path / "runs", rewards=["vader_compound", "sentiment_classifier"])
    out = tmp_path / "project"
    assert cli_main(["export-trl", "--run", str(run.path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"cd {out} && trl rloo --config config.yaml" in printed
    files = _files(out)
    top = [f for f in files if not f.startswith("models/")]
    assert top == ["README.md", "config.yaml", "prompts.jsonl", "rewards.py"]
    assert {f.split("/")[1] for f in files if f.startswith("models/")} == {"tiny-imdb-gpt2", "tiny-imdb-sentiment"}
    assert "models/tiny-imdb-gpt2/model.safetensors" in files and "models/tiny-imdb-sentiment/config.json" in files
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["max_steps"] == 3 and config["model_name_or_path"] == "models/tiny-imdb-gpt2"
    readme = (out / "README.md").read_text()
    assert "trl rloo --config config.yaml" in readme and "vaderSentiment" in readme
    assert "`models/tiny-imdb-sentiment`" in readme


def test_export_trl_refuses_a_run_in_training_a_failed_one_and_no_run_in_one_line(tmp_path, capsys):
    training = _run(tmp_path / "runs", "live", "running")
    failed = _run(tmp_path / "runs", "broke", "failed")
    cases = {
        str(training.path): "error: run 'live' is still training: a TRL project is exported once it has finished",
        str(failed.path): "error: run 'broke' ended as failed: only a finished or stopped run is exported",
        str(tmp_path / "runs" / "nothing"): f"error: '{tmp_path / 'runs' / 'nothing'}' is not a run folder",
    }
    for path, said in cases.items():
        assert cli_main(["export-trl", "--run", path, "--out", str(tmp_path / "project")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(said) and err.count("\n") == 1, err
    assert not (tmp_path / "project").exists()


def test_the_zip_holds_the_project_under_one_folder_and_a_failed_run_has_none(tmp_path):
    run = _run(tmp_path / "runs", "zipped", "stopped")
    into = tmp_path / "exports"
    into.mkdir()
    zip_trl_project(run, into)
    assert [p.name for p in into.iterdir()] == [f"zipped{ZIP_SUFFIX}"]  # the work folder is gone
    with zipfile.ZipFile(into / f"zipped{ZIP_SUFFIX}") as z:
        names = z.namelist()
        assert {n.split("/")[0] for n in names} == {"zipped-trl"}
        assert "zipped-trl/config.yaml" in names and "zipped-trl/models/tiny-imdb-gpt2/config.json" in names
        assert yaml.safe_load(z.read("zipped-trl/config.yaml"))["run_name"] == "zipped"
    failed = _run(tmp_path / "runs", "broke", "failed")
    empty = tmp_path / "none"
    empty.mkdir()
    zip_trl_project(failed, empty)
    assert list(empty.iterdir()) == []
