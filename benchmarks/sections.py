"""The sections of `make bench`, in the report's order (numbered from 1): one module each."""
from benchmarks import (checkpoints, collectives, course, explorer, hub, jax_floor, launcher, learner,
                        loaders, migrate, restarts, testsuite, verdicts)

SECTIONS = [learner, testsuite, explorer, launcher, course, checkpoints, loaders, collectives,
            restarts, hub, verdicts, jax_floor, migrate]
