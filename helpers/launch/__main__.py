"""`python -m helpers.launch ...`: see helpers.launch.cli."""
import sys

from helpers.launch.cli import main

sys.exit(main())
