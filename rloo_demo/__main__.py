import sys

from rloo_demo.cli import main

sys.exit(main())
