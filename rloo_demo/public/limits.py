"""What a caller may ask of this server: public mode, the cap on every size, and the checks that apply them.

A public Hugging Face Space is open to anyone, through its page and through every named endpoint, with any values.
So every limit lives here, once, and is applied on the server by the controller that every UI event and endpoint
goes through; a slider's range is only a convenience. Pure: no gradio, no torch, no files.

Public mode is on when ``SPACE_ID`` is set (Spaces set it) or ``RLOO_PUBLIC=1`` (the Dockerfile sets it). It then:
- accepts only the embedded policy, rewards and data, plus hub ids an operator lists in ``RLOO_ALLOWED_MODELS`` /
  ``RLOO_ALLOWED_DATASETS``; no file path in any field, so no reward module (``module:<file.py>:<function>`` runs
  code); the built-in ``keyword:<word>`` and ``length_target:<n>`` rewards are allowed (both checked strictly);
- caps every size (``PUBLIC`` below; each cap has an environment variable);
- gives each run a compute budget, stops runs whose page is gone, rate-limits sampling and Start per client, and
  keeps the runs folder bounded.
A local server (``python app.py`` on your machine) keeps the same checks with the roomier ``LOCAL`` caps.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

from rloo_demo.config import MAX_SEED, TEMPERATURE_RANGE, RunConfig, _short_repr, text_problem
from rloo_demo.errors import ConfigError, InputError, TooLong
from rloo_demo.i18n import Message
from rloo_demo.models.hub import EMBEDDED_CLASSIFIER, EMBEDDED_POLICY
from rloo_demo.task.data import EMBEDDED_SOURCE as EMBEDDED_DATA
from rloo_demo.task.rewards import KEYWORD_PREFIX, LENGTH_TARGET_PREFIX, MODULE_PREFIX, REWARDS

PUBLIC_REWARDS = tuple(name for name, reward in REWARDS.items() if reward.public)  # the built-in rewards it offers
# Built-in rewards with a parameter that a public server offers too: config.problems has checked the parameter
PUBLIC_REWARD_PREFIXES = (KEYWORD_PREFIX, LENGTH_TARGET_PREFIX)


@dataclass(frozen=True)
class Limits:
    """Caps and policies of one server. ``None`` means "no limit" (local servers only)."""

    public: bool = False
    # --- a run
    max_steps: int = 100_000  # env RLOO_MAX_STEPS
    max_k: int = 64  # RLOO_MAX_K
    max_prompts_per_step: int = 256  # RLOO_MAX_PROMPTS_PER_STEP
    max_completions_per_step: int = 4096  # RLOO_MAX_COMPLETIONS_PER_STEP (prompts x K, or generation_batch_size)
    max_new_tokens: int = 1024  # RLOO_MAX_NEW_TOKENS
    max_prompt_words: int = 512  # RLOO_MAX_PROMPT_WORDS
    max_lora_r: int = 512  # RLOO_MAX_LORA_R
    max_lora_alpha: int = 1024  # RLOO_MAX_LORA_ALPHA
    min_snapshot_every: int = 1  # RLOO_MIN_SNAPSHOT_EVERY: steps between policy snapshots (each one a model save)
    max_run_seconds: float | None = None  # RLOO_MAX_RUN_SECONDS: compute budget; the run stops itself at a step
    abandon_seconds: float | None = None  # RLOO_ABANDON_SECONDS: stop a run whose starting page is gone this long
    min_variance_every: int = 1  # RLOO_MIN_VARIANCE_EVERY: fewest steps between two gradient-variance measurements
    # --- sampling (Compare, Evaluate)
    max_compare_samples: int = 32  # RLOO_MAX_COMPARE_SAMPLES
    max_compare_tokens: int = 256  # RLOO_MAX_COMPARE_TOKENS
    max_prompt_chars: int = 4000  # RLOO_MAX_PROMPT_CHARS
    max_eval_prompts: int = 512  # RLOO_MAX_EVAL_PROMPTS
    sampling_per_minute: int | None = None  # RLOO_SAMPLING_PER_MINUTE: Compare/Evaluate calls per client
    starts_per_minute: int | None = None  # RLOO_STARTS_PER_MINUTE: Start attempts per client
    sampling_share: float | None = None  # RLOO_SAMPLING_SHARE: most of the wall time sampling may use while training
    # --- storage and memory
    keep_runs: int | None = None  # RLOO_KEEP_RUNS: newest runs kept; older finished ones are pruned
    max_runs_mb: float | None = None  # RLOO_MAX_RUNS_MB: size of the runs folder beyond which old runs are pruned
    min_free_mb: float = 200  # RLOO_MIN_FREE_MB: a Start is refused when the disk has less free space
    model_cache: int = 6  # RLOO_MODEL_CACHE: models kept loaded for Compare/Evaluate (least recently used go)
    # --- a fair share for every visitor (a visitor: the connection's address, or a trusted proxy's forwarded one)
    compute_seconds_per_hour: float | None = None  # RLOO_COMPUTE_SECONDS_PER_HOUR: training time a visitor may use
    max_waiting: int = 50  # RLOO_MAX_WAITING: places in the line for the training slot (one a visitor)
    max_events_per_visitor: int | None = None  # RLOO_MAX_EVENTS_PER_VISITOR: events waiting or running, per kind
    # RLOO_EVENT_MS_PER_MINUTE: milliseconds of the server's time a visitor's events may cost a minute, every event
    # together (a page tick, a click, a poll: each costs what ui.api.EVENT_COSTS measured; public.gates.EventGate)
    event_ms_per_minute: float | None = None
    max_runs_per_visitor: int | None = None  # RLOO_MAX_RUNS_PER_VISITOR: a visitor's runs kept (its oldest go first)
    keep_seconds: float = 0  # RLOO_KEEP_SECONDS: a finished run is kept at least this long, whatever the counts
    session_seconds: float | None = None  # RLOO_SESSION_SECONDS: a browser session's state is dropped this long idle
    trusted_proxies: tuple[str, ...] = ()  # RLOO_TRUSTED_PROXIES: networks whose X-Forwarded-For is believed
    # --- who may use what
    allowed_models: tuple[str, ...] = ()  # RLOO_ALLOWED_MODELS: hub ids a public server accepts (comma-separated)
    allowed_datasets: tuple[str, ...] = ()  # RLOO_ALLOWED_DATASETS
    admin_token: str | None = field(default=None, repr=False)  # RLOO_ADMIN_TOKEN: may stop any run

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """The limits of this server, from the environment; a malformed variable is a clear startup error."""
        env = os.environ if env is None else env
        for old, now in RENAMED.items():
            if old in env:
                raise SystemExit(f"error: {old} is no longer read; set {now} instead (docs/operating.md)")
        public = bool(env.get("SPACE_ID")) or _truthy(env.get("RLOO_PUBLIC", ""))
        base = PUBLIC if public else LOCAL
        changes = {}
        for f in fields(cls):
            var = ENV_NAMES.get(f.name)
            if var is None or var not in env:
                continue
            raw = env[var].strip()
            if f.name in ("allowed_models", "allowed_datasets", "trusted_proxies"):
                changes[f.name] = tuple(x.strip() for x in raw.split(",") if x.strip())
            elif f.name == "admin_token":
                changes[f.name] = raw or None
            else:
                changes[f.name] = _env_number(var, raw, f.type)
        proxies = trusted_proxies_from_env(env)  # RLOO_TRUSTED_PROXIES, else a Space's own proxy, checked
        if proxies is not None:
            changes["trusted_proxies"] = proxies
        return replace(base, **changes)

    # ------------------------------------------------------------------ runs

    def config_problems(self, config: RunConfig) -> dict[str, str]:
        """What this server refuses in a (well-typed) config: sizes over the caps, and in public mode anything but
        the embedded or operator-allowed models, rewards and data. Fields with type problems are skipped."""
        p: dict[str, str] = {}
        skip = config.type_problems()

        def cap(name: str, value, limit) -> None:
            if name not in skip and limit is not None and value is not None and value > limit:
                # the value is named beside the limit: a too-large K is refused, never quietly made the largest
                p[name] = Message(f"limits.cap.{name}", limit=limit, value=value)

        cap("max_steps", config.max_steps, self.max_steps)
        cap("num_generations", config.num_generations, self.max_k)
        cap("prompts_per_step", config.prompts_per_step, self.max_prompts_per_step)
        if not ({"generation_batch_size", "prompts_per_step", "num_generations"} & set(skip)):
            cap("generation_batch_size", config.completions_per_step, self.max_completions_per_step)
        cap("max_new_tokens", config.max_new_tokens, self.max_new_tokens)
        cap("prompt_words", config.prompt_words, self.max_prompt_words)
        cap("lora_r", config.lora_r, self.max_lora_r)
        cap("lora_alpha", config.lora_alpha, self.max_lora_alpha)
        if "variance_every" not in skip and 0 < config.variance_every < self.min_variance_every:
            p["variance_every"] = Message("limits.variance_every", every=self.min_variance_every)
        every = config.snapshot_every
        if "snapshot_every" not in skip and 0 < every < self.min_snapshot_every:
            p["snapshot_every"] = Message("limits.snapshot_every", every=self.min_snapshot_every)
        if not self.public:
            return p
        if "policy" not in skip and config.policy.strip() not in (EMBEDDED_POLICY, *self.allowed_models):
            p["policy"] = Message("limits.policy", allowed=self._allowed(EMBEDDED_POLICY, self.allowed_models))
        if "data_source" not in skip and config.data_source.strip() not in (EMBEDDED_DATA, *self.allowed_datasets):
            p["data_source"] = Message("limits.data", allowed=self._allowed(EMBEDDED_DATA, self.allowed_datasets))
        if "rewards" not in skip:
            classifiers = (EMBEDDED_CLASSIFIER, *self.allowed_models)
            for name in config.rewards:
                if name.startswith(MODULE_PREFIX):
                    p["rewards"] = Message(
                        "limits.reward_module",
                        choices=", ".join((*PUBLIC_REWARDS, "keyword:<word>", "length_target:<n>")),
                    )
                    break
                allowed = (
                    name in PUBLIC_REWARDS
                    or name.startswith(PUBLIC_REWARD_PREFIXES)
                    or (name.startswith("classifier:") and name.removeprefix("classifier:") in classifiers)
                )
                if not allowed:
                    choices = ", ".join((*PUBLIC_REWARDS, "keyword:<word>", "length_target:<n>"))
                    if self.allowed_models:
                        choices += f" or classifier:<{' | '.join(self.allowed_models)}>"
                    p["rewards"] = Message("limits.reward", name=_short_repr(name), choices=choices)
                    break
        if "report_to" not in skip and config.report_to.strip() not in ("", "none"):
            p["report_to"] = Message("limits.trackers")
        if "use_vllm" not in skip and config.use_vllm:
            p["use_vllm"] = Message("limits.vllm")
        if "system_prompt" not in skip and config.system_prompt and len(config.system_prompt) > self.max_prompt_chars:
            p["system_prompt"] = Message("limits.system_prompt", max=self.max_prompt_chars)
        if "text_column" not in skip and config.text_column != "text" and config.data_source == EMBEDDED_DATA:
            p["text_column"] = Message("limits.text_column")
        return p

    def check_config(self, config: RunConfig) -> None:
        problems = self.config_problems(config)
        if problems:
            raise ConfigError(problems)

    @staticmethod
    def _allowed(embedded: str, extra: tuple[str, ...]) -> str:
        return " or ".join(repr(x) for x in (embedded, *extra))

    # ------------------------------------------------------------------ sampling requests

    def sampling_request(self, num_samples, max_new_tokens, temperature, top_p, seed, prompt) -> dict:
        """Compare's arguments, checked and converted: raises ``InputError`` naming the first bad one."""
        prompt = as_text("prompt", prompt, self.max_prompt_chars)
        if not prompt.strip():
            raise InputError(Message("limits.no_prompt"))
        return {
            "prompt": prompt,
            "num_samples": as_int("number of samples", num_samples, 1, self.max_compare_samples),
            "max_new_tokens": as_int("max new tokens", max_new_tokens, 1, self.max_compare_tokens),
            "temperature": as_float("temperature", temperature, *TEMPERATURE_RANGE),
            "top_p": as_float("top-p", top_p, 0.01, 1.0),
            "seed": as_int("seed", seed, 0, MAX_SEED),
        }

    def probe_request(self, prompt, num_samples, seed) -> dict:
        """The probe's arguments (a prompt's history across snapshots), checked like Compare's."""
        prompt = as_text("prompt", prompt, self.max_prompt_chars)
        if not prompt.strip():
            raise InputError(Message("limits.no_probe_prompt"))
        return {
            "prompt": prompt,
            "num_samples": as_int("completions per step", num_samples, 1, self.max_compare_samples),
            "seed": as_int("seed", seed, 0, MAX_SEED),
        }

    def eval_request(self, num_prompts, seed) -> dict:
        return {
            "num_prompts": as_int("number of held-out prompts", num_prompts, 1, self.max_eval_prompts),
            "seed": as_int("seed", seed, 0, MAX_SEED),
        }

    def table(self) -> list[tuple[str, str, str]]:
        """(setting, environment variable, value) rows for docs/operating.md and the operator."""
        return [(f.name, ENV_NAMES.get(f.name, ""), str(getattr(self, f.name))) for f in fields(self) if f.repr]


