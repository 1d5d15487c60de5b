"""The private and internal names of our dependencies that the package relies on still exist, as we use them.

The engine subclasses TRL's ``RLOOTrainer`` and overrides its private methods, calls private helpers of TRL and
transformers' generation code, reads the trainer's instance attributes and TRL's config fields, wraps
``accelerator.backward`` and ``model.generate``, and replaces one method of gradio's ``Blocks``. None of that is
public API: an upgrade may rename a parameter or drop an attribute, and the run would then fail (or, worse, quietly
do something else) deep inside a training step. This file pins every such name with the parameters our overrides
and calls use, so an upgrade fails *here*, one test per name, with a message that names it and our module.

``SURFACE`` below is the table, one row per name: ``(kind, dotted owner, name, parameters we rely on, our module)``.
Our modules are named without their package (``capture``, ``fast_step``, ...) because they move between
subpackages; grep for the name to find the code. The kinds:

- ``override``: we override (or replace) it and the library calls it, so the library's parameters must be exactly
  ours: names before ``"*"`` in this order, names after it as a set; ``"**kwargs"`` stands for any ``**`` parameter.
- ``call``: we call it: names before ``"*"`` must be its first parameters, in order (we pass them by position),
  names after ``"*"`` must be accepted by keyword (we pass them by name); ``"**kwargs"``: it takes any keyword.
- ``attr``: the attribute exists: on the class (method, property, class attribute, annotation) or assigned as
  ``self.<name> = ...`` in the source of the class or one of its bases (instance attributes, found without
  building a trainer or loading a model).
- ``field``: a dataclass (or pydantic) field of a config class, checked with ``dataclasses.fields``.
- ``source``: the library's own code still contains these fragments, in this order (whitespace-insensitive): for
  contracts no signature shows, such as *how* TRL calls ``generate`` or which keys its batch dict has.
- ``value``: an enum member still has this value (we compare ``.value`` strings).

Not repeated here: the gradio queue attributes and ``Blocks._queue`` that ``ui/gradio_internals`` tunes, and the
``Block._id`` / ``Block.stateful`` it reads; ``tests/ui/test_gradio_internals.py`` pins those by using them.

Fast (imports only; no model is built or loaded, nothing touches the network):
``python -m pytest tests/project/test_dependency_surface.py``
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import textwrap
from typing import Any, NamedTuple

import pytest

from rloo_demo.engine.trainers import _ALWAYS, _DERIVED
from rloo_demo.fast.fast_step import _MULTIMODAL_KEYS

# The row's meaning is in the module docstring. Owners are dotted paths (a module, then attributes).
_RLOO = "trl.RLOOTrainer"
_GPT2 = "transformers.models.gpt2.modeling_gpt2"
_MM = _MULTIMODAL_KEYS  # the multimodal keywords of TRL's scoring call that fast_step passes on to TRL
_HOOK = ("args", "state", "control", "**kwargs")  # every TrainerCallback hook we override

SURFACE: list[tuple[str, str, str, tuple[str, ...], str]] = [
    # ------------------------------------------------------------------ TRL: the RLOOTrainer methods we override
    ("override", _RLOO, "_calculate_rewards", ("inputs", "prompts", "completions", "completion_ids_list"), "capture"),
    # capture reads compute_entropy as the 6th positional (len(args) < 5); fast_step checks the keywords after "*"
    # by name to leave multimodal and MoE batches to TRL, so a new keyword must be added to its _MULTIMODAL_KEYS.
    (
        "override",
        _RLOO,
        "_get_per_token_logps_and_entropies",
        ("model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy", "*")
        + ("compute_aux_loss", *_MM),
        "capture, fast_step, trl_compat",
    ),
    ("override", _RLOO, "_generate_and_score_completions", ("inputs",), "capture, fast_step"),
    ("override", _RLOO, "_generate_single_turn", ("prompt_ids", "images", "multimodal_fields"), "fast_step"),
    # TRL's profiling wrapper: trl_compat scores with the unwrapped function (the wrapper logs from any thread)
    ("attr", f"{_RLOO}._get_per_token_logps_and_entropies", "__wrapped__", (), "trl_compat"),
    # TRL scores the policy first, then the reference (capture's logps[0] / logps[1], fast_step's _scoring_calls)
    (
        "source",
        _RLOO,
        "_generate_and_score_completions",
        (
            "self._get_per_token_logps_and_entropies( self.model, prompt_completion_ids,",
            "self._get_per_token_logps_and_entropies( self.ref_model, prompt_completion_ids,",
            '"prompt_ids": prompt_ids,',
            '"prompt_mask": prompt_mask,',
            '"completion_ids": completion_ids,',
            '"completion_mask": completion_mask,',
            '"advantages": advantages,',
        ),
        "capture, fast_step, meter, trainers",
    ),
    # fast_step swaps model.generate for lean_or_generate(input_ids, attention_mask, generation_config, **kwargs) on
    # accelerator.unwrap_model(model_wrapped): TRL must call it with those keywords, on that object
    (
        "source",
        _RLOO,
        "_generate_single_turn",
        (
            'generate_inputs = {"input_ids": padded_ids, "attention_mask": attention_mask}',
            "unwrap_model_for_generation( self.model_wrapped,",
            "unwrapped_model.generate( **generate_inputs, generation_config=self.generation_config )",
        ),
        "fast_step",
    ),
    (
        "source",
        "trl.models.utils",
        "_unwrap_model_for_generation",
        ("unwrapped_model = accelerator.unwrap_model(model)", "yield unwrapped_model"),
        "fast_step",
    ),
    # our reward functions take (prompts, completions, completion_ids=None, **columns), by keyword
    (
        "source",
        _RLOO,
        "_calculate_rewards",
        ("prompts=prompts, completions=completions, completion_ids=completion_ids_list",),
        "rewards, user_rewards",
    ),
    # an exported TRL project names its reward functions "rewards.<name>": TRL's script imports such a dotted path
    # with the working folder (the project's) first on sys.path
    (
        "source",
        "trl.scripts.rloo",
        "main",
        (
            'elif "." in func_name:',
            'module_path, func_name = func_name.rsplit(".", 1)',
            "sys.path.insert(0, os.getcwd())",
            "module = importlib.import_module(module_path)",
        ),
        "trl_export",
    ),
    # ------------------------------------------------------------------ TRL: the trainer's state we read or write
    ("attr", _RLOO, "_metrics", (), "capture"),
    ("source", _RLOO, "__init__", ('self._metrics = {"train": defaultdict(list)',), "capture"),
    ("source", _RLOO, "log", ("self._metrics[mode].items()",), "capture"),  # what capture appends gets logged
    ("attr", _RLOO, "_tokenizer", (), "capture"),  # the token pieces (it falls back to processing_class)
    ("attr", _RLOO, "use_vllm", (), "fast_step"),
    ("attr", _RLOO, "use_transformers_continuous_batching", (), "fast_step"),
    ("attr", _RLOO, "num_iterations", (), "fast_step"),
    ("attr", _RLOO, "aux_loss_enabled", (), "fast_step"),
    ("attr", _RLOO, "beta", (), "capture, fast_step, trainers, meter"),
    ("attr", _RLOO, "ref_model", (), "fast_step, trainers, meter"),
    ("attr", _RLOO, "reward_weights", (), "capture, meter"),
    ("attr", _RLOO, "reward_clip_range", (), "capture, meter"),
    ("attr", _RLOO, "reward_func_names", (), "capture"),
    ("attr", _RLOO, "reward_funcs", (), "trainers, meter"),
    ("attr", _RLOO, "num_generations", (), "capture, meter"),
    ("attr", _RLOO, "normalize_advantages", (), "capture, trainers"),
    ("attr", _RLOO, "temperature", (), "meter"),
    ("attr", _RLOO, "top_p", (), "meter"),
    ("attr", _RLOO, "max_completion_length", (), "meter"),
    # the constructor keywords training passes to every estimator's trainer
    (
        "call",
        _RLOO,
        "__init__",
        ("*", "model", "args", "reward_funcs", "train_dataset", "processing_class", "callbacks", "peft_config"),
        "training",
    ),
    (
        "call",
        "trl.GRPOTrainer",
        "__init__",
        ("*", "model", "args", "reward_funcs", "train_dataset", "processing_class", "callbacks", "peft_config"),
        "training, trainers",
    ),
    # ------------------------------------------------------------------ TRL: helpers we call
    (
        "call",
        "trl.models.utils",
        "disable_gradient_checkpointing",
        ("model", "gradient_checkpointing_kwargs"),
        "capture",
    ),
    ("call", "trl.trainer.utils", "use_adapter", ("model", "*", "adapter_name"), "meter"),
    # ------------------------------------------------------------------ TRL: config fields we set or read
    *[
        ("field", "trl.RLOOConfig", name, (), "trl_args")
        for name in (
            "output_dir",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "num_generations",
            "max_completion_length",
            "temperature",
            "top_p",
            "learning_rate",
            "lr_scheduler_type",
            "beta",
            "normalize_advantages",
            "max_steps",
            "seed",
            "logging_steps",
            "save_strategy",
            "report_to",
            "activation_checkpointing",
            "bf16",
            "fp16",
            "use_vllm",
            "vllm_mode",
            "project",
            "use_cpu",
            "remove_unused_columns",
            "dataloader_num_workers",
            "disable_tqdm",
            "reward_weights",
            "run_name",
        )
    ],
    ("field", "trl.RLOOConfig", "disable_dropout", (), "trl_args, overlap"),  # overlap reads it with getattr
    ("field", "trl.RLOOConfig", "num_iterations", (), "fast_step"),
    ("field", "trl.RLOOConfig", "steps_per_generation", (), "fast_step, trainers"),
    ("field", "trl.RLOOConfig", "generation_batch_size", (), "trainers"),
    ("field", "trl.RLOOConfig", "gradient_checkpointing_kwargs", (), "capture"),
    # grpo_config copies these by name and silently skips a field GRPOConfig lacks
    *[
        ("field", "trl.GRPOConfig", name, (), "trainers")
        for name in (*_ALWAYS, *_DERIVED, "scale_rewards")  # the lists grpo_config itself copies by
    ],
    # ------------------------------------------------------------------ transformers: Trainer and callbacks
    ("attr", "transformers.Trainer", "accelerator", (), "capture, fast_step, overlap, trainers, meter, training"),
    ("attr", "transformers.Trainer", "model_wrapped", (), "fast_step, training"),
    ("attr", "transformers.Trainer", "processing_class", (), "capture, meter, training"),
    ("attr", "transformers.Trainer", "is_deepspeed_enabled", (), "fast_step"),
    ("attr", "transformers.Trainer", "is_fsdp_enabled", (), "fast_step"),
    ("call", "transformers.Trainer", "add_callback", ("callback",), "capture, training"),
    ("call", "transformers.Trainer", "remove_callback", ("callback",), "training"),
    # fast_step.use_backward_threads wraps accelerator.backward as (loss, **kwargs)
    ("source", "transformers.Trainer", "training_step", ("self.accelerator.backward(loss, **kwargs)",), "fast_step"),
    ("override", "transformers.TrainerCallback", "on_train_begin", _HOOK, "callbacks, training"),
    ("override", "transformers.TrainerCallback", "on_pre_optimizer_step", _HOOK, "capture, training"),
    ("override", "transformers.TrainerCallback", "on_optimizer_step", _HOOK, "training"),
    ("override", "transformers.TrainerCallback", "on_step_end", _HOOK, "callbacks, capture, snapshots"),
    ("override", "transformers.TrainerCallback", "on_log", _HOOK, "callbacks, training"),
    ("override", "transformers.TrainerCallback", "on_train_end", _HOOK, "capture, training"),
    # the Trainer fires the hooks we rely on, in this order; on_log passes logs= by keyword (our on_log's parameter)
    (
        "source",
        "transformers",
        "Trainer",
        (
            "self.callback_handler.on_train_begin(",
            "self.callback_handler.on_pre_optimizer_step(",
            "self.callback_handler.on_optimizer_step(",
            "self.callback_handler.on_step_end(",
            "self.callback_handler.on_train_end(",
        ),
        "callbacks, capture, training, snapshots",
    ),
    ("source", "transformers.trainer_callback.CallbackHandler", "on_log", ("logs=logs",), "callbacks, training"),
    ("attr", "transformers.trainer_callback", "PrinterCallback", (), "training"),
    ("field", "transformers.TrainerState", "global_step", (), "capture, meter, training, snapshots"),
    ("field", "transformers.TrainerState", "max_steps", (), "callbacks, training"),
    ("field", "transformers.TrainerState", "is_world_process_zero", (), "callbacks, training, snapshots"),
    ("field", "transformers.TrainerControl", "should_training_stop", (), "callbacks"),
    ("attr", "transformers.TrainingArguments", "world_size", (), "callbacks"),
    # ------------------------------------------------------------------ transformers: generation internals
    ("call", "transformers.GPT2LMHeadModel", "_prepare_generation_config", ("generation_config",), "lean_decode"),
    (
        "call",
        "transformers.GPT2LMHeadModel",
        "_prepare_special_tokens",
        ("generation_config", "*", "kwargs_has_attention_mask", "device"),
        "lean_decode",
    ),
    (
        "call",
        "transformers.GPT2LMHeadModel",
        "_get_logits_processor",
        ("*", "generation_config", "input_ids_seq_length", "encoder_input_ids", "prefix_allowed_tokens_fn")
        + ("logits_processor", "device", "model_kwargs"),
        "lean_decode",
    ),
    # fast_step's fallback: generate(input_ids=..., attention_mask=..., generation_config=..., **kwargs)
    ("call", "transformers.GPT2LMHeadModel", "generate", ("*", "generation_config", "**kwargs"), "fast_step"),
    *[
        ("attr", "transformers.GenerationConfig", name, (), "lean_decode")
        for name in (
            "do_sample",
            "num_beams",
            "num_return_sequences",
            "stop_strings",
            "max_time",
            "cache_implementation",
            "output_scores",
            "output_logits",
            "return_dict_in_generate",
            "max_new_tokens",
            "pad_token_id",
            "eos_token_id",
        )
    ],
    ("attr", "transformers.PreTrainedModel", "is_gradient_checkpointing", (), "overlap"),  # read with getattr
    # lean_decode reads hf_quantizer with getattr(..., None): transformers must still set it on a quantized model
    (
        "source",
        "transformers.PreTrainedModel",
        "from_pretrained",
        ("model.hf_quantizer = hf_quantizer",),
        "lean_decode",
    ),
    # ------------------------------------------------------------------ transformers: the GPT-2 that lean_decode runs
    *[("attr", f"{_GPT2}.GPT2LMHeadModel", name, (), "lean_decode") for name in ("transformer", "lm_head")],
    *[("attr", f"{_GPT2}.GPT2Model", name, (), "lean_decode") for name in ("wte", "wpe", "h", "ln_f")],
    *[("attr", f"{_GPT2}.GPT2Block", name, (), "lean_decode") for name in ("ln_1", "attn", "ln_2", "mlp")],
    *[("attr", f"{_GPT2}.GPT2Attention", n, (), "lean_decode") for n in ("c_attn", "c_proj", "num_heads", "scaling")],
    *[("attr", f"{_GPT2}.GPT2MLP", name, (), "lean_decode") for name in ("c_fc", "c_proj", "act")],
    *[
        ("attr", "transformers.GPT2Config", name, (), "lean_decode")
        for name in (
            "add_cross_attention",
            "scale_attn_by_inverse_layer_idx",
            "scale_attn_weights",
            "reorder_and_upcast_attn",
            "n_positions",
        )
    ],
    # ------------------------------------------------------------------ accelerate
    ("call", "accelerate.Accelerator", "backward", ("loss", "**kwargs"), "fast_step"),
    ("call", "accelerate.Accelerator", "unwrap_model", ("model",), "fast_step, overlap, trainers, meter, training"),
    ("call", "accelerate.Accelerator", "gather", ("tensor",), "capture"),
    ("call", "accelerate.Accelerator", "get_state_dict", ("model",), "training"),
    ("attr", "accelerate.Accelerator", "num_processes", (), "capture, fast_step, overlap, meter"),
    ("attr", "accelerate.Accelerator", "process_index", (), "trainers"),
    ("attr", "accelerate.Accelerator", "is_main_process", (), "capture"),
    ("attr", "accelerate.Accelerator", "distributed_type", (), "training, distributed"),
    ("call", "accelerate.utils", "gather_object", ("object",), "capture, distributed"),
    ("call", "accelerate.utils", "is_peft_model", ("model",), "trainers"),
    ("call", "accelerate", "PartialState", ("*", "cpu"), "distributed"),
    *[
        ("attr", "accelerate.PartialState", name, (), "distributed")
        for name in ("process_index", "local_process_index", "num_processes", "backend")
    ],
    *[
        ("value", "accelerate.utils.DistributedType", name, (name,), "training, distributed")
        for name in ("FSDP", "DEEPSPEED", "MULTI_CPU", "MULTI_GPU")
    ],
    # ------------------------------------------------------------------ peft
    *[
        ("field", "peft.LoraConfig", name, (), "trl_args")
        for name in ("task_type", "r", "lora_alpha", "lora_dropout", "target_modules")
    ],
    ("call", "peft.PeftModel", "from_pretrained", ("model", "model_id"), "snapshots"),
    ("attr", "peft.PeftModel", "peft_config", (), "meter"),
    # store and snapshots find it on a PeftModel by hasattr, through PeftModel.__getattr__ to its tuner
    ("attr", "peft.PeftModel", "__getattr__", (), "folder, snapshots"),
    ("attr", "peft.tuners.tuners_utils.BaseTuner", "merge_and_unload", (), "folder, snapshots"),
    # ------------------------------------------------------------- gradio (beyond tests/ui/test_gradio_internals.py)
    ("override", "gradio.Blocks", "postprocess_data", ("block_fn", "predictions", "state"), "gradio_internals"),
    ("attr", "gradio.block_function.BlockFunction", "outputs", (), "gradio_internals"),
    ("attr", "gradio.block_function.BlockFunction", "is_validator_function", (), "gradio_internals"),  # getattr
    ("field", "gradio.components.plot.PlotData", "type", (), "common"),
    ("field", "gradio.components.plot.PlotData", "plot", (), "common"),
    ("call", "gradio.i18n", "I18nData", ("key",), "common"),
    # ------------------------------------------------------------------ huggingface_hub
    ("call", "huggingface_hub.utils", "validate_repo_id", ("repo_id",), "hub"),
]

LIBRARIES = {"trl": "TRL", "transformers": "transformers", "accelerate": "accelerate", "peft": "PEFT"}
KINDS = ("override", "call", "attr", "field", "source", "value")


class Pin(NamedTuple):
    kind: str
    owner: Any  # a dotted path, or the object itself (the checker's own test)
    name: str
    params: tuple[str, ...]
    used_by: str

    @property
    def label(self) -> str:
        owner = self.owner if isinstance(self.owner, str) else getattr(self.owner, "__qualname__", repr(self.owner))
        return f"{owner}.{self.name}"

    @property
    def library(self) -> str:
        root = self.owner.split(".")[0] if isinstance(self.owner, str) else "the library"
        return LIBRARIES.get(root, root)


PINS = [Pin(*row) for row in SURFACE]


# ----------------------------------------------------------------------------- the checker


def resolve(path: str) -> Any:
    """The object at a dotted path: the longest importable module, then attributes (raises what fails)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            if cut == 1:
                raise
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def _rendered(params) -> list[str]:
    """Parameter names, with ``*args`` / ``**kwargs`` for the variadic ones whatever their names."""
    out = []
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            out.append("*args")
        elif p.kind is p.VAR_KEYWORD:
            out.append("**kwargs")
        else:
            out.append(p.name)
    return out


