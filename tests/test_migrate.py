"""helpers.migrate: each pattern found in a script that has it and not in one that does not; the
sections it names exist; bad input gets one line; --diff rewrites only what is safe."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import migrate
from helpers.migrate import LESSONS, findings, rewrite

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "notebooks" / "scripts"
MESH = "import jax\nfrom jax.sharding import NamedSharding, PartitionSpec as P\n" \
       "mesh = jax.make_mesh((2, 4), ('host', 'device'))\n"

# rule -> (a script with the pattern, the line it is on, a script without it)
CASES = {
    "pmap": [
        ("import jax\nstep = jax.pmap(f, axis_name='i')\n", 2, "import jax\nstep = jax.jit(f)\n"),
        ("from jax import pmap\n@pmap\ndef step(x):\n    return x\n", 2,  # a bare decorator
         "import jax\n@jax.jit\ndef step(x):\n    return x\n"),
        ("from functools import partial\nimport jax\n@partial(jax.pmap, axis_name='b', in_axes=(0, None))\n"
         "def step(p, x):\n    return p\n", 3, "from functools import partial\nimport jax\n"
         "@partial(jax.jit, static_argnums=1)\ndef step(p, x):\n    return p\n"),
    ],
    "pmap-collective": [
        ("import jax\nfrom flax.training import common_utils\ns = jax.pmap(f, axis_name='batch')\n"  # old Flax's
         "def f(metrics):\n    return common_utils.pmean(metrics)\n", 5,  # pmean over 'batch'
         "import jax\nfrom flax.training import common_utils\ndef f(labels):\n    return common_utils.onehot(labels, 10)\n"),
        ("import jax\nfrom jax import lax\ns = jax.pmap(f, axis_name='batch')\ndef f(emb):\n"
         "    return lax.pswapaxes(emb, 'batch', 0)\n", 5,
         "import jax\nfrom jax import lax\ndef f(emb):\n    return lax.pswapaxes(emb, ('host', 'device'), 0)\n"),
        ("import jax\nfrom jax import lax\n@jax.pmap\ndef f(g):\n    return lax.psum(g, 'i')\n"
         "h = jax.pmap(f, axis_name='i')\n", 5,
         "import jax\ndef body(g):\n    return jax.lax.psum(g, ('host', 'device'))\n"),
        ("import jax\ns = jax.pmap(f, axis_name='batch')\ndef f(grads):\n"
         "    return jax.lax.pmean(grads, axis_name='batch')\n", 4,
         "import jax\ndef f(grads):\n    return jax.lax.pmean(grads, 'data')\n"),
        ("import jax\ns = jax.pmap(f, axis_name='batch')\ndef f(rng):\n"  # pmap's axis handed to a helper
         "    return bind_to_device(rng, axis_name='batch')\n", 4,
         "import jax\ns = jax.pmap(f, axis_name='batch')\n"),
    ],
    "device-put-replicated": [
        ("import jax\nparams = jax.device_put_replicated(params, jax.local_devices())\n", 2,
         MESH + "params = jax.device_put(params, NamedSharding(mesh, P()))\n"),
        ("import jax\nx = jax.device_put_sharded(list(x), jax.devices())\n", 2, "import jax\nx = jax.device_put(x)\n"),
    ],
    "experimental-shard-map": [
        ("from jax.experimental.shard_map import shard_map\n", 1, "from jax import shard_map\n"),
        ("import jax\nfrom jax.experimental import shard_map, multihost_utils\n", 2,
         "from jax.experimental import multihost_utils\n"),
    ],
    "mesh-of-local-devices": [
        ("import jax\nimport numpy as np\nfrom jax.sharding import Mesh\n"
         "mesh = Mesh(np.array(jax.local_devices()), ('data',))\n", 4,
         "import jax\nimport numpy as np\nfrom jax.sharding import Mesh\nmesh = Mesh(np.array(jax.devices()), ('data',))\n"),
    ],
    "with-mesh": [
        ("from jax.experimental import maps\nmesh = maps.Mesh(devices, ('dp', 'mp'))\nwith mesh:\n    pass\n", 3,
         "from jax.experimental import maps\nmesh = maps.Mesh(devices, ('dp', 'mp'))\nwith open('f') as mesh_log:\n"
         "    pass\n"),
        ("from utils import get_mp_mesh\nm = get_mp_mesh('1,-1')\nwith m:\n    pass\n", 3,  # a project's mesh
         "from utils import get_logger\nm = get_logger('x')\nwith m:\n    pass\n"),
        (MESH + "with mesh:\n    y = f(x)\n", 4, MESH + "with jax.set_mesh(mesh):\n    y = f(x)\n"),
        ("import jax\nfrom jax.sharding import Mesh\nm = Mesh(jax.devices(), ('data',))\nwith m:\n    pass\n", 4,
         "with open('log.txt') as log:\n    pass\n"),
    ],
    "local-batch": [
        ("import jax\nstep = jax.pmap(f)\nemb, state = step(params, batch)\nemb = emb.reshape((-1, 128))\n", 4,
         "import jax\nstep = jax.pmap(f)\nemb, state = step(params, batch)\nemb = emb.reshape((8, 16, 128))\n"),
        ("import jax\ndef stack(x, n):\n    return x.reshape((n, -1) + x.shape[1:])\n"  # a helper of the script,
         "n_dev = jax.local_device_count() if use_pmap else 1\nx = stack(rows, n_dev)\n", 5,  # handed the count
         "import jax\ndef stack(x, n):\n    return x.reshape((n, -1) + x.shape[1:])\nx = stack(rows, 4)\n"),
        ("import jax\nbatch_size = 32 * jax.local_device_count()\n", 2,
         "import jax\nprint(jax.local_device_count(), 'devices')\n"),
        ("import jax\nx = x.reshape(jax.local_device_count(), -1, 4)\n", 2, "import jax\nx = x.reshape(-1, 4)\n"),
        ("import jax\nn = jax.device_count()\nstep = jax.pmap(f)\nprefix = (n, 16)\n"
         "x = x.reshape(prefix + x.shape[1:])\n", 5,
         "import jax\nn = jax.device_count()\nx = x.reshape((n, 16) + x.shape[1:])\n"),  # a reshape for pmap, by names
        ("import jax\nn = jax.local_device_count()\nstep = jax.pmap(f)\nds = load(split, batch_dims=[n, 32])\n", 4,
         "import jax\nn = jax.local_device_count()\nstep = jax.pmap(f)\nds = load(split, batch_dims=[32])\n"),
    ],
    "jax-utils-replicate": [
        ("import jax\nfrom lib import helpers\nstep = jax.pmap(f)\nscalars = helpers.get_first(step(x))\n", 4,
         "from lib import helpers\nscalars = helpers.get_first(rows)\n"),  # no pmap: a name says nothing
        ("import jax\nfrom jaxline import utils\ninit = jax.pmap(f)\nrng = utils.bcast_local_devices(rng)\n", 4,
         "import jax\nfrom jaxline import utils\ninit = jax.pmap(f)\ndef bcast_local_devices(x):\n    return x\n"
         "rng = bcast_local_devices(rng)\n"),  # the script's own helper of that name, which copies nothing
        ("import jax\nimport jax.numpy as jnp\nn_local = jax.local_device_count()\nstep = jax.pmap(f)\n"
         "d = jnp.repeat(dic[None, ...], n_local, axis=0)\n", 5,
         "import jax.numpy as jnp\nd = jnp.repeat(dic[None, ...], 4, axis=0)\n"),
        ("from flax import jax_utils\nstate = jax_utils.replicate(state)\n", 2,
         "def replicate(t):\n    return t\nstate = replicate(state)\n"),
        ("from flax.jax_utils import unreplicate\nparams = unreplicate(state.params)\n", 2,
         "params = state.params\n"),
        ("import jax\nfrom flax import jax_utils\nlogs = jax.tree.map(jax_utils.unreplicate, logs)\n", 3,
         "import jax\nlogs = jax.tree.map(float, logs)\n"),  # handed on uncalled
        ("import jax\nimport numpy as np\nstep = jax.pmap(f)\n"
         "params = jax.tree.map(lambda x: np.array(x[0]), params)\n", 4,
         "import jax\nimport numpy as np\nstep = jax.pmap(f)\nparams = jax.tree.map(lambda x: np.array(x), params)\n"),
        ("import jax\nstep = jax.pmap(f)\nloss, metrics = step(params, batch)\nfor name, value in metrics.items():\n"
         "    log(name, value[0])\n", 5,
         "import jax\nstep = jax.pmap(f)\nfor name, value in config.items():\n    log(name, value[0])\n"),
        ("import jax\nimport jax.numpy as jnp\nn = jax.local_device_count()\ninit = jax.pmap(make)\n"
         "keys = jnp.broadcast_to(key, (n,) + key.shape)\n", 5,
         "import jax\nimport jax.numpy as jnp\ninit = jax.pmap(make)\n"
         "keys = jnp.broadcast_to(key, (1,) + key.shape)\n"),
    ],
    "device-only-spec": [
        (MESH + "x = jax.make_array_from_process_local_data(NamedSharding(mesh, P('device')), rows)\n", 4,
         MESH + "x = jax.make_array_from_process_local_data(NamedSharding(mesh, P(('host', 'device'))), rows)\n"),
        (MESH + "sharding = NamedSharding(mesh, P('device'))\n"
         "x = jax.make_array_from_process_local_data(sharding, rows)\n", 4,
         MESH + "step = jax.shard_map(f, mesh=mesh, in_specs=P('device'), out_specs=P())\n"),
    ],
    "process-zero-collective": [
        ("import jax\nif jax.process_index() == 0:\n    p = jax.device_get(state.params)\n", 3,
         "import jax\nif jax.process_index() == 0:\n    step = jax.device_get(state.step).item()\n"),  # a scalar
        ("import jax\nfrom jax.experimental import multihost_utils\nif jax.process_index() == 0:\n"
         "    every = multihost_utils.process_allgather(loss)\n", 4,
         "import jax\nif jax.process_index() == 0:\n    print(loss)\n"),
        ("import jax\nstep = jax.jit(f)\nif 0 == jax.process_index():\n    loss = step(params)\n", 4,
         "import jax\nstep = jax.jit(f)\nloss = step(params)\nif jax.process_index() == 0:\n    print(loss)\n"),
        (MESH + "step = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P(('host', 'device'))))\n"
         "losses = step(params)\nif jax.process_index() == 0:\n    print(float(losses.mean()))\n", 7,
         MESH + "step = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P()))\n"
         "loss = step(params)\nif jax.process_index() == 0:\n    print(float(loss))\n"),
    ],
    "process-zero-save": [
        ("import jax\nclass E:\n    def __init__(self):\n        self.update = jax.pmap(self._update, axis_name='i')\n"
         "    def step(self, x):\n        self._state, out = self.update(self._state, x)\n"
         "    def save(self):\n        self._checkpointer.maybe_save_checkpoint(self._state, step=1)\n", 8,
         "import jax\nclass E:\n    def save(self):\n        self._checkpointer.maybe_save_checkpoint(self._state)\n"),
        ("import jax\nfrom flax.training import checkpoints\nif jax.process_index() == 0:\n"
         "    checkpoints.save_checkpoint('ckpt', state, step)\n", 4,
         "import jax\nfrom flax.training import checkpoints\ncheckpoints.save_checkpoint('ckpt', state, step)\n"),
        ("import jax\nimport orbax.checkpoint as ocp\nmanager = ocp.CheckpointManager(path)\n"
         "if not jax.process_index():\n    manager.save(step, args=ocp.args.StandardSave(state))\n", 5,
         "import jax\nimport numpy as np\nif jax.process_index() == 0:\n    np.save('losses.npy', losses)\n"),
        ("import jax\nfrom flax.training import checkpoints\ndef save_ckpt(state):\n"
         "    checkpoints.save_checkpoint('ckpt', state, 0)\nif jax.process_index() == 0:\n    save_ckpt(state)\n", 6,
         "import jax\ndef save_model_checkpoint(model, params):\n"  # a helper that only writes host bytes
         "    model.save_pretrained('out', params=params)\nif jax.process_index() == 0:\n"
         "    save_model_checkpoint(model, params)\n"),
    ],
    "nnx-pmap": [
        ("from flax import nnx\n@nnx.pmap(axis_name='batch', in_axes=(state_axes, 0))\ndef step(m, x):\n"
         "    return m(x)\n", 2, "from flax import nnx\n@nnx.jit\ndef step(m, x):\n    return m(x)\n"),
        ("import flax.nnx as nnx\nstep = nnx.pmap(f, axis_name='i')\n", 2, "import jax\nstep = jax.pmap(f)\n"),
    ],
    "nnx-split-rngs": [
        ("import jax\nfrom flax import nnx\nhost, local = jax.process_index(), jax.local_device_count()\n"
         "@nnx.split_rngs(splits=local)\n"
         "def step(m):\n    return m\n", 4,
         "from flax import nnx\n@nnx.split_rngs(splits=3)\n@nnx.vmap(axis_size=3)\ndef layers(rngs):\n"
         "    return nnx.Linear(4, 4, rngs=rngs)\n"),
        ("from flax import nnx\nf = nnx.split_rngs(nnx.pmap(g, axis_name='b'), splits=n)\n", 2,
         "from flax import nnx\nwith nnx.split_rngs(model, splits=mesh.size):\n    pass\n"),
    ],
    "nnx-state-axes": [
        ("from flax import nnx\naxes = nnx.StateAxes({Custom: 0, nnx.RngState: 0, ...: None})\n", 2,
         "from flax import nnx\nspecs = nnx.StateSharding({Custom: P(DATA), ...: P()})\n"),
        ("from flax.nnx import StateAxes\naxes = StateAxes({...: None})\n", 2, "axes = {'params': None}\n"),
        ("from flax import nnx\naxes = nnx.StateAxes({'dropout': 0, ...: None})\n"
         "f = nnx.pmap(g, in_axes=(axes, 0))\n", 2,
         "from flax import nnx\naxes = nnx.StateAxes({'dropout': None, ...: nnx.Carry})\n"  # a scan within each device
         "@nnx.scan(in_axes=(axes, nnx.Carry, 1))\ndef unroll(cell, h, x):\n    return h, x\n"),
    ],
    "flax-shard": [
        ("from flax.training.common_utils import shard\nbatch = shard(batch)\n", 2,
         "def shard(x):\n    return x\nbatch = shard(batch)\n"),
        ("from flax.training import common_utils\nx = common_utils.shard(x)\n", 2, "x = x.reshape(8, -1)\n"),
    ],
    "flax-shard-prng-key": [
        ("from flax.training.common_utils import shard_prng_key\nrngs = shard_prng_key(rng)\n", 2,
         "import jax\nrng, sub = jax.random.split(rng)\n"),
        ("import flax.training.common_utils as cu\nkeys = cu.shard_prng_key(key)\n", 2, "keys = key\n"),
    ],
    "flax-get-metrics": [
        ("from flax.training.common_utils import get_metrics\nm = get_metrics(train_metrics)\n", 2,
         "import jax\nm = jax.device_get(train_metrics)\n"),
        ("from flax.training import common_utils\nm = common_utils.get_metrics(ms)\n", 2, "m = ms\n"),
    ],
    "flax-prefetch": [
        ("from flax import jax_utils\nit = jax_utils.prefetch_to_device(it, 2)\n", 2, "it = iter(loader)\n"),
        ("from flax.jax_utils import prefetch_to_device\nit = prefetch_to_device(batches, size=2)\n", 2,
         "def prefetch_to_device(it, size):\n    return it\nit = prefetch_to_device(b, 2)\n"),
    ],
    "flax-pad-shard-unpad": [
        ("from flax import jax_utils\nstep = jax_utils.pad_shard_unpad(p_eval_step)\n", 2, "step = p_eval_step\n"),
        ("from flax.jax_utils import pad_shard_unpad\nout = pad_shard_unpad(f, static_argnums=(0,))(s, b)\n", 2,
         "out = f(s, b)\n"),
        ("import jax\nimport numpy as np\nn = jax.local_device_count()\nsize = int(np.ceil(len(rows) / n) * n)\n", 4,
         "import jax\nn = jax.local_device_count()\nrows_per_host = 32 * n\n"),  # padding by hand, and a batch size
    ],
    "replicate-method": [
        ("state = TrainState.create(apply_fn=f, params=p, tx=tx)\nstate = state.replicate()\n", 2,
         "state = state.replace(step=0)\n"),
        ("p = model.params.replicate()\n", 1, "p = model.params.replicate(copies=2)\n"),
    ],
    "flax-checkpoints": [
        ("from flax.training import checkpoints\ncheckpoints.save_checkpoint('ckpt', state, step)\n", 2,
         "import orbax.checkpoint as ocp\nm = ocp.CheckpointManager('ckpt')\n"),
        ("from flax.training.checkpoints import restore_checkpoint\nstate = restore_checkpoint('c', state)\n", 2,
         "state = restore('c', state)\n"),
        ("import flax\nflax.config.update('flax_use_orbax_checkpointing', False)\n", 2,
         "import flax\nflax.config.update('flax_use_orbax_checkpointing', True)\n"),
    ],
    "xmap": [
        ("from jax.experimental.maps import xmap\nf = xmap(g, in_axes=['batch', ...], out_axes=['batch', ...])\n", 1,
         "import jax\nf = jax.shard_map(g, mesh=mesh, in_specs=P('batch'), out_specs=P('batch'))\n"),
        ("import jax.experimental.maps\nmesh = jax.experimental.maps.thread_resources.env.physical_mesh\n", 1,
         "import jax\nmesh = jax.sharding.get_abstract_mesh()\n"),
    ],
    "pjit": [
        ("from jax.experimental.pjit import pjit\nf = pjit(g, in_axis_resources=P('x'), out_axis_resources=None)\n", 2,
         "import jax\nf = jax.jit(g, in_shardings=s, out_shardings=s)\n"),
        ("from jax.experimental import pjit\nf = pjit.pjit(g, in_shardings=s, out_shardings=s)\n", 2,
         "from functools import partial\nimport jax\nf = partial(jax.jit, donate_argnums=0)(g)\n"),
    ],
    "experimental-sharding-names": [
        ("from jax.experimental.pjit import pjit, with_sharding_constraint\n", 1,
         "from jax.lax import with_sharding_constraint\n"),
        ("from jax.experimental import maps\nimport numpy as np\nimport jax\n"
         "mesh = maps.Mesh(np.asarray(jax.devices()).reshape(2, 4), ('dp', 'mp'))\n", 4,
         "import jax\nmesh = jax.make_mesh((2, 4), ('dp', 'mp'))\n"),
        ("from jax.experimental import PartitionSpec\n", 1, "from jax.sharding import PartitionSpec\n"),
        ("from jax.experimental.pjit import PartitionSpec as P\n", 1, "from jax import P\n"),
    ],
    "removed-internals": [
        ("from jax.interpreters.pxla import xla_pmap_p\n", 1, "from jax.interpreters import mlir\n"),
        ("import jax\nis_pmap = eqn.primitive is jax.interpreters.pxla.xla_pmap_p\n", 2,
         "import jax\nis_jit = eqn.primitive.name == 'jit'\n"),
    ],
    "host-count": [
        ("import jax\nn = jax.host_count()\n", 2, "import jax\nn = jax.process_count()\n"),
        ("import jax\nif jax.host_id() == 0:\n    print('hi')\n", 2, "import jax\nif jax.process_index() == 0:\n    print('hi')\n"),
        ("from jax.lib import xla_bridge\nn = xla_bridge.device_count()\n", 2, "import jax\nn = jax.device_count()\n"),
    ],
    "shared-shuffle": [
        ("import jax\nstep = jax.pmap(f)\nds = load('train').map(prep).shuffle(10_000, seed=0)\n", 3,
         "import jax\nstep = jax.pmap(f)\nds = load('train').map(prep).shuffle(10_000)\n"),  # unseeded: not shared
        ("import jax\nstep = jax.pmap(f, axis_name='b')\ndef loader(rng, data, bs):\n"
         "    perm = jax.random.permutation(rng, len(data))\n    return data[perm[:bs]]\n", 4,
         "import jax\nstep = jax.pmap(f, axis_name='b')\ndef loader(rng, data, bs):\n"
         "    perm = jax.random.permutation(rng, len(data))\n    me = jax.process_index()\n"
         "    return data[perm[me * bs:(me + 1) * bs]]\n"),
        ("import jax\nstep = jax.pmap(f, axis_name='b')\ndef main(rng, data):\n"  # the index only guards a log line
         "    order = jax.random.permutation(rng, len(data))\n"
         "    if jax.process_index() == 0:\n        print(order)\n", 4,
         "import jax\nstep = jax.pmap(f, axis_name='b')\ndef main(rng, data):\n"
         "    order = jax.random.permutation(rng, len(data))\n"
         "    return order[jax.process_index()::jax.process_count()]\n"),
        ("import jax\nimport numpy as np\nn = jax.local_device_count()\nrng = np.random.default_rng(0)\n"
         "order = rng.permutation(1000)\n", 5,
         "import numpy as np\nrng = np.random.default_rng(0)\norder = rng.permutation(1000)\n"),
    ],
    "global-batch-per-host": [
        ("import jax\nstep = jax.pmap(f)\nbatch_size = 32 * jax.device_count()\n", 3,
         "import jax\nstep = jax.pmap(f)\nbatch_size = 32 * jax.device_count()\n"
         "per_host = batch_size // jax.process_count()\n"),
        ("import jax\nfrom flax.training.common_utils import shard\nbs = jax.device_count() * per_device\n"
         "batch = shard(batch)\n", 3,
         "import jax\nbs = jax.device_count() * per_device\n"),
        ("import jax\nstep = jax.pmap(f)\ntotal = per_device * jax.device_count()\nloader = Loader(ds, total)\n", 3,
         "import jax\nstep = jax.pmap(f)\ntotal = per_device * jax.device_count()\n"  # the global batch, for arithmetic
         "steps = n_examples // total\nlr = base_lr * total / 256\n"),
        ("import jax.experimental.maps\nimport jax\nsize = jax.device_count()\n"
         "ds = Loader(batch=(steps, per_replica * size))\n", 4,
         "import jax.experimental.maps\nimport jax\nsize = jax.device_count()\n"
         "seen = steps * (per_replica * size // mp)\ntokens = seen * seq\nprint(f'{seen} sequences')\n"),  # no loader
        ("import jax\nstep = jax.pmap(f)\nif bs % jax.device_count():\n    raise ValueError(bs)\n"
         "ds = make_dataset(path, batch_size=bs)\n", 5,
         "import jax\nstep = jax.pmap(f)\nif bs % jax.device_count():\n    raise ValueError(bs)\n"
         "ds = make_dataset(path, batch_size=bs // jax.process_count())\n"),
    ],
    "not-read": [
        ("from jax.experimental.multihost_utils import host_local_array_to_global_array_v2\n", 1,
         "from jax.experimental.multihost_utils import process_allgather\n"),
        ("import flax.linen.partitioning as nn_partitioning\nr = nn_partitioning.logical_to_mesh_axes(('batch',))\n", 2,
         "import flax.linen as nn\nd = nn.Dense(4)\n"),
    ],
    "pmap-body-keys": [
        ("import jax\n@jax.pmap\ndef step(key, x):\n    key, sub = jax.random.split(key)\n    return x\n", 4,
         "import jax\n@jax.pmap\ndef step(key, x):\n    key = jax.random.fold_in(key, jax.lax.axis_index('i'))\n"
         "    return x\n"),
        ("import jax\ndef f(rng, x):\n    return x * jax.random.bernoulli(rng, 0.5, x.shape)\n"
         "g = jax.pmap(f, axis_name='b')\n", 3, "import jax\ndef f(rng, x):\n    return x\ng = jax.pmap(f)\n"),
        ("from flax.training import common_utils\nimport jax\nkeys = common_utils.shard_prng_key(key)\n"
         "def step(x, rng):\n    return net.apply(x, rngs={'dropout': rng})\np = jax.pmap(step, 'b')\n"
         "out = p(x, keys)\n", 5,
         "import jax\ndef step(x, rng):\n    key, rng = jax.random.split(rng)\n"  # bound to each device in a helper
         "    return bind_to_device(key, axis_name='b')\np = jax.pmap(step, 'b')\n"),
        ("import jax\nkeys = jax.random.split(key, jax.local_device_count())\ndef step(x, rng):\n"
         "    return net.apply(x, rngs={'dropout': rng})\np = jax.pmap(step, 'b')\nout = p(x, keys)\n", 4,
         "import jax\nkeys = jax.random.split(key, 3)\ndef step(x, rng):\n"
         "    return net.apply(x, rngs={'dropout': rng})\np = jax.pmap(step, 'b')\nout = p(x, keys)\n"),
        ("import jax\n@jax.pmap\ndef step(key, x):\n    return x + jax.random.normal(key, x.shape)\n", 4,
         "import jax\n@jax.pmap\ndef init(x):\n    k = jax.random.key(0)\n"  # a key made there: no draw of a passed one
         "    return net.init(k, x)\n"),
    ],
    "numpy-of-global": [
        ("import jax\nimport numpy as np\npredict = jax.pmap(f)\nout = predict(params, x)\n"
         "best = np.argmax(out, -1)\n", 5,
         "import jax\nimport numpy as np\npredict = jax.pmap(f)\nbest = np.argmax(labels, -1)\n"),
        ("import jax\nimport numpy as np\nstep = jax.pmap(f)\ndef flat(y):\n    return np.asarray(y).reshape(-1)\n"
         "preds = step(x)\nrows = flat(preds)\n", 5,
         "import jax\nimport numpy as np\nstep = jax.pmap(f)\ndef flat(y):\n    return np.asarray(y).reshape(-1)\n"
         "rows = flat(batch)\n"),
        ("import jax\nimport numpy as np\npredict = jax.pmap(f)\nhits = np.argmax(predict(params, x), -1)\n", 4,
         "import jax\nimport numpy as np\nstep = jax.pmap(f)\ndef summarize(metrics):\n"  # another function's name
         "    return np.sum(metrics, -1)\nstate, metrics = step(state, batch)\n"),
    ],
    "pmap-over-hosts": [
        ("import jax\ndef total(x):\n    one = {d.process_index: d for d in jax.devices()}\n"
         "    f = jax.pmap(lambda v: jax.lax.psum(v, 'h'), 'h', devices=list(one.values()))\n"
         "    return f(x[None])[0]\n", 4,
         "import jax\nf = jax.pmap(lambda v: jax.lax.psum(v, 'h'), 'h', devices=jax.local_devices())\n"),
        ("import jax\nfrom jax import lax\nhosts = [ds[0] for ds in by_host.values()]\n"
         "by_host = {d.process_index: [d] for d in jax.devices()}\n"
         "add = jax.pmap(lambda v: lax.psum(v, 'p'), 'p', devices=hosts)\n",
         5, "import jax\nadd = jax.pmap(lambda v: jax.lax.psum(v, 'p'), 'p')\n"),
    ],
    "per-device-state": [
        ("import jax\nimport flax\n@jax.pmap\ndef step(model, state, x):\n"  # old Flax's stateful BatchNorm
         "    with flax.nn.stateful(state) as new_state:\n        y = model(x)\n    return y, new_state\n", 7,
         "import jax\nimport flax\nfrom jax import lax\n@jax.pmap\ndef step(model, state, x):\n"
         "    with flax.nn.stateful(state) as new_state:\n        y = model(x)\n"
         "    new_state = lax.pmean(new_state, 'batch')\n    return y, new_state\n"),
        ("import jax\ndef step(state, x):\n    stats = apply(state, x, mutable=['batch_stats'])\n"
         "    return state.replace(batch_stats=stats['batch_stats'])\np = jax.pmap(step, 'b')\n", 4,
         "import jax\ndef step(state, x):\n    stats = apply(state, x, mutable=['batch_stats'])\n"
         "    return state.replace(batch_stats=jax.lax.pmean(stats['batch_stats'], 'b'))\np = jax.pmap(step, 'b')\n"),
        ("import jax\nfrom functools import partial\n@partial(jax.pmap, axis_name='b')\ndef step(state, x):\n"
         "    new, vs = apply(state, x)\n    return state.apply_gradients(grads=g,\n"
         "                                 batch_stats=vs['batch_stats'])\n", 7,
         "import jax\n@jax.jit\ndef step(state, x):\n    new, vs = apply(state, x)\n"
         "    return state.apply_gradients(grads=g, batch_stats=vs['batch_stats'])\n"),
        ("import jax\ndef step(state, x):\n    new, vs = apply(state, x)\n"  # an entry of a pmean is averaged
         "    return state.apply_gradients(grads=g, batch_stats=vs['batch_stats'])\np = jax.pmap(step, 'b')\n", 4,
         "import jax\ndef step(state, x):\n    new, vs = apply(state, x)\n"
         "    return state.apply_gradients(grads=g, batch_stats=jax.lax.pmean(vs, 'b')['batch_stats'])\n"
         "p = jax.pmap(step, 'b')\n"),
    ],
    "per-device-keys": [
        ("import jax\nstep = jax.pmap(f)\nkey = utils.make_different_rng_key_on_all_devices(key)\n", 3,
         "import jax\nstep = jax.pmap(f)\nkey = utils.make_rng_key(seed)\n"),
        ("import jax\nkeys = jax.random.split(key, jax.local_device_count())\n", 2,
         "import jax\nkey, sub = jax.random.split(key)\n"),
        ("from jax import random\nrngs = random.split(rng, n_devices)\n", 2, "from jax import random\nrngs = random.split(rng, 3)\n"),
    ],
    "loss-over-device-count": [
        ("import jax\ndef cost(w, rows):\n    return (w * rows).sum() / jax.device_count()\n"
         "def update(w, rows):\n    g = jax.grad(cost)(w, rows)\n    return w - jax.lax.psum(g, 'd')\n"
         "run = jax.pmap(update, axis_name='d')\n", 3,
         "import jax\ndef cost(w, rows):\n    return (w * rows).sum() / jax.device_count()\n"  # a pmean: no psum
         "def update(w, rows):\n    g = jax.grad(cost)(w, rows)\n    return w - jax.lax.pmean(g, 'd')\n"
         "run = jax.pmap(update, axis_name='d')\n"),
    ],
    "unreduced-gradients": [
        ("import jax\ndef step(state, batch):\n    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)\n"
         "    return state.apply_gradients(grads=grads)\np = jax.pmap(step, axis_name='batch')\n", 4,
         "import jax\ndef step(state, batch):\n    loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)\n"
         "    grads = jax.lax.pmean(grads, 'batch')\n    return state.apply_gradients(grads=grads)\n"
         "p = jax.pmap(step, axis_name='batch')\n"),
    ],
    "per-host-init": [
        ("import jax\nkey = jax.random.PRNGKey(jax.process_index())\nparams = model.init(key, x)\n"
         "p = jax.pmap(step, axis_name='b')\n", 3,
         "import jax\nkey = jax.random.PRNGKey(0)\ndrop = jax.random.fold_in(key, jax.process_index())\n"
         "params = model.init(key, x)\np = jax.pmap(step, axis_name='b')\n"),
    ],
    "per-device-negatives": [
        ("import jax\nimport jax.numpy as jnp\n@jax.pmap\ndef step(params, batch):\n"
         "    a, b = encode(params, batch['x']), encode(params, batch['y'])\n    return clip_loss(a @ b.T)\n", 6,
         "import jax\nimport jax.numpy as jnp\n@jax.pmap\ndef step(params, batch):\n"
         "    a, b = encode(params, batch['x']), encode(params, batch['y'])\n"
         "    b = jax.lax.all_gather(b, 'i', tiled=True)\n    return clip_loss(a @ b.T)\n"),
    ],
}


def _rules(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in findings(source, "t.py")]


@pytest.mark.parametrize("rule, case", [(rule, i) for rule in CASES for i in range(len(CASES[rule]))])
def test_a_pattern_is_found_where_it_is_and_only_there(rule, case):
    has, line, has_not = CASES[rule][case]
    assert (line, rule) in _rules(has), _rules(has)
    assert rule not in {r for _, r in _rules(has_not)}, _rules(has_not)


def test_every_rule_has_cases_and_names_a_section_the_notebook_has():
    assert set(LESSONS) == set(CASES)  # and each case above proves its rule fires
    for notebook, section in LESSONS.values():
        source = next((ROOT / "notebooks" / "src").glob(f"{notebook}_*.md")).read_text()
        headings = {re.sub(r"^#+ (\d+\. )?", "", line) for line in source.splitlines()
                    if line.startswith("#")}
        assert section in headings, f"notebook {notebook} has no section {section!r}"


def test_a_finding_is_one_line_that_names_line_rule_fix_and_lesson():
    (finding,) = findings("import jax\nkeys = jax.random.split(key, jax.local_device_count())\n", "train.py")
    text = str(finding)
    assert "\n" not in text
    assert text.startswith("train.py:2: jax.random.split(key, jax.local_device_count()) makes one key")
    assert " -> one key, and inside shard_map jax.random.fold_in(key, " in text
    assert text.endswith('(notebook 06, section "Per-device randomness: `fold_in(key, axis_index)`")')


def test_the_script_is_read_never_run(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import no_such_module\nraise SystemExit(7)\nimport jax\nk = jax.random.split(k, jax.device_count())\n")
    assert [f.line for f in migrate.migrate(script, show=False)] == [4]


def _cli(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "helpers.migrate", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_the_course_script_has_findings_and_its_port_none():
    pmap = _cli("notebooks/scripts/pmap_train.py")
    assert pmap.returncode == 1
    assert {line.split(": ", 1)[0] for line in pmap.stdout.splitlines()} >= {
        "notebooks/scripts/pmap_train.py:29", "notebooks/scripts/pmap_train.py:32"}
    ported = _cli("notebooks/scripts/ported_train.py")
    assert (ported.returncode, ported.stdout) == (0, "nothing to change\n")


def test_bad_input_gets_one_line_and_exit_status_2(tmp_path):
    missing = _cli(tmp_path / "nope.py")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "nope.py: no such file; check the path" in missing.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import jax\n\ndef f(:\n    pass\n")
    syntax = _cli(broken)
    assert syntax.returncode == 2 and "Traceback" not in syntax.stderr
    assert re.search(r"broken\.py:3: not valid Python \(.+\); fix that line first", syntax.stderr)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "a folder with no .py file in it" in _cli(empty).stderr
    bogus = tmp_path / "x.ipynb"
    bogus.write_text("{}")
    assert "not a Jupyter notebook" in _cli(bogus).stderr


def test_a_notebook_is_read_cell_by_cell_and_a_folder_file_by_file(tmp_path):
    nb = tmp_path / "old.ipynb"
    cells = [{"cell_type": "markdown", "source": ["# title"]},
             {"cell_type": "code", "source": ["%matplotlib inline\n", "import jax\n"]},
             {"cell_type": "code", "source": ["!pip list\n", "keys = jax.random.split(k, jax.local_device_count())\n"]}]
    nb.write_text(json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5, "metadata": {}}))
    out = _cli(nb)
    assert out.returncode == 1
    assert out.stdout.startswith(f"{nb} cell 2:2: jax.random.split")
    folder = tmp_path / "project"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.py").write_text("print('fine')\n")
    (folder / "sub" / "b.py").write_text("import jax\nstep = jax.pmap(f)\n")
    out = _cli(folder)
    assert out.returncode == 1 and out.stdout.startswith(f"{folder / 'sub' / 'b.py'}:2: jax.pmap()")


OLD_SPELLINGS = MESH + """from jax.experimental.shard_map import shard_map
params = jax.device_put_replicated(params, jax.local_devices())
step = shard_map(f, mesh=mesh, in_specs=P(), out_specs=P(), check_rep=False)
with mesh:
    out = step(params)