# A local server: the same checks, roomy caps, no budget or rate limits.
LOCAL = Limits()

# A public Space on 2 shared CPU cores. The default run (150 steps, K=4 x 4 prompts, 24 tokens) takes about 40 s.
PUBLIC = Limits(
    public=True,
    max_steps=500,
    max_k=8,
    max_prompts_per_step=8,
    max_completions_per_step=64,
    max_new_tokens=64,
    max_prompt_words=64,
    max_lora_r=64,
    max_lora_alpha=128,
    min_snapshot_every=10,
    max_run_seconds=300,
    abandon_seconds=120,
    min_variance_every=55,
    max_compare_samples=8,
    max_compare_tokens=64,
    max_prompt_chars=500,
    max_eval_prompts=64,
    sampling_per_minute=12,
    starts_per_minute=4,
    sampling_share=0.1,  # 8 visitors flooding Compare at 0.25 slowed a step 1.75x (scripts/bench_events.py)
    keep_runs=30,
    max_runs_mb=1000,
    model_cache=3,
    compute_seconds_per_hour=900,
    max_waiting=20,
    max_events_per_visitor=3,
    event_ms_per_minute=900,  # 15 ms a second: a page's tick costs about 5; 8 visitors at that slow a step <= 1.3x
    max_runs_per_visitor=3,
    keep_seconds=3600,
    session_seconds=1800,
)
# A Space's requests reach the app through Hugging Face's proxy, from an address in a private network; the proxy
# appends the visitor's address to X-Forwarded-For. Only those hops are believed (``visitor_address``).
SPACE_PROXIES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")