def parameters(owner: Any, name: str) -> list[inspect.Parameter]:
    """The parameters of ``owner.name`` as a caller passes them: without ``self`` for a method looked up on its
    class (``inspect.signature`` follows ``functools.wraps`` wrappers to the wrapped function)."""
    obj = getattr(owner, name)
    params = list(inspect.signature(obj).parameters.values())
    if inspect.isclass(owner) and inspect.isfunction(inspect.getattr_static(owner, name)) and params:
        params = params[1:]
    return params


def _split(spec: tuple[str, ...]) -> tuple[list[str], list[str]]:
    if "*" in spec:
        i = spec.index("*")
        return list(spec[:i]), list(spec[i + 1 :])
    return list(spec), []


def _normalized(text: str) -> str:
    return " ".join(text.split())


@functools.cache
def assigned_attributes(klass: type) -> frozenset[str]:
    """Names assigned as ``self.<name> = ...`` in the source of ``klass`` itself (not its bases)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            stack = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            stack = [node.target]
        else:
            continue
        while stack:
            t = stack.pop()
            if isinstance(t, ast.Tuple | ast.List):
                stack.extend(t.elts)
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                names.add(t.attr)
    return frozenset(names)


def _has_attribute(owner: Any, name: str) -> bool:
    if hasattr(owner, name):
        return True
    if not inspect.isclass(owner):
        return False
    if any(name in getattr(k, "__annotations__", {}) for k in inspect.getmro(owner)):
        return True
    if dataclasses.is_dataclass(owner) and name in {f.name for f in dataclasses.fields(owner)}:
        return True
    # an instance attribute: assigned in the class or a base (nearest first; each source is parsed once)
    return any(name in assigned_attributes(k) for k in inspect.getmro(owner) if k.__module__ != "builtins")


def _fields(owner: Any) -> set[str] | None:
    if dataclasses.is_dataclass(owner):
        return {f.name for f in dataclasses.fields(owner) if f.init}
    model_fields = getattr(owner, "model_fields", None)  # pydantic
    return set(model_fields) if isinstance(model_fields, dict) else None


def check(pin: Pin) -> list[str]:
    """What no longer holds of ``pin``, as messages that name it and the module relying on it (empty: all holds)."""
    where = f"(used by {pin.used_by})"
    see = f"see {pin.used_by} and its row in tests/project/test_dependency_surface.py"
    gone = f"{pin.label} is gone {where}: {pin.library} changed; {see}"
    try:
        owner = resolve(pin.owner) if isinstance(pin.owner, str) else pin.owner
    except (ImportError, AttributeError) as error:
        return [f"{pin.label}: its owner {pin.owner} is gone ({error}) {where}: {pin.library} changed; {see}"]

    if pin.kind == "field":
        fields = _fields(owner)
        if fields is None:
            return [f"{pin.label}: {pin.owner} is no longer a dataclass {where}: {pin.library} changed; {see}"]
        return [] if pin.name in fields else [gone]

    if pin.kind == "attr":
        return [] if _has_attribute(owner, pin.name) else [gone]

    if not hasattr(owner, pin.name):
        return [gone]

    if pin.kind == "value":
        value = getattr(getattr(owner, pin.name), "value", None)
        if value != pin.params[0]:
            return [
                f"{pin.label} now has the value {value!r}, not {pin.params[0]!r} {where}: {pin.library} changed; {see}"
            ]
        return []

    if pin.kind == "source":
        try:
            source = _normalized(inspect.getsource(getattr(owner, pin.name)))
        except (OSError, TypeError) as error:
            return [f"{pin.label}: its source cannot be read ({error}) {where}; {see}"]
        problems, start = [], 0
        for fragment in pin.params:
            at = source.find(_normalized(fragment), start)
            if at < 0:
                problems.append(
                    f"{pin.label} no longer contains {fragment!r} (in this order) {where}: {pin.library} changed how "
                    f"it does this; {see}"
                )
            else:
                start = at + len(_normalized(fragment))
        return problems

    if pin.kind not in ("call", "override"):
        raise ValueError(f"unknown kind {pin.kind!r} in the row of {pin.label}")
    try:
        params = parameters(owner, pin.name)
    except (TypeError, ValueError) as error:
        return [f"{pin.label} is no longer a callable with a signature ({error}) {where}; {see}"]
    names = _rendered(params)
    positional, keywords = _split(pin.params)
    changed = f"{pin.label} changed its parameters {where}: {pin.library} changed; {see}. We rely on"

    if pin.kind == "override":
        head, rest = names[: len(positional)], names[len(positional) :]
        if head != positional or (sorted(rest) != sorted(keywords)):
            return [f"{changed} ({', '.join(pin.params)}), it now has ({', '.join(names)})"]
        return []

    # call: positional names are its leading parameters, in order; keywords are accepted by keyword
    problems = []
    wants_var_keyword = "**kwargs" in positional + keywords
    positional = [p for p in positional if p != "**kwargs"]
    keywords = [k for k in keywords if k != "**kwargs"]
    if names[: len(positional)] != positional:
        problems.append(f"{changed} ({', '.join(positional)}) first, in this order; it now has ({', '.join(names)})")
    by_name = {p.name: p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [k for k in keywords if k not in by_name]
    if missing:
        problems.append(f"{changed} the keyword(s) {', '.join(missing)}; it now has ({', '.join(names)})")
    if wants_var_keyword and "**kwargs" not in names:
        problems.append(f"{changed} it taking any keyword (**kwargs); it now has ({', '.join(names)})")
    return problems


def _ids(pins: list[Pin]) -> list[str]:
    ids = [pin.label for pin in pins]
    return [f"{i}:{pin.kind}" if ids.count(i) > 1 else i for i, pin in zip(ids, pins, strict=True)]


# ----------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("pin", PINS, ids=_ids(PINS))
def test_dependency_name_is_still_there_as_we_use_it(pin):
    problems = check(pin)
    assert not problems, "\n".join(problems)


def test_the_table_is_well_formed():
    ids = _ids(PINS)
    assert len(set(ids)) == len(ids), "two rows pin the same thing: merge them"
    for pin in PINS:
        assert pin.kind in KINDS, f"{pin.label}: unknown kind {pin.kind!r}"
        assert pin.used_by.strip(), f"{pin.label}: say which of our modules relies on it"
        if pin.kind in ("source", "value"):
            assert pin.params, f"{pin.label}: a {pin.kind} row needs its fragments / value"
        if pin.kind in ("attr", "field"):
            assert not pin.params, f"{pin.label}: an {pin.kind} row has no parameters"


def _our_module(short: str):
    """One of our modules by its short name, wherever it lives under ``rloo_demo`` now (modules move)."""
    import pkgutil

    import rloo_demo

    found = [m.name for m in pkgutil.walk_packages(rloo_demo.__path__, "rloo_demo.") if m.name.endswith(f".{short}")]
    assert len(found) == 1, f"expected one module named {short!r} under rloo_demo, found {found}"
    return importlib.import_module(found[0])


def test_the_table_lists_what_our_code_lists():
    """Where our code keeps its own list of a dependency's names, the table pins every one (it reads the lists)."""
    assert _MM and set(_MM) <= {n for p in PINS for n in p.params}, "a multimodal keyword is not pinned"
    trainers = _our_module("trainers")
    pinned = {p.name for p in PINS if p.owner == "trl.GRPOConfig"}
    missing = (set(trainers._ALWAYS) | set(trainers._DERIVED)) - pinned
    assert not missing, f"trainers copies {sorted(missing)} to GRPOConfig: add them to the table"