keys = jax.random.split(key, jax.local_device_count())
"""


def test_diff_rewrites_the_safe_findings_and_leaves_the_rest():
    new, done = rewrite(OLD_SPELLINGS)
    ast.parse(new)
    assert len(done) == 3, done
    assert "from jax import shard_map\n" in new and "check_vma=False" in new
    assert "jax.device_put(params, NamedSharding(mesh, P()))" in new
    assert "with jax.set_mesh(mesh):" in new
    left = {f.rule for f in findings(new)}
    assert left == {"per-device-keys"}, left


def test_diff_leaves_what_it_cannot_rewrite_safely():
    positional = "from jax.experimental.shard_map import shard_map\nstep = shard_map(f, mesh, P(), P())\n"
    assert rewrite(positional) == (positional, [])
    no_mesh = "import jax\nparams = jax.device_put_replicated(params, jax.local_devices())\n"
    assert rewrite(no_mesh) == (no_mesh, [])


def test_diff_rewrites_what_a_pmap_script_needs_most_and_leaves_the_gradient_trap():
    """pmap calls become jit(shard_map) skeletons on a mesh it adds (P() for what the script
    replicated, donation on jit), replicate/unreplicate, shard, get_metrics and collectives that are
    not gradients are rewritten; the pmean of the gradients stays a finding for you to judge."""
    new, done = rewrite((ROOT / "tests" / "migrate_corpus" / "hf_style_train.py").read_text())
    ast.parse(new)
    assert "mesh = jax.make_mesh((jax.process_count(), jax.local_device_count()), (\"host\", \"device\"))" in new
    assert ("jax.jit(jax.shard_map(train_step, mesh=mesh, in_specs=(P(), P((\"host\", \"device\"))), "
            "out_specs=P()), donate_argnums=(0,))") in new
    assert "jax.shard_map(eval_step, mesh=mesh, in_specs=(P(), P((\"host\", \"device\")))" in new
    marked = {line.split("# migrate: ")[1] for line in new.splitlines() if "# migrate: " in line}
    assert marked == {"per-device-keys", "shared-shuffle", "pmap-body-keys", "pmap-collective",
                      "global-batch-per-host", "process-zero-collective"}, marked
    assert 'grad = jax.lax.pmean(grad, "batch")  # migrate: pmap-collective' in new  # the trap: yours to port


def test_the_diff_option_prints_a_unified_diff(tmp_path):
    script = tmp_path / "old.py"
    script.write_text(OLD_SPELLINGS)
    out = _cli("--diff", script)
    assert out.returncode == 1
    assert f"--- {script}\n+++ {script} (suggested)\n" in out.stdout
    assert "+with jax.set_mesh(mesh):" in out.stdout and "-with mesh:" in out.stdout
    clean = tmp_path / "clean.py"
    clean.write_text("print(1)\n")
    assert _cli("--diff", clean).stdout.startswith("nothing to change\n")


def test_the_suggested_rewrite_of_old_spellings_runs_on_the_pinned_jax_without_a_warning(tmp_path):
    new, done = rewrite((SCRIPTS / "old_spellings.py").read_text())
    assert len(done) == 3 and not {f.rule for f in findings(new)}
    script = tmp_path / "rewritten.py"
    script.write_text(new)
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-W", "error", str(script)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert (out.returncode, out.stdout) == (0, "[2. 2. 2.]\n"), out.stderr


# ------------------------------------------------------------------ code as published scripts write it

HF_STEP = '''import jax
from flax.training.common_utils import onehot
AXIS = "batch"


def train_step(state, batch, dropout_rng):
    def loss_fn(params):
        return compute_loss(params, batch)

    grad_fn = jax.value_and_grad(loss_fn)
    loss, grad = grad_fn(state.params)
    g = jax.tree.map(lambda x: jax.lax.pmean(x, axis_name=AXIS), grad)
    grad_norm = jax.lax.pmean(optax.global_norm(g), AXIS)
    return state.apply_gradients(grads=g), jax.lax.pmean(loss, AXIS), grad_norm


p_train_step = jax.pmap(train_step, "batch", donate_argnums=(0,))
'''


def _said(source: str, line: int) -> list[str]:
    return [f"{f.does} -> {f.instead}" for f in findings(source, "t.py") if f.line == line]


def test_a_pmean_of_gradients_is_the_trap_whatever_the_gradients_are_called():
    """`g` (through a tree map's lambda) holds gradients because of where it comes from: the trap,
    never 'rename the axis'; `grad_norm` and `loss` do not, whatever their names say."""
    (trap,) = _said(HF_STEP, 12)
    assert "N times too large" in trap and "renaming the axis is not enough" in trap
    for line in (13, 14):
        assert all("names pmap's axis" in s for s in _said(HF_STEP, line)), _said(HF_STEP, line)


def test_an_axis_name_given_by_position_or_held_in_a_constant_is_pmaps_axis():
    (pmap,) = [s for s in _said(HF_STEP, 17) if s.startswith("jax.pmap")]
    assert "axis_name='batch'" in pmap and "spans every device of every host" in pmap
    assert "(0,) as donate_argnums on jax.jit" in pmap


def test_gradients_from_dynamic_scale_and_nnx_grad_are_gradients():
    source = ("import jax\nfrom flax import nnx\ns = jax.pmap(step, axis_name='b')\n"
              "dyn, is_fin, aux, grads = dynamic_scale.value_and_grad(loss_fn, has_aux=True)(params)\n"
              "grads = jax.lax.pmean(grads, 'b')\n"
              "updates = nnx.grad(loss_fn)(model)\n"
              "updates = jax.lax.psum(updates, axis_name='b')\n")
    assert "N times too large" in _said(source, 5)[0]
    assert "N times too large" in _said(source, 7)[0]


def test_a_dynamic_scales_axis_name_is_the_trap_on_the_line_that_names_it():
    source = ("import jax\ns = jax.pmap(step, axis_name='b')\n\n\ndef step(state, axis):\n"
              "    grad_fn = dynamic_scale.value_and_grad(\n        loss_fn, has_aux=True, axis_name='b')\n")
    assert [s for s in _said(source, 7) if "N times too large" in s] and not _said(source, 6)
    held = source.replace("True, axis_name='b')", "True, axis_name=axis)")  # pmap's axis in a parameter
    assert [s for s in _said(held, 7) if "N times too large" in s]
    assert not _said(held.replace("s = jax.pmap(step, axis_name='b')", "s = jax.jit(step)"), 7)


def test_gradients_handed_back_by_a_helper_given_a_gradient_transform_are_gradients():
    """`l, g = accumulate(jax.value_and_grad(loss_fn), ...)`: g holds gradients, so its pmean is the trap."""
    source = ("import jax\ndef step(params, batch):\n"
              "    l, g = accumulate(jax.value_and_grad(loss_fn), params, batch, 4)\n"
              "    g = jax.tree.map(lambda x: jax.lax.pmean(x, 'b'), g)\n"
              "    return g, jax.lax.pmean(l, 'b')\n"
              "p = jax.pmap(step, 'b')\n")
    assert "N times too large" in _said(source, 4)[0]
    assert "names pmap's axis" in _said(source, 5)[0]


def test_a_pmean_of_the_loss_and_the_gradients_together_is_the_trap():
    source = ("import jax\nfrom functools import partial\n@partial(jax.pmap, axis_name='b')\ndef step(p, x):\n"
              "    l, grads = jax.value_and_grad(loss_fn)(p, x)\n"
              "    l, grads = jax.lax.pmean((l, grads), axis_name='b')\n"
              "    return l, grads\n")
    (said,) = _said(source, 6)
    assert "N times too large" in said and "keep only what is not a gradient in this pmean" in said


def test_a_comprehension_over_gradients_yields_gradients():
    """`[(psum(dw, 'b'), psum(db, 'b')) for dw, db in grads]`: each layer's gradient, so each psum is the trap."""
    source = ("import jax\nfrom functools import partial\nfrom jax import lax\n"
              "@partial(jax.pmap, axis_name='b')\ndef step(params, batch):\n"
              "    grads = jax.grad(loss)(params, batch)\n"
              "    grads = [(lax.psum(dw, 'b'), lax.psum(db, 'b')) for dw, db in grads]\n"
              "    sizes = [lax.psum(n, 'b') for n in counts]\n    return grads, sizes\n")
    assert len(_said(source, 7)) == 2 and all("N times too large" in said for said in _said(source, 7))
    assert "names pmap's axis" in _said(source, 8)[0]


def test_a_notebook_cell_uses_the_imports_of_the_cells_before_it(tmp_path):
    page = tmp_path / "guide.md"
    page.write_text("# Guide\n\n```{code-cell} ipython3\nimport jax\nfrom flax import nnx\n```\n\n"
                    "```{code-cell} ipython3\nn = jax.local_device_count()\nx = jax.numpy.ones((n, 4))\n"
                    "f = nnx.pmap(g, in_axes=0)\n```\n")
    assert [(f.line, f.rule) for f in migrate.migrate(page, show=False)] == [(10, "local-batch"), (11, "nnx-pmap")]


def test_a_jupytext_myst_notebook_is_read_cell_by_cell_with_the_files_line_numbers(tmp_path):
    page = tmp_path / "train.md"
    page.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\n---\n\n# Train\n\n"
                    "```{code-cell} ipython3\n:tags: [hide-input]\n%matplotlib inline\nimport jax\n```\n\n"
                    "Some prose with `jax.pmap(f)` in it.\n\n"
                    "```{code-cell} ipython3\nstep = jax.pmap(f, axis_name='batch')\n```\n")
    found = migrate.migrate(page, show=False)
    assert [(f.path, f.line, f.rule) for f in found] == [(str(page), 18, "pmap")]


