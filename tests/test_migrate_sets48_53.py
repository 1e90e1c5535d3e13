"""What the blind labels of sets 48-53 found missing: a device count the script stops without (`if num_devices !=
jax.device_count(): raise`) or binds in one branch of two, keys split to a multiple of it, a project's pmaps that
place values (`shard = jax.pmap(lambda x: x)`, `jax.pmap(lambda _: tree)(dummy)`) or hand back outputs, and a
project's loaders that load the whole batch on every host: a subclass of torch's DataLoader, or one handed the batch
size and nothing of the host (said at the size, as a DataLoader without a sampler is)."""
from migrate_support import package, project_rules, rule_set, write

_CHECKED = """import jax

num_devices = args.num_devices
if num_devices != jax.device_count():
    raise ValueError('expected %d devices' % num_devices)
x = jax.random.normal(key, (num_devices, batch // num_devices, 3))
keys = jax.random.split(key, num_devices)
step = jax.pmap(update, axis_name='p')
out = step(x, keys)
"""


def test_a_count_the_script_stops_without_counts_devices():
    found = rule_set(_CHECKED)
    assert {(6, "local-batch"), (7, "per-device-keys")} <= found, found
    unchecked = _CHECKED.replace("if num_devices != jax.device_count():", "if num_devices > 64:")
    assert (6, "local-batch") not in rule_set(unchecked)  # a cap, not a count of devices


_UTILS = """import jax
import jax.numpy as jnp

shard = jax.pmap(lambda x: x)


def replicate(pytree, num_devices):
    dummy = jnp.empty(num_devices)
    return jax.pmap(lambda _: pytree)(dummy)


def scaled(pytree, num_devices):
    return jax.pmap(lambda x: x * 2)(pytree)
"""

_TRAIN = """import jax
import jax.numpy as jnp
from src.utils import replicate, shard, scaled

n = jax.local_device_count()
update = jax.pmap(step, axis_name='p')
params = replicate(params, n)
x = jax.random.normal(key, (n, 16, 3))
keys = jax.random.split(key, n)
x, keys = shard(x), shard(keys)
grads_acc = shard(jax.tree_util.tree_map(jnp.zeros_like, params))
rate_acc = shard(jnp.zeros(n))
y = scaled(x, n)
params, x = update(params, x, keys, grads_acc, rate_acc, y)
key, *subkeys = jax.random.split(key, n + 1)
params, x = update(params, x, shard(jnp.stack(subkeys)), grads_acc, rate_acc, y)
"""


def test_a_projects_pmaps_that_place_values_are_said_by_what_they_place(tmp_path):
    package(tmp_path, "src", utils=_UTILS)
    found = project_rules(write(tmp_path / "train.py", _TRAIN))
    assert (7, "jax-utils-replicate") in found, found  # a pmap of a function that ignores its input
    assert {(10, "local-batch"), (10, "per-device-keys")} <= found, found  # rows, and keys split one a device
    assert {(11, "jax-utils-replicate"), (12, "jax-utils-replicate")} <= found, found  # copies and an accumulator
    assert not {(11, "local-batch"), (12, "local-batch")} & found, found
    assert not {rule for line, rule in found if line == 13}, found  # a pmap that computes: neither
    assert (16, "per-device-keys") in found and (16, "local-batch") not in found, found  # split keys, stacked again


_LOADER = """import torch.utils.data as data


class NumpyLoader(data.DataLoader):
    def __init__(self, dataset, batch_size=1, shuffle=False):
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle)
"""


def test_a_projects_subclass_of_torchs_data_loader_loads_the_whole_batch_on_every_host(tmp_path):
    package(tmp_path, "proj", data=_LOADER)
    script = write(tmp_path / "train.py", "import jax\nfrom proj.data import NumpyLoader\n\n"
                   "def train_step(state, batch):\n    return jax.pmap(step, axis_name='b')(state, batch)\n\n\n"
                   "loader = NumpyLoader(train_ds, batch_size=cfg.batch)\nfor batch in loader:\n"
                   "    state = train_step(state, batch)\n")
    found = project_rules(script)
    assert (8, "global-batch-per-host") in found, found
    sampled = script.read_text().replace("batch_size=cfg.batch)", "batch_size=cfg.batch, sampler=DistributedSampler("
                                         "train_ds, jax.process_count(), jax.process_index()))")
    found = project_rules(write(script, sampled))
    assert (8, "global-batch-per-host") not in found, found  # each host samples its own rows


