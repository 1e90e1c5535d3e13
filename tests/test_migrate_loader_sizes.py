"""How big each host's batch is, read from what a loader is told (helpers.migrate.loader_rules, data_rules): a size per
device or per host handed to a loader, a batch_dims list led by the local device count, a reshape whose device count
sits on a line of its own, a per-device share of every device that each host stacks in full, and a DataLoader with no
sampler."""
from tests.migrate_support import rule_set, said

PER_DEVICE_KEYWORD = """\
import jax
import pipeline

step = jax.pmap(train_step, axis_name='b')
ds = pipeline.make_input(
    split='train',
    rows_per_device_batch_size=cfg.rows,
    per_device_batch_size=cfg.rows,
)
"""


def test_a_loader_told_a_per_device_size_is_said_at_the_keyword():
    assert (7, "local-batch") in rule_set(PER_DEVICE_KEYWORD)
    assert "per device" in said(PER_DEVICE_KEYWORD, 7, "local-batch")


def test_a_loader_told_a_global_size_or_a_counting_helper_is_not_a_per_device_size():
    source = PER_DEVICE_KEYWORD.replace("per_device_batch_size", "global_batch_size").replace(
        "rows_per_device_batch_size", "rows")
    assert not any(rule == "local-batch" for _, rule in rule_set(source))
    counted = "import jax\nimport pipeline\nstep = jax.pmap(f)\nn = pipeline.get_num_examples(process_batch_size=8)\n"
    assert not any(rule == "local-batch" for _, rule in rule_set(counted))


def test_a_per_device_keyword_of_a_script_with_no_pmap_is_not_said():
    assert not any(rule == "local-batch" for _, rule in rule_set(PER_DEVICE_KEYWORD.replace(
        "step = jax.pmap(train_step, axis_name='b')\n", "")))


BATCH_DIMS = """\
import jax

step = jax.pmap(train_step, axis_name='b')
batch_dims = [
    jax.local_device_count(),
    cfg.per_device,
]
"""


def test_batch_dims_led_by_the_local_device_count_is_said_where_the_count_is():
    assert (5, "local-batch") in rule_set(BATCH_DIMS)
    flat = BATCH_DIMS.replace("    jax.local_device_count(),\n", "    cfg.rows,\n")
    assert not any(rule == "local-batch" for _, rule in rule_set(flat))


RESHAPE_OVER_LINES = """\
import jax


class Trainer:
    def __init__(self):
        self.n_dev = jax.local_device_count()
        self.step = jax.pmap(train_step, axis_name='b')

    def next_batch(self, rows, per_device):
        rows = rows.reshape(
            self.n_dev, per_device,
            *rows.shape[1:])
        return self.step(rows)
"""


def test_a_reshape_by_a_device_count_held_in_an_attribute_is_said_at_the_count():
    assert {(10, "local-batch"), (11, "local-batch")} <= rule_set(RESHAPE_OVER_LINES)
    other = RESHAPE_OVER_LINES.replace("self.n_dev = jax.local_device_count()", "self.n_dev = cfg.groups")
    assert not any(rule == "local-batch" for _, rule in rule_set(other))


EVERY_DEVICE_SHARE = """\
import jax

TOTAL = 1024
PER_DEVICE = TOTAL // jax.device_count()
step = jax.pmap(train_step, axis_name='b')
xs = make_rows(TOTAL).reshape(jax.device_count(), PER_DEVICE, -1)
step(xs)
"""


def test_a_share_of_every_device_that_each_host_stacks_in_full_is_said_at_the_share():
    found = rule_set(EVERY_DEVICE_SHARE)
    assert (4, "global-batch-per-host") in found
    assert (6, "global-batch-per-host") not in found
    own = EVERY_DEVICE_SHARE.replace("PER_DEVICE = TOTAL // jax.device_count()", "PER_DEVICE = cfg.per_device")
    assert (4, "global-batch-per-host") not in rule_set(own)


DATA_LOADER = """\
import jax
from torch.utils.data import DataLoader

step = jax.pmap(train_step, axis_name='b')
loader = DataLoader(
    train_set, batch_size=64, drop_last=True)
"""


def test_a_data_loader_with_no_sampler_loads_the_whole_dataset_on_every_host():
    assert (6, "global-batch-per-host") in rule_set(DATA_LOADER)
    sampled = DATA_LOADER.replace("batch_size=64,", "batch_size=64, sampler=host_sampler,")
    assert (6, "global-batch-per-host") not in rule_set(sampled)
    ranked = DATA_LOADER.replace("train_set,", "shard(train_set, jax.process_index()),")
    assert (6, "global-batch-per-host") not in rule_set(ranked)


LOCAL_COUNT = """\
import jax
import loaders


class Trainer:
    def __init__(self):
        self.num_devices = jax.local_device_count()
        self.step = jax.pmap(train_step, axis_name='b')

    def batches(self, ds, size):
        return loaders.stream(ds, size,
                              num_devices=self.num_devices)
"""


def test_a_loader_told_this_hosts_device_count_stacks_per_device():
    assert (12, "local-batch") in rule_set(LOCAL_COUNT)
    assert "one slice per local device" in said(LOCAL_COUNT, 12, "local-batch")
    assert (12, "local-batch") not in rule_set(LOCAL_COUNT.replace("jax.local_device_count()", "cfg.shards"))
    everyone = rule_set(LOCAL_COUNT.replace("jax.local_device_count()", "jax.device_count()"))
    assert (12, "global-batch-per-host") in everyone and (12, "local-batch") not in everyone
