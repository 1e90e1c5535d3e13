"""Grain input pipelines for notebook 11 and `notebooks/scripts/train_stack.py`.

Training: `HostLoader` gives one host its part of every global batch. The records are shuffled
by Grain with one seed, so every host computes the same order (a new one each epoch) without
talking to the others; step `s` of that order is the same global batch whatever the number of
hosts, and host `h` of `H` reads only its own contiguous block of it:

    >>> loader = HostLoader(ArrayRecords(*train.dataset()), 256, ShardOptions(1, 2), seed=0)
    >>> loader.batch(3)["x"].shape     # host 1's 128 rows of step 3's 256
    (128, 4)

Evaluation: `eval_batch` gives one host its share of a whole data set whose size need not
divide the hosts or the devices, padded to equal rows per host, with a mask that marks the
real rows (1.0) and the padding (0.0).
"""
from __future__ import annotations

import math

import grain
import numpy as np
from grain.sharding import ShardOptions

__all__ = ["ArrayRecords", "HostLoader", "ShardOptions", "eval_batch", "padded_rows",
           "pad_with_mask"]


class ArrayRecords:
    """A random-access Grain data source over arrays: record i is {'id': i, 'x': x[i], 'y': y[i]}.

    `reads` lists every record id read so far, in order: which records a host really loaded.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray):
        if len(x) != len(y) or len(x) == 0:
            raise ValueError(f"x and y need the same, positive number of rows; got {len(x)} and {len(y)}")
        self.x, self.y = x, y
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, record_id: int) -> dict[str, np.ndarray]:
        record_id = int(record_id)
        self.reads.append(record_id)
        return {"id": np.int32(record_id), "x": self.x[record_id], "y": self.y[record_id]}


def _whole(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be a whole number of at least {low}; got {value!r}")
    return int(value)


class HostLoader:
    """One host's rows of each global batch: a shared shuffle (new each epoch), split by host.

    `shard` says which host this is (`grain.sharding.ShardByJaxProcess()` in a real run, which
    reads `jax.process_index()` and `jax.process_count()`); only its `shard_index` and
    `shard_count` are read, so its `drop_remainder` changes nothing. Each epoch keeps
    `len(source) // global_batch` whole batches and drops the rest of the records.
    """

    def __init__(self, source: ArrayRecords, global_batch: int, shard: ShardOptions, seed: int):
        self.global_batch = _whole("global_batch", global_batch)
        self.host, self.num_hosts = shard.shard_index, shard.shard_count
        if self.global_batch % self.num_hosts:
            raise ValueError(f"the global batch ({self.global_batch}) must split evenly over "
                             f"{self.num_hosts} hosts; pick a multiple of {self.num_hosts}")
        self.steps_per_epoch = len(source) // self.global_batch
        if self.steps_per_epoch == 0:
            raise ValueError(f"the data set has {len(source)} records, fewer than one global "
                             f"batch of {self.global_batch}")
        self.source = source
        self.seed = seed
        # every host builds the same lazy order: shuffled with `seed`, reshuffled each epoch
        self.records = grain.MapDataset.source(source).shuffle(seed=seed).repeat()

    @property
    def rows_per_host(self) -> int:
        """How many rows of each global batch this host reads."""
        return self.global_batch // self.num_hosts

    def positions(self, step: int) -> range:
        """Where this host's rows of `step` sit in the shuffled, repeated record stream."""
        epoch, k = divmod(_whole("step", step, 0), self.steps_per_epoch)
        start = epoch * len(self.source) + k * self.global_batch + self.host * self.rows_per_host
        return range(start, start + self.rows_per_host)

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This host's rows of global batch `step`: {'id': [L], 'x': [L, 4], 'y': [L, 1]} (L = rows_per_host)."""
        where = self.positions(step)
        return self.records[where.start:where.stop].batch(len(where))[0]

    def state(self, next_step: int) -> dict[str, int]:
        """The loader's position as a checkpoint stores it: the same on any number of hosts."""
        return {"next_step": int(next_step), "global_batch": self.global_batch,
                "seed": int(self.seed), "records": len(self.source)}


def padded_rows(num_records: int, num_hosts: int, local_devices: int) -> int:
    """Rows every host passes when `num_records` are split over hosts: its share, rounded up to its devices."""
    per_host = math.ceil(_whole("num_records", num_records) / _whole("num_hosts", num_hosts))
    devices = _whole("local_devices", local_devices)
    return math.ceil(per_host / devices) * devices


def pad_with_mask(batch: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """`batch` padded with zero rows up to `rows`, plus 'mask': 1.0 for real rows, 0.0 for padding."""
    have = len(next(iter(batch.values())))
    if have > rows:
        raise ValueError(f"the batch has {have} rows, more than the {rows} to pad to")
    padded = {k: np.concatenate([v, np.zeros((rows - have, *v.shape[1:]), v.dtype)])
              for k, v in batch.items()}
    padded["mask"] = (np.arange(rows) < have).astype(np.float32)
    return padded


def eval_batch(source: ArrayRecords, shard: ShardOptions, local_devices: int) -> dict[str, np.ndarray]:
    """This host's share of the whole evaluation set (every num_hosts-th record), padded and masked."""
    mine = grain.MapDataset.source(source)[shard.shard_index::shard.shard_count]
    rows = padded_rows(len(source), shard.shard_count, local_devices)
    return pad_with_mask(mine.batch(len(mine))[0], rows)
