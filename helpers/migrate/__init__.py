"""Read your own pmap-era training script and say, line by line, what the course teaches about it.

    python -m helpers.migrate path/to/train.py          # or a notebook, or a folder of scripts
    python -m helpers.migrate --diff path/to/train.py   # and a suggested rewrite where it is safe
    python -m helpers.migrate --format short --summary src/       # a codebase: a short line a finding, counts
    python -m helpers.migrate --format json src/ > migrate.json   # for a CI job

or `migrate("train.py")` in a notebook. The script is parsed with `ast`: it is never imported
or run. Each finding is one line, `train.py:12: <what the line does on several hosts> -> <what
to write instead> (notebook NN, section "...")`; the sections come from `LESSONS`, which a test
checks against the notebooks' own headings. A line kept on purpose ends with `# migrate: ok` (or
`# migrate: ok RULE`), and `--ignore RULE` leaves a rule out. Exit status: 0 nothing to change
(or every finding acknowledged), 1 findings, 2 a file that cannot be read.

The package, one module a job:
  script     the learner's script as the rules read it (`Script`: its tree and imported names); bindings
             what a name is bound to; reach  the functions a pmapped step runs beyond its own body;
             bodies  functions pmapped out of view (a framework's pmap: their collectives name its axis)
             once  the whole-file answers a Script computes on first asking, and keeps
  aliases    pmap and its collectives under a project's own names (`constants.pmap`), spelled out first
  gradients  which values hold gradients, function by function (what `Script.gradient_status` answers)
  jax_rules  JAX's own pmap-era patterns          nnx_rules  Flax NNX's (nnx.pmap, split_rngs, StateAxes)
  collective_rules  pmap's collectives: the gradient trap, a rename, or both outcomes
  copy_rules  pmap's copies taken apart or made by hand (x[0], get_first, stacks of copies)
  key_rules  per-device randomness (keys split per local device, draws inside the step)
  data_rules, batch_rules, loader_rules, stack_rules  what each host loads: shuffles, global batch sizes,
             project loaders, datasets batched per device; feeds  what the script hands its pmapped functions
  helper_calls  a helper's stack, keys or copy said again at each of its calls
  mesh_rules  a mesh of one host's devices     negatives_rules  a contrastive loss with its own negatives
  flax_rules, old_api_rules, keyword_rules  Flax's linen-era helpers; xmap, pjit, removed APIs and keywords
  jit_collective_rules  the gradient trap in a jit/pjit step with no pmap
  save_option_rules, refusal_rules  saves on process 0 unless an option says; a refusal to run on several hosts
  host_zero  which code runs on process 0 only (an if, a name holding the test, the other hosts' early return)
  process_zero_rules  work on process 0 only (a collective, a step's outputs, a stack reduced, a save)
  host_read_rules  a step's results read on the host (numpy of a global output, a pmap across hosts);
             forwarders  functions that hand a pmapped call's output back; across_hosts  pmaps over one
             device a host
  fold_rules, einops_rules  pmap's device axis merged or split by hand (a reshape, an einops pattern)
  gradient_rules  a pmapped step that applies each device's own gradient, unreduced
  scaling_rules  a loss divided by the device count whose gradients are psum'd (a pmean in disguise)
  unread     no false all-clear: a parallel API no rule reads is said as "not read"
  findings   `Finding`, `LESSONS` and `findings(source)`, every rule applied
  rewriter   `rewrite(source)`: what `--diff` can rewrite safely
  proof, proof_runs  prove a port: the old step and the new on the same per-host data, compared
  project    the modules of its own project a script imports, and what a folder's files tell each other
  cli        files, notebooks and folders read, and the command line (`main`)
"""
from helpers.migrate.cli import MigrateError, main, migrate
from helpers.migrate.findings import LESSONS, Finding, findings
from helpers.migrate.rewriter import rewrite

__all__ = ["Finding", "LESSONS", "findings", "migrate", "rewrite", "main", "MigrateError"]
