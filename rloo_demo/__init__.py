"""rloo-demo: watch a small language model learn with RLOO (REINFORCE Leave-One-Out), offline, on a CPU."""

__version__ = "0.1.0"

import os as _os

# Progress bars of library internals (dataset filters, weight loading, shard writing) drown the ones that matter.
_os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
_os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings as _warnings

# transformers 5 renamed gradient_checkpointing; TRL 1.16 still calls the old names once per step.
_warnings.filterwarnings("ignore", message=r".*is deprecated and will be removed in v6.*", category=FutureWarning)
