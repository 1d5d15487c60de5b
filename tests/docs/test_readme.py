"""README.md and the docs pages match the code: the API example (docs/reference.md) runs verbatim against a live app,
its config reference lists every RunConfig field, and the public limits table (docs/operating.md) has the code's
values. ``python -m pytest tests/docs/test_readme.py``"""

import os
import re
import subprocess
import sys
from dataclasses import fields

from apputil import running_app
from conftest import ROOT

from rloo_demo.config import RunConfig

README = (ROOT / "README.md").read_text()


def doc(name: str) -> str:
    """A page under docs/, where the README's sections by reader now live."""
    return (ROOT / "docs" / name).read_text()


def code_block_after(page: str, heading: str, lang: str) -> str:
    section = page.split(heading, 1)[1]
    return re.search(rf"```{lang}\n(.*?)```", section, re.S).group(1)


def test_api_example_runs_verbatim(space_runs_dir):
    """Against the app as the image runs it: public mode, runs outside the working folder and /tmp."""
    from rloo_demo.public.limits import PUBLIC

    code = code_block_after(doc("reference.md"), "## API (gradio_client)", "python")
    with running_app(space_runs_dir, limits=PUBLIC) as (url, _):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, RLOO_DEMO_URL=url),
        )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line for line in out.stdout.splitlines() if not line.startswith("Loaded as API")]
    assert re.match(r".+: finished after 20 steps, reward [+-]\d\.\d{3} -> [+-]\d\.\d{3}$", lines[0])
    assert sum(line.startswith("reward ") for line in lines) == 4  # K completions of one group
    assert lines[-2].startswith("base:") and lines[-1].startswith("trained:")


def test_config_reference_lists_every_setting():
    table = doc("reference.md").split("### Config reference", 1)[1].split("###", 1)[0]
    for f in fields(RunConfig):
        assert f"`{f.name}`" in table, f"docs/reference.md's config reference lacks {f.name}"


def test_two_commands_exist():
    assert "bash scripts/serve.sh" in README and "bash scripts/test.sh" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci


def test_public_limits_table_matches_the_code():
    """Every limit's variable is in the table of docs/operating.md, with the public and local values the code has."""
    from rloo_demo.public.limits import ENV_NAMES, LOCAL, PUBLIC

    operating = doc("operating.md")
    table = operating.split("## Running a public Space", 1)[1].split("\n\n| limit |", 1)[1].split("\n\n", 1)[0]
    cells = {}  # variable -> (public, local) as written
    for line in table.splitlines()[2:]:
        _, variables, public, local = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`(RLOO_\w+)`", variables)
        publics, locals_ = public.split(" / "), local.split(" / ")
        for i, var in enumerate(names):
            cells[var] = (publics[min(i, len(publics) - 1)], locals_[min(i, len(locals_) - 1)])
    assert len(cells) >= len(ENV_NAMES) > 10  # the table was found and read

    def written(value) -> str:
        if value is None or value == ():
            return "none"
        return f"{value:,}" if isinstance(value, int) else f"{value:g}"

    for field, var in ENV_NAMES.items():
        assert var in cells, f"docs/operating.md's limits table lacks {var}"
        if field in ("allowed_models", "allowed_datasets", "admin_token", "trusted_proxies"):
            continue
        for value, cell in zip((getattr(PUBLIC, field), getattr(LOCAL, field)), cells[var], strict=True):
            ok = cell == written(value) or (value is None and cell in ("none", "never", "all"))
            assert ok, f"docs/operating.md says {cell!r} for {var}, the code has {value!r}"
