"""``python -m rloo_demo``: the command line (``rloo_demo.cli``)."""

import sys

from rloo_demo.cli import main

sys.exit(main())