# ------------------------------------------------------------------ the labelled corpus (make bench-migrate)

def test_the_corpus_is_read_with_recall_of_95_percent_no_wrong_advice_and_its_ports_clean():
    from benchmarks import migrate as corpus

    rows = [corpus.score(script) for script in corpus.scripts()]
    assert len(rows) >= 6
    labelled, found = sum(r["labelled"] for r in rows), sum(r["found"] for r in rows)
    assert found / labelled >= 0.95, [(r["script"], r["missed"]) for r in rows]
    assert not [(r["script"], r["wrong"]) for r in rows if r["wrong"]]
    assert not [(r["script"], r["ported_findings"]) for r in rows if r["ported_findings"]]


def test_the_corpus_score_names_a_rename_where_the_trap_is_as_wrong_advice(tmp_path, monkeypatch):
    """The measure can fail: a script whose pmean of gradients the tool only renamed is wrong advice."""
    from benchmarks import migrate as corpus

    (tmp_path / "s.py").write_text("import jax\np = jax.pmap(f, axis_name='b')\ny = jax.lax.pmean(x, 'b')\n")
    (tmp_path / "s.labels").write_text("2 pmap\n3 pmap-collective:trap  -- x holds gradients, by label\n")
    (tmp_path / "s_ported.py").write_text("import jax\n")
    row = corpus.score(tmp_path / "s.py")
    assert row["wrong"] == [(3, "pmap-collective:rename")] and row["recall"] == 0.5