# Each limit's environment variable is RLOO_ and its field's name in capitals; ``public`` is set by the mode itself.
ENV_NAMES = {f.name: f"RLOO_{f.name.upper()}" for f in fields(Limits) if f.name != "public"}
# Variables an older server read, and what replaced them: set, they stop the server with that name, never ignored.
RENAMED = {"RLOO_READS_PER_MINUTE": "RLOO_EVENT_MS_PER_MINUTE"}


# ----------------------------------------------------------------------------- request values


def as_int(name: str, value, lo: int, hi: int) -> int:
    """A whole number in [lo, hi]; a bool, a fraction, NaN or text is refused. Integral floats pass (gradio's
    number boxes send 4.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(Message("value.whole", name=name, value=_short_repr(value)))
    if isinstance(value, float) and not value.is_integer():
        raise InputError(Message("value.whole", name=name, value=repr(value)))
    number = int(value)
    if not lo <= number <= hi:
        raise InputError(Message("value.between", name=name, lo=lo, hi=hi, value=number))
    return number


def as_float(name: str, value, lo: float, hi: float) -> float:
    """A finite number in [lo, hi]; a bool, NaN, infinity or text is refused."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value
        or value
        in (
            float("inf"),
            float("-inf"),
        )
    ):
        raise InputError(Message("value.finite", name=name, value=_short_repr(value)))
    if not lo <= value <= hi:
        raise InputError(Message("value.between", name=name, lo=f"{lo:g}", hi=f"{hi:g}", value=repr(value)))
    return float(value)


