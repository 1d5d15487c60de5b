"""What a caller is told when something fails (public/redaction.py), word for word: a config's problems as a
list, a user error escaped, a bug named as a bug with its traceback only in the log, and server paths replaced
in public mode (the runs folder by its name and by its resolved path, any other absolute path), never locally."""

import logging

from rloo_demo.errors import ConfigError, UserError
from rloo_demo.public.redaction import Redactor, inert


def test_error_texts_for_each_kind_of_failure(caplog):
    local = Redactor(public=False, runs_dir="/srv/runs")
    problems = ConfigError({"beta": "must be >= 0, not -1 <b>", "k": "too <i>big</i>"})
    assert local.error_text(problems) == (
        "- **beta**: must be &gt;= 0, not -1 &lt;b&gt;\n- **k**: too &lt;i&gt;big&lt;/i&gt;"
    )
    assert local.error_text(UserError("no run 'x<y'")) == "no run 'x&lt;y'"
    with caplog.at_level(logging.ERROR, logger="rloo_demo.public.redaction"):
        text = local.error_text(KeyError("secret /srv/runs/a"))
    assert text == "internal error (KeyError); this is a bug in rloo-demo, not in your input"
    assert caplog.records[-1].message == "internal error" and caplog.records[-1].exc_info[0] is KeyError
    assert inert('a <b> & "c"') == 'a &lt;b&gt; &amp; "c"'  # quotes kept: Markdown shows them as they are


def test_public_mode_replaces_server_paths_and_local_mode_keeps_them(tmp_path):
    real = tmp_path / "real-runs"
    real.mkdir()
    link = tmp_path / "runs-link"
    link.symlink_to(real)
    public = Redactor(public=True, runs_dir=str(link))
    message = f"cannot read {link}/a/config.yaml, {real}/b and /etc/passwd (see http://example.org/x/y)"
    assert (
        public.redact(message) == "cannot read <runs>/a/config.yaml, <runs>/b and <path> (see http://example.org/x/y)"
    )
    assert public.error_text(UserError(f"no file {real}/c")) == "no file <runs>/c"
    assert public.redact("") == "" and public.redact(None) is None
    local = Redactor(public=False, runs_dir=str(link))
    assert local.redact(message) == message


def test_a_relative_runs_folder_is_redacted_by_its_resolved_path_first(tmp_path, monkeypatch):
    from rloo_demo.public.redaction import Redactor

    monkeypatch.chdir(tmp_path)
    redactor = Redactor(True, "runs")
    message = f"cannot read {tmp_path.resolve()}/runs/a/config.yaml (see runs/b)"
    assert redactor.redact(message) == "cannot read <runs>/a/config.yaml (see <runs>/b)"


def test_a_relative_runs_folders_name_is_a_path_only_where_a_path_starts_with_it(tmp_path, monkeypatch):
    from rloo_demo.public.redaction import Redactor

    monkeypatch.chdir(tmp_path)
    redactor = Redactor(True, "runs")
    assert redactor.redact("this server keeps 30 runs; see runs/a or ./runs/b, not myruns/c") == (
        "this server keeps 30 runs; see <runs>/a or ./<runs>/b, not myruns/c"
    )
    longer = Redactor(True, str(tmp_path / "runs"))
    assert longer.redact(f"{tmp_path}/runs-old/x and {tmp_path}/runs/x") == "<path> and <runs>/x"  # not a prefix


def test_the_runs_folder_itself_and_a_configured_trailing_slash_are_redacted(tmp_path, monkeypatch):
    from rloo_demo.public.redaction import Redactor

    monkeypatch.chdir(tmp_path)
    absolute = Redactor(True, str(tmp_path / "runs"))
    assert absolute.redact(f"cannot write {tmp_path}/runs") == "cannot write <runs>"
    slash = Redactor(True, "runs/")
    assert slash.redact("see runs/a") == "see <runs>/a"