def test_the_pmap_finding_gives_p_for_the_arguments_the_script_replicates():
    source = ("import jax\nfrom flax import jax_utils\n@jax.pmap\ndef step(params, batch):\n    return params\n"
              "p = jax.pmap(step, 'b')\nparams = jax_utils.replicate(params0)\nout = p(params, batch)\n")
    (said,) = [f.instead for f in findings(source) if f.rule == "pmap" and f.line == 6]
    assert "in_specs=(P(), P(('host', 'device')))" in said


def test_a_held_out_folder_is_scored_without_ports_and_its_absence_is_said(tmp_path):
    """HELDOUT=folder: published scripts labelled by hand, scored like the corpus (no port beside them).
    CI has no network, so the folder is made here (tests/test_benchmarks.py: kept sets, shown without folders)."""
    from benchmarks import migrate as corpus

    (tmp_path / "train.py").write_text("import jax\np = jax.pmap(f, axis_name='b')\ny = jax.lax.pmean(x, 'b')\n")
    (tmp_path / "train.labels").write_text("# someone/repo train.py @ abc123\n2 pmap\n3 pmap-collective:trap\n")
    (tmp_path / "notes.txt").write_text("not a script\n")
    heldout = corpus.score_heldout(tmp_path)
    (row,) = heldout["scripts"]
    assert (row["source"], row["labelled"], row["found"], row["wrong"]) == (
        "someone/repo train.py @ abc123", 2, 1, [(3, "pmap-collective:rename")])
    row_shown = "| `train.py` | someone/repo train.py @ abc123 | 2 | 1 | 50% | 50% | 1 |  |"
    assert row_shown in corpus.render_heldout(heldout | {"name": "set9", "commit": "abc1234"})
    (tmp_path / "train.labels").write_text("# someone/repo train.py @ abc123\n# note: fresh at r2: labelled later\n")
    assert corpus.fresh_at(tmp_path / "train.py") == "r2"
    assert corpus._unseen({"fresh_at": "r2", "before": [{"found": 1}, {"found": 2}]}, ["r1", "r2"]) == {"found": 2}
    assert corpus._unseen(row, ["r1", "r2"]) is None


