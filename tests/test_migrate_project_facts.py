"""What a script's project modules tell it (helpers.migrate.project `folder_facts`): folders without `__init__.py`
named by an import, loaders that split by host only for training, functions that hand back a pmapped step's output,
and a helper that takes device 0's copy through a function nested in it."""
from pathlib import Path

from helpers import migrate
from helpers.migrate.project import folder_facts, project_modules
from migrate_support import write


def _said_on(script: Path, line: int) -> dict[str, str]:
    """rule -> what it says, for the findings on a line."""
    return {f.rule: f.does for f in migrate.migrate(script, show=False) if f.line == line}


_COPY = "import jax\n\n\ndef first_copy(xs):\n    return jax.tree_util.tree_map(lambda x: x[0], xs)\n"
_USES_COPY = ("import jax\nfrom {module} import utils\n\nstep = jax.pmap(f, axis_name='i')\nout = step(x)\n"
              "log(utils.first_copy(out))\n")


def test_a_folder_without_init_named_by_an_import_is_a_root(tmp_path):
    write(tmp_path / "proj" / "data" / "utils.py", _COPY)
    script = write(tmp_path / "proj" / "train" / "main.py", _USES_COPY.format(module="proj.data"))
    assert project_modules(script) == [tmp_path / "proj" / "data" / "utils.py"]
    assert "jax-utils-replicate" in _said_on(script, 6)
    other = write(tmp_path / "proj" / "train" / "other.py", _USES_COPY.format(module="elsewhere.data"))
    assert project_modules(other) == []  # a folder no ancestor of the script is named for: not the project's


_SPLIT_IF_TRAINING = ("import jax\n\n\ndef load(split, is_training, batch_size):\n    if is_training:\n"
                      "        start = jax.process_index()\n    else:\n        start = 0\n"
                      "    return read(split, start, batch_size)\n")
_SPLIT_IF_TRAIN_SPLIT = ("import jax\n\n\ndef load(split='train', batch_size=8):\n    rows = read(split, batch_size)\n"
                         "    if split == 'train':\n        rows = rows.shard(jax.process_count(), jax.process_index())\n"
                         "    return rows\n")


def test_a_loader_that_splits_by_host_only_for_training_is_read_as_such(tmp_path):
    write(tmp_path / "proj" / "data.py", _SPLIT_IF_TRAINING)
    write(tmp_path / "proj" / "tfds.py", _SPLIT_IF_TRAIN_SPLIT)
    by_split, by_flag = sorted(folder_facts([tmp_path / "proj" / "data.py", tmp_path / "proj" / "tfds.py"]
                                             ).host_switches, key=lambda w: w.test)
    assert (by_split.function, by_split.parameter, by_split.test, by_split.value, by_split.default) == (
        "load", "split", "==", "'train'", "'train'")
    assert (by_flag.function, by_flag.parameter, by_flag.position, by_flag.test) == ("load", "is_training", 1, "true")
    none = write(tmp_path / "plain.py", "import jax\n\n\ndef load(n):\n    return read(n, jax.process_index())\n")
    assert folder_facts([none]).host_switches == frozenset()  # read whatever it is told: host-aware, no switch


def _evaluating(tmp_path: Path, loader: str, *loads: str) -> Path:
    """A script that feeds a pmapped eval step from each of `loads`, calls of the project module `proj/data.py`
    (`loader` its source), one loop a call, from line 5 on, two lines a loop."""
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "data.py", loader)
    loops = "".join(f"for batch in {load}:\n    p_eval(state, batch)\n" for load in loads)
    return write(tmp_path / "train.py",
                 "import jax\nfrom proj import data\n\np_eval = jax.pmap(eval_step, axis_name='b')\n" + loops)


def test_an_evaluation_call_of_a_loader_split_by_host_only_for_training_loads_everything_on_every_host(tmp_path):
    script = _evaluating(tmp_path, _SPLIT_IF_TRAINING, "data.load('test', is_training=False, batch_size=8)",
                         "data.load('train', True, 8)", "data.load('train', training, 8)")
    said = _said_on(script, 5)
    assert "only when is_training is true (here False)" in said["global-batch-per-host"]
    assert "global-batch-per-host" not in _said_on(script, 7)  # the training call splits by host
    assert "global-batch-per-host" not in _said_on(script, 9)  # a flag the tool cannot read: not guessed