# The checker must be able to fail: run it on a stand-in library that renamed, dropped and reordered things.
class _Library:
    """What a stand-in library looks like before the upgrade."""

    class_attribute = 1

    def __init__(self):
        self.instance_attribute = 2

    def method(self, model, input_ids, batch_size=None, *, device=None, **kwargs):
        return model

    def hook(self, args, state, control, **kwargs):
        return control


class _Upgraded:
    """The same after an upgrade that dropped one name of each kind and renamed or added a parameter."""

    def __init__(self):
        self.renamed_attribute = 2

    def method(self, model, inputs_ids, batch_size=None, *, target_device=None):  # renamed two, dropped **kwargs
        return model

    def hook(self, args, state, control, logs, **kwargs):  # a new positional parameter
        return control


@dataclasses.dataclass
class _Config:
    kept: int = 0


def test_the_checker_reports_what_an_upgrade_changed():
    def report(kind, owner, name, params=()):
        return "\n".join(check(Pin(kind, owner, name, params, "capture")))

    # before the upgrade everything holds
    assert report("attr", _Library, "class_attribute") == ""
    assert report("attr", _Library, "instance_attribute") == ""  # found in __init__'s source
    assert report("call", _Library, "method", ("model", "input_ids", "*", "device", "**kwargs")) == ""
    assert report("override", _Library, "hook", ("args", "state", "control", "**kwargs")) == ""
    assert report("field", _Config, "kept") == ""
    assert report("source", _Library, "method", ("return model",)) == ""

    # after it, each change is reported with the name and the module that relies on it
    message = report("attr", _Upgraded, "instance_attribute")
    assert "_Upgraded.instance_attribute is gone (used by capture)" in message
    assert "_Upgraded.class_attribute is gone" in report("attr", _Upgraded, "class_attribute")
    assert "_Upgraded.missing is gone" in report("call", _Upgraded, "missing", ("x",))
    message = report("call", _Upgraded, "method", ("model", "input_ids", "*", "device", "**kwargs"))
    assert "_Upgraded.method changed its parameters (used by capture)" in message
    assert "(model, input_ids) first" in message  # the renamed positional
    assert "the keyword(s) device" in message  # the renamed keyword
    assert "taking any keyword (**kwargs)" in message  # the dropped **kwargs
    message = report("override", _Upgraded, "hook", ("args", "state", "control", "**kwargs"))
    assert "_Upgraded.hook changed its parameters" in message and "logs" in message
    assert "_Config.dropped is gone" in report("field", _Config, "dropped")
    assert "no longer contains 'return inputs_ids'" in report("source", _Upgraded, "method", ("return inputs_ids",))
    assert "in this order" in report("source", _Library, "method", ("return model", "def method"))  # order matters
    assert "its owner no.such.module is gone" in report("attr", "no.such.module", "x")


def test_the_checker_catches_a_real_name_going_away(monkeypatch):
    """The real table against TRL with one method deleted and one parameter renamed (monkeypatched)."""
    import trl

    row = next(p for p in PINS if p.owner == _RLOO and p.name == "_calculate_rewards" and p.kind == "override")
    assert check(row) == []
    monkeypatch.delattr(trl.RLOOTrainer, "_calculate_rewards")
    assert check(row) == [
        "trl.RLOOTrainer._calculate_rewards is gone (used by capture): TRL changed; see capture and its row in "
        "tests/project/test_dependency_surface.py"
    ]
    monkeypatch.undo()

    def renamed(self, inputs, prompts, completions, completion_ids):  # TRL renaming its last parameter
        raise AssertionError("never called")

    monkeypatch.setattr(trl.RLOOTrainer, "_calculate_rewards", renamed)
    (message,) = check(row)
    assert "trl.RLOOTrainer._calculate_rewards changed its parameters (used by capture)" in message
    assert "completion_ids_list" in message and "completion_ids)" in message