# ------------------------------------------------------------------ gradients, wherever they come from

_EITHER = "if this is a gradient: drop it and take the gradient of jax.lax.pmean(loss, ('host', 'device')); " \
          "otherwise rename the axis to ('host', 'device')"


def _kind(source: str, line: int) -> str:
    """'trap', 'either' or 'rename': what the findings on a line say of its collective."""
    (said,) = [s for s in _said(source, line)]
    return "trap" if "renaming the axis is not enough" in said else "either" if _EITHER in said else "rename"


BOUND_FIRST = '''import jax


class Trainer:
    def __init__(self, loss_fn):
        self.loss_fn = loss_fn
        self.grad_fn = jax.value_and_grad(self.loss_fn, has_aux=True)

    def make_grad_fn(self):
        return jax.value_and_grad(self.loss_fn)

    def step(self, params, batch):
        grad_fn = jax.grad(self.loss_fn, has_aux=True)
        grads, aux = grad_fn(params, batch)
        grads = jax.lax.pmean(grads, "batch")
        aux = jax.lax.pmean(aux, "batch")
        (loss, stats), more = self.grad_fn(params, batch)
        more = jax.lax.psum(more, "batch")
        loss = jax.lax.pmean(loss, "batch")
        value, last = self.make_grad_fn()(params)
        return jax.lax.pmean(last, "batch"), jax.lax.pmean(value, "batch")


p_step = jax.pmap(Trainer(f).step, "batch")
'''


