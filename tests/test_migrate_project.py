"""A script named alone is read with the modules of its own project that it imports (helpers.migrate.project)."""
from pathlib import Path

from helpers import migrate
from helpers.migrate.project import project_modules
from migrate_support import write

_COPIES = "import jax\n\n\ndef first_copy(xs):\n    return jax.tree_util.tree_map(lambda x: x[0], xs)\n"
_TRAIN = ("import jax\n{import_line}\n\nstep = jax.pmap(f, axis_name='i')\nout = step(x)\n"
          "log({module}first_copy(out))\n")


def _rules_on(script: Path, line: int) -> set[str]:
    return {f.rule for f in migrate.migrate(script, show=False) if f.line == line}


def test_a_package_module_imported_from_a_script_beside_the_package_is_read(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "utils.py", _COPIES)
    script = write(tmp_path / "train.py", _TRAIN.format(import_line="from proj import utils", module="utils."))
    assert project_modules(script) == [tmp_path / "proj" / "__init__.py", tmp_path / "proj" / "utils.py"]
    assert "jax-utils-replicate" in _rules_on(script, 6)


def test_a_script_inside_its_package_reaches_the_root_and_relative_imports(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "common" / "__init__.py", "")
    write(tmp_path / "proj" / "common" / "copies.py", _COPIES)
    absolute = write(tmp_path / "proj" / "train" / "main.py",
                     _TRAIN.format(import_line="from proj.common.copies import first_copy", module=""))
    write(tmp_path / "proj" / "train" / "__init__.py", "")
    relative = write(tmp_path / "proj" / "train" / "other.py",
                     _TRAIN.format(import_line="from ..common import copies", module="copies."))
    assert "jax-utils-replicate" in _rules_on(absolute, 6)
    assert "jax-utils-replicate" in _rules_on(relative, 6)


def test_no_module_outside_the_project_and_no_finding_without_it(tmp_path):
    write(tmp_path / "utils.py", _COPIES)  # beside the folder, not in it: another project
    script = write(tmp_path / "alone" / "train.py", _TRAIN.format(import_line="import utils", module="utils."))
    assert project_modules(script) == []
    assert "jax-utils-replicate" not in _rules_on(script, 6)


def test_a_loader_that_pmaps_its_own_lambda_is_not_a_wrapper_of_the_step(tmp_path):
    write(tmp_path / "data.py", "import jax\n\n\ndef shard_dataset(n):\n"
                                 "    return jax.pmap(lambda x: x)(load(n))\n\n\n"
                                 "def dist(f, axis_name):\n    return jax.pmap(f, axis_name=axis_name)\n")
    script = write(tmp_path / "train.py", "import data\n\nrows = data.shard_dataset(8)\n"
                                           "step = data.dist(update, axis_name='batch')\n")
    assert "pmap" not in _rules_on(script, 3)
    assert "pmap" in _rules_on(script, 4)


_LOADERS = ("import jax\n\n\nclass Source:\n    def get_train(self):\n"
            "        return read(shard=jax.process_index(), count=jax.process_count())\n\n"
            "    def get_test(self):\n        return read()\n")
_EVAL = ("import jax\nfrom proj import data\n\np_eval = jax.pmap(eval_step, axis_name='b')\n"
         "source = data.Source()\nfor batch in source.get_test():\n    p_eval(state, batch)\n"
         "for batch in source.get_train():\n    p_eval(state, batch)\n")


def test_a_project_loader_whose_body_never_reads_the_host_loads_the_whole_batch_on_every_host(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "data.py", _LOADERS)
    script = write(tmp_path / "train.py", _EVAL)
    assert "global-batch-per-host" in _rules_on(script, 6)  # get_test: no process index in its body
    assert "global-batch-per-host" not in _rules_on(script, 8)  # get_train splits by host itself
    alone = write(tmp_path / "alone" / "train.py", _EVAL)  # out of view: an evaluation's loader is not guessed at
    assert "global-batch-per-host" not in _rules_on(alone, 6)


def test_a_project_function_that_stacks_rows_per_local_device_is_local_batch_at_its_call(tmp_path):
    write(tmp_path / "utils" / "__init__.py", "")
    write(tmp_path / "utils" / "data_utils.py",
          "import jax\n\n\ndef shard(batch):\n    n = jax.local_device_count()\n"
          "    return jax.tree_util.tree_map(lambda x: x.reshape((n, -1) + x.shape[1:]), batch)\n\n\n"
          "def normalise(batch):\n    return batch / 255.0\n")
    source = ("import jax\nfrom utils import data_utils\n\nstep = jax.pmap(train_step, axis_name='b')\n"
              "for batch in loader:\n    batch = data_utils.normalise(data_utils.shard(batch))\n"
              "    state = step(state, batch)\n")
    script = write(tmp_path / "train.py", source)
    found = [f for f in migrate.migrate(script, show=False) if f.line == 6 and f.rule == "local-batch"]
    assert len(found) == 1 and "data_utils.shard(...) (in the project)" in found[0].does
    alone = write(tmp_path / "alone" / "train.py", source)
    assert "local-batch" not in _rules_on(alone, 6)