def test_a_split_compared_with_the_training_split_and_its_default(tmp_path):
    script = _evaluating(tmp_path, _SPLIT_IF_TRAIN_SPLIT, "data.load(split='test')", "data.load()")
    assert "global-batch-per-host" in _said_on(script, 5)
    assert "global-batch-per-host" not in _said_on(script, 7)  # the default, 'train', splits by host


_SAMPLER = ("import jax\n\n\ndef _decode(x):\n    return x * 2\n\n\ndef sample(state, x):\n"
            "    p_decode = jax.pmap(_decode)\n    out = []\n    out.append(p_decode(x))\n    return finish(out)\n\n\n"
            "def place(x):\n    return jax.pmap(lambda v: v)(x)\n\n\ndef plain(x):\n    return x + 1\n")


def test_a_project_function_that_returns_a_pmapped_steps_output_hands_back_pmap_stacks(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    models = write(tmp_path / "proj" / "models.py", _SAMPLER)
    assert folder_facts([models]).pmap_runners == {"sample"}  # a pmap of a lambda places values, it runs no step
    script = write(tmp_path / "train.py",
                   "import jax\nfrom proj.models import sample, place, plain\n\n"
                   "step = jax.pmap(f, axis_name='i')\npredictions = sample(state, batch)\n"
                   "host = jax.device_get(predictions)\nother = jax.device_get(plain(batch))\n"
                   "if jax.process_index() == 0:\n    sample(state, batch)\n    plain(batch)\n")
    assert "numpy-of-global" in _said_on(script, 6)
    assert "numpy-of-global" not in _said_on(script, 7)
    assert "process-zero-collective" in _said_on(script, 9)  # a compiled step on process 0 only
    assert "process-zero-collective" not in _said_on(script, 10)


_NESTED_COPY = ("import jax\n\n\ndef rows_of(tree):\n    def take(leaf):\n        return leaf * 2\n"
                "    return jax.tree_util.tree_map(take, tree)\n\n\n"
                "def first_of(tree):\n    def take(leaf):\n        leaf = leaf[0]\n        return leaf\n"
                "    return jax.tree_util.tree_map(take, tree)\n")


def test_a_helper_that_maps_a_nested_function_taking_device_zeros_copy_is_an_unreplicate(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    utils = write(tmp_path / "proj" / "utils.py", _NESTED_COPY)
    assert folder_facts([utils]).copies == {("first_of", "unreplicate")}  # each helper's own nested `take`
    script = write(tmp_path / "train.py",
                   "import jax\nfrom proj.utils import first_of, rows_of\n\nstep = jax.pmap(f, axis_name='i')\n"
                   "out = step(x)\nlog(first_of(out))\nlog(rows_of(out))\n")
    assert "jax-utils-replicate" in _said_on(script, 6)
    assert "jax-utils-replicate" not in _said_on(script, 7)


def test_a_project_loader_that_prefetches_its_stacks_to_the_devices_is_flax_prefetch(tmp_path):
    (tmp_path / "data.py").write_text(
        "import jax\nfrom flax import jax_utils\n\n"
        "def _stack(x):\n    return x.reshape((jax.local_device_count(), -1) + x.shape[1:])\n\n"
        "def to_device(batches):\n    return jax_utils.prefetch_to_device(map(_stack, batches), 2)\n\n"
        "def create_dataset(args):\n    return to_device(read(args))\n\n"
        "def create_plain(args):\n    return map(_stack, read(args))\n")
    script = tmp_path / "train.py"
    script.write_text("import jax\nimport data\n\np_step = jax.pmap(step, axis_name='d')\n"
                      "it = data.create_dataset(args)\nplain = data.create_plain(args)\n"
                      "for batch in it:\n    state = p_step(state, batch)\n"
                      "for batch in plain:\n    state = p_step(state, batch)\n")
    found = {(f.line, f.rule) for f in migrate.migrate(script, show=False)}
    assert (5, "flax-prefetch") in found and (5, "local-batch") not in found, found
    assert (6, "local-batch") in found and (6, "flax-prefetch") not in found, found


def test_a_package_s_init_re_exports_its_modules_to_the_script(tmp_path):
    package = tmp_path / "data"
    package.mkdir()
    (package / "__init__.py").write_text("from .tfds import create_iterator\n")
    (package / "tfds.py").write_text("def create_iterator(args):\n    return read(args)\n")
    (package / "other.py").write_text("def unused():\n    pass\n")
    script = tmp_path / "train.py"
    script.write_text("from data import create_iterator\n")
    assert [p.name for p in project_modules(script)] == ["__init__.py", "tfds.py"]


_STEP_MAKER = ("import jax\n\n\ndef train_step_pmap(tx, loss_fn):\n    def step(state, batch):\n"
               "        return state, {'loss': loss_fn(state, batch)}\n\n    return jax.pmap(step, axis_name='devices')\n\n\n"
               "def pad_with_keys(data, key):\n"
               "    seeds = jax.pmap(lambda k: jax.random.split(k, num=data.shape[1]))(key)\n    return data + seeds\n")


def test_a_project_function_that_returns_a_pmap_of_its_own_step_is_a_pmap_and_its_step_pmapped(tmp_path):
    write(tmp_path / "proj" / "__init__.py", "")
    write(tmp_path / "proj" / "steps.py", _STEP_MAKER)
    assert folder_facts([tmp_path / "proj" / "steps.py"]).pmappers == {"train_step_pmap"}  # not pad_with_keys
    script = write(tmp_path / "train.py",
                   "import jax\nimport numpy as np\nfrom proj.steps import pad_with_keys, train_step_pmap\n\n"
                   "p_step = train_step_pmap(tx, loss_fn)\nstate, metrics = p_step(state, pad_with_keys(x, k))\n"
                   "host = jax.tree.map(lambda x: np.array(x).mean(), metrics)\n")
    assert "pmap" in _said_on(script, 5)
    assert "pmap" not in _said_on(script, 6)  # pmaps a lambda of its own: it places values, it wraps no step
    assert "numpy-of-global" in _said_on(script, 7)  # p_step's output is a per-device stack


_TRAINER = ("import jax\n\n\nclass Trainer:\n    def __init__(self, training_step, train_pmap_kwargs):\n"
            "        self.training_step = training_step\n        self.train_pmap_kwargs = train_pmap_kwargs\n\n"
            "    def train(self, state, data):\n"
            "        step = jax.pmap(self.training_step, **self.train_pmap_kwargs)\n"
            "        for batch in data:\n            state = step(state, batch)\n        return state\n")
_USES_TRAINER = ("import jax\nfrom speech_jax import training\n\n\ndef training_step(state, batch):\n"
                 "    grads = jax.grad(loss)(state.params, batch)\n    return jax.lax.pmean(grads, axis_name='batch')\n\n\n"
                 "trainer = training.Trainer(training_step=training_step,\n"
                 "                           train_pmap_kwargs={'axis_name': 'batch'})\n"
                 "state = trainer.train(state, data)\n")


def test_a_src_layout_trainer_that_pmaps_the_step_it_is_handed_is_said_where_pmaps_keywords_are(tmp_path):
    write(tmp_path / "src" / "speech_jax" / "__init__.py", "")
    write(tmp_path / "src" / "speech_jax" / "training.py", _TRAINER)
    script = write(tmp_path / "projects" / "finetune.py", _USES_TRAINER)
    assert tmp_path / "src" / "speech_jax" / "training.py" in project_modules(script)
    assert "pmap" in _said_on(script, 11) and "pmap" not in _said_on(script, 10)  # the line naming the axis
    assert "pmap" not in _said_on(script, 12)  # train() runs the pmap the object was handed, it wraps nothing
    assert "N times too large" in _said_on(script, 7)["pmap-collective"]  # the gradient trap in the handed step
    alone = write(tmp_path / "alone" / "finetune.py", _USES_TRAINER)  # out of view: the keywords still say pmap
    assert "pmap" in _said_on(alone, 11)


def test_a_helper_that_puts_keys_split_one_a_device_on_the_devices_is_no_replicate(tmp_path):
    script = write(tmp_path / "train.py",
                   "import jax\n\n\ndef put_keys(key):\n    keys = jax.random.split(key, jax.local_device_count())\n"
                   "    return jax.device_put_sharded(list(keys), jax.local_devices())\n\n\n"
                   "def put_copies(x):\n    devices = jax.local_devices()\n"
                   "    return jax.device_put_sharded(len(devices) * [x], devices)\n\n\n"
                   "step = jax.pmap(f, axis_name='i')\nstep(put_copies(params), put_keys(key))\n")
    said = [f.does for f in migrate.migrate(script, show=False) if f.line == 15 and f.rule == "jax-utils-replicate"]
    assert any("put_copies" in d for d in said) and not any("put_keys" in d for d in said)