def test_a_gradient_transform_bound_first_gives_gradients_where_its_has_aux_puts_them():
    """grad(has_aux=True) gives (gradients, aux), value_and_grad gives ((loss, aux), gradients): bound to a name,
    an attribute or returned by a method, and called later."""
    assert [_kind(BOUND_FIRST, line) for line in (15, 16, 18, 19)] == ["trap", "rename", "trap", "rename"]
    last, value = sorted(_said(BOUND_FIRST, 21), key=lambda said: not said.startswith("pmean(last"))
    assert "renaming the axis is not enough" in last and "names pmap's axis, which" in value


DECORATED = """from functools import partial
import jax


@jax.jit
@jax.value_and_grad
def train_forward(params, src, labels):
    return ((params * src - labels) ** 2).mean()


@partial(jax.grad, has_aux=True)
def grads_and_aux(params, src):
    return (params * src).sum(), src


@partial(jax.pmap, axis_name='n_devices')
def train_step(params, src, labels):
    loss, grads = train_forward(params, src, labels)
    grads = jax.lax.pmean(grads, axis_name='n_devices')
    loss = jax.lax.pmean(loss, axis_name='n_devices')
    g2, aux = grads_and_aux(params, src)
    g2 = jax.lax.pmean(g2, 'n_devices')
    aux = jax.lax.pmean(aux, 'n_devices')
    return params - grads - g2, loss, aux
"""


def test_a_function_decorated_with_a_gradient_transform_gives_gradients_where_the_transform_puts_them():
    """@jax.value_and_grad (under @jax.jit) gives (loss, gradients); @partial(jax.grad, has_aux=True) gives
    (gradients, aux): a published trainer's pmean of such gradients was told to rename (held-out set 3)."""
    assert [_kind(DECORATED, line) for line in (19, 20, 22, 23)] == ["trap", "rename", "trap", "rename"]
    plain = DECORATED.replace("@jax.value_and_grad\n", "").replace("@partial(jax.grad, has_aux=True)\n", "")
    assert _kind(plain, 20) == "rename"  # no transform: what grads_and_aux returns is no gradient
    assert _kind(plain, 17) == "either"  # ... but a value named grads is never told just to rename


def test_a_psum_of_gradients_of_a_loss_divided_by_the_device_count_is_the_trap():
    source = ("import jax\n\n\ndef train_step(params, batch):\n    def loss_fn(p):\n"
              "        return compute(p, batch) / jax.device_count()\n\n    grads = jax.grad(loss_fn)(params)\n"
              "    if SYNC:\n        grads = jax.tree_map(lambda g: jax.lax.psum(g, 'batch'), grads)\n"
              "    return grads\n\n\np_step = jax.pmap(train_step, axis_name='batch')\n")
    (said,) = _said(source, 10)
    assert "their mean, when the loss was divided by the device count" in said and "N times too large" in said
    assert "drop this psum" in said
    losses = source.replace("grads = jax.grad(loss_fn)(params)", "grads = {'loss': loss_fn(params)}")
    assert _kind(losses, 10) == "rename"  # a loss divided by the device count, summed: no gradient


def test_gradients_handed_to_a_helper_make_its_collective_the_trap_and_other_values_do_not():
    helper = ("import jax\nfrom jax import lax\n\n\ndef sync(grads):\n"
              "    return jax.tree_map(lambda x: lax.pmean(x, 'batch'), grads)\n\n\n")
    gradients = helper + ("def step(params, batch):\n    loss, grads = jax.value_and_grad(loss_fn)(params, batch)\n"
                          "    return sync(grads)\n\n\np = jax.pmap(step, 'batch')\n")
    metrics = helper + ("def evaluate(params, batch):\n    return sync({'loss': loss_fn(params, batch)})\n\n\n"
                        "p = jax.pmap(evaluate, 'batch')\n")
    assert _kind(gradients, 6) == "trap" and _kind(metrics, 6) == "rename"


def test_a_partial_of_pmean_mapped_over_gradients_is_the_trap_not_a_rename():
    source = ("import functools\nimport jax\n\n\ndef step(params, batch):\n"
              "    grads = jax.grad(loss_fn)(params, batch)\n"
              "    grads = jax.tree_util.tree_map(functools.partial(jax.lax.pmean, axis_name='batch'), grads)\n"
              "    stats = jax.tree_util.tree_map(functools.partial(jax.lax.pmean, axis_name='batch'), stats)\n"
              "    return grads, stats\n\n\np = jax.pmap(step, 'batch')\n")
    assert _kind(source, 7) == "trap" and _kind(source, 8) == "rename"


def test_what_a_call_handed_gradients_gives_back_may_be_a_gradient_and_the_finding_says_both():
    """`tx.update(grads, ...)` gives updates the tool cannot see into: neither 'rename' nor 'the trap' alone;
    the loss value_and_grad gives first is no gradient; parameters apply_gradients gives back, averaged, stand in for
    the gradient mean (the trap: dropping a pmean of copies that the port makes equal is safe either way)."""
    source = ("import jax\n\n\ndef step(state, batch):\n    loss, grads = jax.value_and_grad(loss_fn)(state.params)\n"
              "    updates, opt = tx.update(grads, state.opt_state)\n    updates = jax.lax.pmean(updates, 'batch')\n"
              "    new = state.apply_gradients(grads=grads)\n    new = jax.lax.pmean(new, 'batch')\n"
              "    return jax.lax.pmean(loss, 'batch')\n\n\np = jax.pmap(step, 'batch')\n")
    assert [_kind(source, line) for line in (7, 9, 10)] == ["either", "trap", "rename"]
    (either,) = _said(source, 7)
    assert "N times too large" in either


def test_a_collective_in_a_function_without_gradients_is_renamed():
    source = ("import jax\n\n\ndef evaluate(params, batch):\n    logits = apply(params, batch)\n"
              "    return jax.lax.pmean(jnp.mean(logits), 'batch')\n\n\np = jax.pmap(evaluate, 'batch')\n")
    assert _kind(source, 6) == "rename"


def test_a_helper_in_another_file_of_the_folder_handed_gradients_is_the_trap(tmp_path):
    (tmp_path / "utils.py").write_text("import jax\n\n\ndef sync(grads):\n"
                                       "    return jax.tree_map(lambda x: jax.lax.pmean(x, 'batch'), grads)\n")
    (tmp_path / "train.py").write_text("import jax\nfrom utils import sync\n\n\ndef step(params, batch):\n"
                                       "    grads = jax.grad(loss_fn)(params, batch)\n    return sync(grads)\n\n\n"
                                       "p = jax.pmap(step, 'batch')\n")
    (trap,) = [f for f in migrate.migrate(tmp_path, show=False) if f.path.endswith("utils.py")]
    assert "N times too large" in trap.does
    assert migrate.migrate(tmp_path / "utils.py", show=False) == []  # alone, nothing says 'batch' is pmap's


def test_a_name_assigned_in_another_function_is_not_this_ones():
    """`n = jax.local_device_count()` in one function says nothing of `n` in another."""
    source = ("import jax\nfrom flax import nnx\n\n\ndef devices():\n    n = jax.local_device_count()\n"
              "    return n\n\n\ndef layers(x, n):\n    y = x.reshape(n, -1)\n"
              "    return nnx.split_rngs(splits=n)(f)(y)\n")
    assert _rules(source) == []
    local = source.replace("def layers(x, n):", "def layers(x):\n    n = jax.local_device_count()")
    assert {rule for _, rule in _rules(local)} == {"local-batch", "nnx-split-rngs"}
    closure = ("import jax\n\n\ndef prepare(xs):\n    n = jax.local_device_count()\n\n    def one(x):\n"
               "        return x.reshape((n, -1) + x.shape[1:])\n\n    return jax.tree.map(one, xs)\n")
    assert (8, "local-batch") in _rules(closure)  # a function sees the names of the one it is in


