"""A policy's module names, known before any weight loads: what ``lora_target_modules`` may name.

The model is built from its ``config.json`` on torch's meta device (shapes, no memory, no weights read), so a
Start that names a module the policy lacks is refused in well under a second with the names it has, instead of
failing inside PEFT after the run has started and printing the whole module tree.

PEFT's rule for a list of names: a module matches a name when its full dotted name equals it or ends with
``.<name>``; a matched module must be a layer LoRA can adapt (a linear layer, GPT-2's ``Conv1D``, an embedding or
a convolution), not a block that holds them.
"""

from __future__ import annotations

import functools

from rloo_demo.errors import ConfigError
from rloo_demo.i18n import Message

ADAPTABLE = ("Linear", "Conv1D", "Embedding", "Conv1d", "Conv2d", "Conv3d", "MultiheadAttention")


@functools.lru_cache(maxsize=16)
def module_types(folder: str) -> tuple[tuple[str, str], ...]:
    """``(dotted name, class name)`` of every module of the causal LM in ``folder``, from its config alone."""
    import torch  # heavy: only a Start with LoRA names needs it (torch is loaded by then on a server)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return tuple((name, type(module).__name__) for name, module in model.named_modules() if name)


def matches(name: str, target: str) -> bool:
    """PEFT's matching of one entry of ``target_modules`` (a list) against a module's dotted name."""
    return name == target or name.endswith("." + target)


def lora_target_problem(folder: str, targets: list[str]) -> str | None:
    """Why ``targets`` cannot be the LoRA modules of the policy in ``folder`` (a name matches nothing, or only
    blocks LoRA cannot adapt), with the adaptable layers it has; None when every name matches such a layer."""
    modules = module_types(folder)
    adaptable = [(n, t) for n, t in modules if t in ADAPTABLE]
    offered = sorted({n.rsplit(".", 1)[-1] for n, _ in adaptable})
    hint = Message("lora.layers", layers=", ".join(offered[:20]) + (" ..." if len(offered) > 20 else ""))
    for target in targets:
        found = [t for n, t in modules if matches(n, target)]
        if not found:
            return Message("lora.no_module", target=repr(target), hint=hint)
        if not any(t in ADAPTABLE for t in found):
            kinds = ", ".join(sorted(set(found))[:3])
            return Message("lora.not_adaptable", target=repr(target), kinds=kinds, hint=hint)
    return None


def check_lora_targets(config, folder: str) -> None:
    """``ConfigError`` on ``lora_target_modules`` when LoRA is on and a name does not fit the policy."""
    if not config.use_lora or not config.lora_target_modules:
        return
    problem = lora_target_problem(str(folder), list(config.lora_target_modules))
    if problem:
        raise ConfigError({"lora_target_modules": problem})