_STACKING_MODULE = (
    "import jax\nimport jax.numpy as jnp\nimport tensorflow as tf\n\n\n"
    "def shard_batch(batch, n_devices):\n    return jnp.reshape(batch, (n_devices, -1) + batch.shape[1:])\n\n\n"
    "def split_batch(batch):\n    return tf.reshape(batch, (jax.local_device_count(), -1) + tuple(batch.shape[1:]))\n\n\n"
    "def create_split(builder, batch_size):\n    return builder.as_dataset().batch(batch_size).map(split_batch)\n\n\n"
    "def evaluate_loop(p_eval, state, builder):\n    for batch in create_split(builder, 8):\n"
    "        p_eval(state, batch)\n")


def test_a_project_function_that_stacks_by_a_count_it_is_handed_or_through_another_is_local_batch(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "pipeline.py", _STACKING_MODULE)
    source = ("import jax\nfrom proj.pipeline import create_split, evaluate_loop, shard_batch, split_batch\n\n"
              "p_step = jax.pmap(train_step, axis_name='b')\nn_devices = jax.local_device_count()\n"
              "ds = create_split(builder, 64)\n"  # 6: a loader that maps the stacker
              "other = builder.as_dataset().map(split_batch)\n"  # 7: the stacker handed on
              "for batch in ds:\n    state = p_step(state, shard_batch(batch, n_devices))\n"  # 9: by a device count
              "    halves = shard_batch(batch, 2)\n"  # 10: a count of halves, not of devices
              "evaluate_loop(p_eval, state, builder)\n")  # 11: it runs a step on what it stacks, it loads nothing
    script = write(tmp_path / "train.py", source)
    assert {line for line in range(6, 12) if "local-batch" in _rules_on(script, line)} == {6, 7, 9}
    alone = write(tmp_path / "alone" / "train.py", source)  # out of view: not guessed from the names
    assert not any("local-batch" in _rules_on(alone, line) for line in (6, 7))
    assert not any("(in the project)" in f.does for f in migrate.migrate(alone, show=False))


def test_a_project_loader_read_through_the_stacking_of_its_rows_loads_the_whole_batch_on_every_host(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "pipeline.py", _STACKING_MODULE + "\n\ndef create_loader(args):\n    return read(args)\n")
    source = ("import jax\nimport numpy as np\nfrom proj.pipeline import create_loader, shard_batch\n\n"
              "p_step = jax.pmap(train_step, axis_name='b')\nloader = create_loader(args)\n"
              "for batch in loader:\n    rows = shard_batch(np.asarray(batch), jax.local_device_count())\n"
              "    state = p_step(state, rows)\n")
    script = write(tmp_path / "train.py", source)
    assert "global-batch-per-host" in _rules_on(script, 6)  # past shard_batch, a transform of the loader's rows
    assert "global-batch-per-host" not in _rules_on(script, 8)


_KFAC_STYLE = ("import functools\nimport jax\nimport jax.tree_util as jtu\n\n"
               "instance = functools.partial(jtu.tree_map, lambda x: x[0])\n"
               "_p_split = jax.pmap(lambda key: tuple(jax.random.split(key)))\n\n\n"
               "def p_split(key):\n    return _p_split(key)\n\n\n"
               "def replicate(tree):\n    return jax.device_put_replicated(tree, jax.local_devices())\n")


def test_a_projects_replicate_instance_and_p_split_imported_by_name(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "jax_utils.py", _KFAC_STYLE)
    source = ("import jax\nfrom proj.jax_utils import instance, p_split, replicate\n\n"
              "step = jax.pmap(train_step, axis_name='b')\nparams = replicate(params)\n"
              "key, subkeys = p_split(key)\nparams, loss = step(params, batch, subkeys)\nsave(instance(params))\n")
    script = write(tmp_path / "train.py", source)
    assert "jax-utils-replicate" in _rules_on(script, 5)
    assert "per-device-keys" in _rules_on(script, 6)
    assert "jax-utils-replicate" in _rules_on(script, 8)
    alone = write(tmp_path / "alone" / "train.py", source)  # without its project: instance is nobody's
    assert "jax-utils-replicate" not in _rules_on(alone, 8)