def test_diff_renames_no_collective_in_a_function_that_takes_gradients_or_stays_under_pmap():
    new, _ = rewrite((ROOT / "tests" / "migrate_corpus" / "hf_style_train.py").read_text())
    assert 'metrics = jax.lax.pmean({"loss": loss, "learning_rate": schedule(state.step)}, axis_name="batch")' \
           "  # migrate: pmap-collective" in new  # train_step takes gradients: yours to judge
    assert 'return jax.lax.pmean({"loss": loss}, axis_name=("host", "device"))' in new  # eval_step: none
    kept = ("import jax\n\n\ndef step(params, batch):\n    return jax.lax.pmean(batch.sum(), 'batch')\n\n\n"
            "def other(x):\n    return jax.lax.psum(x, 'batch')\n\n\n"
            "p = jax.pmap(step, 'batch', in_axes=(0, 1))\nq = jax.pmap(other, 'batch')\n")
    new, _ = rewrite(kept)
    assert "jax.lax.pmean(batch.sum(), 'batch')" in new  # its pmap stays: in_axes=1 has no spec here
    assert 'jax.lax.psum(x, ("host", "device"))' in new


def test_keys_that_fold_in_the_host_are_not_the_same_on_every_host_and_device_count_is_global():
    folded = ("import jax\nkey = jax.random.PRNGKey(0)\nkey = jax.random.fold_in(key, jax.process_index())\n"
              "keys = jax.random.split(key, jax.local_device_count())\n")
    (said,) = _said(folded, 4)
    assert "every host splits the same key" not in said and "folds in jax.process_index()" in said
    (said,) = _said("import jax\nkeys = jax.random.split(key, jax.device_count())\n", 2)
    assert "one key per local device" not in said and "one key per device of every host" in said
    (said,) = _said(folded.replace("key = jax.random.fold_in(key, jax.process_index())\n", ""), 3)
    assert "one key per local device" in said and "every host splits the same key" in said


def test_a_long_chain_of_functions_fed_back_into_each_other_is_read_quickly_and_never_said_renamed():
    chain = "".join(f"def f{i}(a, b, c):\n    x = f{i - 1}(b, c, a) if {i} else jax.grad(loss)(a)\n"
                    f"    y = f{max(i - 2, 0)}(x, a, b)\n    z = jax.lax.pmean(x + y, 'batch')\n"
                    "    return z, x, y\n\n\n"
                    for i in range(60))
    source = f"import jax\n\n\n{chain}p = jax.pmap(f59, 'batch')\nfor _ in range(9):\n    s, t, u = p(s, t, u)\n"
    said = [f.instead for f in findings(source) if f.rule == "pmap-collective"]
    assert len(said) == 60 and all("renaming the axis is not enough" in s or _EITHER in s for s in said)


def test_pmap_is_said_to_span_every_hosts_devices_with_each_host_feeding_its_part():
    (said,) = [s for s in _said("import jax\nstep = jax.pmap(f)\n", 2)]
    assert "this host's devices only" not in said and "maps over every host's devices" in said
    assert "each host feeds only its own part" in said
    (nnx,) = _said("from flax import nnx\nstep = nnx.pmap(f, axis_name='i')\n", 2)
    assert "this host's devices only" not in nnx and "each host feeds only its own part" in nnx


def test_a_folder_under_a_hidden_folder_is_read(tmp_path):
    folder = tmp_path / ".cache" / "project"
    (folder / ".git").mkdir(parents=True)
    (folder / "train.py").write_text("import jax\nstep = jax.pmap(f)\n")
    (folder / ".git" / "hook.py").write_text("import jax\nstep = jax.pmap(f)\n")
    out = _cli(folder.resolve())
    assert out.returncode == 1 and out.stdout.count("jax.pmap()") == 1, out.stderr


def test_help_says_what_is_read_and_the_exit_status():
    text = " ".join(_cli("--help").stdout.split())
    assert "Exit status: 0 nothing to change, 1 findings, 2 a path that cannot be read" in text
    assert all(kind in text for kind in (".py", "folders", ".ipynb", "MyST .md"))


def test_a_name_that_may_hold_a_gradient_or_not_gets_both_outcomes_and_stepped_parameters_none():
    source = ("import jax\n\n\ndef step(params, batch):\n    grads = jax.grad(loss_fn)(params, batch)\n"
              "    out = grads if SYNC else {'n': batch.shape[0]}\n    if SYNC:\n        tree = grads\n    else:\n"
              "        tree = {'n': batch.shape[0]}\n    tree = jax.lax.pmean(tree, 'batch')\n"
              "    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), tree, out\n\n\n"
              "def evaluate(params, batch):\n    return jax.lax.pmean(apply(params, batch), 'batch')\n\n\n"
              "p_step, p_eval = jax.pmap(step, 'batch'), jax.pmap(evaluate, 'batch')\n"
              "for batch in batches:\n    params, tree, out = p_step(params, batch)\n    print(p_eval(params, batch))\n")
    assert _kind(source, 11) == "either"  # grads on one branch, a count on the other
    assert _kind(source, 16) == "rename"  # parameters after an SGD step are no gradient


# ------------------------------------------------------------------ held-out set 2: what it missed, and its wrong advice


def test_the_aux_of_grad_with_has_aux_is_no_gradient_through_a_tree_map_over_a_tuple_and_a_later_unpacking():
    """`grads, (metrics, state) = jax.grad(f, has_aux=True)(...)`: the gradients are the first item, the aux the
    second; a tree map over `(state, metrics, grads)` keeps each item what it was, and so does `(g, m) = out`."""
    source = ("import jax\n\n\ndef step(params, state, batch):\n"
              "    grad_fn = jax.grad(loss_fn, argnums=0, has_aux=True)\n"
              "    grads, (metrics, state) = grad_fn(params, state, batch)\n"
              "    state, metrics, grads = jax.tree_map(from_bf16, (state, metrics, grads))\n"
              "    grads = jax.lax.psum(grads, 'i')\n    metrics = jax.lax.pmean(metrics, 'i')\n"
              "    return grads, metrics\n\n\np = jax.pmap(step, axis_name='i')\n")
    assert (_kind(source, 8), _kind(source, 9)) == ("trap", "rename")
    unpacked = ("import jax\n\n\ndef step(params, batch):\n    out = jax.grad(loss_fn, has_aux=True)(params, batch)\n"
                "    (grads, metrics) = out\n    grads = jax.lax.pmean(grads, 'i')\n"
                "    metrics = jax.lax.pmean(metrics, 'i')\n    return grads, metrics\n\n\n"
                "p = jax.pmap(step, axis_name='i')\n")
    assert (_kind(unpacked, 7), _kind(unpacked, 8)) == ("trap", "rename")
    lambdas = source.replace("jax.tree_map(from_bf16,", "jax.tree_map(lambda x: x.astype('float32'),")
    assert (_kind(lambdas, 8), _kind(lambdas, 9)) == ("trap", "rename")


def test_a_key_split_inside_a_pmapped_init_is_not_told_to_fold_in_the_device():
    """Every device must draw the same initial parameters: a pmapped `model_init` splitting its key is right."""
    init = ("import jax\n\n\ndef model_init(rng_key, batch):\n    keys = jax.random.split(rng_key, 4)\n"
            "    return [glorot(k) for k in keys]\n\n\ninit = jax.pmap(model_init)\n")
    assert "pmap-body-keys" not in {rule for _, rule in _rules(init)}
    step = init.replace("model_init", "train_step")
    assert (5, "pmap-body-keys") in _rules(step)


def test_local_device_count_is_no_per_host_batch_where_the_script_counts_every_host_or_counts_parameters():
    per_host = "import jax\nper_node = 32 * jax.local_device_count()\n"
    assert (2, "local-batch") in _rules(per_host)
    assert _rules(per_host + "per_step = per_node * jax.process_count()\n") == []  # no pmap: a global batch made
    pmap_stack = per_host + "per_step = per_node * jax.process_count()\nstep = jax.pmap(f)\n"
    assert (2, "local-batch") in _rules(pmap_stack)  # pmap's per-host stack, which the port replaces
    per_device = "import jax\nper_device = host_batch // jax.local_device_count()\n"
    assert (2, "local-batch") in _rules(per_device)
    assert _rules(per_device + "total = jax.device_count()\n") == []  # the script's batches are global ones
    assert _rules("import jax\nprint(num_params / jax.local_device_count())\n") == []


def test_with_sharding_constraint_is_one_finding_at_its_import_and_no_not_read_at_each_call():
    source = ("from jax.experimental.pjit import pjit, with_sharding_constraint\nfrom jax.sharding import "
              "PartitionSpec as PS\n\n\ndef step(batch):\n    x = with_sharding_constraint(batch, PS('dp'))\n"
              "    return with_sharding_constraint(x, PS('dp'))\n")
    (found,) = findings(source)
    assert (found.line, found.rule) == (1, "experimental-sharding-names")
    assert "jax.lax.with_sharding_constraint" in found.instead and "ImportError" in found.does