_SAMPLER = """import jax
from functools import partial


@partial(jax.pmap, axis_name='p', in_axes=(0, None))
def sample_x(keys, x):
    return keys, x, jax.lax.pmean(x.mean(), 'p')
"""


def test_device_zeros_entry_of_what_a_projects_pmapped_step_hands_back_is_an_unreplicate(tmp_path):
    package(tmp_path, "src", vmc=_SAMPLER)
    script = write(tmp_path / "train.py", "import jax\nimport src.vmc\n\nupdate = jax.pmap(step, axis_name='p')\n"
                   "keys, x, rate = src.vmc.sample_x(keys, x)\nprint(rate[0])\nstate = src.vmc.load(path)\n"
                   "print(state[0])\n")
    found = project_rules(script)
    assert (6, "jax-utils-replicate") in found, found
    assert not {rule for line, rule in found if line in (7, 8)}, found  # the project's other functions: not pmap's


_KEYS_AND_BRANCHES = """import jax
import einops

n_local = jax.local_device_count()
step = jax.pmap(update, axis_name='i')
key, t_key, *local_keys = jax.random.split(key, 2 + 2 * n_local)
step_keys = jax.random.split(key, n_local * cfg.envs)
rows = jax.random.split(key, cfg.batch // n_local)
if jax.default_backend() == 'gpu':
    n_devices = jax.local_device_count()
else:
    n_devices = 1
batch = einops.rearrange(images, '(n b) h w c -> n b h w c', n=n_devices)
state = step(state, batch, step_keys)
"""


def test_keys_split_to_a_multiple_of_the_devices_and_a_count_bound_in_one_branch_of_two():
    found = rule_set(_KEYS_AND_BRANCHES)
    assert {(6, "per-device-keys"), (7, "per-device-keys")} <= found, found  # so many keys a device
    assert (6, "local-batch") not in found, found  # a count of keys, not of a batch's rows
    assert (8, "per-device-keys") not in found, found  # keys a row: fewer than the devices
    assert (13, "local-batch") in found, found  # n_devices is the device count on a GPU, 1 elsewhere


_DATASETS = """import jax
import numpy as np
from functools import partial


class Dataset:
    def __init__(self, path, batch_size):
        self.rows = np.load(path)
        self.batch_size = batch_size


class BatchSampler:
    def __init__(self, batch_size):
        self.batch_size = batch_size

    @partial(jax.pmap, static_broadcasted_argnums=(0,))
    def sample(self, key):
        return jax.random.normal(key, (self.batch_size, 3))
"""


def test_a_projects_loader_handed_the_batch_size_and_no_host_loads_the_whole_batch_on_every_host(tmp_path):
    package(tmp_path, "proj", data=_DATASETS)
    source = ("import jax\nfrom proj.data import BatchSampler, Dataset\n\np_step = jax.pmap(step, axis_name='b')\n"
              "train = Dataset(\n    'train.npy',\n    batch_size=cfg.batch_size,\n)\n"
              "evaluate = Dataset('eval.npy', batch_size_per_device)\nstate = run(p_step, train)\n"
              "sampler = BatchSampler(batch_size=cfg.batch_size)\n")
    found = project_rules(write(tmp_path / "train.py", source))
    assert (7, "global-batch-per-host") in found, found  # said at the size it is handed
    assert (9, "global-batch-per-host") not in found, found  # a size per device: another rule's
    assert (11, "global-batch-per-host") not in found, found  # a sampler that draws on each device
    write(tmp_path / "proj" / "data.py", _DATASETS.replace(
        "np.load(path)", "np.load(path)[jax.process_index()::jax.process_count()]"))
    found = project_rules(tmp_path / "train.py")
    assert (7, "global-batch-per-host") not in found, found  # its body takes this host's rows


def test_a_data_loader_without_a_sampler_is_said_at_its_batch_size():
    found = rule_set("import jax\nfrom torch.utils.data import DataLoader\n\np_step = jax.pmap(step, axis_name='b')\n"
                     "loader = DataLoader(\n    train_set,\n    shuffle=True,\n    batch_size=cfg.batch,\n)\n")
    assert (8, "global-batch-per-host") in found and (6, "global-batch-per-host") not in found, found


def test_the_last_devices_entry_of_a_pmap_output_is_an_unreplicate_too():
    found = rule_set("import jax\n\nstep = jax.pmap(update, axis_name='i')\nstate, loss = step(state, batch)\n"
                     "print(loss[-1].item())\nhistory = [1, 2]\nprint(history[-1])\n")
    assert (5, "jax-utils-replicate") in found and not {r for line, r in found if line == 7}, found
