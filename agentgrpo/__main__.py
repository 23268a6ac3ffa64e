"""``python -m agentgrpo ...``: the ``agentgrpo`` command without its console script."""
import sys

from agentgrpo.cli import main

sys.exit(main())