def test_a_replicate_or_unreplicate_helper_in_another_file_of_the_folder_is_followed_to_its_body(tmp_path):
    (tmp_path / "utils.py").write_text(
        "import jax\n\n\ndef first_copy(xs):\n    return jax.tree_util.tree_map(lambda x: x[0], xs)\n\n\n"
        "def copy_to_devices(x):\n    devices = jax.local_devices()\n"
        "    return jax.device_put_sharded(len(devices) * [x], devices)\n\n\n"
        "def save_state(path, state):\n    host_state = jax.device_get(state[0])\n    write(path, host_state)\n"
        "    return host_state\n\n\ndef first_row(xs):\n    return xs[0]\n")
    (tmp_path / "train.py").write_text(
        "import jax\nimport utils\n\nstep = jax.pmap(f, axis_name='i')\nkey = utils.copy_to_devices(key)\n"
        "out = step(key)\nlog(utils.first_copy(out))\nutils.save_state('ckpt', out)\nrow = utils.first_row(rows)\n")
    found = {(f.line, f.rule): f for f in migrate.migrate(tmp_path, show=False) if f.path.endswith("train.py")}
    assert {(5, "jax-utils-replicate"), (7, "jax-utils-replicate"), (8, "jax-utils-replicate")} <= set(found)
    assert "not a batch split" in found[5, "jax-utils-replicate"].does
    assert "saves device 0's copy" in found[8, "jax-utils-replicate"].does
    assert 9 not in {line for line, _ in found}  # a helper that takes row 0 of its argument copies nothing
    alone = {(f.line, f.rule) for f in migrate.migrate(tmp_path / "train.py", show=False)}  # reads what it imports
    assert {(5, "jax-utils-replicate"), (7, "jax-utils-replicate"), (8, "jax-utils-replicate")} <= alone
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "train.py").write_text((tmp_path / "train.py").read_text())
    assert not [f for f in migrate.migrate(tmp_path / "elsewhere" / "train.py", show=False) if f.line in (5, 7, 8)]


def test_the_benchmark_counts_a_both_outcomes_finding_as_right_for_a_trap_or_a_rename_label(tmp_path):
    from benchmarks import migrate as corpus

    source = ("import jax\n\n\ndef step(params, batch):\n    grads = jax.grad(loss)(params, batch)\n"
              "    out = helper(grads)\n    return jax.lax.pmean(out, 'b')\n\n\np = jax.pmap(step, axis_name='b')\n")
    assert _kind(source, 7) == "either"
    (tmp_path / "s.py").write_text(source)
    (tmp_path / "s_ported.py").write_text("import jax\n")
    for label in ("trap", "rename"):
        (tmp_path / "s.labels").write_text(f"7 pmap-collective:{label}\n10 pmap\n")
        row = corpus.score(tmp_path / "s.py")
        assert (row["found"], row["wrong"], row["either"]) == (2, [], 1)
    (tmp_path / "s.labels").write_text("10 pmap\n")
    assert corpus.score(tmp_path / "s.py")["extra"] == [(7, "pmap-collective:either")]
    assert "1 both-outcomes finding (if a gradient" in corpus._tally([corpus.score(tmp_path / "s.py")])


# ------------------------------------------------------------------ output a porter can use on a real codebase


KEEPS_KEYS = ("import jax\nstep = jax.pmap(f, axis_name='i')\n"
              "keys = jax.random.split(key, jax.local_device_count())  # migrate: ok\n"
              "more = jax.random.split(key, jax.local_device_count())  # migrate: ok local-batch\n")
PLAIN = re.sub(r"  # migrate: .*", "", KEEPS_KEYS)


def test_a_line_marked_migrate_ok_is_acknowledged_for_every_rule_or_the_rules_it_names():
    assert _rules(KEEPS_KEYS) == [(2, "pmap"), (4, "per-device-keys")]
    assert _rules(KEEPS_KEYS.replace("ok local-batch", "ok per-device-keys")) == [(2, "pmap")]
    marked = KEEPS_KEYS.replace("  # migrate: ok\n", "  # migrate: per-device-keys\n")  # --diff's mark: still open
    assert (3, "per-device-keys") in _rules(marked)


def test_a_port_that_keeps_findings_on_purpose_reaches_exit_0_with_marks_or_ignore(tmp_path):
    script = tmp_path / "keeps.py"
    script.write_text(KEEPS_KEYS)
    assert _cli(script).returncode == 1
    assert _cli(script, "--ignore", "pmap,per-device-keys").stdout == "nothing to change\n"
    assert _cli(script, "--ignore", "pmap", "--ignore", "per-device-keys").returncode == 0
    script.write_text(KEEPS_KEYS.replace("ok local-batch", "ok").replace("f, axis_name='i')", "f)  # migrate: ok"))
    assert (_cli(script).returncode, _cli(script).stdout) == (0, "nothing to change\n")
    wrong = _cli(script, "--ignore", "pmapp")
    assert wrong.returncode == 2 and "no rule named pmapp" in wrong.stderr


def test_the_short_form_is_one_line_a_finding_and_each_rule_once_with_its_section(tmp_path):
    (tmp_path / "a.py").write_text(PLAIN)
    full, short = _cli(tmp_path), _cli(tmp_path, "--format", "short")
    assert short.returncode == full.returncode == 1
    lines, rules = short.stdout.split("\n\n")
    assert [line.split(": ")[1] for line in lines.splitlines()] == ["pmap", "per-device-keys", "per-device-keys"]
    assert all(len(line) < 200 for line in lines.splitlines()) and "->" not in lines
    assert rules.splitlines()[0].startswith("per-device-keys (2): notebook 06, section")
    explained = _cli(tmp_path, "--format", "short", "--explain", "pmap").stdout.split("\n\n")[-1]
    assert explained.strip() == full.stdout.splitlines()[0]  # the finding in full, behind --explain


def test_json_output_gives_file_line_rule_section_and_advice_and_counts_for_ci(tmp_path):
    (tmp_path / "a.py").write_text(PLAIN)
    out = _cli(tmp_path / "a.py", "--format", "json")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    first = report["findings"][0]
    assert {k: first[k] for k in ("line", "rule", "notebook")} == {"line": 2, "rule": "pmap", "notebook": "06"}
    assert first["file"].endswith("a.py") and first["section"] == LESSONS["pmap"][1] and "shard_map" in first["advice"]
    assert report["counts"] == {"per-device-keys": 2, "pmap": 1}
    (tmp_path / "b.py").write_text("x = 1\n")
    assert (json.loads(_cli(tmp_path / "b.py", "--format", "json").stdout), ) == ({"findings": [], "counts": {}},)


def test_the_summary_counts_findings_per_rule(tmp_path):
    (tmp_path / "a.py").write_text(PLAIN)
    tail = _cli(tmp_path / "a.py", "--summary").stdout.split("\n\n")[-1].splitlines()
    assert tail[0] == "findings per rule:" and tail[1].split()[:2] == ["per-device-keys", "2"]
    assert tail[-1].strip() == "3 findings in 1 file"


def test_help_documents_acknowledging_a_finding_and_the_formats():
    shown = _cli("--help").stdout
    assert "# migrate: ok" in shown and "--ignore" in shown and "--format" in shown and "json" in shown


def test_a_reduction_of_values_named_gradients_is_never_just_a_rename():
    """A method handed accumulated gradients from code the tool cannot follow (held-out set 6: an nnx.pmap'd
    `_apply_update(self, grads, ...)` psums them): both outcomes, never a plain rename."""
    source = ("import jax\nfrom flax import nnx\n\n\nclass Trainer:\n"
              "    @nnx.pmap(axis_name='data', in_axes=(None, 0))\n    def apply_update(self, grads):\n"
              "        grads = jax.lax.psum(grads, axis_name='data')\n        stats = jax.lax.psum(self.stats, 'data')\n"
              "        self.optimizer.update(self.model, grads)\n        return stats\n")
    assert [_kind(source, line) for line in (8, 9)] == ["either", "rename"]


def test_keys_split_by_keyword_are_read_like_positional_ones():
    """`jax.random.split(key=k, num=n)` (held-out set 7 crashed the tool of 89affe0 with an IndexError)."""
    source = "import jax\nkeys = jax.random.split(key=root, num=jax.local_device_count())\n"
    assert [f.rule for f in findings(source)] == ["per-device-keys"]


def test_a_rule_that_fails_is_said_and_the_other_rules_still_read_the_file(monkeypatch, capsys):
    import importlib

    findings_module = importlib.import_module("helpers.migrate.findings")  # the module, not the function

    def broken(script):
        raise IndexError("list index out of range")

    monkeypatch.setattr(findings_module, "RULES", (broken, *findings_module.RULES))
    found = findings_module.findings("import jax\nstep = jax.pmap(f, axis_name='i')\n", "train.py")
    assert [f.rule for f in found] == ["pmap"]
    said = capsys.readouterr().err
    assert said.startswith("migrate: train.py: the rule test_migrate.broken failed on this code (IndexError at ")
    assert "a bug of helpers.migrate" in said


PARAMETER_AVERAGE = """\
import jax
import optax
from jax import lax


def make_step(loss_fn, tx, axis='batch'):
    grad_fn = jax.grad(loss_fn)

    def apply(grads, opt_state, params):
        updates, opt_state = tx.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        new_params = lax.pmean(new_params, axis_name=axis)
        return new_params, opt_state

    def step(params, opt_state, batch):
        grads = grad_fn(params, batch)
        sgd = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        sgd = lax.pmean(sgd, axis)
        return apply(grads, opt_state, params), sgd

    return jax.pmap(step, axis_name=axis)
"""


def test_a_pmean_of_parameters_each_device_updated_with_its_gradients_is_the_trap_not_a_rename():
    found = findings(PARAMETER_AVERAGE, "t.py")
    for line in (12, 18):
        (said,) = [f for f in found if f.line == line and f.rule == "pmap-collective"]
        assert "the gradient mean in another form" in said.does and "renaming the axis is not enough" in said.instead
    assert not [f for f in found if f.rule == "unreduced-gradients"]  # the average reduces them
