"""rloo-demo: watch a small language model learn with RLOO (REINFORCE Leave-One-Out), offline, on a CPU."""

__version__ = "0.1.0"

import os as _os
import sys as _sys
import warnings as _warnings

# Progress bars of library internals (dataset filters, weight loading, shard writing) drown the ones that matter.
_os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_hub_bars = _sys.modules.get("huggingface_hub.utils.tqdm")
if _hub_bars is not None and _os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
    # huggingface_hub was imported before this package set the variable (a notebook or a test session that imported
    # gradio first; app.py and the CLI import this package first): it read the variable unset, and a Trainer's
    # ``suppress_progress_bars`` turns every bar back on when it ends, so each model loaded after a run printed its
    # "Loading weights" bar into the log and between the CLI's error lines.
    _hub_bars.HF_HUB_DISABLE_PROGRESS_BARS = True

# transformers 5 renamed gradient_checkpointing; TRL 1.16 still calls the old names once per step.
_warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed in v6.*", category=FutureWarning)
