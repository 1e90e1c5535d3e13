"""Hand-rolled checkpoints of pmap-era scripts (helpers/migrate/checkpoint_rules.py): model state pickled, written as
msgpack bytes or npz, directly or through a checkpointer of the script or of its project, and such a save run on
process 0 only."""
from __future__ import annotations

import textwrap

from helpers.migrate import findings
from helpers.migrate.project import folder_facts, project_modules
from tests.migrate_support import rule_set, said

PMAPPED = """\
import pickle
import jax
from flax import jax_utils
step = jax.pmap(lambda s, b: s, axis_name="batch")
state = jax_utils.replicate(make_state())
"""


def test_a_pickle_of_the_state_on_every_host_is_a_hand_rolled_checkpoint():
    source = PMAPPED + "with open('ckpt.pkl', 'wb') as f:\n    pickle.dump(jax_utils.unreplicate(state), f)\n"
    assert (7, "flax-checkpoints") in rule_set(source)
    assert "CheckpointManager" in said(source, 7, "flax-checkpoints")


def test_a_pickle_of_metrics_or_of_a_config_is_no_checkpoint():
    source = PMAPPED + ("with open('log.pkl', 'wb') as f:\n    pickle.dump(metrics_history, f)\n"
                        "with open('run.pkl', 'wb') as f:\n    pickle.dump(config, f)\n")
    assert not {r for _, r in rule_set(source)} & {"flax-checkpoints", "process-zero-save"}


def test_a_script_without_pmap_pickles_its_state_as_it_likes():
    source = "import pickle\nwith open('ckpt.pkl', 'wb') as f:\n    pickle.dump(state, f)\n"
    assert not rule_set(source)


def test_npz_of_state_leaves_and_a_restore_in_a_load_function_are_checkpoints():
    source = PMAPPED + textwrap.dedent("""\
        import numpy as np
        np.savez("snapshot.npz", *jax.tree_util.tree_leaves(state))
        def load_checkpoint(path):
            with open(path, "rb") as f:
                return pickle.load(f)
        """)
    found = rule_set(source)
    assert (7, "flax-checkpoints") in found and (10, "flax-checkpoints") in found


def test_the_scripts_own_save_on_process_zero_is_said_in_its_body_and_at_its_call():
    source = PMAPPED + textwrap.dedent("""\
        import flax
        def save_checkpoint(state, path):
            with open(path, "wb") as f:
                f.write(flax.serialization.to_bytes(state))
        for batch in batches:
            state = step(state, batch)
            if jax.process_index() == 0:
                save_checkpoint(state, "out/ckpt")
        """)
    found = rule_set(source)
    assert (9, "flax-checkpoints") in found
    assert (13, "process-zero-save") in found and (13, "flax-checkpoints") not in found
    assert "process 0 only" in said(source, 13, "process-zero-save")


def test_a_project_checkpointer_is_read_from_its_body(tmp_path):
    (tmp_path / "train_utils.py").write_text(textwrap.dedent("""\
        import pickle
        def save_state(path, state):
            with open(path, "wb") as f:
                pickle.dump(state, f)
        def describe(path, rows):
            with open(path, "wb") as f:
                pickle.dump(rows, f)
        """))
    script = tmp_path / "train.py"
    script.write_text(PMAPPED + textwrap.dedent("""\
        import train_utils
        for batch in batches:
            state = step(state, batch)
            train_utils.save_state("out", state)
            train_utils.describe("out", batch)
            if jax.process_index() == 0:
                train_utils.save_state("out", jax_utils.unreplicate(state))
        """))
    folder = folder_facts(project_modules(script))
    assert folder.checkpointers == {"save_state"}
    found = {(f.line, f.rule) for f in findings(script.read_text(), "train.py", folder=folder)}
    assert (9, "flax-checkpoints") in found and not {line for line, _ in found} & {10}
    assert {(12, "flax-checkpoints"), (12, "process-zero-save")} <= found


def test_a_checkpointer_class_is_said_where_its_save_runs(tmp_path):
    (tmp_path / "store.py").write_text(textwrap.dedent("""\
        import pickle
        class Checkpoint:
            def __init__(self, path):
                self.path = path
            def save(self, model):
                with open(self.path, "wb") as f:
                    f.write(pickle.dumps(model))
        """))
    script = tmp_path / "train.py"
    script.write_text(PMAPPED + textwrap.dedent("""\
        from store import Checkpoint
        cp = Checkpoint("out")
        cp.save(state)
        """))
    found = {(f.line, f.rule) for f in findings(script.read_text(), "train.py",
                                                 folder=folder_facts(project_modules(script)))}
    assert (8, "flax-checkpoints") in found and not {line for line, _ in found} & {7}


def test_an_objax_checkpoint_handed_on_is_said_where_it_is_made():
    source = textwrap.dedent("""\
        import objax
        train_op = objax.Parallel(step, model.vars(), reduce=lambda x: x[0])
        checkpoint = objax.io.Checkpoint(logdir="out", keep_ckpts=3)
        train_loop(train_op, checkpoint)
        """)
    assert (3, "flax-checkpoints") in rule_set(source)
    made_and_used = source + "checkpoint.save(model.vars(), 0)\n"
    assert {(3, "flax-checkpoints"), (5, "flax-checkpoints")} & rule_set(made_and_used) == {(5, "flax-checkpoints")}


def test_a_package_without_init_is_found_by_its_own_name(tmp_path):
    package = tmp_path / "proj"
    package.mkdir()
    (package / "store.py").write_text("def f():\n    return 1\n")
    (package / "train.py").write_text("from proj import store\n")
    assert project_modules(package / "train.py") == [package / "store.py"]
