"""`python -m helpers.migrate PATH ...`: see helpers.migrate."""
import sys

from helpers.migrate.cli import main

sys.exit(main())