def as_text(name: str, value, max_chars: int) -> str:
    """A text of at most ``max_chars`` characters that encodes (no lone surrogate, which no tokenizer or answer
    takes)."""
    if not isinstance(value, str):
        raise InputError(Message("value.text", name=name, value=_short_repr(value)))
    if len(value) > max_chars:
        raise TooLong(name, len(value), max_chars)
    problem = text_problem(value)
    if problem:
        raise InputError(Message("value.bad_text", name=name, problem=problem))
    return value


def trusted_proxies_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...] | None:
    """The networks whose ``X-Forwarded-For`` this server believes, as the environment sets them: the comma-separated
    ``RLOO_TRUSTED_PROXIES`` where it is set (empty: none); else on a Space (``SPACE_ID`` set) ``SPACE_PROXIES``,
    the private networks its proxy connects from; ``RLOO_TRUST_FORWARDED=0`` believes no one, whatever the rest
    says. ``None``: the environment says nothing (the mode's default stands). A malformed network is a clear
    startup error."""
    env = os.environ if env is None else env
    never = env.get("RLOO_TRUST_FORWARDED", "").strip().lower() in ("0", "false", "no", "off")
    if never:
        return ()
    if "RLOO_TRUSTED_PROXIES" in env:
        found = tuple(x.strip() for x in env["RLOO_TRUSTED_PROXIES"].split(",") if x.strip())
    elif env.get("SPACE_ID"):
        found = SPACE_PROXIES
    else:
        return None
    try:
        _networks(found)
    except ValueError as exc:
        raise SystemExit(f"error: RLOO_TRUSTED_PROXIES: {exc}") from None
    return found


def visitor_address(peer: str | None, forwarded: str | Sequence[str] | None, trusted: Sequence[str]) -> str | None:
    """Who a request comes from, for every per-visitor limit: the connection's peer address, unless the peer is a
    proxy in one of the ``trusted`` networks. A proxy appends the address it saw to ``X-Forwarded-For``
    (``forwarded``: the header's value, or each of its values in order when it came more than once), so the hops
    are read from the right: the first one that is not itself a trusted proxy is the visitor. What a client wrote
    into the header stands to the left of what the proxies appended and is never reached. A malformed or empty hop
    where the visitor should be means the header is not the proxy's: the peer counts."""
    networks = _networks(tuple(trusted))
    if not networks or not peer or not _within(peer, networks) or not forwarded:
        return visitor_key(peer)
    text = forwarded if isinstance(forwarded, str) else ",".join(forwarded)
    for hop in reversed(text.split(",")):
        try:
            address = ipaddress.ip_address(hop.strip())
        except ValueError:
            return visitor_key(peer)
        if not any(address in net for net in networks):
            return visitor_key(str(address))
    return visitor_key(peer)  # every hop a proxy of ours: the request started inside


def visitor_key(address: str | None) -> str | None:
    """The visitor an address stands for: an IPv4 address itself; an IPv6 address by its /64, the block one host
    (one home line, one cloud machine) is given to use as it likes, so rotating through it makes no new visitor;
    an IPv4 address written as IPv6 (``::ffff:a.b.c.d``) as the IPv4 one. Anything else as it is."""
    if not address:
        return address
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


@functools.lru_cache(maxsize=16)
def _networks(trusted: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(net, strict=False) for net in trusted)


def _within(peer: str, networks) -> bool:
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in net for net in networks)


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _env_number(var: str, raw: str, annotation: str):
    """An environment variable as the field's number type; empty, 0, 'none' or 'off' means no limit where allowed."""
    optional = "None" in str(annotation)
    if optional and raw.lower() in ("", "none", "off", "0"):
        return None
    try:
        number = float(raw)
    except ValueError:
        raise SystemExit(f"error: {var}={raw!r} is not a number") from None
    if number != number or number < 0:
        raise SystemExit(f"error: {var}={raw!r} must be a number >= 0")
    return int(number) if "int" in str(annotation) and number.is_integer() else number
